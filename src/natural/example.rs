//! Synthesizes plausible example arguments from a tool's JSON Schema.
//!
//! Every contract ends with an example call, and models copy examples far more
//! faithfully than they follow schemas, so the example must validate: every
//! required property is present and every value has the right type, format or
//! enum member. Hints in the schema (`examples`, `default`, "e.g." in the
//! description) are preferred over generic values so the example also shows
//! what a realistic value looks like.

use serde_json::{Map, Value, json};

/// How deep nested schemas and `$ref` chains are followed; past it a value
/// becomes `null`, which keeps recursive schemas finite.
const MAX_DEPTH: usize = 8;

/// Example arguments for a tool whose parameters are `schema` (`None`: `{}`).
///
/// Top-level optional properties are included too, so the example shows the
/// whole surface of the tool; nested objects only get their required ones, to
/// keep examples short.
pub fn arguments(schema: Option<&Value>) -> Value {
    match schema {
        Some(schema) => match value_for(schema, schema, 0, true) {
            Value::Null => Value::Object(Map::new()),
            value => value,
        },
        None => Value::Object(Map::new()),
    }
}

/// An example value for `schema`; `root` resolves local `$ref`s.
fn value_for(schema: &Value, root: &Value, depth: usize, top: bool) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(schema) = schema.as_object() else {
        // `true` or a malformed schema: anything goes.
        return json!("example");
    };
    if let Some(hint) = given_example(schema) {
        return hint;
    }
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        return match resolve(root, target) {
            Some(target) => value_for(target, root, depth + 1, top),
            None => Value::Null,
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let option = options.iter().find(|option| !is_null_schema(option));
            if let Some(option) = option.or(options.first()) {
                return value_for(option, root, depth + 1, top);
            }
        }
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        return merge_all(parts, root, depth, top);
    }
    match schema_type(schema) {
        Some("object") => object_value(schema, root, depth, top),
        Some("array") => array_value(schema, root, depth),
        Some("string") => string_value(schema),
        Some("integer") => integer_value(schema),
        Some("number") => number_value(schema),
        Some("boolean") => Value::Bool(true),
        Some("null") => Value::Null,
        _ => json!("example"),
    }
}

/// The schema's own example, default, const or first enum member.
fn given_example(schema: &Map<String, Value>) -> Option<Value> {
    let first_example = schema
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|examples| examples.first());
    first_example
        .or_else(|| schema.get("example"))
        .or_else(|| schema.get("default"))
        .or_else(|| schema.get("const"))
        .or_else(|| {
            schema
                .get("enum")
                .and_then(Value::as_array)
                .and_then(|values| values.first())
        })
        .cloned()
}

/// The schema's type: the first non-null entry of a type list, or inferred
/// from the keywords present.
pub(crate) fn schema_type(schema: &Map<String, Value>) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(kind)) => Some(kind),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .or_else(|| kinds.first().and_then(Value::as_str)),
        _ if schema.contains_key("properties") => Some("object"),
        _ if schema.contains_key("items") => Some("array"),
        _ => None,
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

/// Resolves a local reference such as `#/$defs/Address`.
fn resolve<'a>(root: &'a Value, target: &str) -> Option<&'a Value> {
    target
        .strip_prefix('#')
        .and_then(|pointer| root.pointer(pointer))
}

fn merge_all(parts: &[Value], root: &Value, depth: usize, top: bool) -> Value {
    let mut merged = Map::new();
    for part in parts {
        match value_for(part, root, depth + 1, top) {
            Value::Object(fields) => merged.extend(fields),
            // A non-object part decides the whole value (e.g. allOf of a
            // single string schema).
            other if merged.is_empty() => return other,
            _ => {}
        }
    }
    Value::Object(merged)
}

fn object_value(schema: &Map<String, Value>, root: &Value, depth: usize, top: bool) -> Value {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Map::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if top || required.contains(&name.as_str()) {
                fields.insert(name.clone(), value_for(property, root, depth + 1, false));
            }
        }
    }
    // Required names without a property schema still have to be present.
    for name in required {
        if !fields.contains_key(name) {
            fields.insert(name.to_string(), json!("example"));
        }
    }
    Value::Object(fields)
}

fn array_value(schema: &Map<String, Value>, root: &Value, depth: usize) -> Value {
    let max_items = schema.get("maxItems").and_then(Value::as_u64);
    match schema.get("items") {
        Some(items) if max_items != Some(0) => {
            let min_items = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1);
            let item = value_for(items, root, depth + 1, false);
            // Never more than a few items: the example illustrates, it does
            // not need to be long. Unique items stay valid with one entry.
            let count = min_items.clamp(1, 3);
            if count > 1 && schema.get("uniqueItems") == Some(&Value::Bool(true)) {
                return Value::Array(vec![item]);
            }
            Value::Array((0..count).map(|_| item.clone()).collect())
        }
        _ => Value::Array(Vec::new()),
    }
}

fn string_value(schema: &Map<String, Value>) -> Value {
    let by_format = match schema.get("format").and_then(Value::as_str) {
        Some("date") => Some("2025-05-15"),
        Some("date-time") => Some("2025-05-15T19:00:00Z"),
        Some("time") => Some("19:00:00"),
        Some("email") => Some("user@example.com"),
        Some("uri" | "url" | "uri-reference" | "iri") => Some("https://example.com"),
        Some("uuid") => Some("123e4567-e89b-12d3-a456-426614174000"),
        Some("hostname") => Some("example.com"),
        Some("ipv4") => Some("192.0.2.1"),
        Some("ipv6") => Some("2001:db8::1"),
        Some("duration") => Some("PT1H"),
        _ => None,
    };
    if let Some(value) = by_format {
        return json!(value);
    }
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(example) = description_example(description) {
        return json!(example);
    }
    if description.contains("YYYY-MM-DD") {
        return json!("2025-05-15");
    }
    if description.contains("HH:MM") {
        return json!("19:00");
    }
    json!("example")
}

/// The value after "e.g." in a description ("The city, e.g. San Francisco, CA"
/// gives "San Francisco, CA"), when it is short enough to be a single value.
fn description_example(description: &str) -> Option<&str> {
    let start = description.find("e.g.")? + "e.g.".len();
    let rest = description[start..].trim_start_matches([',', ':', ' ']);
    let end = rest.find([')', ';', '\n']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let rest = rest.find(". ").map_or(rest, |end| &rest[..end]);
    let value = rest
        .trim()
        .trim_end_matches('.')
        .trim_matches(['"', '\'', '`']);
    (!value.is_empty() && value.chars().count() <= 60).then_some(value)
}

fn integer_value(schema: &Map<String, Value>) -> Value {
    let minimum = bound(schema, "minimum", "exclusiveMinimum", 1.0);
    let maximum = bound(schema, "maximum", "exclusiveMaximum", -1.0);
    let mut value = 1.0_f64;
    if let Some(minimum) = minimum {
        value = value.max(minimum.ceil());
    }
    if let Some(maximum) = maximum {
        value = value.min(maximum.floor());
    }
    // The bounds come from the client: keep the conversion in range.
    if value.is_finite() && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(1)
    }
}

fn number_value(schema: &Map<String, Value>) -> Value {
    let minimum = bound(schema, "minimum", "exclusiveMinimum", 0.5);
    let maximum = bound(schema, "maximum", "exclusiveMaximum", -0.5);
    let mut value = 1.5_f64;
    if let Some(minimum) = minimum {
        value = value.max(minimum);
    }
    if let Some(maximum) = maximum {
        value = value.min(maximum);
    }
    serde_json::Number::from_f64(value).map_or(json!(1.5), Value::Number)
}

/// An inclusive bound, moving exclusive ones inward by `step`.
fn bound(schema: &Map<String, Value>, inclusive: &str, exclusive: &str, step: f64) -> Option<f64> {
    schema.get(inclusive).and_then(Value::as_f64).or_else(|| {
        schema
            .get(exclusive)
            .and_then(Value::as_f64)
            .map(|b| b + step)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_weather_example_uses_the_description_hint_and_first_enum() {
        let schema = json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            },
            "required": ["location"]
        });
        assert_eq!(
            arguments(Some(&schema)),
            json!({"location": "San Francisco, CA", "unit": "celsius"})
        );
    }

    #[test]
    fn formats_defaults_and_examples() {
        let schema = json!({
            "type": "object",
            "properties": {
                "day": {"type": "string", "format": "date"},
                "at": {"type": "string", "format": "date-time"},
                "mail": {"type": "string", "format": "email"},
                "id": {"type": "string", "format": "uuid"},
                "count": {"type": "integer", "default": 7},
                "tag": {"type": "string", "examples": ["urgent"]},
                "ratio": {"type": "number", "minimum": 2},
                "flag": {"type": ["boolean", "null"]}
            }
        });
        let value = arguments(Some(&schema));
        assert_eq!(value["day"], "2025-05-15");
        assert_eq!(value["at"], "2025-05-15T19:00:00Z");
        assert_eq!(value["mail"], "user@example.com");
        assert_eq!(value["id"], "123e4567-e89b-12d3-a456-426614174000");
        assert_eq!(value["count"], 7);
        assert_eq!(value["tag"], "urgent");
        assert_eq!(value["ratio"], 2.0);
        assert_eq!(value["flag"], true);
    }

    #[test]
    fn nested_objects_get_required_fields_only() {
        let schema = json!({
            "type": "object",
            "properties": {
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"]
                },
                "tags": {"type": "array", "items": {"type": "integer", "maximum": 0}}
            },
            "required": ["address", "missing"]
        });
        assert_eq!(
            arguments(Some(&schema)),
            json!({"address": {"city": "example"}, "tags": [0], "missing": "example"})
        );
    }

    #[test]
    fn refs_and_unions_are_followed_and_recursion_ends() {
        let schema = json!({
            "type": "object",
            "properties": {
                "node": {"$ref": "#/$defs/Node"},
                "either": {"anyOf": [{"type": "null"}, {"type": "integer"}]}
            },
            "required": ["node"],
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}, "required": ["next"]}}
        });
        let value = arguments(Some(&schema));
        assert_eq!(value["either"], 1);
        assert!(value["node"]["next"]["next"].is_object());
    }

    #[test]
    fn no_schema_gives_empty_object() {
        assert_eq!(arguments(None), json!({}));
        assert_eq!(arguments(Some(&json!({"type": "object"}))), json!({}));
    }
}

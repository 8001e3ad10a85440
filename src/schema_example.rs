//! Example arguments made from a JSON Schema (bounded in depth, nodes and
//! bytes): what natural mode's contracts show a model and what the demo
//! model answers with. Pure.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

/// How deep nested schemas and `$ref` chains are followed; past it a value
/// becomes `null`, which keeps recursive schemas finite.
const MAX_DEPTH: usize = 8;

/// How many schema nodes one example may visit. Depth alone does not bound
/// the work: an object whose 20 required properties each refer back to it
/// has 20^8 nodes within [`MAX_DEPTH`].
pub const MAX_EXAMPLE_NODES: usize = 100_000;

/// How many bytes of JSON one example may hold; past it the example is cut
/// off (see [`Example::truncated`]).
pub const MAX_EXAMPLE_BYTES: usize = 256 * 1024;

/// A synthesized example and whether a budget cut it short.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The example arguments (always an object).
    pub value: Value,
    /// A node or byte budget ran out: some values are left out, so the
    /// example may lack required properties.
    pub truncated: bool,
}

/// Example arguments for a tool whose parameters are `schema` (`None`: `{}`).
///
/// Top-level optional properties are included too, so the example shows the
/// whole surface of the tool; nested objects only get their required ones, to
/// keep examples short.
pub fn arguments(schema: Option<&Value>) -> Value {
    bounded(schema).value
}

/// Like [`arguments`], within [`MAX_EXAMPLE_NODES`] and [`MAX_EXAMPLE_BYTES`].
pub fn bounded(schema: Option<&Value>) -> Example {
    bounded_within(schema, MAX_EXAMPLE_NODES, MAX_EXAMPLE_BYTES)
}

/// Like [`bounded`] with explicit budgets (tests use small ones).
pub fn bounded_within(schema: Option<&Value>, nodes: usize, bytes: usize) -> Example {
    let mut budget = Budget {
        nodes,
        bytes,
        truncated: false,
    };
    let value = match schema {
        Some(schema) => match value_for(schema, schema, 0, true, &mut budget) {
            Value::Null => Value::Object(Map::new()),
            value => value,
        },
        None => Value::Object(Map::new()),
    };
    Example {
        value,
        truncated: budget.truncated,
    }
}

/// What is left of one example's budgets. The byte count is of the JSON
/// text the example will be written as, pretty-printed (each member on its
/// own line, indented by at most two spaces per level of `depth`), so a
/// cut-off example is never larger than [`MAX_EXAMPLE_BYTES`] as written.
struct Budget {
    nodes: usize,
    bytes: usize,
    truncated: bool,
}

impl Budget {
    /// Takes `nodes` steps and `bytes` of output; `false` (and marks the
    /// example truncated) when either is exhausted.
    fn take(&mut self, nodes: usize, bytes: usize) -> bool {
        if self.truncated || nodes > self.nodes || bytes > self.bytes {
            self.truncated = true;
            return false;
        }
        self.nodes -= nodes;
        self.bytes -= bytes;
        true
    }

    /// Takes the bytes of `value` written as JSON, measuring it no further
    /// than the budget left, so a huge value costs at most that much work.
    fn take_value(&mut self, value: &Value) -> bool {
        match json_size_within(value, self.bytes) {
            Some(size) => self.take(1, size),
            None => {
                self.truncated = true;
                false
            }
        }
    }
}

/// The size of `value` as compact JSON (strings counted unescaped), or `None`
/// when it exceeds `limit`; stops walking as soon as it does.
fn json_size_within(value: &Value, limit: usize) -> Option<usize> {
    fn walk(value: &Value, left: &mut usize) -> bool {
        let own = match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => items.len() + 2,
            Value::Object(fields) => fields.len() * 2 + 2,
        };
        if own > *left {
            return false;
        }
        *left -= own;
        match value {
            Value::Array(items) => items.iter().all(|item| walk(item, left)),
            Value::Object(fields) => fields.iter().all(|(key, item)| {
                if key.len() + 2 > *left {
                    return false;
                }
                *left -= key.len() + 2;
                walk(item, left)
            }),
            _ => true,
        }
    }
    let mut left = limit;
    walk(value, &mut left).then(|| limit - left)
}

/// An example value for `schema`; `root` resolves local `$ref`s. `Null` when
/// the depth or the budget ran out.
fn value_for(schema: &Value, root: &Value, depth: usize, top: bool, budget: &mut Budget) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(schema) = schema.as_object() else {
        // `true` or a malformed schema: anything goes.
        return leaf(json!("example"), budget);
    };
    if let Some(hint) = given_example(schema) {
        return if budget.take_value(hint) {
            hint.clone()
        } else {
            Value::Null
        };
    }
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        // Resolving walks the pointer: charge its length as work.
        if !budget.take(1 + target.len() / 16, 0) {
            return Value::Null;
        }
        return match resolve(root, target) {
            Some(target) => value_for(target, root, depth + 1, top, budget),
            None => Value::Null,
        };
    }
    if !budget.take(1, 0) {
        return Value::Null;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let option = options.iter().find(|option| !is_null_schema(option));
            if let Some(option) = option.or(options.first()) {
                return value_for(option, root, depth + 1, top, budget);
            }
        }
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        return merge_all(parts, root, depth, top, budget);
    }
    match schema_type(schema) {
        Some("object") => object_value(schema, root, depth, top, budget),
        Some("array") => array_value(schema, root, depth, budget),
        Some("string") => leaf(string_value(schema), budget),
        Some("integer") => leaf(integer_value(schema), budget),
        Some("number") => leaf(number_value(schema), budget),
        Some("boolean") => leaf(Value::Bool(true), budget),
        Some("null") => Value::Null,
        _ => leaf(json!("example"), budget),
    }
}

/// The most indentation a pretty-printed line at `depth` can have: a level
/// of nesting takes at least one level of schema depth.
fn indent(depth: usize) -> usize {
    2 * (depth + 1)
}

/// A small synthesized value, if the byte budget has room for it.
fn leaf(value: Value, budget: &mut Budget) -> Value {
    if budget.take_value(&value) {
        value
    } else {
        Value::Null
    }
}

/// The schema's own example, default, const or first enum member.
fn given_example(schema: &Map<String, Value>) -> Option<&Value> {
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

fn merge_all(parts: &[Value], root: &Value, depth: usize, top: bool, budget: &mut Budget) -> Value {
    let mut merged = Map::new();
    for part in parts {
        match value_for(part, root, depth + 1, top, budget) {
            Value::Object(fields) => merged.extend(fields),
            // A non-object part decides the whole value (e.g. allOf of a
            // single string schema).
            other if merged.is_empty() => return other,
            _ => {}
        }
    }
    Value::Object(merged)
}

fn object_value(
    schema: &Map<String, Value>,
    root: &Value,
    depth: usize,
    top: bool,
    budget: &mut Budget,
) -> Value {
    // A set: a long `required` list must not make each property a scan.
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Map::new();
    // The braces, the closing one indented on its own line.
    if !budget.take(0, 3 + indent(depth)) {
        return Value::Null;
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if top || required.contains(name.as_str()) {
                // An indented line: the key, its quotes, ": " and a comma.
                if !budget.take(1, name.len() + 6 + indent(depth)) {
                    return Value::Object(fields);
                }
                let value = value_for(property, root, depth + 1, false, budget);
                if budget.truncated && value.is_null() {
                    return Value::Object(fields);
                }
                fields.insert(name.clone(), value);
            }
        }
    }
    // Required names without a property schema still have to be present.
    // `required` keeps the schema's order only for iteration below.
    let names = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for name in names {
        if !fields.contains_key(name) {
            if !budget.take(1, name.len() + 16 + indent(depth)) {
                return Value::Object(fields);
            }
            fields.insert(name.to_string(), json!("example"));
        }
    }
    Value::Object(fields)
}

fn array_value(
    schema: &Map<String, Value>,
    root: &Value,
    depth: usize,
    budget: &mut Budget,
) -> Value {
    let max_items = schema.get("maxItems").and_then(Value::as_u64);
    match schema.get("items") {
        Some(items) if max_items != Some(0) => {
            let min_items = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1);
            // The brackets, and each item on an indented line.
            let before = budget.bytes;
            if !budget.take(0, 3 + 2 * indent(depth)) {
                return Value::Null;
            }
            let item = value_for(items, root, depth + 1, false, budget);
            let item_bytes = before - budget.bytes;
            // Never more than a few items: the example illustrates, it does
            // not need to be long. Unique items stay valid with one entry.
            let count = min_items.clamp(1, 3) as usize;
            if count > 1 && schema.get("uniqueItems") == Some(&Value::Bool(true)) {
                return Value::Array(vec![item]);
            }
            // Each copy costs its bytes again; as many as fit.
            let mut values = vec![item];
            while values.len() < count && budget.take(1, item_bytes) {
                values.push(values[0].clone());
            }
            Value::Array(values)
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
    if let Some(example) = description_example(description)
        && accepts(schema, example)
    {
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
/// gives "San Francisco, CA"), when it is one whole value: the first quoted
/// one when the example is quoted (`e.g. 'America/New_York', 'Europe/London'`
/// gives `America/New_York`), else the text up to the end of the clause,
/// short and free of quotes.
fn description_example(description: &str) -> Option<&str> {
    let start = description.find("e.g.")? + "e.g.".len();
    let rest = description[start..].trim_start_matches([',', ':', ' ']);
    if let Some(quote) = rest.chars().next().filter(|c| ['"', '\'', '`'].contains(c)) {
        let inner = &rest[quote.len_utf8()..];
        let value = &inner[..inner.find(quote)?];
        return (!value.trim().is_empty() && value.chars().count() <= 60).then_some(value);
    }
    let end = rest.find([')', ';', '\n']).unwrap_or(rest.len());
    let rest = &rest[..end];
    let rest = rest.find(". ").map_or(rest, |end| &rest[..end]);
    let value = rest.trim().trim_end_matches('.');
    let whole =
        !value.is_empty() && value.chars().count() <= 60 && !value.contains(['"', '\'', '`']);
    whole.then_some(value)
}

/// Whether the property's own schema accepts `value` (its pattern, length,
/// enum, format): an example taken from prose is shown only when it does.
fn accepts(schema: &Map<String, Value>, value: &str) -> bool {
    jsonschema::validator_for(&Value::Object(schema.clone()))
        .is_ok_and(|validator| validator.is_valid(&json!(value)))
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

    /// An example taken from prose is one whole value the schema accepts,
    /// or none: a list of quoted examples gives its first, never the text
    /// between two quotes (the demo model copied that, and the tool failed).
    #[test]
    fn prose_examples_are_whole_values_the_schema_accepts() {
        let example = |description: &str, extra: Value| {
            let mut property = json!({"type": "string", "description": description});
            if let (Value::Object(p), Value::Object(e)) = (&mut property, extra) {
                p.extend(e);
            }
            let schema =
                json!({"type": "object", "properties": {"v": property}, "required": ["v"]});
            arguments(Some(&schema))["v"].clone()
        };
        assert_eq!(
            example(
                "IANA zone, e.g. 'America/New_York', 'Europe/London'",
                json!({})
            ),
            "America/New_York"
        );
        assert_eq!(example("e.g. \"Paris\" or \"Lyon\"", json!({})), "Paris");
        assert_eq!(example("A city, e.g. Paris", json!({})), "Paris");
        // Quotes inside an unquoted example: not one value.
        assert_eq!(example("e.g. O'Hare, 'JFK'", json!({})), "example");
        // The schema refuses the prose's example: none is taken.
        assert_eq!(
            example("Two letters, e.g. France", json!({"pattern": "^[A-Z]{2}$"})),
            "example"
        );
        assert_eq!(example("e.g. 'FR'", json!({"pattern": "^[A-Z]{2}$"})), "FR");
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

    /// The schema of issue 15: an object whose ~20 required properties each
    /// refer back to the object. Unbounded, its example has 20^8 nodes.
    pub(crate) fn self_referencing_schema(properties: usize) -> Value {
        let names: Vec<String> = (0..properties).map(|i| format!("p{i}")).collect();
        let props: Map<String, Value> = names
            .iter()
            .map(|name| (name.clone(), json!({"$ref": "#"})))
            .collect();
        json!({"type": "object", "properties": props, "required": names})
    }

    #[test]
    fn self_referencing_required_properties_stay_within_the_byte_budget() {
        let schema = self_referencing_schema(20);
        let example = bounded(Some(&schema));
        assert!(example.truncated);
        let written = serde_json::to_string_pretty(&example.value).unwrap().len();
        assert!(written <= MAX_EXAMPLE_BYTES, "{written} bytes");
        // Cut off cleanly: still an object, with the first properties filled.
        assert!(example.value["p0"]["p0"].is_object());
    }

    #[test]
    fn the_node_budget_bounds_work_even_when_values_are_tiny() {
        // No byte limit: only the node budget stops the walk.
        let schema = self_referencing_schema(20);
        let example = bounded_within(Some(&schema), 1_000, usize::MAX);
        assert!(example.truncated);
        assert!(count_nodes(&example.value) <= 1_000);
    }

    #[test]
    fn array_copies_and_large_hints_are_charged() {
        let big = "x".repeat(10_000);
        let schema = json!({
            "type": "object",
            "properties": {"list": {"type": "array", "minItems": 3, "items": {"type": "string", "default": big}}}
        });
        // Room for one copy only.
        let example = bounded_within(Some(&schema), 1_000, 15_000);
        assert!(example.truncated);
        assert_eq!(example.value["list"].as_array().map(Vec::len), Some(1));
        let whole = bounded_within(Some(&schema), 1_000, 40_000);
        assert!(!whole.truncated);
        assert_eq!(whole.value["list"].as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn ordinary_schemas_are_not_truncated() {
        let schema =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert!(!bounded(Some(&schema)).truncated);
    }

    fn count_nodes(value: &Value) -> usize {
        1 + match value {
            Value::Array(items) => items.iter().map(count_nodes).sum(),
            Value::Object(fields) => fields.values().map(count_nodes).sum(),
            _ => 0,
        }
    }
}

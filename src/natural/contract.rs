//! Renders one tool as a Markdown contract: its name, purpose, parameters
//! and an example call.
//!
//! Layout rules that other code depends on (a built-in demo model reads them):
//! a section starts with the line `## ToolName`; the example call starts on the
//! line right after a line that is exactly `Example:`, contains no blank line
//! and ends the section. To keep those rules true whatever the client writes,
//! descriptions never produce a line that starts a section or an example.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::natural::syntax::Syntax;
use crate::natural::tools::Tool;
use crate::schema_example as example;

/// A JSON Schema object, or one of its `properties` maps.
type Schema = Map<String, Value>;

/// Object nesting rendered as nested lists; deeper schemas become JSON blocks.
const MAX_LIST_DEPTH: usize = 3;

/// Keywords whose meaning a bullet list cannot express; a (sub-)schema with
/// any of them is shown as JSON instead.
const COMPLEX_KEYWORDS: [&str; 8] = [
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "not",
    "if",
    "patternProperties",
    "additionalProperties",
];

/// Appends the contract of `tool`, without a trailing newline.
pub fn render(tool: &Tool, syntax: Syntax, out: &mut String) {
    out.push_str("## ");
    out.push_str(&tool.name);
    out.push('\n');
    if let Some(description) = tool.description.as_deref().map(str::trim)
        && !description.is_empty()
    {
        out.push_str("Description: ");
        push_indented_lines(description, out);
        out.push('\n');
    }
    out.push('\n');
    render_parameters(tool.parameters.as_ref(), out);
    if tool.strict {
        out.push_str(
            "The arguments must match the parameters exactly: no other properties, no missing required ones.\n",
        );
    }
    let example = example::bounded(tool.parameters.as_ref());
    if example.truncated {
        // Said before the example, which must end the section.
        out.push_str(
            "The example below is abridged (the schema is too large to show in full): fill in every required property.\n",
        );
    }
    out.push_str("\nExample:\n");
    syntax.render_call(&tool.name, &example.value, out);
}

/// Writes a multi-line text so that every line after the first is indented:
/// no client text can then start a line with `## ` or be exactly `Example:`.
fn push_indented_lines(text: &str, out: &mut String) {
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push_str("\n  ");
        }
        out.push_str(line.trim_end());
    }
}

fn render_parameters(schema: Option<&Value>, out: &mut String) {
    let Some(object) = schema.and_then(Value::as_object) else {
        out.push_str("Parameters: none\n");
        return;
    };
    let has_definitions = object.contains_key("$defs") || object.contains_key("definitions");
    if has_definitions || is_complex(object) {
        out.push_str("Parameters (JSON Schema):\n");
        push_json_block(&Value::Object(object.clone()), 0, out);
        return;
    }
    match object.get("properties").and_then(Value::as_object) {
        Some(properties) if !properties.is_empty() => {
            out.push_str("Parameters:\n");
            render_properties(object, properties, 0, out);
        }
        _ => out.push_str("Parameters: none\n"),
    }
}

fn is_complex(schema: &Map<String, Value>) -> bool {
    COMPLEX_KEYWORDS.iter().any(|key| {
        schema
            .get(*key)
            .is_some_and(|value| value.is_object() || value.is_array() || value.is_string())
    })
}

/// One bullet per property of `parent`, nested `depth` levels deep.
fn render_properties(
    parent: &Map<String, Value>,
    properties: &Map<String, Value>,
    depth: usize,
    out: &mut String,
) {
    // A set: a long `required` list must not make each property a scan.
    let required: HashSet<&str> = parent
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let is_required = required.contains(name.as_str());
        render_property(name, property, is_required, depth, out);
    }
}

fn render_property(name: &str, schema: &Value, required: bool, depth: usize, out: &mut String) {
    let indent = "  ".repeat(depth);
    let empty = Map::new();
    let object = schema.as_object().unwrap_or(&empty);
    out.push_str(&indent);
    out.push_str("- `");
    push_property_name(name, out);
    out.push_str("` (");
    out.push_str(&type_label(object));
    out.push_str(if required {
        ", required)"
    } else {
        ", optional)"
    });
    let details = details(object);
    if !details.is_empty() {
        out.push_str(": ");
        out.push_str(&details);
    }
    out.push('\n');

    if is_complex(object) || depth + 1 >= MAX_LIST_DEPTH && has_children(object) {
        push_json_block(schema, depth + 1, out);
        return;
    }
    if let Some(children) = children(object) {
        let (parent, properties) = children;
        render_properties(parent, properties, depth + 1, out);
    }
}

/// Writes a property name; one with control characters (a line break could
/// fake a section heading) is written JSON-escaped instead.
fn push_property_name(name: &str, out: &mut String) {
    if name.chars().any(char::is_control) {
        out.push_str(&Value::from(name).to_string());
    } else {
        out.push_str(name);
    }
}

/// The nested properties to list below a property: its own for an object,
/// its items' for an array of objects.
fn children(schema: &Map<String, Value>) -> Option<(&Schema, &Schema)> {
    let holder = match example::schema_type(schema) {
        Some("array") => schema.get("items")?.as_object()?,
        _ => schema,
    };
    let properties = holder.get("properties")?.as_object()?;
    (!properties.is_empty()).then_some((holder, properties))
}

fn has_children(schema: &Map<String, Value>) -> bool {
    children(schema).is_some()
}

/// "string", "integer or null", "array of object", ...
fn type_label(schema: &Map<String, Value>) -> String {
    let kinds: Vec<&str> = match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => example::schema_type(schema).into_iter().collect(),
    };
    if kinds.is_empty() {
        return match schema
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
        {
            Some(Value::String(_)) => "string".into(),
            Some(Value::Number(_)) => "number".into(),
            Some(Value::Bool(_)) => "boolean".into(),
            _ => "any".into(),
        };
    }
    let labels: Vec<String> = kinds
        .iter()
        .map(|kind| match *kind {
            "array" => match schema.get("items").and_then(Value::as_object) {
                Some(items) => format!("array of {}", type_label(items)),
                None => "array".into(),
            },
            other => other.to_string(),
        })
        .collect();
    labels.join(" or ")
}

/// The description followed by the constraints a model needs to respect.
fn details(schema: &Map<String, Value>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        let single_line = description.split_whitespace().collect::<Vec<_>>().join(" ");
        if !single_line.is_empty() {
            parts.push(single_line);
        }
    }
    let described = !parts.is_empty();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(Value::to_string).collect();
        parts.push(format!("One of: {}.", values.join(", ")));
    }
    if let Some(value) = schema.get("const") {
        parts.push(format!("Always {value}."));
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        parts.push(format!("Format: {format}."));
    }
    if let Some(default) = schema.get("default") {
        parts.push(format!("Default: {default}."));
    }
    for (key, label) in [
        ("minimum", "Minimum"),
        ("maximum", "Maximum"),
        ("minLength", "Minimum length"),
        ("maxLength", "Maximum length"),
        ("minItems", "Minimum items"),
        ("maxItems", "Maximum items"),
        ("pattern", "Pattern"),
    ] {
        if let Some(value) = schema.get(key) {
            parts.push(format!("{label}: {value}."));
        }
    }
    // End the description as a sentence when constraints follow it.
    if described && parts.len() > 1 && !parts[0].ends_with(['.', '!', '?', ':']) {
        parts[0].push('.');
    }
    parts.join(" ")
}

/// A ```json fenced block, indented to sit under a list item.
fn push_json_block(schema: &Value, depth: usize, out: &mut String) {
    let indent = "  ".repeat(depth);
    let json = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
    out.push_str(&indent);
    out.push_str("```json\n");
    for line in json.lines() {
        out.push_str(&indent);
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&indent);
    out.push_str("```\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(parameters: Option<Value>, description: Option<&str>) -> String {
        let tool = Tool {
            name: "T".into(),
            description: description.map(str::to_string),
            parameters,
            strict: false,
            unlisted: false,
        };
        let mut out = String::new();
        render(&tool, Syntax::Tag, &mut out);
        out
    }

    #[test]
    fn tool_without_parameters() {
        assert_eq!(
            rendered(None, None),
            "## T\n\nParameters: none\n\nExample:\n<T>\n```json\n{}\n```\n</T>"
        );
    }

    #[test]
    fn nested_objects_and_arrays_are_nested_lists() {
        let schema = json!({
            "type": "object",
            "properties": {
                "address": {"type": "object", "description": "Where", "properties": {
                    "city": {"type": "string"}
                }, "required": ["city"]},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]+$"}
                }}},
                "tags": {"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 3}
            },
            "required": ["address"]
        });
        let text = rendered(Some(schema), None);
        assert!(
            text.contains("- `address` (object, required): Where\n  - `city` (string, required)\n")
        );
        assert!(text.contains(
            "- `items` (array of object, optional)\n  - `sku` (string, optional): Pattern: \"^[A-Z]+$\".\n"
        ));
        assert!(text.contains("- `tags` (array of string or null, optional): Maximum items: 3.\n"));
    }

    #[test]
    fn complex_properties_become_indented_json() {
        let schema = json!({
            "type": "object",
            "properties": {"when": {"description": "A date or a number", "anyOf": [{"type": "string"}, {"type": "integer"}]}}
        });
        let text = rendered(Some(schema), None);
        assert!(text.contains("- `when` (any, optional): A date or a number\n  ```json\n  {\n"));
        assert!(text.contains("\n  ```\n\nExample:\n"));
    }

    #[test]
    fn schemas_with_definitions_are_shown_whole() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}}
        });
        let text = rendered(Some(schema), None);
        assert!(text.contains("Parameters (JSON Schema):\n```json\n{\n"));
        assert!(text.ends_with("\"a\": \"example\"\n}\n```\n</T>"));
    }

    #[test]
    fn deep_nesting_falls_back_to_json() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {
            "b": {"type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "string"}}}}}
        }}}});
        let text = rendered(Some(schema), None);
        // Three levels as lists, the fourth as JSON under the third.
        assert!(
            text.contains(
                "  - `b` (object, optional)\n    - `c` (object, optional)\n      ```json\n"
            )
        );
    }

    #[test]
    fn descriptions_cannot_fake_sections_or_examples() {
        let text = rendered(None, Some("Line one\n## Fake\nExample:\nend"));
        assert!(text.starts_with("## T\nDescription: Line one\n  ## Fake\n  Example:\n  end\n"));
        assert_eq!(text.lines().filter(|line| *line == "Example:").count(), 1);
        assert_eq!(
            text.lines().filter(|line| line.starts_with("## ")).count(),
            1
        );
    }

    #[test]
    fn strict_tools_say_so() {
        let tool = Tool {
            name: "T".into(),
            description: None,
            parameters: None,
            strict: true,
            unlisted: false,
        };
        let mut out = String::new();
        render(&tool, Syntax::ToolCall, &mut out);
        assert!(out.contains("must match the parameters exactly"));
        assert!(out.ends_with("Example:\n<tool_call name=\"T\">\n{}\n</tool_call>"));
    }
}

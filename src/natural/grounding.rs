//! Whether a call's values come from the conversation (`on_ungrounded`).
//!
//! A call is *ungrounded* when one of its string argument values (at any
//! depth of its arguments) appears nowhere in what the client wrote, and is
//! neither one of the schema's `enum` values nor its `default` at that place.
//! What the client wrote is the text of the request's `system`, `developer`
//! and `user` messages (a string content, or the `text` of its parts), as
//! the client sent them, before natural mode's instructions go in. The
//! comparison is a substring test on normalised text: lower-cased, every run
//! of whitespace one space, none at either end. A value that is empty once
//! normalised carries nothing; numbers, booleans and nulls are not checked.
//! Pure: the engine decides what an ungrounded call leads to.

use serde_json::Value;

use crate::natural::tools::ToolSet;

/// What the client wrote, normalised, one message a line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation(String);

/// A string value of a call that the conversation does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ungrounded {
    /// The tool called.
    pub tool: String,
    /// Where the value sits in the arguments, as `a.b[0]`.
    pub path: String,
    /// The value as the model wrote it.
    pub value: String,
}

/// `text` lower-cased, each run of whitespace one space, trimmed.
pub fn normalised(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

impl Conversation {
    /// The client's `messages` (the request's array, before any rewrite).
    pub fn from_messages(messages: &[Value]) -> Conversation {
        let mut out = String::new();
        for message in messages {
            let role = message.get("role").and_then(Value::as_str);
            if !matches!(role, Some("system" | "developer" | "user")) {
                continue;
            }
            let text = match message.get("content") {
                Some(Value::String(text)) => normalised(text),
                Some(Value::Array(parts)) => normalised(
                    &parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => continue,
            };
            out.push_str(&text);
            out.push('\n');
        }
        Conversation(out)
    }

    /// The ungrounded values of a call of `tool` (its name) with
    /// `arguments` (a JSON object's text); none when the arguments are not
    /// JSON (the validator has said so already).
    pub fn ungrounded(&self, tools: &ToolSet, tool: &str, arguments: &str) -> Vec<Ungrounded> {
        let Ok(arguments) = serde_json::from_str::<Value>(arguments) else {
            return Vec::new();
        };
        let schema = tools.get(tool).and_then(|t| t.parameters.as_ref());
        let mut out = Vec::new();
        let mut path = String::new();
        self.walk(&arguments, schema, &mut path, &mut |path, value| {
            out.push(Ungrounded {
                tool: tool.to_owned(),
                path: path.to_owned(),
                value: value.to_owned(),
            });
        });
        out
    }

    fn walk(
        &self,
        value: &Value,
        schema: Option<&Value>,
        path: &mut String,
        found: &mut dyn FnMut(&str, &str),
    ) {
        match value {
            Value::Object(members) => {
                let properties = schema.and_then(|s| s.get("properties"));
                for (key, member) in members {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    self.walk(member, properties.and_then(|p| p.get(key)), path, found);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let schema = schema.and_then(|s| s.get("items"));
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.walk(item, schema, path, found);
                    path.truncate(len);
                }
            }
            Value::String(raw) => {
                let text = normalised(raw);
                if !text.is_empty() && !self.0.contains(&text) && !allowed(schema, &text) {
                    found(path, raw);
                }
            }
            _ => {}
        }
    }
}

/// Whether the schema at a value's place names it: one of its `enum`
/// values or its `default` (normalised as the value is).
fn allowed(schema: Option<&Value>, text: &str) -> bool {
    let Some(schema) = schema else {
        return false;
    };
    let named = |v: &Value| v.as_str().is_some_and(|s| normalised(s) == text);
    schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| values.iter().any(named))
        || schema.get("default").is_some_and(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natural::tools::Tool;
    use serde_json::json;

    fn tools() -> ToolSet {
        ToolSet::from_tools(vec![Tool {
            name: "get_weather".into(),
            description: None,
            parameters: Some(json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "lang": {"type": "string", "default": "en"},
                "tags": {"type": "array", "items": {"type": "string"}},
            }})),
            strict: false,
            unlisted: false,
        }])
    }

    fn conversation() -> Conversation {
        Conversation::from_messages(&[
            json!({"role": "system", "content": "You help travellers."}),
            json!({"role": "user", "content": [{"type": "text", "text": "Weather in\n  NEW   York?"}]}),
            json!({"role": "assistant", "content": "Boston"}),
            json!({"role": "tool", "content": "Paris"}),
        ])
    }

    #[test]
    fn values_the_client_wrote_are_grounded_whatever_their_case_and_spacing() {
        let c = conversation();
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"new york"}"#)
                .is_empty()
        );
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"New\tYork "}"#)
                .is_empty()
        );
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"travellers"}"#)
                .is_empty()
        );
    }

    #[test]
    fn a_value_only_the_model_or_a_tool_wrote_is_ungrounded() {
        let c = conversation();
        for city in ["Boston", "Paris", "example"] {
            let found = c.ungrounded(&tools(), "get_weather", &format!(r#"{{"city":"{city}"}}"#));
            assert_eq!(
                found,
                vec![Ungrounded {
                    tool: "get_weather".into(),
                    path: "city".into(),
                    value: city.into()
                }]
            );
        }
    }

    #[test]
    fn enum_and_default_values_numbers_and_empty_strings_are_grounded() {
        let c = conversation();
        let args =
            r#"{"city":"New York","unit":"Celsius","lang":"en","days":3,"ok":true,"note":"  "}"#;
        assert!(c.ungrounded(&tools(), "get_weather", args).is_empty());
        // The enum holds at its place only.
        let found = c.ungrounded(&tools(), "get_weather", r#"{"city":"celsius"}"#);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn nested_values_are_found_with_their_path() {
        let c = conversation();
        let found = c.ungrounded(
            &tools(),
            "get_weather",
            r#"{"tags":["york","john"],"x":{"y":"doe"}}"#,
        );
        let paths: Vec<_> = found
            .iter()
            .map(|u| (u.path.as_str(), u.value.as_str()))
            .collect();
        assert_eq!(paths, [("tags[1]", "john"), ("x.y", "doe")]);
    }

    #[test]
    fn normalising_lowers_and_collapses_whitespace() {
        assert_eq!(normalised("  A\t B\n\nÇ  "), "a b ç");
    }
}

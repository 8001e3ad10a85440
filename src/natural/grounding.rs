//! Whether a call's values come from the conversation (`on_ungrounded`).
//!
//! A call is *ungrounded* when one of its string argument values (at any
//! depth of its arguments) comes from nowhere in the conversation: it is
//! not in what the client and its tools wrote, shares no word with it, and
//! is neither one of the schema's `enum` values nor its `default` at that
//! place. What they wrote is the text of the request's `system`,
//! `developer`, `user` and `tool` messages (a string content, or the `text`
//! of its parts), as the client sent them, before natural mode's
//! instructions go in; the model's own messages are not in it.
//!
//! Text is compared normalised: lower-cased, every run of whitespace one
//! space, none at either end. A value is grounded when it is a substring of
//! that text, or when one of its *words* (runs of letters and digits) of at
//! least [`MIN_WORD`] characters is a word there: `"Los Angeles Lakers"`
//! after a question about "the lakers", `"2022-07-10"` after one about
//! July 2022. A value without such a word (`"all"`, `"km"`, `"x^2"`) is too
//! short to judge and passes; so does one empty once normalised. Numbers,
//! booleans and nulls are not checked. Measured on BFCL's recorded answers,
//! this keeps the invented values of irrelevant calls (`"example"`,
//! `"john"`, an invented date) and lets through the values a right call
//! derives from the question (docs/natural-mode.md). Pure: the engine
//! decides what an ungrounded call leads to.

use std::collections::HashSet;

use serde_json::Value;

use crate::natural::tools::ToolSet;

/// The fewest characters a word needs to ground a value (shorter words,
/// `"the"`, `"all"`, `"km"`, say nothing of where a value came from).
pub const MIN_WORD: usize = 4;

/// What the client and its tools wrote, normalised, one message a line,
/// and its words of at least [`MIN_WORD`] characters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    text: String,
    words: HashSet<String>,
}

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

/// The words of `text` that can ground a value: runs of letters and digits
/// of at least [`MIN_WORD`] characters.
fn long_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().nth(MIN_WORD - 1).is_some())
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
            if !matches!(role, Some("system" | "developer" | "user" | "tool")) {
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
        let words = long_words(&out).map(str::to_owned).collect();
        Conversation { text: out, words }
    }

    /// Whether `text` (normalised) could come from the conversation: it is
    /// in it, or one of its long words is a word of it, or it has no long
    /// word to judge by.
    fn holds(&self, text: &str) -> bool {
        if text.is_empty() || self.text.contains(text) {
            return true;
        }
        let mut words = long_words(text).peekable();
        words.peek().is_none() || words.any(|w| self.words.contains(w))
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
                if !self.holds(&text) && !allowed(schema, &text) {
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
    fn a_value_that_shares_a_long_word_with_the_conversation_is_grounded() {
        let c = conversation();
        for city in ["New York City", "york, usa", "Paris", "all", "NY", "x^2"] {
            assert!(
                c.ungrounded(&tools(), "get_weather", &format!(r#"{{"city":"{city}"}}"#))
                    .is_empty(),
                "{city}"
            );
        }
    }

    #[test]
    fn a_value_only_the_model_wrote_is_ungrounded() {
        let c = conversation();
        for city in ["Boston", "example", "Newark", "San Francisco"] {
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
            r#"{"tags":["york","john"],"x":{"y":"smith"}}"#,
        );
        let paths: Vec<_> = found
            .iter()
            .map(|u| (u.path.as_str(), u.value.as_str()))
            .collect();
        assert_eq!(paths, [("tags[1]", "john"), ("x.y", "smith")]);
    }

    #[test]
    fn normalising_lowers_and_collapses_whitespace() {
        assert_eq!(normalised("  A\t B\n\nÇ  "), "a b ç");
    }
}

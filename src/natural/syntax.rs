//! The textual shapes a tool call can take inside a model's message.
//!
//! The same enum drives both directions: the request side writes contracts,
//! examples and past calls in the configured syntax, and the response side
//! parses that syntax back into native calls.

pub mod python;

pub use crate::config::Syntax;

/// Writing calls and results as text, exactly as the instructions ask the model
/// to write them, so the history the model reads and the replies it is asked
/// for look the same.
impl Syntax {
    /// Appends a call of `name` with `arguments` in this syntax.
    ///
    /// Tag and tool_call use pretty JSON (what models imitate best); bracket
    /// keeps the whole call on one line with compact JSON, as its parser
    /// expects; python writes a list of one call with keyword arguments.
    pub fn render_call(self, name: &str, arguments: &serde_json::Value, out: &mut String) {
        let json = match self {
            Syntax::Python => {
                out.push('[');
                python::write_call(name, arguments, out);
                out.push(']');
                return;
            }
            Syntax::Bracket => arguments.to_string(),
            Syntax::Tag | Syntax::ToolCall => {
                serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string())
            }
        };
        self.render_call_text(name, &json, out);
    }

    /// Appends a call whose arguments are already text. Used for history
    /// whose `arguments` string is not valid JSON: the model should see what
    /// it (or the client) actually sent rather than have the request fail
    /// (in python, between the call's parentheses).
    pub fn render_call_text(self, name: &str, arguments: &str, out: &mut String) {
        self.write_call_open(name, out);
        out.push_str(arguments);
        self.write_call_close(name, out);
    }

    /// A bracket call with its own `[description]` (the one the model
    /// wrote), JSON arguments compact, as the parser reads it back.
    pub fn render_bracket_call(description: &str, name: &str, arguments: &str, out: &mut String) {
        out.push_str(description);
        write_bracket_object_open(name, out);
        out.push_str(arguments);
        out.push('}');
    }

    /// Appends everything a call's text has before its arguments. Split from
    /// [`Syntax::write_call_close`] so a call can be written as its
    /// arguments stream in (to_natural mode).
    pub fn write_call_open(self, name: &str, out: &mut String) {
        match self {
            Syntax::Tag => {
                out.push('<');
                out.push_str(name);
                out.push_str(">\n```json\n");
            }
            Syntax::ToolCall => {
                out.push_str("<tool_call name=\"");
                out.push_str(&escape_attribute(name));
                out.push_str("\">\n");
            }
            Syntax::Bracket => {
                out.push_str("[Calling ");
                out.push_str(name);
                out.push(']');
                write_bracket_object_open(name, out);
            }
            Syntax::Python => {
                out.push('[');
                out.push_str(name);
                out.push('(');
            }
        }
    }

    /// Appends everything a call's text has after its arguments.
    pub fn write_call_close(self, name: &str, out: &mut String) {
        match self {
            Syntax::Tag => {
                out.push_str("\n```\n</");
                out.push_str(name);
                out.push('>');
            }
            Syntax::ToolCall => out.push_str("\n</tool_call>"),
            Syntax::Bracket => out.push('}'),
            Syntax::Python => out.push_str(")]"),
        }
    }

    /// Appends one tool result as a `<tool_response>` block.
    /// The block is the same in every syntax: results are never parsed back.
    pub fn render_tool_response(name: &str, result: &str, out: &mut String) {
        out.push_str("<tool_response name=\"");
        out.push_str(&escape_attribute(name));
        out.push_str("\">\n");
        out.push_str(result);
        out.push_str("\n</tool_response>");
    }
}

/// Appends a bracket call's object up to its arguments:
/// `{"name": "…", "arguments": `.
pub fn write_bracket_object_open(name: &str, out: &mut String) {
    out.push_str("{\"name\": ");
    out.push_str(&serde_json::Value::from(name).to_string());
    out.push_str(", \"arguments\": ");
}

/// Keeps a name from closing the attribute it is written into. Declared tool
/// names cannot contain `"`, but names in history come from anywhere.
fn escape_attribute(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains('"') {
        std::borrow::Cow::Owned(name.replace('"', "&quot;"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(syntax: Syntax, arguments: serde_json::Value) -> String {
        let mut out = String::new();
        syntax.render_call("GetWeather", &arguments, &mut out);
        out
    }

    #[test]
    fn tag_call_is_a_fenced_json_block_inside_name_tags() {
        assert_eq!(
            call(Syntax::Tag, json!({"location": "Paris"})),
            "<GetWeather>\n```json\n{\n  \"location\": \"Paris\"\n}\n```\n</GetWeather>"
        );
    }

    #[test]
    fn tool_call_has_no_fence() {
        assert_eq!(
            call(Syntax::ToolCall, json!({})),
            "<tool_call name=\"GetWeather\">\n{}\n</tool_call>"
        );
    }

    #[test]
    fn bracket_is_one_line_with_compact_arguments() {
        assert_eq!(
            call(Syntax::Bracket, json!({"location": "Paris", "days": 2})),
            "[Calling GetWeather]{\"name\": \"GetWeather\", \"arguments\": {\"location\":\"Paris\",\"days\":2}}"
        );
    }

    #[test]
    fn python_is_a_list_of_one_call_with_keyword_arguments() {
        assert_eq!(
            call(
                Syntax::Python,
                json!({"location": "Paris", "days": 2, "metric": true})
            ),
            "[GetWeather(location=\"Paris\", days=2, metric=True)]"
        );
        let mut out = String::new();
        Syntax::Python.render_call_text("GetWeather", "not json", &mut out);
        assert_eq!(out, "[GetWeather(not json)]");
    }

    #[test]
    fn tool_response_wraps_the_result_and_escapes_the_name() {
        let mut out = String::new();
        Syntax::render_tool_response("a\"b", "42", &mut out);
        assert_eq!(
            out,
            "<tool_response name=\"a&quot;b\">\n42\n</tool_response>"
        );
    }
}

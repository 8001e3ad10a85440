//! What the demo model says: a pure function of the request.
//!
//! The demo reads its prompt the way a small instruction-following model
//! would: if the system prompt carries tool contracts (toolgate's natural
//! mode writes them), it calls a tool by copying the contract's example; if
//! the conversation ends in a tool result, it answers with that result;
//! otherwise it replies in a short sentence. When the user's message holds
//! a `code span`, its text becomes the call's first string argument, so a
//! demo call can carry real input (`What is \`6 * 7\`?`).

use serde_json::Value;

/// What the demo answers: text, optionally followed by one native tool call.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    /// `(name, arguments JSON)` when the request offered native `tools`.
    pub call: Option<(String, String)>,
}

/// The answer, or why the request is unusable (answered as a 400, like a real provider).
///
/// Offered native `tools` (the demo behind a passthrough or to_natural
/// provider), it calls one natively, with arguments synthesized from the schema.
pub fn answer(request: &Value) -> Result<Answer, String> {
    let text = reply(request)?;
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty());
    let choice_none = request.get("tool_choice").and_then(Value::as_str) == Some("none");
    let last_is_result = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .is_some_and(|m| matches!(role(m), "tool" | "function"));
    let (Some(tools), false, false) = (tools, choice_none, last_is_result) else {
        return Ok(Answer { text, call: None });
    };
    let user = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.iter().rev().find(|m| role(m) == "user"))
        .map(text_of)
        .unwrap_or_default()
        .to_lowercase();
    let name_of = |t: &Value| {
        t.pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let tool = tools
        .iter()
        .find(|t| !name_of(t).is_empty() && user.contains(&name_of(t).to_lowercase()))
        .unwrap_or(&tools[0]);
    let name = name_of(tool);
    let mut arguments = crate::schema_example::arguments(tool.pointer("/function/parameters"));
    if let Some(span) = code_span(&user) {
        fill_first_string(&mut arguments, span);
    }
    let arguments = arguments.to_string();
    Ok(Answer {
        text: format!("I'll use {name} for that."),
        call: Some((name, arguments)),
    })
}

/// The reply text, or why the request is unusable.
pub fn reply(request: &Value) -> Result<String, String> {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` must be an array")?;
    let last = messages.last().ok_or("`messages` must not be empty")?;
    if let Some(answer) = answer_tool_result(messages, last) {
        return Ok(answer);
    }
    let system: String = messages
        .iter()
        .filter(|m| matches!(role(m), "system" | "developer"))
        .map(text_of)
        .collect::<Vec<_>>()
        .join("\n\n");
    let user = messages
        .iter()
        .rev()
        .find(|m| role(m) == "user")
        .map(text_of)
        .unwrap_or_default();
    let contracts = contracts(&system);
    if !contracts.is_empty() {
        let lower = user.to_lowercase();
        let (name, example) = contracts
            .iter()
            .find(|(name, _)| lower.contains(&name.to_lowercase()))
            .unwrap_or(&contracts[0]);
        let example = match code_span(&user) {
            Some(span) => with_span(example, span),
            None => example.clone(),
        };
        return Ok(format!("I'll use {name} for that.\n\n{example}"));
    }
    let said: String = user.chars().take(200).collect();
    Ok(format!(
        "Hello! I am toolgate's built-in demo model. You said: \"{said}\". \
         Offer me tools and I will call one."
    ))
}

/// The text of the first `code span` in `text`.
fn code_span(text: &str) -> Option<&str> {
    let start = text.find('`')? + 1;
    let len = text[start..].find('`')?;
    Some(&text[start..start + len]).filter(|s| !s.is_empty())
}

/// Sets the first string value of an arguments object (depth first).
fn fill_first_string(value: &mut Value, span: &str) -> bool {
    match value {
        Value::String(s) => {
            *s = span.to_owned();
            true
        }
        Value::Object(map) => map.values_mut().any(|v| fill_first_string(v, span)),
        Value::Array(items) => items.iter_mut().any(|v| fill_first_string(v, span)),
        _ => false,
    }
}

/// A contract's example call with its JSON's first string set to `span`.
fn with_span(example: &str, span: &str) -> String {
    let (Some(open), Some(close)) = (example.find('{'), example.rfind('}')) else {
        return example.to_owned();
    };
    let Ok(mut json) = serde_json::from_str::<Value>(&example[open..=close]) else {
        return example.to_owned();
    };
    // A bracket call wraps the arguments: {"name": …, "arguments": {…}}.
    let arguments = match json.get_mut("arguments") {
        Some(inner) if inner.is_object() => inner,
        _ => &mut json,
    };
    if !fill_first_string(arguments, span) {
        return example.to_owned();
    }
    format!("{}{}{}", &example[..open], json, &example[close + 1..])
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

/// A message's text: string content, or its text parts joined.
pub fn text_of(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Answers a conversation whose last message is a tool result: a native
/// `tool` message, or a user message holding `<tool_response>` blocks.
fn answer_tool_result(messages: &[Value], last: &Value) -> Option<String> {
    let (name, result) = match role(last) {
        "tool" | "function" => {
            let id = last.get("tool_call_id").and_then(Value::as_str);
            let name = last
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| id.and_then(|id| call_name(messages, id)))
                .unwrap_or_else(|| "the tool".to_owned());
            (name, text_of(last))
        }
        "user" | "assistant" => {
            let text = text_of(last);
            let start = text.rfind("<tool_response name=\"")?;
            let rest = &text[start + "<tool_response name=\"".len()..];
            let (name, rest) = rest.split_once("\">")?;
            let body = rest.split("</tool_response>").next().unwrap_or(rest);
            (name.to_owned(), body.trim().to_owned())
        }
        _ => return None,
    };
    let result: String = result.chars().take(500).collect();
    Some(format!("{name} returned: {result}"))
}

fn call_name(messages: &[Value], id: &str) -> Option<String> {
    messages.iter().rev().find_map(|m| {
        m.get("tool_calls")?.as_array()?.iter().find_map(|c| {
            (c.get("id")?.as_str()? == id)
                .then(|| c.pointer("/function/name")?.as_str().map(str::to_owned))?
        })
    })
}

/// `(name, example)` for each `## Name` section that has an `Example:` block:
/// the lines after a line that is exactly `Example:`, up to a blank line.
fn contracts(system: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut name: Option<&str> = None;
    let mut lines = system.lines();
    while let Some(line) = lines.next() {
        if let Some(heading) = line.strip_prefix("## ") {
            name = Some(heading.trim());
        } else if line.trim_end() == "Example:"
            && let Some(n) = name.take()
        {
            let example: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.trim().is_empty())
                .collect();
            if !example.is_empty() {
                found.push((n.to_owned(), example.join("\n")));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_chat_echoes_the_user() {
        let r = reply(&json!({"messages": [{"role": "user", "content": "hi there"}]})).unwrap();
        assert!(r.contains("hi there"), "{r}");
    }

    #[test]
    fn contracts_make_it_call_the_mentioned_tool() {
        let system = "Tools:\n\n## GetWeather\n\nExample:\n<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>\n\n## BookRestaurant\n\nExample:\n<BookRestaurant>\n{}\n</BookRestaurant>\n\nBe nice.";
        let req = json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "please bookrestaurant now"}
        ]});
        let r = reply(&req).unwrap();
        assert!(
            r.ends_with("<BookRestaurant>\n{}\n</BookRestaurant>"),
            "{r}"
        );
        let req = json!({"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hm"}]});
        assert!(reply(&req).unwrap().contains("</GetWeather>"));
    }

    #[test]
    fn a_code_span_fills_the_arguments_of_a_bracket_call_not_its_name() {
        let example = r#"[Calling lookup]{"name": "lookup", "arguments": {"query":"example"}}"#;
        assert_eq!(
            with_span(example, "rust"),
            r#"[Calling lookup]{"name":"lookup","arguments":{"query":"rust"}}"#
        );
        assert_eq!(
            with_span("<lookup>\n{\"query\": \"x\"}\n</lookup>", "rust"),
            "<lookup>\n{\"query\":\"rust\"}\n</lookup>"
        );
    }

    #[test]
    fn tool_results_are_answered_in_text() {
        let native = json!({"messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "GetWeather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "21 C"}
        ]});
        assert_eq!(reply(&native).unwrap(), "GetWeather returned: 21 C");
        let natural = json!({"messages": [
            {"role": "user", "content": "<tool_response name=\"GetWeather\">\n21 C\n</tool_response>"}
        ]});
        assert_eq!(reply(&natural).unwrap(), "GetWeather returned: 21 C");
    }

    #[test]
    fn native_tools_get_a_native_call() {
        let req = json!({
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"type": "function", "function": {"name": "GetWeather", "parameters": {
                "type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius"]}}, "required": ["unit"]}}}]
        });
        let a = answer(&req).unwrap();
        assert_eq!(
            a.call,
            Some(("GetWeather".to_owned(), "{\"unit\":\"celsius\"}".to_owned()))
        );
    }

    #[test]
    fn a_code_span_becomes_the_first_string_argument() {
        let system = "## calculator\n\nExample:\n<calculator>\n```json\n{\"expression\": \"example\"}\n```\n</calculator>\n";
        let req = json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "What is `6 * 7`?"}
        ]});
        let r = reply(&req).unwrap();
        assert!(r.contains(r#"{"expression":"6 * 7"}"#), "{r}");
        let native = json!({
            "messages": [{"role": "user", "content": "Compute `1 + 1` please"}],
            "tools": [{"type": "function", "function": {"name": "calculator", "parameters": {
                "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
        });
        let a = answer(&native).unwrap();
        assert_eq!(a.call.unwrap().1, r#"{"expression":"1 + 1"}"#);
    }

    #[test]
    fn bad_requests_are_refused() {
        assert!(reply(&json!({})).is_err());
        assert!(reply(&json!({"messages": []})).is_err());
    }
}

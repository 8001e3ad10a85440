//! How a gateway tool call is shown in the answer's text when
//! `show_gateway_tools = "details"`: a `<details type="tool_calls">` block,
//! the form chat web UIs render as a collapsible tool panel. Attribute
//! values are HTML-escaped, so tool output can never become markup.

use crate::exchange::request::{Content, Message, Part, Role};
use crate::exchange::{GatewayCall, GatewayStatus};

/// The block for a finished call (empty while it runs: text once streamed
/// cannot be taken back, so only the finished call is written).
pub fn details_block(call: &GatewayCall) -> String {
    if call.status == GatewayStatus::InProgress {
        return String::new();
    }
    let result = match (&call.output, &call.error) {
        (Some(output), _) => output.clone(),
        (None, Some(error)) => format!("Error: {error}"),
        (None, None) => String::new(),
    };
    // The result as a JSON string, as the UIs that render this block expect.
    let result = serde_json::Value::String(result).to_string();
    let summary = match call.status {
        GatewayStatus::Failed => format!("{} failed", call.name),
        _ => format!("{} executed", call.name),
    };
    format!(
        "\n<details type=\"tool_calls\" done=\"true\" id=\"{}\" name=\"{}\" arguments=\"{}\" result=\"{}\">\n<summary>{}</summary>\n</details>\n",
        escape(&call.id),
        escape(&call.name),
        escape(&call.arguments),
        escape(&result),
        escape(&summary),
    )
}

/// What every block this module writes starts with.
const OPENING: &str = "<details type=\"tool_calls\" done=\"true\" id=\"";
const CLOSING: &str = "</details>";

/// `text` without the blocks [`details_block`] wrote (clients such as Open
/// WebUI send the content back verbatim): the model reads its own words, and
/// the history matches the state it continues. `None` when there are none.
pub fn strip_details(text: &str) -> Option<String> {
    if !text.contains(OPENING) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPENING) {
        let Some(len) = rest[at..].find(CLOSING) else {
            break;
        };
        let before = &rest[..at];
        out.push_str(before.strip_suffix('\n').unwrap_or(before));
        let after = &rest[at + len + CLOSING.len()..];
        rest = after.strip_prefix('\n').unwrap_or(after);
    }
    out.push_str(rest);
    Some(out)
}

/// Strips toolgate's blocks from every assistant message of `messages`.
pub fn strip_history(messages: &mut [Message]) {
    for message in messages {
        if message.role != Role::Assistant {
            continue;
        }
        match &mut message.content {
            Some(Content::Text(text)) => {
                if let Some(stripped) = strip_details(text) {
                    *text = stripped;
                }
            }
            Some(Content::Parts(parts)) => {
                for part in parts {
                    let text = match part {
                        Part::Text(text) => text,
                        Part::Other(map) => match map.get_mut("text") {
                            Some(serde_json::Value::String(text)) => text,
                            _ => continue,
                        },
                        Part::Image { .. } => continue,
                    };
                    if let Some(stripped) = strip_details(text) {
                        *text = stripped;
                    }
                }
            }
            None => {}
        }
    }
}

/// HTML escaping for attribute values and text.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(status: GatewayStatus, output: Option<&str>) -> GatewayCall {
        GatewayCall {
            index: 0,
            id: "call_1".into(),
            name: "GetWeather".into(),
            server: "http".into(),
            arguments: r#"{"location":"<Paris>"}"#.into(),
            status,
            output: output.map(str::to_owned),
            error: None,
        }
    }

    /// What the client sends back is what the model wrote: the blocks go,
    /// with the line breaks they brought, and nothing else.
    #[test]
    fn blocks_sent_back_are_stripped_exactly() {
        let first = details_block(&call(GatewayStatus::Completed, Some("21 C")));
        let second = details_block(&call(GatewayStatus::Failed, None));
        let model = ["Let me check.", "It is 21 C.", " Done."];
        let shown = format!("{}{first}{}{second}{}", model[0], model[1], model[2]);
        assert_eq!(strip_details(&shown).unwrap(), model.concat());
        assert_eq!(strip_details("no blocks <details>here</details>"), None);
        // A block the client trimmed around is still found.
        assert_eq!(strip_details(&format!("a{}b", first.trim())).unwrap(), "ab");
        let mut history = vec![
            Message::text(Role::User, shown.clone()),
            Message::text(Role::Assistant, shown.clone()),
            serde_json::from_value(serde_json::json!({"role": "assistant", "content": [
                {"type": "text", "text": shown},
                {"type": "text", "text": shown, "cache_control": {"type": "ephemeral"}},
            ]}))
            .unwrap(),
        ];
        strip_history(&mut history);
        assert!(history[0].text_content().contains("<details"));
        assert_eq!(history[1].text_content(), model.concat());
        assert_eq!(history[2].text_content(), model.concat());
        assert_eq!(
            history[2].to_value()["content"][1]["text"],
            model.concat(),
            "a part with fields of its own is stripped too"
        );
    }

    #[test]
    fn finished_calls_become_an_escaped_block() {
        let block = details_block(&call(
            GatewayStatus::Completed,
            Some("<script>x</script> \"hot\""),
        ));
        assert!(
            block.starts_with(
                "\n<details type=\"tool_calls\" done=\"true\" id=\"call_1\" name=\"GetWeather\""
            ),
            "{block}"
        );
        assert!(
            block.contains("arguments=\"{&quot;location&quot;:&quot;&lt;Paris&gt;&quot;}\""),
            "{block}"
        );
        assert!(!block.contains("<script>"), "{block}");
        assert!(
            block.contains(
                "result=\"&quot;&lt;script&gt;x&lt;/script&gt; \\&quot;hot\\&quot;&quot;\""
            ),
            "{block}"
        );
        assert!(block.contains("<summary>GetWeather executed</summary>"));
        assert_eq!(details_block(&call(GatewayStatus::InProgress, None)), "");
    }
}

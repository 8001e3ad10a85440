//! How a gateway tool call is shown in the answer's text when
//! `show_gateway_tools = "details"`: a `<details type="tool_calls">` block,
//! the form chat web UIs render as a collapsible tool panel. Attribute
//! values are HTML-escaped, so tool output can never become markup.

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

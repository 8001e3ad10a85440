//! The client direction of to_natural mode for whole completions: each
//! choice's `tool_calls` are appended to its content as text, the native
//! fields removed, and `finish_reason: "tool_calls"` becomes `"stop"`. The
//! text is exactly what the streaming path writes for the same calls.

use serde_json::{Value, json};

use crate::error::GatewayError;
use crate::to_natural::RenderOptions;

pub fn rewrite(body: &[u8], options: &RenderOptions) -> Result<Vec<u8>, GatewayError> {
    let mut completion = crate::upstream::reply::parse(body)?;
    if let Some(choices) = completion.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices {
            rewrite_choice(choice, options);
        }
    }
    Ok(serde_json::to_vec(&completion).unwrap_or_default())
}

fn rewrite_choice(choice: &mut Value, options: &RenderOptions) {
    let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
        return;
    };
    let mut calls: Vec<(String, String)> = Vec::new();
    if let Some(Value::Array(tool_calls)) = message.remove("tool_calls") {
        for call in tool_calls {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let args = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or_default();
            calls.push((name.to_owned(), args.to_owned()));
        }
    }
    if let Some(Value::Object(f)) = message.remove("function_call") {
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        let args = f
            .get("arguments")
            .and_then(Value::as_str)
            .unwrap_or_default();
        calls.push((name.to_owned(), args.to_owned()));
    }
    if calls.is_empty() {
        return;
    }
    let mut text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    for (i, (name, args)) in calls.iter().enumerate() {
        if i > 0 {
            text.push('\n');
            text.push_str(&options.separator);
            text.push('\n');
        } else if !text.is_empty() {
            text.push_str("\n\n");
        }
        options.write_call(name, args, &mut text);
    }
    message.insert("content".into(), Value::String(text));
    if matches!(
        choice.get("finish_reason").and_then(Value::as_str),
        Some("tool_calls" | "function_call")
    ) {
        choice["finish_reason"] = json!("stop");
    }
}

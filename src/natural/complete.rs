//! The non-streaming rewrite: a whole `chat.completion` in, the same object
//! with each choice's natural-text calls moved into `message.tool_calls`.

use serde_json::{Value, json};

use crate::error::GatewayError;
use crate::natural::repair::Repairer;
use crate::natural::reply::{InvalidCall, ReplyParser, ReplySettings};

/// Rewrites an upstream completion body (rule 16), repairing broken calls
/// with the fallback model when one is configured.
pub async fn rewrite(
    body: &[u8],
    settings: &ReplySettings,
    repairer: Option<&Repairer>,
) -> Result<Vec<u8>, GatewayError> {
    let mut completion = crate::upstream::reply::parse(body)?;
    if let Some(choices) = completion.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices {
            rewrite_choice(choice, settings, repairer).await?;
        }
    }
    Ok(serde_json::to_vec(&completion).unwrap_or_default())
}

async fn rewrite_choice(
    choice: &mut Value,
    settings: &ReplySettings,
    repairer: Option<&Repairer>,
) -> Result<(), GatewayError> {
    let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let Some(Value::String(content)) = message.get("content") else {
        return Ok(());
    };
    let mut reply = ReplyParser::new(settings.clone());
    let mut text = String::with_capacity(content.len());
    let invalid = |i: InvalidCall| GatewayError::InvalidToolCall {
        message: i.message(),
    };
    reply.feed(content, &mut text).map_err(invalid)?;
    reply.finish_text(&mut text).map_err(invalid)?;
    for request in reply.take_repairs() {
        let result = match repairer {
            Some(r) => r.repair(&request).await,
            None => Err(InvalidCall {
                tool: request.tool.clone(),
                reason: request.error.clone(),
            }),
        };
        reply.resolve(request.id, result);
    }
    let calls = reply.take_calls().map_err(invalid)?;
    let message = choice
        .get_mut("message")
        .and_then(Value::as_object_mut)
        .expect("checked above");
    if calls.is_empty() {
        message.insert("content".into(), Value::String(text));
        return Ok(());
    }
    // Rule 16: content is null when nothing but whitespace surrounds the calls.
    let content = if text.trim().is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".into(), content);
    let tool_calls: Vec<Value> = calls
        .into_iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    message.insert("tool_calls".into(), Value::Array(tool_calls));
    choice["finish_reason"] = json!("tool_calls");
    Ok(())
}

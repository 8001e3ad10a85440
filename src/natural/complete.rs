//! The non-streaming rewrite: a whole `chat.completion` in, the same object
//! with each choice's natural-text calls moved into `message.tool_calls`.
//!
//! Every choice is parsed first; then all repairs of the response run at
//! once, under one deadline ([`Repairer::deadline`]).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::error::GatewayError;
use crate::natural::repair::Repairer;
use crate::natural::reply::{InvalidCall, RepairRequest, ReplyParser, ReplySettings};

/// One choice's parse: its position in `choices`, its parser and its text.
struct Parsed {
    at: usize,
    reply: ReplyParser,
    text: String,
}

/// Rewrites an upstream completion body (rule 16), repairing broken calls
/// with the fallback model when one is configured.
pub async fn rewrite(
    body: &[u8],
    settings: &ReplySettings,
    repairer: Option<Arc<Repairer>>,
) -> Result<Vec<u8>, GatewayError> {
    let mut completion = crate::upstream::reply::parse(body)?;
    rewrite_choices(&mut completion, settings, repairer).await?;
    Ok(serde_json::to_vec(&completion).unwrap_or_default())
}

/// Rescue: the completion with calls written as text made native, or
/// `None` when no choice held one (the upstream's bytes then stand).
/// Nothing is repaired and nothing fails: a block that is no valid call is
/// text (`settings.on_invalid` is `text`).
pub async fn rescue(
    body: &[u8],
    settings: &ReplySettings,
) -> Result<Option<Vec<u8>>, GatewayError> {
    let mut completion = crate::upstream::reply::parse(body)?;
    let calls = rewrite_choices(&mut completion, settings, None).await?;
    Ok((calls > 0).then(|| serde_json::to_vec(&completion).unwrap_or_default()))
}

/// Parses every choice's content, runs the repairs, writes the calls in;
/// returns how many calls were written.
async fn rewrite_choices(
    completion: &mut Value,
    settings: &ReplySettings,
    repairer: Option<Arc<Repairer>>,
) -> Result<usize, GatewayError> {
    let mut written = 0;
    if let Some(choices) = completion.get_mut("choices").and_then(Value::as_array_mut) {
        let mut parsed = Vec::new();
        let mut repairs = Vec::new();
        for (at, choice) in choices.iter().enumerate() {
            let Some(content) = choice.pointer("/message/content").and_then(Value::as_str) else {
                continue;
            };
            let mut reply = ReplyParser::new(settings.clone());
            let mut text = String::with_capacity(content.len());
            if let Err(failed) = reply.feed(content, &mut text) {
                return Err(failed.error_in_whole(&text));
            }
            if choice.get("finish_reason").and_then(Value::as_str) == Some("length") {
                reply.cut_short();
            }
            if let Err(failed) = reply.finish_text(&mut text) {
                return Err(failed.error_in_whole(&text));
            }
            repairs.extend(reply.take_repairs().into_iter().map(|r| (parsed.len(), r)));
            parsed.push(Parsed { at, reply, text });
        }
        run_repairs(repairs, &mut parsed, repairer).await?;
        for Parsed {
            at,
            mut reply,
            text,
        } in parsed
        {
            let calls = reply
                .take_calls()
                .map_err(|failed| failed.error_in_whole(&text))?;
            written += calls.len();
            apply(&mut choices[at], text, calls, settings.legacy_functions);
        }
    }
    Ok(written)
}

/// Runs the repairs of every choice at once and fills their slots. A failed
/// repair fails the response at once (the others are cancelled: their answers
/// could not be used); at the deadline, the repairs still running are
/// cancelled and their slots fail, as `on_invalid` says for a failed repair.
async fn run_repairs(
    repairs: Vec<(usize, RepairRequest)>,
    parsed: &mut [Parsed],
    repairer: Option<Arc<Repairer>>,
) -> Result<(), GatewayError> {
    let Some(repairer) = repairer else {
        for (slot, request) in repairs {
            let failed = InvalidCall {
                tool: request.tool.clone(),
                reason: request.error.clone(),
                raw: Some(request.original.clone()),
            };
            parsed[slot].reply.resolve(request.id, Err(failed));
        }
        return Ok(());
    };
    if repairs.is_empty() {
        return Ok(());
    }
    let deadline = repairer.deadline();
    let ends = tokio::time::Instant::now() + deadline;
    let mut running = JoinSet::new();
    let mut late = Vec::with_capacity(repairs.len());
    for (slot, request) in repairs {
        late.push((
            slot,
            request.id,
            request.tool.clone(),
            request.error.clone(),
        ));
        let repairer = repairer.clone();
        running.spawn(crate::telemetry::scope::carry(async move {
            let result = repairer.repair(&request).await;
            (slot, request.id, result)
        }));
    }
    loop {
        match tokio::time::timeout_at(ends, running.join_next()).await {
            Ok(None) | Err(_) => break,
            Ok(Some(Ok((slot, _, Err(failed))))) => {
                return Err(failed.error_in_whole(&parsed[slot].text));
            }
            Ok(Some(Ok((slot, id, ok)))) => parsed[slot].reply.resolve(id, ok),
            Ok(Some(Err(e))) => {
                return Err(GatewayError::InvalidToolCall {
                    message: format!("A tool-call repair failed: {e}"),
                    raw: None,
                    text: None,
                });
            }
        }
    }
    // Past the deadline: what still waits fails (slots already filled ignore this).
    for (slot, id, tool, error) in late {
        let reason = format!(
            "{error}; not repaired: the response's repairs did not finish within {:.1}s",
            deadline.as_secs_f64()
        );
        parsed[slot].reply.resolve(
            id,
            Err(InvalidCall {
                tool,
                reason,
                raw: None,
            }),
        );
    }
    Ok(())
}

/// Writes a choice's text and calls into its message: `tool_calls`, or
/// for a legacy `functions` request its one call as `function_call`.
fn apply(
    choice: &mut Value,
    text: String,
    calls: Vec<crate::natural::reply::ReadyCall>,
    legacy: bool,
) {
    let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
        return;
    };
    if calls.is_empty() {
        message.insert("content".into(), Value::String(text));
        return;
    }
    // Rule 16: content is null when nothing but whitespace surrounds the calls.
    let content = if text.trim().is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".into(), content);
    if legacy && let Some(call) = calls.first() {
        let call = json!({"name": call.name, "arguments": call.arguments});
        message.insert("function_call".into(), call);
        choice["finish_reason"] = json!("function_call");
        return;
    }
    let calls = calls
        .into_iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}));
    // Calls the upstream made natively (rescue) come first.
    match message.get_mut("tool_calls") {
        Some(Value::Array(native)) => native.extend(calls),
        _ => {
            message.insert("tool_calls".into(), Value::Array(calls.collect()));
        }
    }
    choice["finish_reason"] = json!("tool_calls");
}

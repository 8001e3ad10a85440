//! What Anthropic's SDK stream helpers require of a `/v1/messages` stream.
//! [`check_messages`] validates a whole SSE body: exactly one
//! `message_start`, first; `ping`s anywhere after it; content blocks with
//! indexes contiguous from 0, each started once before its deltas and
//! stopped once, deltas of the block's kind, `input_json_delta`s that
//! concatenate to a JSON object; one `message_delta` with a `stop_reason`
//! after every block stopped; exactly one `message_stop`, last. Or one
//! `error` event after which nothing follows. Returns what a client
//! assembles from it.

use serde_json::{Value, json};

use super::Call;

/// An Anthropic stream as a client assembles it.
#[derive(Debug, Clone, Default)]
pub struct MessagesSummary {
    /// The message with its blocks and end state (as the SDK's final message).
    pub message: Value,
    /// Text of every text block, in order.
    pub text: String,
    /// `tool_use` blocks (id, name, concatenated input JSON).
    pub calls: Vec<Call>,
    /// The `error` event's `error`, if the stream ended with one.
    pub error: Option<Value>,
    /// Event types in order.
    pub kinds: Vec<String>,
}

fn events(body: &[u8]) -> Result<Vec<(String, Value)>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut name = None;
        let mut data = None;
        for line in block.lines() {
            if line.starts_with(':') || line.is_empty() {
                continue;
            } else if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n);
            } else if let Some(d) = line.strip_prefix("data: ") {
                if data.is_some() {
                    return Err(format!("two data lines in one event: {block:?}"));
                }
                data = Some(d);
            } else {
                return Err(format!("unexpected line {line:?}"));
            }
        }
        match (name, data) {
            (None, None) => {}
            (Some(name), Some(data)) => {
                let v: Value =
                    serde_json::from_str(data).map_err(|e| format!("bad JSON {data:?}: {e}"))?;
                if v["type"] != name {
                    return Err(format!("event {name} has data type {}", v["type"]));
                }
                out.push((name.to_owned(), v));
            }
            _ => return Err(format!("event without both name and data: {block:?}")),
        }
    }
    Ok(out)
}

/// A block being streamed.
struct Block {
    value: Value,
    json: String,
    stopped: bool,
}

pub fn check_messages(body: &[u8]) -> Result<MessagesSummary, String> {
    let events = events(body)?;
    let mut summary = MessagesSummary::default();
    let mut blocks: Vec<Block> = Vec::new();
    let mut delta_seen = false;
    let mut stopped = false;
    for (i, (kind, v)) in events.iter().enumerate() {
        summary.kinds.push(kind.clone());
        if stopped {
            return Err(format!("{kind} after message_stop"));
        }
        if summary.error.is_some() {
            return Err(format!("{kind} after error"));
        }
        if i == 0 && kind != "message_start" && kind != "error" {
            return Err(format!("first event is {kind}, not message_start"));
        }
        match kind.as_str() {
            "message_start" => {
                if i != 0 {
                    return Err("message_start not first (or twice)".into());
                }
                let m = &v["message"];
                if m["type"] != "message" || m["role"] != "assistant" || !m["content"].is_array() {
                    return Err(format!("bad message_start message {m}"));
                }
                if !m["id"].as_str().is_some_and(|id| id.starts_with("msg_")) {
                    return Err(format!("message id {} is not msg_…", m["id"]));
                }
                summary.message = m.clone();
            }
            "ping" => {}
            "content_block_start" => {
                if delta_seen {
                    return Err("content_block_start after message_delta".into());
                }
                let index = v["index"].as_u64().ok_or("block start without index")? as usize;
                if index != blocks.len() {
                    return Err(format!("block index {index}, expected {}", blocks.len()));
                }
                if let Some(open) = blocks.iter().position(|b| !b.stopped) {
                    return Err(format!("block {index} started while {open} is open"));
                }
                let value = v["content_block"].clone();
                if value["type"] == "tool_use"
                    && !value["id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("toolu_"))
                {
                    return Err(format!("tool_use id {} is not toolu_…", value["id"]));
                }
                blocks.push(Block {
                    value,
                    json: String::new(),
                    stopped: false,
                });
            }
            "content_block_delta" => {
                let index = v["index"].as_u64().ok_or("delta without index")? as usize;
                let block = blocks
                    .get_mut(index)
                    .ok_or(format!("delta for unstarted block {index}"))?;
                if block.stopped {
                    return Err(format!("delta for stopped block {index}"));
                }
                let d = &v["delta"];
                let (field, piece) = match (block.value["type"].as_str(), d["type"].as_str()) {
                    (Some("text"), Some("text_delta")) => ("text", &d["text"]),
                    (Some("thinking"), Some("thinking_delta")) => ("thinking", &d["thinking"]),
                    (Some("thinking"), Some("signature_delta")) => ("signature", &d["signature"]),
                    (Some(_), Some("input_json_delta")) => {
                        let p = d["partial_json"]
                            .as_str()
                            .ok_or("input_json_delta without partial_json")?;
                        block.json.push_str(p);
                        continue;
                    }
                    (k, dk) => return Err(format!("{dk:?} delta in a {k:?} block")),
                };
                let piece = piece.as_str().ok_or(format!("delta without {field}"))?;
                let so_far = block.value[field].as_str().unwrap_or_default().to_owned();
                block.value[field] = json!(so_far + piece);
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().ok_or("stop without index")? as usize;
                let block = blocks
                    .get_mut(index)
                    .ok_or(format!("stop for unstarted block {index}"))?;
                if std::mem::replace(&mut block.stopped, true) {
                    return Err(format!("block {index} stopped twice"));
                }
                if block.value.get("input").is_some() {
                    let json = if block.json.is_empty() {
                        "{}"
                    } else {
                        &block.json
                    };
                    let input: Value = serde_json::from_str(json)
                        .map_err(|e| format!("block {index} input {json:?} is not JSON: {e}"))?;
                    if !input.is_object() {
                        return Err(format!("block {index} input {json} is not an object"));
                    }
                    block.value["input"] = input;
                }
            }
            "message_delta" => {
                if std::mem::replace(&mut delta_seen, true) {
                    return Err("two message_delta events".into());
                }
                if let Some(open) = blocks.iter().position(|b| !b.stopped) {
                    return Err(format!("message_delta while block {open} is open"));
                }
                let reason = v["delta"]["stop_reason"]
                    .as_str()
                    .ok_or("message_delta without stop_reason")?;
                if ![
                    "end_turn",
                    "tool_use",
                    "max_tokens",
                    "stop_sequence",
                    "pause_turn",
                    "refusal",
                ]
                .contains(&reason)
                {
                    return Err(format!("unknown stop_reason {reason}"));
                }
                summary.message["stop_reason"] = json!(reason);
                summary.message["stop_sequence"] = v["delta"]["stop_sequence"].clone();
                if !v["usage"]["output_tokens"].is_u64() {
                    return Err("message_delta usage without output_tokens".into());
                }
                summary.message["usage"] = v["usage"].clone();
            }
            "message_stop" => {
                if !delta_seen {
                    return Err("message_stop without message_delta".into());
                }
                stopped = true;
            }
            "error" => {
                if !v["error"]["type"].is_string() || !v["error"]["message"].is_string() {
                    return Err(format!("bad error event {v}"));
                }
                summary.error = Some(v["error"].clone());
            }
            other => return Err(format!("unknown event {other}")),
        }
    }
    if !stopped && summary.error.is_none() {
        return Err("stream ended without message_stop".into());
    }
    for b in &blocks {
        match b.value["type"].as_str() {
            Some("text") => summary
                .text
                .push_str(b.value["text"].as_str().unwrap_or_default()),
            Some("tool_use") => summary.calls.push(Call {
                id: b.value["id"].as_str().unwrap_or_default().to_owned(),
                name: b.value["name"].as_str().unwrap_or_default().to_owned(),
                arguments: b.value["input"].to_string(),
            }),
            _ => {}
        }
    }
    summary.message["content"] = Value::Array(blocks.into_iter().map(|b| b.value).collect());
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(events: &[Value]) -> Vec<u8> {
        let mut out = String::new();
        for e in events {
            out.push_str(&format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap()
            ));
        }
        out.into_bytes()
    }

    fn good() -> Vec<Value> {
        vec![
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop"}),
        ]
    }

    #[test]
    fn accepts_a_tool_call_stream() {
        let s = check_messages(&sse(&good())).unwrap();
        assert_eq!(s.calls[0].args(), json!({"a": 1}));
    }

    #[test]
    fn rejects_broken_streams() {
        let mut e = good();
        e.remove(5);
        assert!(check_messages(&sse(&e)).is_err(), "block never stopped");
        let mut e = good();
        e.remove(4);
        assert!(check_messages(&sse(&e)).is_err(), "input not JSON");
        let mut e = good();
        e[2]["index"] = json!(1);
        assert!(check_messages(&sse(&e)).is_err(), "index gap");
        let mut e = good();
        e.pop();
        assert!(check_messages(&sse(&e)).is_err(), "no message_stop");
        let mut e = good();
        e.swap(0, 1);
        assert!(check_messages(&sse(&e)).is_err(), "message_start not first");
    }
}

//! The chunks toolgate writes itself, shaped by ../shared/conformance.md:
//! every chunk carries the stream's `id`, `object`, `created`, `model` (and
//! `system_fingerprint` when the upstream sent one); a call is one delta with
//! `id`, `type`, `name` and `arguments: ""` followed by one delta with the
//! arguments; the finish chunk has an empty delta; usage comes last with
//! `choices: []`.

use bytes::BytesMut;
use serde_json::{Map, Value, json};

use crate::natural::reply::ReadyCall;
use crate::sse::encoder;

/// The fields every chunk of one stream repeats, taken from the upstream's first chunk.
#[derive(Debug, Clone)]
pub struct ChunkHeader {
    fields: Map<String, Value>,
}

impl ChunkHeader {
    /// Reads `id`, `created`, `model`, `system_fingerprint` from an upstream chunk.
    pub fn from_chunk(chunk: &Map<String, Value>) -> Self {
        let mut fields = Map::new();
        fields.insert(
            "id".into(),
            chunk
                .get("id")
                .cloned()
                .unwrap_or_else(|| json!("chatcmpl-toolgate")),
        );
        fields.insert("object".into(), json!("chat.completion.chunk"));
        fields.insert(
            "created".into(),
            chunk
                .get("created")
                .filter(|v| v.is_u64())
                .cloned()
                .unwrap_or_else(|| json!(now())),
        );
        fields.insert(
            "model".into(),
            chunk.get("model").cloned().unwrap_or_else(|| json!("")),
        );
        if let Some(fp) = chunk.get("system_fingerprint").filter(|v| !v.is_null()) {
            fields.insert("system_fingerprint".into(), fp.clone());
        }
        ChunkHeader { fields }
    }

    /// Used when the upstream failed before sending any chunk.
    pub fn fallback() -> Self {
        Self::from_chunk(&Map::new())
    }

    pub fn chunk(&self, choices: Value) -> Value {
        let mut c = self.fields.clone();
        c.insert("choices".into(), choices);
        Value::Object(c)
    }

    /// Writes the call's two deltas (rules 7-11).
    pub fn write_call(
        &self,
        out: &mut BytesMut,
        choice: u64,
        tool_index: usize,
        call: &ReadyCall,
        first_delta: bool,
    ) {
        let mut delta = json!({
            "tool_calls": [{
                "index": tool_index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]
        });
        if first_delta {
            // Rule 4: the first delta of a choice names the role.
            delta = json!({"role": "assistant", "content": null, "tool_calls": delta["tool_calls"].take()});
        }
        encoder::write_json(
            out,
            &self.chunk(
                json!([{"index": choice, "delta": delta, "logprobs": null, "finish_reason": null}]),
            ),
        );
        let args = json!({"tool_calls": [{"index": tool_index, "function": {"arguments": call.arguments}}]});
        encoder::write_json(
            out,
            &self.chunk(
                json!([{"index": choice, "delta": args, "logprobs": null, "finish_reason": null}]),
            ),
        );
    }

    pub fn write_text(&self, out: &mut BytesMut, choice: u64, text: &str, first_delta: bool) {
        let delta = if first_delta {
            json!({"role": "assistant", "content": text})
        } else {
            json!({"content": text})
        };
        encoder::write_json(
            out,
            &self.chunk(
                json!([{"index": choice, "delta": delta, "logprobs": null, "finish_reason": null}]),
            ),
        );
    }

    pub fn write_finish(&self, out: &mut BytesMut, choice: u64, reason: &Value, first_delta: bool) {
        let delta = if first_delta {
            json!({"role": "assistant", "content": ""})
        } else {
            json!({})
        };
        encoder::write_json(out, &self.chunk(json!([{"index": choice, "delta": delta, "logprobs": null, "finish_reason": reason}])));
    }

    pub fn write_usage(&self, out: &mut BytesMut, usage: &Value) {
        let mut c = self.fields.clone();
        c.insert("choices".into(), json!([]));
        c.insert("usage".into(), usage.clone());
        encoder::write_json(out, &Value::Object(c));
    }
}

/// An error after the stream started (rule 15): an error event, then `[DONE]`.
pub fn write_error(out: &mut BytesMut, error: &Value) {
    encoder::write_json(out, error);
    out.extend_from_slice(encoder::DONE);
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

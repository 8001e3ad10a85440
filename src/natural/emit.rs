//! The chunks toolgate writes itself, shaped as real clients require (the
//! rules `tests/it/conformance` checks):
//! every chunk carries the stream's `id`, `object`, `created`, `model` (and
//! `system_fingerprint` when the upstream sent one); a call is one delta with
//! `id`, `type`, `name` and `arguments: ""` followed by one delta with the
//! arguments; the finish chunk has an empty delta; usage comes last with
//! `choices: []`.

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::natural::reply::ReadyCall;
use crate::upstream::plain::HeaderFields;

/// The fields every chunk of one stream repeats, taken from the upstream's
/// first chunk, serialized once: each chunk toolgate writes is this opening,
/// its `choices` (and `usage`), and the closing brace.
#[derive(Debug, Clone)]
pub struct ChunkHeader {
    /// `{"id":…,"object":"chat.completion.chunk","created":…,"model":…,` and
    /// `"system_fingerprint":…,` when the upstream sent one.
    open: Vec<u8>,
}

/// One entry of `choices`; `logprobs` is always null.
#[derive(Serialize)]
pub struct Choice<'a, D> {
    pub index: u64,
    pub delta: D,
    pub logprobs: (),
    pub finish_reason: Option<&'a Value>,
}

/// A text delta; the first delta of a choice also names the role (rule 4).
#[derive(Serialize)]
struct TextDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    content: &'a str,
}

/// The first delta of a call: id, type, name and empty arguments (rules 7-9).
#[derive(Serialize)]
struct CallOpen<'a> {
    index: usize,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// The second delta of a call: its arguments alone (rules 10-11).
#[derive(Serialize)]
struct CallArguments<'a> {
    index: usize,
    function: CallFunction<'a>,
}

/// A delta holding calls; as the choice's first delta it also carries the
/// role and `content: null`.
#[derive(Serialize)]
struct CallsDelta<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<()>,
    tool_calls: [T; 1],
}

/// A legacy call delta (`functions` requests): `function_call` instead of
/// `tool_calls`, never more than one call.
#[derive(Serialize)]
struct FunctionCallDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<()>,
    function_call: CallFunction<'a>,
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
        // `{"id":…,"model":…}` without its closing brace, then a comma.
        let mut open = serde_json::to_vec(&fields).expect("JSON values serialize");
        open.pop();
        open.push(b',');
        ChunkHeader { open }
    }

    /// The header [`ChunkHeader::from_chunk`] makes of the same chunk, from
    /// the fields' text, without a parsed chunk; `None` when a value is not
    /// in the form serde_json would write it back in (then the caller parses
    /// the chunk and calls `from_chunk`).
    pub fn from_fields(fields: &HeaderFields<'_>) -> Option<Self> {
        // A string without escapes is written back byte for byte; absent is
        // absent. Anything else (escapes, numbers, null) takes the long way.
        let plain = |text: Option<&str>| {
            text.is_none_or(|t| t.len() >= 2 && t.starts_with('"') && !t.contains('\\'))
        };
        if !(plain(fields.id) && plain(fields.model) && plain(fields.system_fingerprint)) {
            return None;
        }
        let mut open = Vec::with_capacity(128);
        open.extend_from_slice(b"{\"id\":");
        open.extend_from_slice(fields.id.unwrap_or("\"chatcmpl-toolgate\"").as_bytes());
        open.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        // `from_chunk` keeps `created` only when it reads as a u64: digits
        // without a leading zero that fit.
        let created = fields.created.filter(|c| {
            c.bytes().all(|b| b.is_ascii_digit())
                && (c == &"0" || !c.starts_with('0'))
                && c.parse::<u64>().is_ok()
        });
        match created {
            Some(created) => open.extend_from_slice(created.as_bytes()),
            None => open.extend_from_slice(now().to_string().as_bytes()),
        }
        open.extend_from_slice(b",\"model\":");
        open.extend_from_slice(fields.model.unwrap_or("\"\"").as_bytes());
        if let Some(fp) = fields.system_fingerprint {
            open.extend_from_slice(b",\"system_fingerprint\":");
            open.extend_from_slice(fp.as_bytes());
        }
        open.push(b',');
        Some(ChunkHeader { open })
    }

    /// Used when the upstream failed before sending any chunk.
    pub fn fallback() -> Self {
        Self::from_chunk(&Map::new())
    }

    /// Writes one chunk event: the header fields, then `rest` (which writes
    /// the remaining `"key":value` pairs).
    fn write(&self, out: &mut BytesMut, rest: impl FnOnce(&mut bytes::buf::Writer<&mut BytesMut>)) {
        out.put_slice(b"data: ");
        out.put_slice(&self.open);
        let mut writer = out.writer();
        rest(&mut writer);
        let out = writer.into_inner();
        out.put_slice(b"}\n\n");
    }

    /// Writes a chunk whose `choices` hold one choice with this delta.
    fn write_choice<D: Serialize>(
        &self,
        out: &mut BytesMut,
        choice: u64,
        delta: D,
        finish_reason: Option<&Value>,
    ) {
        let choices = [Choice {
            index: choice,
            delta,
            logprobs: (),
            finish_reason,
        }];
        self.write_choices(out, &choices);
    }

    /// Writes a chunk with these `choices`.
    pub fn write_choices<C: Serialize + ?Sized>(&self, out: &mut BytesMut, choices: &C) {
        self.write(out, |w| {
            w.get_mut().put_slice(b"\"choices\":");
            // Serializing plain data into memory cannot fail.
            let _ = serde_json::to_writer(w, choices);
        });
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
        let open = CallOpen {
            index: tool_index,
            id: &call.id,
            kind: "function",
            function: CallFunction {
                name: Some(&call.name),
                arguments: "",
            },
        };
        self.write_choice(out, choice, calls_delta(open, first_delta), None);
        let arguments = CallArguments {
            index: tool_index,
            function: CallFunction {
                name: None,
                arguments: &call.arguments,
            },
        };
        self.write_choice(out, choice, calls_delta(arguments, false), None);
    }

    /// A call in one delta: id, name and the whole arguments. For toolgate's
    /// own reading of a round (`ReplySettings::early_calls`), where a call that
    /// arrives whole can run at once; clients get [`Self::write_call`].
    pub fn write_whole_call(
        &self,
        out: &mut BytesMut,
        choice: u64,
        tool_index: usize,
        call: &ReadyCall,
        first_delta: bool,
    ) {
        let whole = CallOpen {
            index: tool_index,
            id: &call.id,
            kind: "function",
            function: CallFunction {
                name: Some(&call.name),
                arguments: &call.arguments,
            },
        };
        self.write_choice(out, choice, calls_delta(whole, first_delta), None);
    }

    /// The legacy shape of a call, for requests that declared `functions`:
    /// `delta.function_call` with the name and empty arguments, then the arguments.
    pub fn write_function_call(
        &self,
        out: &mut BytesMut,
        choice: u64,
        call: &ReadyCall,
        first_delta: bool,
    ) {
        let open = FunctionCallDelta {
            role: first_delta.then_some("assistant"),
            content: first_delta.then_some(()),
            function_call: CallFunction {
                name: Some(&call.name),
                arguments: "",
            },
        };
        self.write_choice(out, choice, open, None);
        let arguments = FunctionCallDelta {
            role: None,
            content: None,
            function_call: CallFunction {
                name: None,
                arguments: &call.arguments,
            },
        };
        self.write_choice(out, choice, arguments, None);
    }

    pub fn write_text(&self, out: &mut BytesMut, choice: u64, text: &str, first_delta: bool) {
        let delta = TextDelta {
            role: first_delta.then_some("assistant"),
            content: text,
        };
        self.write_choice(out, choice, delta, None);
    }

    pub fn write_finish(&self, out: &mut BytesMut, choice: u64, reason: &Value, first_delta: bool) {
        if first_delta {
            let delta = TextDelta {
                role: Some("assistant"),
                content: "",
            };
            self.write_choice(out, choice, delta, Some(reason));
        } else {
            self.write_choice(out, choice, Map::new(), Some(reason));
        }
    }

    pub fn write_usage(&self, out: &mut BytesMut, usage: &Value) {
        self.write(out, |w| {
            w.get_mut().put_slice(b"\"choices\":[],\"usage\":");
            let _ = serde_json::to_writer(w, usage);
        });
    }
}

fn calls_delta<T>(call: T, first_delta: bool) -> CallsDelta<T> {
    CallsDelta {
        role: first_delta.then_some("assistant"),
        content: first_delta.then_some(()),
        tool_calls: [call],
    }
}

pub use crate::sse::encoder::write_error;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_from_the_fields_text_is_the_header_from_the_parsed_chunk() {
        let mut taken = 0;
        for chunk in [
            r#"{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{}}]}"#,
            r#"{"choices":[{"index":0,"delta":{}}],"model":"ünï","id":"x"}"#,
            r#"{"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":"a","id":"b","created":0,"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":"c","created":18446744073709551615,"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":"c\n","choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":7,"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":"c","system_fingerprint":null,"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"id":"c","model":null,"choices":[{"index":0,"delta":{}}]}"#,
        ] {
            let fields = crate::upstream::plain::read(chunk.as_bytes())
                .unwrap()
                .header;
            let Some(fast) = ChunkHeader::from_fields(&fields) else {
                continue;
            };
            taken += 1;
            let parsed: Value = serde_json::from_str(chunk).unwrap();
            let slow = ChunkHeader::from_chunk(parsed.as_object().unwrap());
            assert_eq!(
                String::from_utf8(fast.open).unwrap(),
                String::from_utf8(slow.open).unwrap(),
                "{chunk}"
            );
        }
        assert_eq!(taken, 5, "the first five are plain");
        // `created` that is not a u64 is replaced by the clock, as `from_chunk` does.
        for created in ["1.5", "-1", "\"1\"", "18446744073709551616", "1e3"] {
            let fields = HeaderFields {
                created: Some(created),
                ..HeaderFields::default()
            };
            let open = ChunkHeader::from_fields(&fields).unwrap().open;
            assert!(
                !String::from_utf8(open)
                    .unwrap()
                    .contains(&format!(":{created},"))
            );
        }
    }

    fn header() -> ChunkHeader {
        let upstream = json!({"id": "c1", "object": "chat.completion.chunk", "created": 7,
            "model": "m", "system_fingerprint": "fp", "choices": []});
        ChunkHeader::from_chunk(upstream.as_object().unwrap())
    }

    fn written(write: impl FnOnce(&ChunkHeader, &mut BytesMut)) -> String {
        let mut out = BytesMut::new();
        write(&header(), &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    const HEAD: &str = r#"data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","#;

    #[test]
    fn text_and_finish_chunks_have_the_conformance_shapes() {
        assert_eq!(
            written(|h, out| h.write_text(out, 0, "Hi \"x\"", true)),
            format!(
                r#"{HEAD}"choices":[{{"index":0,"delta":{{"role":"assistant","content":"Hi \"x\""}},"logprobs":null,"finish_reason":null}}]}}{}"#,
                "\n\n"
            )
        );
        assert_eq!(
            written(|h, out| h.write_text(out, 1, "more", false)),
            format!(
                r#"{HEAD}"choices":[{{"index":1,"delta":{{"content":"more"}},"logprobs":null,"finish_reason":null}}]}}{}"#,
                "\n\n"
            )
        );
        assert_eq!(
            written(|h, out| h.write_finish(out, 0, &json!("tool_calls"), false)),
            format!(
                r#"{HEAD}"choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"tool_calls"}}]}}{}"#,
                "\n\n"
            )
        );
        assert_eq!(
            written(|h, out| h.write_finish(out, 0, &json!("stop"), true)),
            format!(
                r#"{HEAD}"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":"stop"}}]}}{}"#,
                "\n\n"
            )
        );
        assert_eq!(
            written(|h, out| h.write_usage(out, &json!({"total_tokens": 3}))),
            format!(
                r#"{HEAD}"choices":[],"usage":{{"total_tokens":3}}}}{}"#,
                "\n\n"
            )
        );
    }

    #[test]
    fn a_call_is_a_named_delta_then_its_arguments() {
        let call = ReadyCall {
            id: "call_1".into(),
            name: "GetWeather".into(),
            arguments: r#"{"location":"Paris"}"#.into(),
        };
        let first = written(|h, out| h.write_call(out, 0, 0, &call, true));
        let later = written(|h, out| h.write_call(out, 0, 1, &call, false));
        let args = r#""function":{"arguments":"{\"location\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}"#;
        assert_eq!(
            first,
            format!(
                "{HEAD}{}\n\n{HEAD}{}{args}\n\n",
                r#""choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"GetWeather","arguments":""}}]},"logprobs":null,"finish_reason":null}]}"#,
                r#""choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"#,
            )
        );
        assert!(later.starts_with(&format!(
            "{HEAD}{}",
            r#""choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_1","#
        )));
    }

    #[test]
    fn a_legacy_call_is_a_function_call_delta_then_its_arguments() {
        let call = ReadyCall {
            id: "call_1".into(),
            name: "GetWeather".into(),
            arguments: r#"{"a":1}"#.into(),
        };
        assert_eq!(
            written(|h, out| h.write_function_call(out, 0, &call, true)),
            format!(
                "{HEAD}{}\n\n{HEAD}{}\n\n",
                r#""choices":[{"index":0,"delta":{"role":"assistant","content":null,"function_call":{"name":"GetWeather","arguments":""}},"logprobs":null,"finish_reason":null}]}"#,
                r#""choices":[{"index":0,"delta":{"function_call":{"arguments":"{\"a\":1}"}},"logprobs":null,"finish_reason":null}]}"#,
            )
        );
    }
}

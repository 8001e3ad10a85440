//! Usage a client did not ask for: a tenant whose limits count tokens has
//! its streamed Chat Completions (and legacy Completions) requests sent with
//! `stream_options.include_usage`, and the usage chunk this adds (the one
//! with `choices: []`) is taken out of the answer before the client sees
//! it. The other chunks keep the `"usage": null` the upstream then adds to
//! them. Requests of tenants without token limits or budgets, and requests
//! whose client asked for usage, are not touched.
//!
//! The client cannot turn this off: whatever `stream_options` holds
//! (missing, `null`, `{}`, `include_usage: false`), a streamed request is
//! sent asking for usage, or a budget would be charged an estimate. A
//! `stream` or `stream_options` of the wrong type never gets this far
//! (`inbound::find_model` refuses it), so `stream: true` is the only
//! streamed request there is.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

use crate::error::GatewayError;
use crate::sse::encoder;
use crate::sse::transform::Transform;

/// `body` with `stream_options.include_usage` set, when it is a streamed
/// request whose client did not ask for usage; `None` otherwise (the body
/// then goes as it is, and the client gets the usage chunk it asked for).
/// The other members of the client's `stream_options` are kept; one that is
/// not an object (`null`) is replaced.
pub fn ask(body: &[u8]) -> Option<Bytes> {
    let Ok(Value::Object(mut request)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    if request.get("stream") != Some(&Value::Bool(true)) {
        return None;
    }
    let asked = || serde_json::json!({"include_usage": true});
    match request.get_mut("stream_options") {
        Some(Value::Object(options)) => {
            if options.get("include_usage") == Some(&Value::Bool(true)) {
                return None;
            }
            options.insert("include_usage".into(), Value::Bool(true));
        }
        // `null` (or anything else that reached here): the client asked
        // for nothing, so nothing of it is lost.
        Some(other) => *other = asked(),
        None => {
            request.insert("stream_options".into(), asked());
        }
    }
    serde_json::to_vec(&request).ok().map(Bytes::from)
}

/// Whether a request is to the legacy Completions API (`POST
/// /v1/completions`), whose streams, like chat's, report usage only when
/// `stream_options.include_usage` asks, in a last chunk with `choices: []`.
pub fn is_legacy_completions(method: &http::Method, path: &str) -> bool {
    method == http::Method::POST && path.strip_suffix('/').unwrap_or(path) == "/v1/completions"
}

/// Passes an answer's events on, without the usage chunk.
#[derive(Debug, Default)]
pub struct DropUsage {
    done: bool,
    ended: bool,
}

impl DropUsage {
    /// Whether `data` is the usage chunk `include_usage` adds.
    fn is_usage_chunk(data: &[u8]) -> bool {
        // Every other chunk carries `"usage":null` once usage is asked for:
        // those are passed on without being parsed.
        let Some(at) = memchr::memmem::find(data, b"\"usage\"") else {
            return false;
        };
        let after = data[at + 7..].trim_ascii_start();
        if after
            .strip_prefix(b":")
            .is_some_and(|v| v.trim_ascii_start().starts_with(b"null"))
        {
            return false;
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(Value::Object(chunk)) => {
                chunk.get("usage").is_some_and(Value::is_object)
                    && chunk
                        .get("choices")
                        .is_some_and(|c| c.as_array().is_some_and(Vec::is_empty))
            }
            _ => false,
        }
    }
}

impl Transform for DropUsage {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        if self.ended {
            return;
        }
        if data == b"[DONE]" {
            self.done = true;
            self.ended = true;
            out.extend_from_slice(encoder::DONE);
            return;
        }
        if !Self::is_usage_chunk(data) {
            encoder::write_raw(out, data);
        }
    }

    fn finish(&mut self, out: &mut BytesMut) {
        if !self.ended {
            self.fail(out, &super::chat_decode::cut());
        }
    }

    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        if self.ended {
            return;
        }
        crate::body::observed::told(error.code());
        encoder::write_error(out, &error.to_json());
        self.ended = true;
    }

    fn is_ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_only_streams_whose_client_did_not() {
        let asked = ask(br#"{"model":"m","stream":true,"messages":[]}"#).unwrap();
        let v: Value = serde_json::from_slice(&asked).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["model"], "m", "every other field kept");
        let kept =
            ask(br#"{"stream":true,"stream_options":{"include_usage":false,"x":1}}"#).unwrap();
        let v: Value = serde_json::from_slice(&kept).unwrap();
        assert_eq!(
            v["stream_options"],
            serde_json::json!({"include_usage": true, "x": 1})
        );
        assert!(ask(br#"{"stream":true,"stream_options":{"include_usage":true}}"#).is_none());
        assert!(ask(br#"{"stream":false}"#).is_none());
        assert!(ask(br#"{"messages":[]}"#).is_none());
        assert!(ask(b"not json").is_none());
    }

    /// Each shape of `stream_options` a streamed request may come with, and
    /// the `stream_options` that go upstream in its place (`None`: the body
    /// as it came, since its client asked for usage and gets the usage
    /// chunk).
    #[test]
    fn every_stream_asks_for_usage_whatever_its_stream_options() {
        let asked = || Some(r#"{"include_usage":true}"#);
        let cases = [
            ("null", asked()),
            ("{}", asked()),
            (r#"{"include_usage":false}"#, asked()),
            (r#"{"include_usage":null}"#, asked()),
            (r#"{"x":1}"#, Some(r#"{"x":1,"include_usage":true}"#)),
            (
                r#"{"x":1,"include_usage":false,"y":[2]}"#,
                Some(r#"{"x":1,"include_usage":true,"y":[2]}"#),
            ),
            (r#"{"include_usage":true}"#, None),
            (r#"{"x":1,"include_usage":true}"#, None),
        ];
        let request = |options: &str| {
            format!(r#"{{"model":"m","stream":true,"stream_options":{options},"messages":[]}}"#)
        };
        for (options, sent) in cases {
            let body = request(options);
            let got = ask(body.as_bytes()).map(|b| String::from_utf8(b.to_vec()).unwrap());
            // Every other field keeps its place and its value.
            assert_eq!(got, sent.map(request), "{body}");
        }
        // None at all: they are added.
        let got = ask(br#"{"model":"m","stream":true,"messages":[]}"#).unwrap();
        assert_eq!(
            &got[..],
            br#"{"model":"m","stream":true,"messages":[],"stream_options":{"include_usage":true}}"#
        );
        // A request that does not stream goes as it came, whatever it says.
        for stream in ["", r#","stream":false"#, r#","stream":null"#] {
            for options in ["", r#","stream_options":null"#, r#","stream_options":{}"#] {
                let body = format!(r#"{{"model":"m"{stream}{options},"messages":[]}}"#);
                assert_eq!(ask(body.as_bytes()), None, "{body}");
            }
        }
    }

    #[test]
    fn the_usage_chunk_is_dropped_and_everything_else_passes() {
        let mut t = DropUsage::default();
        let mut out = BytesMut::new();
        let text = br#"{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}"#;
        let usage = br#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#;
        t.on_event(text, &mut out);
        t.on_event(usage, &mut out);
        t.on_event(b"[DONE]", &mut out);
        t.finish(&mut out);
        let expected = format!(
            "data: {}\n\ndata: [DONE]\n\n",
            std::str::from_utf8(text).unwrap()
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected);
    }

    #[test]
    fn a_stream_cut_before_done_ends_with_an_error() {
        let mut t = DropUsage::default();
        let mut out = BytesMut::new();
        t.on_event(
            br#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            &mut out,
        );
        t.finish(&mut out);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.contains("upstream_stream_cut") && text.ends_with("data: [DONE]\n\n"),
            "{text}"
        );
    }
}

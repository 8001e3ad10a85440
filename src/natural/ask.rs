//! `on_ungrounded = "ask"`: a reply whose call carries a value the
//! conversation does not hold ([`grounding`](crate::natural::grounding)) is
//! not sent on; the model is asked once more, in the same request, whether
//! a tool fits and what value the user gave, and its second answer is the
//! answer (a call is emitted, text is text).
//!
//! Both answers are read whole: the upstream is asked without streaming,
//! and a client that asked for a stream gets the final answer as one
//! (its text, each call, the finish and, when asked for, the usage of both
//! requests).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response, header};
use serde_json::{Value, json};

use crate::body::{self, Body};
use crate::config::Provider;
use crate::error::GatewayError;
use crate::natural::complete;
use crate::natural::emit::ChunkHeader;
use crate::natural::grounding::{Conversation, Ungrounded};
use crate::natural::repair::Repairer;
use crate::natural::reply::{ReadyCall, ReplySettings};
use crate::natural::tools::ToolSet;
use crate::sse::encoder;
use crate::upstream::Upstreams;
use crate::upstream::reply::{self, Shape};

/// What one asking request needs.
pub struct Ask<'a> {
    pub upstreams: &'a Upstreams,
    pub provider: &'a Arc<Provider>,
    pub settings: &'a ReplySettings,
    pub repairer: Option<Arc<Repairer>>,
    pub tools: &'a ToolSet,
    pub conversation: &'a Conversation,
    /// The client asked for a usage chunk.
    pub include_usage: bool,
}

impl Ask<'_> {
    /// Sends `body` (the rewritten request) and answers it, asking again
    /// about an ungrounded call.
    pub async fn run(
        &self,
        parts: http::request::Parts,
        body: &[u8],
    ) -> Result<Response<Body>, GatewayError> {
        let mut request: Value =
            serde_json::from_slice(body).map_err(|e| GatewayError::BadRequest {
                message: format!("The request body is not JSON: {e}"),
                param: None,
            })?;
        let streamed = request.get("stream") == Some(&Value::Bool(true));
        if let Some(fields) = request.as_object_mut() {
            fields.remove("stream");
            fields.remove("stream_options");
        }
        let again = copy_parts(&parts);
        let (mut head, first, raw) = match self.whole(parts, &request).await? {
            Whole::Read {
                head,
                completion,
                raw,
            } => (head, completion, raw),
            Whole::Passed(response) => return Ok(response),
        };
        let mut completion = first;
        for (at, found) in flagged(&completion, self.tools, self.conversation) {
            let said = raw
                .pointer(&format!("/choices/{at}/message/content"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let asked = with_follow_up(&request, said, &follow_up(&found));
            let second = match self.whole(copy_parts(&again), &asked).await? {
                Whole::Read { completion, .. } => completion,
                Whole::Passed(response) => return Ok(response),
            };
            replace_choice(&mut completion, at, &second);
        }
        if !streamed {
            let bytes = serde_json::to_vec(&completion).unwrap_or_default();
            return Ok(Response::from_parts(head, body::full(bytes)));
        }
        head.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        head.headers.remove(header::CONTENT_LENGTH);
        let stream = write_stream(
            &completion,
            self.include_usage,
            self.settings.legacy_functions,
        );
        Ok(Response::from_parts(head, body::full(stream.freeze())))
    }

    /// One whole answer, its calls read out: the head, the rewritten
    /// completion and the upstream's own; a failed answer (or a stream the
    /// upstream sent anyway) passes to the client as it is.
    async fn whole(
        &self,
        parts: http::request::Parts,
        request: &Value,
    ) -> Result<Whole, GatewayError> {
        let bytes = Bytes::from(serde_json::to_vec(request).unwrap_or_default());
        let response = self
            .upstreams
            .send_to_read(self.provider, parts, bytes)
            .await?;
        if !response.status().is_success() {
            return Ok(Whole::Passed(response));
        }
        let (mut head, upstream_body) = response.into_parts();
        if let Shape::Stream = reply::prepare(&mut head)? {
            return Err(GatewayError::UpstreamInvalid {
                message: "The upstream streamed an answer toolgate asked for whole (on_ungrounded = \"ask\")".into(),
                code: "upstream_invalid_body",
            });
        }
        let collected = reply::read(upstream_body).await?;
        let raw = reply::parse(&collected)?;
        let rewritten = complete::rewrite(&collected, self.settings, self.repairer.clone()).await?;
        let completion = reply::parse(&rewritten)?;
        Ok(Whole::Read {
            head,
            completion,
            raw,
        })
    }
}

enum Whole {
    Read {
        head: http::response::Parts,
        completion: Value,
        raw: Value,
    },
    Passed(Response<Body>),
}

/// A request head like `parts` (method, URI, version, headers), for a
/// second request.
fn copy_parts(parts: &http::request::Parts) -> http::request::Parts {
    let mut request = Request::new(());
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request.headers_mut().remove(header::CONTENT_LENGTH);
    request.into_parts().0
}

/// Each choice (by position) with a call carrying ungrounded values, and
/// those values.
pub fn flagged(
    completion: &Value,
    tools: &ToolSet,
    conversation: &Conversation,
) -> Vec<(usize, Vec<Ungrounded>)> {
    let Some(choices) = completion.get("choices").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (at, choice) in choices.iter().enumerate() {
        let message = choice.get("message");
        let calls = message
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("function"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let legacy = message.and_then(|m| m.get("function_call"));
        let mut found = Vec::new();
        for function in calls.into_iter().chain(legacy) {
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let arguments = function
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or_default();
            found.extend(conversation.ungrounded(tools, name, arguments));
        }
        if !found.is_empty() {
            out.push((at, found));
        }
    }
    out
}

/// The message that asks the model again: which values it wrote that the
/// user did not, and the two ways to answer.
pub fn follow_up(found: &[Ungrounded]) -> String {
    let values = found
        .iter()
        .map(|u| {
            let value = serde_json::to_string(&u.value).unwrap_or_default();
            format!("`{}` = {value} in your call of `{}`", u.path, u.tool)
        })
        .collect::<Vec<_>>()
        .join(", ");
    let never = if found.len() == 1 {
        "that value"
    } else {
        "those values"
    };
    format!(
        "I never wrote {never}: {values}. Does one of the tools really fit what I asked? \
         If one does and I gave every value it needs, call it again using only values I gave. \
         If none fits, or I did not give a value it needs, do not call a tool: answer me in text \
         and say what is missing."
    )
}

/// `request` with the model's reply (`said`, as it wrote it) and the
/// follow-up appended to its messages.
pub fn with_follow_up(request: &Value, said: &str, follow_up: &str) -> Value {
    let mut asked = request.clone();
    if let Some(messages) = asked.get_mut("messages").and_then(Value::as_array_mut) {
        messages.push(json!({"role": "assistant", "content": said}));
        messages.push(json!({"role": "user", "content": follow_up}));
    }
    asked
}

/// The choice at `at` becomes the second answer's first choice (keeping its
/// index), and the second answer's usage is added to the first's.
pub fn replace_choice(completion: &mut Value, at: usize, second: &Value) {
    if let Some(mut choice) = second.pointer("/choices/0").cloned()
        && let Some(slot) = completion.pointer_mut(&format!("/choices/{at}"))
    {
        if let Some(index) = slot.get("index").cloned() {
            choice["index"] = index;
        }
        *slot = choice;
    }
    let (Some(first), Some(more)) = (
        completion.get_mut("usage").and_then(Value::as_object_mut),
        second.get("usage").and_then(Value::as_object),
    ) else {
        return;
    };
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        if let (Some(a), Some(b)) = (
            first.get(key).and_then(Value::as_u64),
            more.get(key).and_then(Value::as_u64),
        ) {
            first.insert(key.into(), json!(a + b));
        }
    }
}

/// A whole completion as the chunks of a stream: per choice its text, each
/// call (or the legacy `function_call`), its finish; the usage chunk when
/// asked for; `[DONE]`.
pub fn write_stream(completion: &Value, include_usage: bool, legacy: bool) -> BytesMut {
    let mut out = BytesMut::new();
    let header = completion
        .as_object()
        .map_or_else(ChunkHeader::fallback, ChunkHeader::from_chunk);
    let choices = completion
        .get("choices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (at, choice) in choices.iter().enumerate() {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(at as u64);
        let message = choice.get("message").cloned().unwrap_or_default();
        let mut first = true;
        if let Some(text) = message.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            header.write_text(&mut out, index, text, true);
            first = false;
        }
        let call = |c: &Value| ReadyCall {
            id: c
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments: c
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        if legacy && let Some(function) = message.get("function_call") {
            let ready = call(&json!({"function": function}));
            header.write_function_call(&mut out, index, &ready, first);
            first = false;
        }
        for (k, c) in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            header.write_call(&mut out, index, k, &call(c), first);
            first = false;
        }
        let reason = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        header.write_finish(&mut out, index, &reason, first);
    }
    if include_usage && let Some(usage) = completion.get("usage") {
        header.write_usage(&mut out, usage);
    }
    out.extend_from_slice(encoder::DONE);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_follow_up_names_each_value_and_both_ways_to_answer() {
        let found = [Ungrounded {
            tool: "get_weather".into(),
            path: "city".into(),
            value: "example".into(),
        }];
        let text = follow_up(&found);
        assert!(
            text.contains("`city` = \"example\" in your call of `get_weather`"),
            "{text}"
        );
        assert!(
            text.contains("call it again") && text.contains("answer me in text"),
            "{text}"
        );
    }

    #[test]
    fn the_second_answer_takes_the_choice_and_adds_its_usage() {
        let mut first = json!({"choices": [{"index": 0, "message": {"content": null, "tool_calls": []}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
        let second = json!({"choices": [{"index": 0, "message": {"content": "Which city?"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}});
        replace_choice(&mut first, 0, &second);
        assert_eq!(first["choices"][0]["message"]["content"], "Which city?");
        assert_eq!(
            first["usage"],
            json!({"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49})
        );
    }
}

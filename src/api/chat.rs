//! The Chat Completions door when the answer goes through [`crate::answer`]
//! (a provider with gateway tools): the body is read as the request, and the
//! answer's events are written as a chat stream or one completion. Other
//! chat requests keep their direct, byte-for-byte paths (see `gateway`).

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use serde_json::Value;

use crate::answer::{self, Ask, Started};
use crate::api::chat_events::ChatEvents;
use crate::api::chat_message::ChatMessage;
use crate::body::Body;
use crate::config::Provider;
use crate::error::GatewayError;
use crate::gateway::Runtime;
use crate::tools::drive;

pub async fn handle(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    parts: http::request::Parts,
    bytes: Bytes,
) -> Result<Response<Body>, GatewayError> {
    let request = super::json_object(&bytes)?;
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        == Some(true);
    let ask = Ask {
        request,
        uri: parts.uri,
        headers: parts.headers,
    };
    let running = match answer::start(runtime, provider, ask).await? {
        Started::Refused(response) => return Ok(response),
        Started::Running(running) => running,
    };
    let chat = running.chat_id().map(str::to_owned);
    let show = running.show();
    if stream {
        let encoder = ChatEvents::new(include_usage, show);
        let body = drive::spawn(encoder, move |mut out| {
            Box::pin(async move { running.drive(&mut out).await })
        });
        let mut response = super::event_stream(body);
        answer::tag_chat(&mut response, chat.as_deref());
        return Ok(response);
    }
    let mut message = ChatMessage::new(show);
    running.drive(&mut message).await;
    let completion = message.into_completion()?;
    let mut response = super::json(&completion);
    answer::tag_chat(&mut response, chat.as_deref());
    Ok(response)
}

//! The Chat Completions door when the answer goes through [`crate::answer`]
//! (a provider with gateway tools): the body is read as the request, and the
//! answer's events are written as a chat stream or one completion.
//! [`Request::from_chat`] is this door's reader. Other
//! chat requests keep their direct, byte-for-byte paths (see `gateway`).

use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use crate::answer::{self, Ask, Started, Transcript};
use crate::api::chat_events::ChatEvents;
use crate::api::chat_message::ChatMessage;
use crate::body::Body;
use crate::config::{Provider, Tenant};
use crate::error::GatewayError;
use crate::exchange::Request;
use crate::runtime::Runtime;

pub async fn handle(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    tenant: Arc<Tenant>,
    parts: http::request::Parts,
    bytes: Bytes,
    transcript: &mut Transcript,
) -> Result<Response<Body>, GatewayError> {
    let request = Request::from_chat(super::json_object(&bytes)?)?;
    // Parsed: the raw body is not held for the rest of the answer.
    drop(bytes);
    let stream = request.stream;
    let include_usage = request.include_usage();
    let ask = Ask {
        request,
        uri: parts.uri,
        headers: parts.headers,
        tenant,
        transcript,
    };
    let running = match answer::start(runtime, provider, ask).await? {
        Started::Refused(response) => return Ok(response),
        Started::Running(running) => running,
    };
    let show = running.show();
    if stream {
        return Ok(super::streamed(
            running,
            ChatEvents::new(include_usage, show),
        ));
    }
    super::whole(
        running,
        ChatMessage::new(show),
        ChatMessage::into_completion,
    )
    .await
}

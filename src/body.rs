//! The single response body type and its constructors.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response toolgate sends has this body type: an upstream body passed
/// through, a rewritten stream, or a small buffer the gateway made itself.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn json(value: &serde_json::Value) -> Body {
    full(serde_json::to_vec(value).unwrap_or_default())
}

/// Wraps any body whose errors can be boxed.
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

pub mod channel;
pub mod coalesce;
pub mod drain;
pub mod idle_timeout;
pub mod observed;
pub mod stall;

/// Reads a whole body of our own type, refusing more than `limit` bytes.
/// (Non-generic on purpose: `Limited`'s generic error bound trips rustc's
/// higher-ranked lifetime check when used inside the async handler.)
pub async fn collect_limited(mut body: Body, limit: usize) -> Result<Bytes, BoxError> {
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if buf.len() + data.len() > limit {
                return Err(format!("body larger than {limit} bytes").into());
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

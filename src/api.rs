//! The wire formats toolgate speaks with clients and upstreams, each
//! converted to and from the format-free [`crate::exchange`] types.

pub mod chat;
pub mod chat_decode;
pub mod chat_events;
pub mod chat_message;
pub mod chat_tap;
pub mod from_responses;
pub mod responses;
pub mod responses_events;
pub mod responses_request;
pub mod to_responses;
pub mod transcripts;

use serde_json::{Map, Value};

use crate::error::GatewayError;

/// A front door's request body: a JSON object, or a `400` saying why not.
pub fn json_object(bytes: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(GatewayError::bad_request(
            "The request body must be a JSON object",
            None,
        )),
        Err(e) => Err(GatewayError::bad_request(
            format!("The request body is not valid JSON: {e}"),
            None,
        )),
    }
}

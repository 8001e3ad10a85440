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

//! Server-sent events, sans-IO: a decoder that turns arbitrary byte reads into
//! complete events, and the encoder for what toolgate writes itself.

pub mod decoder;
pub mod encoder;
pub mod transform;

pub use decoder::{Decoder, Event};

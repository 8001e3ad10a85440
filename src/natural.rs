//! Natural mode: tool calling for models without native tools.
//!
//! Upstream direction: the request's tools become Markdown contracts in the
//! system prompt and the tool history becomes text. Client direction: the
//! model's natural-text calls are parsed out of its streamed reply and
//! emitted as native `tool_calls`.

pub mod ask;
pub mod cache;
pub mod complete;
pub mod content;
pub mod contract;
pub mod emit;
pub(crate) mod engine;
pub mod error;
pub mod fields;
pub mod grammar;
pub mod grounding;
pub mod history;
pub mod parser;
pub mod policy;
pub mod prompt;
pub mod repair;
pub mod repairing;
pub mod reply;
pub mod request;
pub mod stream;
pub mod syntax;
pub mod tools;
pub mod validate;

pub use engine::Engine;

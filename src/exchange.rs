//! What a model round says, independent of any wire format: pure data.
//!
//! Upstream answers are decoded into [`Event`]s (`upstream::chat_decode`); the
//! gateway's tool loop (`tools::rounds`) reads and writes them; a door's
//! encoder ([`Sink`]) turns them into what its client speaks. What the
//! client asks is a [`Request`], read from any door.

#[cfg(test)]
pub mod answers;
pub mod request;

pub use request::Request;

use rand::RngExt;
use rand::distr::Alphanumeric;
use serde::{Deserialize, Serialize};

/// The fields a Chat Completions answer repeats in every chunk, from the
/// upstream's first chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// The answer's id (`chatcmpl-…`).
    pub id: Option<String>,
    /// Unix seconds.
    pub created: Option<u64>,
    /// The model the upstream says answered.
    pub model: Option<String>,
    /// The upstream's backend configuration, when it sends one.
    pub system_fingerprint: Option<String>,
}

/// A complete call: arguments are the JSON object text the model wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The call's id, which its result cites (`call_…`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, a JSON object's text.
    pub arguments: String,
}

/// Token counts, summed over rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Tokens written.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Both.
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// Adds another round's counts.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Where a gateway tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GatewayStatus {
    /// Started, no result yet.
    InProgress,
    /// Ended with a result.
    Completed,
    /// Ended with an error.
    Failed,
}

/// A call the gateway runs itself, as reported to the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayCall {
    /// 0, 1, 2 … over the whole answer.
    pub index: usize,
    /// The call's id.
    pub id: String,
    /// The tool's name as the model sees it.
    pub name: String,
    /// Its MCP server's name, `http` or `builtin`.
    pub server: String,
    /// The arguments, a JSON object's text.
    pub arguments: String,
    /// Where it stands.
    pub status: GatewayStatus,
    /// The result, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// What went wrong, once failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One step of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The answer's header fields (first event of a round).
    Start(Meta),
    /// Answer text, as it comes.
    Text(String),
    /// Reasoning text (`reasoning_content`), kept apart from the answer.
    Reasoning(String),
    /// A complete call for the client to run.
    Call(Call),
    /// A gateway tool call started or ended.
    Gateway(GatewayCall),
    /// The answer ended, for this reason (`stop`, `tool_calls`, `length` …).
    Finish(String),
    /// The round's token counts.
    Usage(Usage),
}

/// Where an answer's events go: a door's encoder.
pub trait Sink {
    /// The answer's next step.
    fn event(&mut self, event: Event);
    /// The answer cannot go on; nothing follows but [`Sink::end`].
    fn fail(&mut self, error: crate::error::GatewayError);
    /// The answer is over.
    fn end(&mut self);
    /// Nothing was written for a while (streams send a comment).
    fn keep_alive(&mut self) {}
}

/// `call_` plus 24 random alphanumerics, as OpenAI's ids look.
pub fn call_id() -> String {
    let mut id = String::with_capacity(29);
    id.push_str("call_");
    id.extend(
        rand::rng()
            .sample_iter(Alphanumeric)
            .take(24)
            .map(char::from),
    );
    id
}

//! The common result type of the two block state machines (tag-style blocks
//! and JSON-object calls), so the parser can apply either the same way.

use crate::natural::parser::event::InvalidReason;

/// Progress of a block over one input slice.
#[derive(Debug)]
pub(crate) enum Step {
    /// `n` bytes were appended to the block; it is still open. `n` may be 0
    /// only when the block changed its internal phase.
    Continue(usize),
    /// `n` bytes were appended and the block is decided.
    Finished(usize, Outcome),
}

/// How a decided block is emitted. `raw_len` is the length of the block's
/// source at the start of the held bytes; anything held after it is fed
/// through the parser again (it was only looked at while searching).
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The first `raw_len` held bytes are one call.
    Call {
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
        raw_len: usize,
    },
    /// The first `raw_len` held bytes are one rejected block.
    Invalid {
        name: Option<String>,
        reason: InvalidReason,
        raw_len: usize,
    },
    /// It was not a call after all: the first `raw_len` held bytes are text.
    Text { raw_len: usize },
}

impl Outcome {
    /// The same decision over the first `raw_len` held bytes (a reader that
    /// judged a part of the block re-seats it on the whole).
    pub(crate) fn with_raw_len(self, raw_len: usize) -> Outcome {
        match self {
            Outcome::Call {
                name, arguments, ..
            } => Outcome::Call {
                name,
                arguments,
                raw_len,
            },
            Outcome::Invalid { name, reason, .. } => Outcome::Invalid {
                name,
                reason,
                raw_len,
            },
            Outcome::Text { .. } => Outcome::Text { raw_len },
        }
    }
}

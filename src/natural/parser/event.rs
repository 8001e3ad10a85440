//! What the parser hands back: text to show, completed calls, and blocks that
//! looked like calls but could not be used.
//!
//! Every event carries the exact source bytes it came from (`Text` is the text
//! itself, `Call::raw` and `Invalid::raw` are the block source), so a consumer
//! can always reproduce what the model wrote.

use std::fmt;

/// One piece of the parsed message, in source order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Prose (including `<think>` blocks and, in bracket syntax, the visible
    /// `[description]` of a call). Adjacent text within one `feed` is merged.
    Text(String),
    /// A complete, well-formed call of a declared tool.
    Call(ParsedCall),
    /// A block that opened a call of a declared tool but could not be used.
    Invalid(InvalidBlock),
}

/// A tool call recognised in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// The declared tool name, exactly as declared.
    pub name: String,
    /// The call's arguments (always a JSON object).
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Exact source text of the block. In tag and tool_call syntax this is the
    /// whole block from the opening to the closing tag; in bracket syntax it is
    /// only the hidden JSON object (the `[description]` before it is a `Text`).
    pub raw: String,
}

/// A block that started as a call but was rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidBlock {
    /// The declared tool the block named, when known.
    pub name: Option<String>,
    /// Exact source text covered by the block.
    pub raw: String,
    /// Why it was rejected.
    pub reason: InvalidReason,
}

/// Why a block was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidReason {
    /// The body is not valid JSON; the message comes from the scanner or serde.
    BadJson(String),
    /// The body is valid JSON but not an object (arguments must be an object).
    NotAnObject,
    /// Something other than whitespace, a fence or the closing tag surrounds
    /// the JSON value.
    Malformed(String),
    /// The message ended before the block was closed.
    Unclosed,
    /// The block grew beyond `ParserOptions::max_block_bytes`.
    TooLarge,
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidReason::BadJson(why) => write!(f, "invalid JSON: {why}"),
            InvalidReason::NotAnObject => f.write_str("arguments are not a JSON object"),
            InvalidReason::Malformed(why) => write!(f, "malformed tool call: {why}"),
            InvalidReason::Unclosed => f.write_str("tool call was not closed"),
            InvalidReason::TooLarge => f.write_str("tool call is too large"),
        }
    }
}

/// Appends events, merging text with a `Text` pushed earlier in the same feed.
///
/// Merging is limited to events this feed pushed (index `>= start`) so events
/// the caller already had in the vector are never modified.
pub(crate) struct Sink<'a> {
    out: &'a mut Vec<Event>,
    start: usize,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(out: &'a mut Vec<Event>) -> Self {
        let start = out.len();
        Sink { out, start }
    }

    pub(crate) fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.out.len() > self.start
            && let Some(Event::Text(last)) = self.out.last_mut()
        {
            last.push_str(text);
            return;
        }
        self.out.push(Event::Text(text.to_owned()));
    }

    pub(crate) fn call(&mut self, call: ParsedCall) {
        self.out.push(Event::Call(call));
    }

    pub(crate) fn invalid(&mut self, invalid: InvalidBlock) {
        self.out.push(Event::Invalid(invalid));
    }
}

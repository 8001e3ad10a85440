//! The common shape of an upstream chunk's choice, read borrowed, without
//! building a JSON tree: both stream rewriters take their fast path on it and
//! fall back to the general path for anything else.
//!
//! Keys that the fast paths cannot carry over are read only so a rewriter can
//! check that they are absent (or null); an unknown delta key fails the parse,
//! which also means "take the general path".

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// One entry of `choices`.
#[derive(Deserialize)]
pub struct PlainChoice<'a> {
    pub index: u64,
    #[serde(borrow)]
    pub delta: PlainDelta<'a>,
    #[serde(default, borrow)]
    pub finish_reason: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub logprobs: Option<&'a RawValue>,
}

/// A delta of content and/or call fragments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlainDelta<'a> {
    #[serde(default, borrow)]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub role: Option<&'a str>,
    #[serde(default, borrow)]
    pub tool_calls: Option<Vec<PlainCall<'a>>>,
    #[serde(default, borrow)]
    pub refusal: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub function_call: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub reasoning_content: Option<&'a RawValue>,
}

impl PlainDelta<'_> {
    /// Neither a refusal, a legacy function call nor reasoning: what is left
    /// is content, the role and call fragments.
    pub fn is_plain(&self) -> bool {
        self.refusal.is_none() && self.function_call.is_none() && self.reasoning_content.is_none()
    }
}

/// A call fragment; `id` and `type` are not needed by either rewriter's
/// fast path.
#[derive(Deserialize)]
pub struct PlainCall<'a> {
    #[serde(default)]
    pub index: u64,
    #[serde(default, borrow)]
    pub function: Option<PlainFunction<'a>>,
}

#[derive(Deserialize)]
pub struct PlainFunction<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub arguments: Option<Cow<'a, str>>,
}

/// Whether an event's data may take a fast path at all: a multi-line `data:`
/// payload must be re-framed, never copied (conformance rule 1).
pub fn single_line(data: &[u8]) -> bool {
    memchr::memchr(b'\n', data).is_none()
}

//! The common shape of an upstream chunk, read borrowed, without building a
//! JSON tree: both stream rewriters take their fast path on it and fall back
//! to the general path for anything else.
//!
//! [`read`] walks the chunk once with [`crate::json::Reader`]. The serde
//! derives below are the reference it must agree with: `reference` reads the
//! same shape through serde_json, and the tests and the `chunk_reader` fuzz
//! target require both to give the same answer whenever [`read`] gives one.
//!
//! Keys that the fast paths cannot carry over are read only so a rewriter can
//! check that they are absent (or null); an unknown delta key fails the read,
//! which also means "take the general path".

use std::borrow::Cow;
use std::ops::Range;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::json::Reader;

/// A value kept as its JSON text (never `null`: a null field is absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raw<'a>(pub &'a str);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|raw| Raw(raw.get()))
    }
}

/// A chunk of exactly one choice.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PlainChunk<'a> {
    #[serde(borrow)]
    pub choices: [PlainChoice<'a>; 1],
    #[serde(default, borrow)]
    pub usage: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub error: Option<Raw<'a>>,
}

/// One entry of `choices`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PlainChoice<'a> {
    pub index: u64,
    #[serde(borrow)]
    pub delta: PlainDelta<'a>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub logprobs: Option<Raw<'a>>,
}

/// A delta of content and/or call fragments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlainDelta<'a> {
    #[serde(default, borrow)]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub role: Option<&'a str>,
    #[serde(default, borrow)]
    pub tool_calls: Option<Vec<PlainCall<'a>>>,
    #[serde(default, borrow)]
    pub refusal: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub function_call: Option<Raw<'a>>,
    #[serde(default, borrow)]
    pub reasoning_content: Option<Raw<'a>>,
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PlainCall<'a> {
    #[serde(default)]
    pub index: u64,
    #[serde(default, borrow)]
    pub function: Option<PlainFunction<'a>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PlainFunction<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub arguments: Option<Cow<'a, str>>,
}

/// A chunk read by [`read`]: the shape, and where its `choices` are.
#[derive(Debug)]
pub struct ReadChunk<'a> {
    pub chunk: PlainChunk<'a>,
    /// An `error` key is present, even with `null`.
    pub error_key: bool,
    /// Where the delta's string values sit.
    pub holes: Holes,
    /// The fields a chunk header is made of, as they came.
    pub header: HeaderFields<'a>,
    data: &'a [u8],
    choices: Range<usize>,
}

/// The top-level fields a rewritten chunk's header is made of:
/// each value's JSON text (the last one when a key repeats, as in a parsed
/// object).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFields<'a> {
    pub id: Option<&'a str>,
    pub created: Option<&'a str>,
    pub model: Option<&'a str>,
    pub system_fingerprint: Option<&'a str>,
}

/// Where the string values that change from chunk to chunk of one stream
/// sit in a chunk's text: each string token, quotes included. A
/// stencil (natural mode's `stencil`) is cut around one of them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holes {
    /// The delta's `content`, when it is a string.
    pub content: Option<Range<usize>>,
    /// The last call fragment's `function.arguments`, when it is a string.
    pub arguments: Option<Range<usize>>,
}

impl ReadChunk<'_> {
    /// The bytes before and after the value of `choices`.
    pub fn around_choices(&self) -> (&[u8], &[u8]) {
        (
            &self.data[..self.choices.start],
            &self.data[self.choices.end..],
        )
    }

    /// The text of `choices` as it came.
    pub fn choices_text(&self) -> &[u8] {
        &self.data[self.choices.clone()]
    }

    /// Where `choices` is.
    pub fn choices_span(&self) -> Range<usize> {
        self.choices.clone()
    }
}

/// Reads `data` as a chunk of the common shape; `None` for anything else
/// (including anything that is not valid JSON), which sends the caller down
/// its general path.
pub fn read(data: &[u8]) -> Option<ReadChunk<'_>> {
    let mut r = Reader::new(data)?;
    let mut holes = Holes::default();
    let mut header = HeaderFields::default();
    let mut choice = None;
    let mut span = None;
    let (mut usage, mut error) = (None, None);
    r.object(|r, key| match key {
        "choices" => {
            r.skip_ws();
            let start = r.position();
            let mut first = None;
            r.array(|r| {
                // Exactly one element.
                if first.is_some() {
                    return None;
                }
                first = Some(read_choice(r, &mut holes)?);
                Some(())
            })?;
            once(&mut span, start..r.position())?;
            choice = Some(first?);
            Some(())
        }
        "usage" => once(&mut usage, raw(r)?),
        "error" => once(&mut error, raw(r)?),
        "id" => r.skip().map(|v| header.id = Some(v)),
        "created" => r.skip().map(|v| header.created = Some(v)),
        "model" => r.skip().map(|v| header.model = Some(v)),
        "system_fingerprint" => r.skip().map(|v| header.system_fingerprint = Some(v)),
        _ => r.skip().map(drop),
    })?;
    r.end()?;
    Some(ReadChunk {
        chunk: PlainChunk {
            choices: [choice?],
            usage: usage.flatten(),
            error: error.flatten(),
        },
        error_key: error.is_some(),
        holes,
        header,
        data,
        choices: span?,
    })
}

fn non_null(value: &str) -> Option<Raw<'_>> {
    (value != "null").then_some(Raw(value))
}

/// An optional field: `null` is absent.
fn optional<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Option<T>,
) -> Option<Option<T>> {
    if r.null() {
        Some(None)
    } else {
        read(r).map(Some)
    }
}

fn raw<'a>(r: &mut Reader<'a>) -> Option<Option<Raw<'a>>> {
    r.skip().map(non_null)
}

/// Sets `slot` once: a repeated field is refused, as serde refuses it.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// A string whose token's span is kept in `hole`.
fn string_in<'a>(r: &mut Reader<'a>, hole: &mut Option<Range<usize>>) -> Option<Cow<'a, str>> {
    r.skip_ws();
    let start = r.position();
    let text = r.string()?.decode()?;
    *hole = Some(start..r.position());
    Some(text)
}

fn read_choice<'a>(r: &mut Reader<'a>, holes: &mut Holes) -> Option<PlainChoice<'a>> {
    let (mut index, mut delta) = (None, None);
    let (mut finish, mut logprobs) = (None, None);
    r.object(|r, key| match key {
        "index" => once(&mut index, r.u64()?),
        "delta" => once(&mut delta, read_delta(r, holes)?),
        "finish_reason" => once(&mut finish, raw(r)?),
        "logprobs" => once(&mut logprobs, raw(r)?),
        _ => r.skip().map(drop),
    })?;
    Some(PlainChoice {
        index: index?,
        delta: delta?,
        finish_reason: finish.flatten(),
        logprobs: logprobs.flatten(),
    })
}

fn read_delta<'a>(r: &mut Reader<'a>, holes: &mut Holes) -> Option<PlainDelta<'a>> {
    let (mut content, mut role, mut calls) = (None, None, None);
    let (mut refusal, mut function_call, mut reasoning) = (None, None, None);
    r.object(|r, key| match key {
        "content" => once(
            &mut content,
            optional(r, |r| string_in(r, &mut holes.content))?,
        ),
        "role" => once(&mut role, optional(r, |r| r.string()?.borrowed())?),
        "tool_calls" => once(&mut calls, optional(r, |r| read_calls(r, holes))?),
        "refusal" => once(&mut refusal, raw(r)?),
        "function_call" => once(&mut function_call, raw(r)?),
        "reasoning_content" => once(&mut reasoning, raw(r)?),
        // `deny_unknown_fields`.
        _ => None,
    })?;
    Some(PlainDelta {
        content: content.flatten(),
        role: role.flatten(),
        tool_calls: calls.flatten(),
        refusal: refusal.flatten(),
        function_call: function_call.flatten(),
        reasoning_content: reasoning.flatten(),
    })
}

fn read_calls<'a>(r: &mut Reader<'a>, holes: &mut Holes) -> Option<Vec<PlainCall<'a>>> {
    let mut calls = Vec::new();
    r.array(|r| {
        let (mut index, mut function) = (None, None);
        r.object(|r, key| match key {
            "index" => once(&mut index, r.u64()?),
            "function" => once(&mut function, optional(r, |r| read_function(r, holes))?),
            _ => r.skip().map(drop),
        })?;
        calls.push(PlainCall {
            index: index.unwrap_or(0),
            function: function.flatten(),
        });
        Some(())
    })?;
    Some(calls)
}

fn read_function<'a>(r: &mut Reader<'a>, holes: &mut Holes) -> Option<PlainFunction<'a>> {
    let (mut name, mut arguments) = (None, None);
    r.object(|r, key| match key {
        "name" => once(&mut name, optional(r, |r| r.string()?.decode())?),
        "arguments" => once(
            &mut arguments,
            optional(r, |r| string_in(r, &mut holes.arguments))?,
        ),
        _ => r.skip().map(drop),
    })?;
    Some(PlainFunction {
        name: name.flatten(),
        arguments: arguments.flatten(),
    })
}

/// The same shape read through serde_json: what [`read`] must agree with.
#[doc(hidden)]
pub fn reference(data: &[u8]) -> Option<PlainChunk<'_>> {
    serde_json::from_slice(data).ok()
}

/// Whether an event's data may take a fast path at all: a multi-line `data:`
/// payload must be re-framed, never copied (conformance rule 1).
pub fn single_line(data: &[u8]) -> bool {
    memchr::memchr(b'\n', data).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`read`] agrees with serde_json whenever it answers, and answers on
    /// the shapes upstreams send.
    fn agrees(data: &str) -> bool {
        let fast = read(data.as_bytes());
        if let Some(fast) = &fast {
            assert_eq!(
                Some(&fast.chunk),
                reference(data.as_bytes()).as_ref(),
                "{data}"
            );
            assert!(serde_json::from_str::<serde_json::Value>(data).is_ok());
            let (before, after) = fast.around_choices();
            let again = [before, fast.choices_text(), after].concat();
            let a: serde_json::Value = serde_json::from_slice(&again).unwrap();
            let b: serde_json::Value = serde_json::from_str(data).unwrap();
            assert_eq!(a, b, "the fields written back are the chunk");
        }
        fast.is_some()
    }

    #[test]
    fn reads_the_common_shapes() {
        for data in [
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"Let "},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"id": "c", "choices": [{"delta": {"content": "a \"quoted\" é\n"}, "index": 0}], "usage": null}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"GetWeather","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":3,"delta":{"tool_calls":[{"function":{"arguments":"{\"loc"}}]},"finish_reason":"tool_calls","logprobs":{"content":[]}}],"usage":{"total_tokens":3}}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":"no","function_call":null,"reasoning_content":"hm"}}],"obfuscation":"x"}"#,
            r#"{"choices":[{"index":0,"delta":{}}],"error":{"message":"x"}}"#,
            r#"{"choices":[{"index":0,"delta":{}}],"id":"a","id":"b"}"#,
        ] {
            assert!(agrees(data), "{data}");
        }
    }

    #[test]
    fn anything_else_takes_the_general_path() {
        for data in [
            r#"{"choices":[]}"#,
            r#"{"choices":[{"index":0,"delta":{}},{"index":1,"delta":{}}]}"#,
            r#"{"choices":[{"delta":{"content":"no index"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"x","extra":1}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assist\u0061nt"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"\ud800"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":1}}]}"#,
            r#"{"choices":[{"index":0.0,"delta":{}}]}"#,
            r#"{"choices":[{"index":0,"index":1,"delta":{}}]}"#,
            r#"{"ch\u006fices":[{"index":0,"delta":{}}]}"#,
            r#"{"choices":[{"index":0,"delta":{}}],"choices":[{"index":0,"delta":{}}]}"#,
            r#"{"choices":[{"index":0,"delta":{}}],"usage":null,"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{}}]} trailing"#,
            r#"{"choices":[{"index":0,"delta":{"content":"x"}}],"broken":[1,]}"#,
            r#"[{"index":0,"delta":{}}]"#,
            "",
        ] {
            assert!(!agrees(data), "{data}");
        }
    }
}

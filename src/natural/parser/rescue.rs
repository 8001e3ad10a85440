//! The formats rescue recognises: how open models write calls when no
//! server parser turned them into native ones.
//!
//! Each format is a [`Recognizer`]: a name, where it opens (its opener) and
//! the [`Shape`] of what follows, which [`calls::CallsBlock`] reads. Adding a
//! format is one entry in [`RECOGNIZERS`] (and, for a body that is not JSON,
//! a reader of its own behind [`Format`]). Calls in a Python list
//! ([`Format::Pythonic`]) are read by the `python` syntax's own block.
//!
//! The rule that tells a call from JSON shown to the user (the irrelevance
//! rule) is the same for every format: a call names a declared tool
//! (`"name"`, exactly as declared) and its arguments (`"arguments"` or
//! `"parameters"`: an object, a string holding one, or missing) fit the
//! tool's schema, which the reply checks. Anything else is text, opener
//! included. A pythonic call names a declared tool by construction (its
//! opener needs one) and its keyword arguments are its arguments.

pub(crate) mod calls;

use crate::natural::parser::names::ToolNames;
use crate::natural::parser::opener::{OpenMatch, Opened};
use crate::natural::parser::python;

/// Special tokens a server may leave in the text after a call (it did not
/// treat them as the end of the message): they belong to the call.
pub(crate) const TERMINATORS: &[&[u8]] = &[b"<|eom_id|>", b"<|eot_id|>", b"<|im_end|>", b"</s>"];

/// A format of calls written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `<tool_call>{"name": …, "arguments": …}</tool_call>` (Hermes and Qwen
    /// chat templates), one block per call or several objects in one.
    Hermes,
    /// A ```` ```json ```` (or bare ```` ``` ````) fence at a line start
    /// holding a call object, several, or a list of them.
    Fence,
    /// A call object bare at a line start, `{"name": …, "parameters": …}`
    /// (Llama 3.x JSON tool calling, Qwen); several separated by `;`, `,` or
    /// whitespace.
    Bare,
    /// `<|python_tag|>` then call objects separated by `;` (Llama 3.1+ with a
    /// server that kept the special token as text).
    PythonTag,
    /// `[TOOL_CALLS]` then a list of call objects (Mistral tokenizers v2-v7),
    /// or a declared name, `[ARGS]` and the arguments object (v11+, with an
    /// optional `[CALL_ID]id` before `[ARGS]`), one call per `[TOOL_CALLS]`.
    Mistral,
    /// `<function=name>{…}</function>`: a declared name, then its arguments
    /// object (Llama 3.1's custom tool calling, as its model card shows it),
    /// one call per tag.
    LlamaFunction,
    /// A Python list of calls, `[get_weather(city="Paris"), get_time(tz="UTC")]`
    /// (Llama 3.2+, BFCL's prompt mode), also after `<|python_tag|>`. It
    /// opens as [`Opened::PythonList`] and runs as the `python` syntax's
    /// block, never as a [`calls::CallsBlock`].
    Pythonic,
}

/// Where a format opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    /// This literal, anywhere in the text.
    Literal(&'static [u8]),
    /// ```` ``` ````, an optional `json` (any case), spaces, a line break,
    /// at a line start.
    Fence,
    /// A `{` at a line start (nothing is consumed before the object).
    LineStartObject,
    /// `[`, whitespace and a declared name followed by `(`: the `python`
    /// syntax's list opener.
    PythonList,
}

/// What follows a format's opener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// What closes the block (after the calls); empty when nothing does.
    pub(crate) closer: &'static [u8],
    /// The calls may come as one JSON list, `[{…}, {…}]`.
    pub(crate) list: bool,
    /// Bytes that may separate one call object from the next (besides
    /// whitespace alone, which always may).
    pub(crate) separators: &'static [u8],
    /// A declared name ending at this byte, then its arguments object,
    /// instead of a call object: `[` (Mistral v11+'s `name[ARGS]{…}`, whose
    /// markers follow) or `>` (Llama's `<function=name>{…}`).
    pub(crate) name_end: Option<u8>,
    /// The opener again: whitespace between one block and the next belongs
    /// to the first call rather than to the text.
    pub(crate) again: &'static [u8],
}

/// A format, its name (as the corpus names it) and its opener.
#[derive(Debug, Clone, Copy)]
pub struct Recognizer {
    pub name: &'static str,
    pub(crate) format: Format,
    pub(crate) opener: Opener,
}

/// Every format rescue reads, in no particular order (their openers are
/// distinct: `[TOOL_CALLS]` is no declared name's list).
pub const RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        name: "hermes",
        format: Format::Hermes,
        opener: Opener::Literal(b"<tool_call>"),
    },
    Recognizer {
        name: "fence",
        format: Format::Fence,
        opener: Opener::Fence,
    },
    Recognizer {
        name: "bare",
        format: Format::Bare,
        opener: Opener::LineStartObject,
    },
    Recognizer {
        name: "python_tag",
        format: Format::PythonTag,
        opener: Opener::Literal(b"<|python_tag|>"),
    },
    Recognizer {
        name: "mistral",
        format: Format::Mistral,
        opener: Opener::Literal(b"[TOOL_CALLS]"),
    },
    Recognizer {
        name: "llama_function",
        format: Format::LlamaFunction,
        opener: Opener::Literal(b"<function="),
    },
    Recognizer {
        name: "pythonic",
        format: Format::Pythonic,
        opener: Opener::PythonList,
    },
];

/// The recognizer of this name, if rescue has it.
pub fn recognizer(name: &str) -> Option<&'static Recognizer> {
    RECOGNIZERS.iter().find(|r| r.name == name)
}

impl Format {
    pub(crate) fn shape(self) -> Shape {
        let shape = Shape {
            closer: b"",
            list: true,
            separators: b",;",
            name_end: None,
            again: b"",
        };
        match self {
            Format::Hermes => Shape {
                closer: b"</tool_call>",
                again: b"<tool_call>",
                ..shape
            },
            Format::Fence => Shape {
                closer: b"```",
                again: b"```",
                ..shape
            },
            Format::Bare => Shape {
                list: false,
                ..shape
            },
            Format::PythonTag => Shape {
                again: b"<|python_tag|>",
                ..shape
            },
            Format::Mistral => Shape {
                name_end: Some(b'['),
                again: b"[TOOL_CALLS]",
                ..shape
            },
            Format::LlamaFunction => Shape {
                closer: b"</function>",
                list: false,
                separators: b"",
                name_end: Some(b'>'),
                again: b"<function=",
            },
            // Read by the python syntax's block; no `CallsBlock` has it.
            Format::Pythonic => shape,
        }
    }
}

/// Matches the rescue formats' openers at the start of `bytes` (a `<`, a
/// `[`, or a backtick at a line start; a `{` at a line start opens
/// [`Format::Bare`] without a matcher).
pub(crate) fn match_opener(bytes: &[u8], names: &ToolNames) -> OpenMatch {
    let mut partial = false;
    for r in RECOGNIZERS {
        let found = match r.opener {
            Opener::Literal(literal) => match_literal(bytes, literal),
            Opener::Fence => match_fence(bytes),
            Opener::LineStartObject => None,
            Opener::PythonList => match python::match_list_open(bytes, names) {
                full @ OpenMatch::Full { .. } => return full,
                OpenMatch::Partial => Some(None),
                OpenMatch::No => None,
            },
        };
        match found {
            Some(Some(len)) if r.format == Format::PythonTag => {
                return python_tag_list(bytes, len, names);
            }
            Some(Some(len)) => {
                return OpenMatch::Full {
                    len,
                    opened: Opened::Rescue(r.format),
                };
            }
            Some(None) => partial = true,
            None => {}
        }
    }
    if partial {
        OpenMatch::Partial
    } else {
        OpenMatch::No
    }
}

/// `<|python_tag|>` (`tag` bytes) and what follows: a Python list of calls
/// opens with the tag as part of its opener; anything else is the JSON
/// form's. Held until the byte after the tag tells them apart.
fn python_tag_list(bytes: &[u8], tag: usize, names: &ToolNames) -> OpenMatch {
    let python_tag = OpenMatch::Full {
        len: tag,
        opened: Opened::Rescue(Format::PythonTag),
    };
    match bytes.get(tag..) {
        None | Some([]) => OpenMatch::Partial,
        Some(rest) => match python::match_list_open(rest, names) {
            OpenMatch::Full { len, opened } => OpenMatch::Full {
                len: tag + len,
                opened,
            },
            OpenMatch::Partial => OpenMatch::Partial,
            OpenMatch::No => python_tag,
        },
    }
}

/// The longest opener for these names (a fence line is bounded by its own
/// rule; `<|python_tag|>` may be followed by a list's opener).
pub(crate) fn longest_opener(names: &ToolNames) -> usize {
    RECOGNIZERS
        .iter()
        .map(|r| match r.opener {
            Opener::Literal(l) if r.format == Format::PythonTag => {
                l.len() + python::max_opener_len(names)
            }
            Opener::Literal(l) => l.len(),
            Opener::Fence => FENCE_MAX,
            Opener::LineStartObject => 0,
            Opener::PythonList => python::max_opener_len(names),
        })
        .max()
        .unwrap_or(0)
}

/// ```` ``` ````, `json`, 16 spaces, `\r\n`.
const FENCE_MAX: usize = 3 + 4 + 16 + 2;

/// `Some(Some(len))` a match, `Some(None)` a proper prefix, `None` no match.
fn match_literal(bytes: &[u8], literal: &[u8]) -> Option<Option<usize>> {
    if bytes.len() >= literal.len() {
        bytes.starts_with(literal).then_some(Some(literal.len()))
    } else {
        literal.starts_with(bytes).then_some(None)
    }
}

/// ```` ``` ````, an optional `json` (any case), at most 16 spaces or tabs,
/// an optional `\r`, a `\n`.
fn match_fence(bytes: &[u8]) -> Option<Option<usize>> {
    let mut i = 0;
    let info: &[u8] = if matches!(bytes.get(3), Some(b'j' | b'J')) {
        b"```json"
    } else {
        b"```"
    };
    for &want in info {
        match bytes.get(i) {
            None => return Some(None),
            Some(b) if b.to_ascii_lowercase() == want => i += 1,
            Some(_) => return None,
        }
    }
    let spaces = bytes
        .get(i..)
        .unwrap_or_default()
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    if spaces > 16 {
        return None;
    }
    i += spaces;
    if bytes.get(i) == Some(&b'\r') {
        i += 1;
    }
    match bytes.get(i) {
        None => Some(None),
        Some(b'\n') => Some(Some(i + 1)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ToolNames {
        ToolNames::new(["get_weather", "get_time"])
    }

    fn match_opener(bytes: &[u8]) -> OpenMatch {
        super::match_opener(bytes, &names())
    }

    fn full(s: &str) -> Option<(usize, Format)> {
        match match_opener(s.as_bytes()) {
            OpenMatch::Full {
                len,
                opened: Opened::Rescue(f),
            } => Some((len, f)),
            _ => None,
        }
    }

    #[test]
    fn openers() {
        assert_eq!(full("<tool_call>\n{"), Some((11, Format::Hermes)));
        assert_eq!(full("<|python_tag|>{"), Some((14, Format::PythonTag)));
        assert_eq!(full("[TOOL_CALLS]["), Some((12, Format::Mistral)));
        assert_eq!(
            full("<function=get_time>"),
            Some((10, Format::LlamaFunction))
        );
        assert_eq!(full("```json\n{"), Some((8, Format::Fence)));
        assert_eq!(full("```JSON  \r\n"), Some((11, Format::Fence)));
        assert_eq!(full("```\n"), Some((4, Format::Fence)));
        for partial in [
            "<",
            "<tool_call",
            "<|py",
            "[TOOL",
            "``",
            "```js",
            "```json ",
            "[",
            "[ get_wea",
            "<|python_tag|>",
            "<|python_tag|>[get_",
            "<function",
        ] {
            assert_eq!(
                match_opener(partial.as_bytes()),
                OpenMatch::Partial,
                "{partial}"
            );
        }
        for no in [
            "<tool_calls>",
            "<functions>",
            "<b>",
            "[link]",
            "```python\n",
            "```jsonl\n",
            "``` x\n",
            "<|eot_id|>",
            "[1]",
            "[get_weather]",
            "[get_weather docs](https://x)",
            "[search_web(q=1)]",
        ] {
            assert_eq!(match_opener(no.as_bytes()), OpenMatch::No, "{no}");
        }
        // A Python list opens as the python syntax's block, after the tag too.
        assert_eq!(
            match_opener(b"[get_time(tz"),
            OpenMatch::Full {
                len: 10,
                opened: Opened::PythonList(0)
            }
        );
        assert_eq!(
            match_opener(b"<|python_tag|>[get_weather(a"),
            OpenMatch::Full {
                len: 27,
                opened: Opened::PythonList(1)
            }
        );
        assert_eq!(full("<|python_tag|>[{"), Some((14, Format::PythonTag)));
        assert!(longest_opener(&names()) >= "<|python_tag|>[ get_weather(".len());
        assert!(recognizer("mistral").is_some());
        assert!(recognizer("pythonic").is_some());
    }
}

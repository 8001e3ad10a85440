//! Recognising the tags that open a call or a think block.
//!
//! The matcher looks at the bytes from a `<` onwards and answers "no", "not
//! yet" (the bytes so far are a proper prefix of an opener, so they must be
//! held back) or "yes, this many bytes". It is pure and bounded: it never looks
//! further than the longest possible opener.

use crate::natural::parser::names::{NameMatch, ToolNames};
use crate::natural::parser::python;
use crate::natural::parser::rescue::{self, Format};
use crate::natural::syntax::Syntax;

/// The think opener recognised when `skip_think` is on.
pub(crate) const THINK_OPEN: &[u8] = b"<think>";
/// The think closer.
pub(crate) const THINK_CLOSE: &[u8] = b"</think>";
/// Longest whitespace run accepted inside `<tool_call name = "X">`; bounds
/// how much prose a stray `<tool_call ` can hold back.
const MAX_TAG_SPACE: usize = 16;

/// What opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened {
    Think,
    /// `<Name>`: a call of the declared tool at this index, closed by `</Name>`.
    Tag(usize),
    /// `<tool_call name="Name">`: closed by `</tool_call>`.
    NamedToolCall(usize),
    /// `[Name(` (python syntax, and rescue's pythonic format, also after
    /// `<|python_tag|>`): a list of calls, the first of the declared tool at
    /// this index.
    PythonList(usize),
    /// A rescue format's opener (rescue only): `<tool_call>`, a fence,
    /// `<|python_tag|>`, `[TOOL_CALLS]`, or (no bytes) a `{` at a line start.
    Rescue(Format),
}

/// Which openers are live: one syntax's, or (rescue) every syntax's plus
/// the rescue formats' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Openers {
    Syntax(Syntax),
    Rescue,
}

/// Result of matching an opener at the start of a byte string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenMatch {
    No,
    Partial,
    Full { len: usize, opened: Opened },
}

/// Matches `bytes` (which start with `<`, or `[` in python syntax) against every opener active for
/// `openers`. Think wins over a tool that happens to be called `think`; a
/// complete opener wins over one still partial (`<tool_call>` is whole while
/// `<tool_call name=` may still follow only if the byte after `<tool_call`
/// is a space, so the two never both match).
pub(crate) fn match_opener(
    bytes: &[u8],
    openers: Openers,
    names: &ToolNames,
    skip_think: bool,
) -> OpenMatch {
    let think = if skip_think {
        match_literal(bytes, THINK_OPEN)
    } else {
        OpenMatch::No
    };
    if let OpenMatch::Full { .. } = think {
        return think;
    }
    if matches!(bytes.first(), Some(b'`' | b'[')) {
        // Only the rescue scanner holds a backtick (at a line start), and
        // only it and the python syntax's a `[`.
        return match openers {
            Openers::Rescue => rescue::match_opener(bytes, names),
            Openers::Syntax(Syntax::Python) => python::match_list_open(bytes, names),
            Openers::Syntax(_) => OpenMatch::No,
        };
    }
    let candidates = match openers {
        Openers::Syntax(Syntax::Tag) => [match_tag(bytes, names), OpenMatch::No, OpenMatch::No],
        Openers::Syntax(Syntax::ToolCall) => {
            [match_tool_call(bytes, names), OpenMatch::No, OpenMatch::No]
        }
        Openers::Syntax(Syntax::Bracket) => [OpenMatch::No; 3],
        // Its `[` was matched above; a `<` here is think's only.
        Openers::Syntax(Syntax::Python) => [OpenMatch::No; 3],
        Openers::Rescue => [
            match_tag(bytes, names),
            match_tool_call(bytes, names),
            rescue::match_opener(bytes, names),
        ],
    };
    let mut partial = think == OpenMatch::Partial;
    for candidate in candidates {
        match candidate {
            OpenMatch::Full { .. } => return candidate,
            OpenMatch::Partial => partial = true,
            OpenMatch::No => {}
        }
    }
    if partial {
        OpenMatch::Partial
    } else {
        OpenMatch::No
    }
}

/// Matches a fixed tag such as `<think>` or `</think>`.
pub(crate) fn match_literal(bytes: &[u8], literal: &[u8]) -> OpenMatch {
    if bytes.len() >= literal.len() {
        if bytes.starts_with(literal) {
            OpenMatch::Full {
                len: literal.len(),
                opened: Opened::Think,
            }
        } else {
            OpenMatch::No
        }
    } else if literal.starts_with(bytes) {
        OpenMatch::Partial
    } else {
        OpenMatch::No
    }
}

/// `<ToolName>` with the name matched exactly.
fn match_tag(bytes: &[u8], names: &ToolNames) -> OpenMatch {
    let Some(rest) = bytes.strip_prefix(b"<") else {
        return OpenMatch::No;
    };
    match names.match_prefix(rest, b'>') {
        NameMatch::No => OpenMatch::No,
        NameMatch::Partial => OpenMatch::Partial,
        NameMatch::Full { index, len } => OpenMatch::Full {
            len: len + 2,
            opened: Opened::Tag(index),
        },
    }
}

/// A tiny cursor over the opener bytes; running out of input means "partial".
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Running out of bytes while the opener is still plausible.
struct NeedMore;

impl Cursor<'_> {
    /// Consumes `lit`; `Ok(false)` on a mismatch.
    fn literal(&mut self, lit: &[u8]) -> Result<bool, NeedMore> {
        for &want in lit {
            match self.bytes.get(self.pos) {
                None => return Err(NeedMore),
                Some(&b) if b == want => self.pos += 1,
                Some(_) => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Consumes spaces and tabs; `Ok(false)` if there were fewer than `min`
    /// or more than the cap.
    fn spaces(&mut self, min: usize) -> Result<bool, NeedMore> {
        let start = self.pos;
        loop {
            match self.bytes.get(self.pos) {
                None => {
                    return if self.pos - start > MAX_TAG_SPACE {
                        Ok(false)
                    } else {
                        Err(NeedMore)
                    };
                }
                Some(b' ' | b'\t') => self.pos += 1,
                Some(_) => break,
            }
        }
        let n = self.pos - start;
        Ok(n >= min && n <= MAX_TAG_SPACE)
    }
}

/// `<tool_call name="ToolName">`: single or double quotes, optional spaces
/// around `=` and before `>`, at least one space after `tool_call`.
fn match_tool_call(bytes: &[u8], names: &ToolNames) -> OpenMatch {
    let mut c = Cursor { bytes, pos: 0 };
    match tool_call_inner(&mut c, names) {
        Err(NeedMore) => OpenMatch::Partial,
        Ok(None) => OpenMatch::No,
        Ok(Some(index)) => OpenMatch::Full {
            len: c.pos,
            opened: Opened::NamedToolCall(index),
        },
    }
}

fn tool_call_inner(c: &mut Cursor<'_>, names: &ToolNames) -> Result<Option<usize>, NeedMore> {
    if !c.literal(b"<tool_call")? || !c.spaces(1)? || !c.literal(b"name")? || !c.spaces(0)? {
        return Ok(None);
    }
    if !c.literal(b"=")? || !c.spaces(0)? {
        return Ok(None);
    }
    let quote = match c.bytes.get(c.pos) {
        None => return Err(NeedMore),
        Some(&q @ (b'"' | b'\'')) => q,
        Some(_) => return Ok(None),
    };
    c.pos += 1;
    let rest = c.bytes.get(c.pos..).unwrap_or_default();
    let index = match names.match_prefix(rest, quote) {
        NameMatch::No => return Ok(None),
        NameMatch::Partial => return Err(NeedMore),
        NameMatch::Full { index, len } => {
            c.pos += len + 1;
            index
        }
    };
    if !c.spaces(0)? || !c.literal(b">")? {
        return Ok(None);
    }
    Ok(Some(index))
}

/// Longest opener for these names; openers never exceed it, so a held
/// candidate never grows beyond it.
pub(crate) fn max_opener_len(openers: Openers, names: &ToolNames) -> usize {
    let tool_call = b"<tool_call name=\"\">".len() + names.longest() + 4 * MAX_TAG_SPACE;
    let call = match openers {
        Openers::Syntax(Syntax::Tag) => names.longest() + 2,
        Openers::Syntax(Syntax::ToolCall) => tool_call,
        Openers::Rescue => tool_call.max(rescue::longest_opener(names)),
        Openers::Syntax(Syntax::Bracket) => 0,
        Openers::Syntax(Syntax::Python) => python::max_opener_len(names),
    };
    call.max(THINK_CLOSE.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ToolNames {
        ToolNames::new(["GetWeather", "BookRestaurant"])
    }

    fn m(s: &str, syntax: Syntax) -> OpenMatch {
        match_opener(s.as_bytes(), Openers::Syntax(syntax), &names(), true)
    }

    #[test]
    fn tag_openers() {
        assert_eq!(m("<", Syntax::Tag), OpenMatch::Partial);
        assert_eq!(m("<Get", Syntax::Tag), OpenMatch::Partial);
        assert_eq!(m("<th", Syntax::Tag), OpenMatch::Partial);
        assert_eq!(
            m("<GetWeather>{", Syntax::Tag),
            OpenMatch::Full {
                len: 12,
                opened: Opened::Tag(1)
            }
        );
        assert_eq!(m("<GetWeatherX>", Syntax::Tag), OpenMatch::No);
        assert_eq!(m("<getweather>", Syntax::Tag), OpenMatch::No);
        assert_eq!(m("</GetWeather>", Syntax::Tag), OpenMatch::No);
        assert_eq!(m("< b", Syntax::Tag), OpenMatch::No);
        assert_eq!(
            m("<think>", Syntax::Tag),
            OpenMatch::Full {
                len: 7,
                opened: Opened::Think
            }
        );
    }

    #[test]
    fn tool_call_openers() {
        let full = |s: &str| match m(s, Syntax::ToolCall) {
            OpenMatch::Full { len, .. } => Some(len),
            _ => None,
        };
        assert_eq!(full("<tool_call name=\"GetWeather\">"), Some(29));
        assert_eq!(full("<tool_call name='GetWeather'>x"), Some(29));
        assert_eq!(full("<tool_call  name = \"GetWeather\" >"), Some(33));
        assert_eq!(
            m("<tool_call name=\"GetWeather'>", Syntax::ToolCall),
            OpenMatch::No
        );
        assert_eq!(
            m("<tool_call name=\"Get", Syntax::ToolCall),
            OpenMatch::Partial
        );
        assert_eq!(
            m("<tool_call name=\"Nope\">", Syntax::ToolCall),
            OpenMatch::No
        );
        assert_eq!(
            m("<tool_callname=\"GetWeather\">", Syntax::ToolCall),
            OpenMatch::No
        );
        assert_eq!(m("<tool_call>", Syntax::ToolCall), OpenMatch::No);
        let long = format!("<tool_call{}", " ".repeat(MAX_TAG_SPACE + 1));
        assert_eq!(m(&long, Syntax::ToolCall), OpenMatch::No);
    }

    #[test]
    fn rescue_opens_every_syntax_and_the_bare_tool_call_tag() {
        let r = |s: &str| match_opener(s.as_bytes(), Openers::Rescue, &names(), true);
        assert!(matches!(
            r("<GetWeather>"),
            OpenMatch::Full {
                opened: Opened::Tag(1),
                ..
            }
        ));
        assert!(matches!(
            r("<tool_call name=\"GetWeather\">"),
            OpenMatch::Full {
                opened: Opened::NamedToolCall(1),
                ..
            }
        ));
        assert_eq!(
            r("<tool_call>\n{"),
            OpenMatch::Full {
                len: 11,
                opened: Opened::Rescue(Format::Hermes)
            }
        );
        assert_eq!(r("<tool_call"), OpenMatch::Partial);
        assert_eq!(r("<tool_call name=\"Get"), OpenMatch::Partial);
        assert_eq!(r("<tool_calls>"), OpenMatch::No);
        assert_eq!(r("<b>"), OpenMatch::No);
        assert_eq!(
            m("<tool_call>", Syntax::ToolCall),
            OpenMatch::No,
            "natural mode keeps to its syntax"
        );
        let fence = |s: &str| match r(s) {
            OpenMatch::Full {
                len,
                opened: Opened::Rescue(Format::Fence),
            } => Some(len),
            _ => None,
        };
        assert_eq!(fence("```json\n{"), Some(8));
        assert_eq!(fence("```JSON  \r\n"), Some(11));
        assert_eq!(fence("```\n"), Some(4));
        assert_eq!(r("```js"), OpenMatch::Partial);
        assert_eq!(r("``"), OpenMatch::Partial);
        assert_eq!(r("```python\n"), OpenMatch::No);
        assert_eq!(r("```jsonl\n"), OpenMatch::No);
        assert_eq!(m("```json\n", Syntax::Tag), OpenMatch::No);
    }
}

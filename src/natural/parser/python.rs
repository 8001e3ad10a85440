//! Python syntax: calls written as a Python list,
//! `[get_weather(city="Paris"), get_time(tz="UTC")]`.
//!
//! A list opens at `[`, optional whitespace and a declared tool's name
//! followed by `(`; any other `[` (`[1]`, a Markdown link) is text. Each
//! call of the list is decided when what follows its `)` is known: a `,`
//! (the call's raw runs through it and the whitespace after it, and the
//! next call is read by [`PyBlock::next_call`]) or the list's `]` (the raw
//! runs through it). The first call's raw begins with the `[`, so the list
//! is hidden from the text whole. Other text after a `)` ends the list
//! there, its calls kept (a near miss whose intent is plain).
//!
//! While a call is open only the structure is followed (quotes, escapes,
//! brackets), and bytes that no literal holds outside a string (`<`, `#`,
//! a line break inside a string, a bracket that closes nothing) end it as
//! an invalid call, its raw up to that byte, which is then read again as
//! text. At its `)` the call is read by [`python_literal::parse_call`]:
//! keyword arguments whose values are literals are a call, anything else
//! (a positional argument, a name, an expression) an invalid call, as is a
//! call in the list to an undeclared tool.

use crate::natural::parser::event::InvalidReason;
use crate::natural::parser::names::{NameMatch, ToolNames};
use crate::natural::parser::opener::{OpenMatch, Opened};
use crate::natural::parser::outcome::{Outcome, Step};
use crate::natural::parser::python_literal;

/// Most whitespace read between `[` and the first name.
const MAX_LEAD: usize = 32;
/// Brackets nested deeper than this inside a call end it as invalid.
const MAX_NESTING: usize = 64;
/// Longest name read for a later call of a list.
const MAX_NAME: usize = 256;

/// Matches `[`, up to [`MAX_LEAD`] whitespace bytes and `Name(` for a
/// declared `Name` at the start of `bytes`.
pub(crate) fn match_list_open(bytes: &[u8], names: &ToolNames) -> OpenMatch {
    let Some(rest) = bytes.strip_prefix(b"[") else {
        return OpenMatch::No;
    };
    let lead = rest.iter().take_while(|b| is_ws(**b)).count();
    if lead > MAX_LEAD {
        return OpenMatch::No;
    }
    match names.match_prefix(rest.get(lead..).unwrap_or_default(), b'(') {
        NameMatch::No => OpenMatch::No,
        NameMatch::Partial => OpenMatch::Partial,
        NameMatch::Full { index, len } => OpenMatch::Full {
            len: 1 + lead + len + 1,
            opened: Opened::PythonList(index),
        },
    }
}

/// Longest list opener for these names.
pub(crate) fn max_opener_len(names: &ToolNames) -> usize {
    1 + MAX_LEAD + names.longest() + 1
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Bytes a call's arguments hold outside strings and brackets.
fn is_argument_byte(b: u8) -> bool {
    is_name_byte(b) || is_ws(b) || matches!(b, b'=' | b',' | b':' | b'+' | b'*' | b'\\')
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A later call's name (the held bytes so far).
    Name,
    /// Inside the call's parentheses.
    Args,
    /// After the call's `)`, which ended at held offset `end`.
    Trailer { end: usize },
    /// After the `,` that follows a call ending at held offset `end`.
    AfterComma,
    /// After the list's `]` (held bytes up to `end` are the call's), where
    /// end tokens may follow; one may have started at held offset `token`.
    Closed { end: usize, token: Option<usize> },
}

/// Where the structure of a call stands.
#[derive(Debug, Default)]
struct Structure {
    /// The closers expected, innermost last.
    closers: Vec<u8>,
    /// Inside a string opened by this quote.
    quote: Option<u8>,
    /// After a backslash inside a string.
    escaped: bool,
}

/// What one byte of a call's arguments does.
enum Seen {
    More,
    /// The call's `)`.
    Closed,
    /// The byte cannot be part of the call; why.
    Wrong(String),
}

impl Structure {
    fn byte(&mut self, b: u8) -> Seen {
        if let Some(quote) = self.quote {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == quote {
                self.quote = None;
            } else if b == b'\n' {
                return Seen::Wrong("a line break inside a string".to_owned());
            }
            return Seen::More;
        }
        match b {
            b'"' | b'\'' => self.quote = Some(b),
            b'(' | b'[' | b'{' => {
                if self.closers.len() >= MAX_NESTING {
                    return Seen::Wrong(format!("brackets nested deeper than {MAX_NESTING}"));
                }
                self.closers.push(match b {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                });
            }
            b')' | b']' | b'}' => {
                if self.closers.last() != Some(&b) {
                    return Seen::Wrong(format!("`{}` closes nothing open", b as char));
                }
                self.closers.pop();
                if self.closers.is_empty() {
                    return Seen::Closed;
                }
            }
            b if is_argument_byte(b) => {}
            b if b.is_ascii() => {
                return Seen::Wrong(format!("unexpected `{}` in a call", b as char));
            }
            _ => return Seen::Wrong("unexpected text outside a string in a call".to_owned()),
        }
        Seen::More
    }
}

/// One call of an open list. Its bytes live in the parser's held buffer
/// (the first call's from the `[`); offsets index into it.
#[derive(Debug)]
pub(crate) struct PyBlock {
    /// The call's tool, once known: `Ok` a declared one, `Err` the name
    /// written when no tool has it.
    name: Result<String, String>,
    phase: Phase,
    structure: Structure,
    /// Where the call's name begins in the held bytes.
    call_start: usize,
    /// The call's verdict, once its `)` was read.
    decided: Option<Outcome>,
    /// Another call of the list follows this one.
    more: bool,
    /// Special tokens a server may leave after the list (rescue): they
    /// belong to its last call.
    end_tokens: &'static [&'static [u8]],
}

impl PyBlock {
    /// After the opener `[ Name(` (held, `call_start` bytes before `Name`);
    /// `end_tokens` after the list's `]` are its last call's.
    pub(crate) fn opened(
        name: String,
        call_start: usize,
        end_tokens: &'static [&'static [u8]],
    ) -> Self {
        PyBlock {
            name: Ok(name),
            phase: Phase::Args,
            structure: Structure {
                closers: vec![b')'],
                ..Structure::default()
            },
            call_start,
            decided: None,
            more: false,
            end_tokens,
        }
    }

    /// A later call of the list, from its name.
    fn later(end_tokens: &'static [&'static [u8]]) -> Self {
        PyBlock {
            name: Err(String::new()),
            phase: Phase::Name,
            structure: Structure::default(),
            call_start: 0,
            decided: None,
            more: false,
            end_tokens,
        }
    }

    /// After this call ended at a `,` with a name after it: the block that
    /// reads that call.
    pub(crate) fn next_call(&self) -> Option<PyBlock> {
        self.more.then(|| PyBlock::later(self.end_tokens))
    }

    fn tool(&self) -> Option<String> {
        self.name.as_ref().ok().cloned()
    }

    /// Consumes a prefix of `input`, appending it to `held`.
    pub(crate) fn step(&mut self, held: &mut String, input: &str, names: &ToolNames) -> Step {
        let bytes = input.as_bytes();
        match self.phase {
            Phase::Name => {
                for (i, &b) in bytes.iter().enumerate() {
                    if is_name_byte(b) && held.len() + i < MAX_NAME {
                        continue;
                    }
                    push(held, input, i);
                    if b != b'(' {
                        let reason = InvalidReason::Malformed(format!(
                            "expected `(` after `{held}` in the call list"
                        ));
                        return Step::Finished(i, self.invalid(reason, held.len()));
                    }
                    held.push('(');
                    self.name = if names.contains(held.trim_end_matches('(')) {
                        Ok(held.trim_end_matches('(').to_owned())
                    } else {
                        Err(held.trim_end_matches('(').to_owned())
                    };
                    self.structure.closers.push(b')');
                    self.phase = Phase::Args;
                    return Step::Continue(i + 1);
                }
                held.push_str(input);
                Step::Continue(input.len())
            }
            Phase::Args => {
                for (i, &b) in bytes.iter().enumerate() {
                    match self.structure.byte(b) {
                        Seen::More => {}
                        Seen::Closed => {
                            push(held, input, i + 1);
                            self.decided = Some(self.verdict(held));
                            self.phase = Phase::Trailer { end: held.len() };
                            return Step::Continue(i + 1);
                        }
                        Seen::Wrong(why) => {
                            push(held, input, i);
                            let outcome = self.invalid(InvalidReason::Malformed(why), held.len());
                            return Step::Finished(i, outcome);
                        }
                    }
                }
                held.push_str(input);
                Step::Continue(input.len())
            }
            Phase::Trailer { end } => {
                for (i, &b) in bytes.iter().enumerate() {
                    match b {
                        b if is_ws(b) => {}
                        b',' => {
                            push(held, input, i + 1);
                            self.phase = Phase::AfterComma;
                            return Step::Continue(i + 1);
                        }
                        b']' => {
                            push(held, input, i + 1);
                            return self.list_closed(held, i + 1);
                        }
                        // Other text: the list ends with this call.
                        _ => {
                            push(held, input, i);
                            return Step::Finished(i, self.take(end));
                        }
                    }
                }
                held.push_str(input);
                Step::Continue(input.len())
            }
            Phase::AfterComma => {
                for (i, &b) in bytes.iter().enumerate() {
                    if is_ws(b) {
                        continue;
                    }
                    if b == b']' {
                        push(held, input, i + 1);
                        return self.list_closed(held, i + 1);
                    }
                    push(held, input, i);
                    self.more = b.is_ascii_alphabetic() || b == b'_';
                    return Step::Finished(i, self.take(held.len()));
                }
                held.push_str(input);
                Step::Continue(input.len())
            }
            Phase::Closed { mut end, mut token } => {
                let base = held.len();
                for (i, &b) in bytes.iter().enumerate() {
                    let at = base + i;
                    if token.is_none() {
                        if is_ws(b) {
                            continue;
                        }
                        token = Some(at);
                    }
                    let start = token.unwrap_or(at);
                    let mut read = held.as_bytes().get(start..).unwrap_or_default().to_vec();
                    read.extend_from_slice(
                        bytes
                            .get(start.saturating_sub(base)..=i)
                            .unwrap_or_default(),
                    );
                    if self.end_tokens.contains(&read.as_slice()) {
                        end = at + 1;
                        token = None;
                    } else if !self.end_tokens.iter().any(|t| t.starts_with(&read)) {
                        // Other text: the list ends with what it had.
                        push(held, input, i);
                        return Step::Finished(i, self.take(end));
                    }
                }
                held.push_str(input);
                self.phase = Phase::Closed { end, token };
                Step::Continue(input.len())
            }
        }
    }

    /// The list's `]` was read (`used` bytes of this input): the call ends
    /// there, or after the end tokens that follow.
    fn list_closed(&mut self, held: &str, used: usize) -> Step {
        if self.end_tokens.is_empty() {
            return Step::Finished(used, self.take(held.len()));
        }
        self.phase = Phase::Closed {
            end: held.len(),
            token: None,
        };
        Step::Continue(used)
    }

    /// What the complete call in `held` is.
    fn verdict(&self, held: &str) -> Outcome {
        let text = held.get(self.call_start..).unwrap_or_default();
        match &self.name {
            Err(written) => Outcome::Invalid {
                name: None,
                reason: InvalidReason::Malformed(format!("`{written}` is not a declared tool")),
                raw_len: 0,
            },
            Ok(name) => match python_literal::parse_call(text) {
                Ok((_, arguments)) => Outcome::Call {
                    name: name.clone(),
                    arguments,
                    raw_len: 0,
                },
                Err(why) => Outcome::Invalid {
                    name: Some(name.clone()),
                    reason: InvalidReason::Malformed(why),
                    raw_len: 0,
                },
            },
        }
    }

    fn invalid(&self, reason: InvalidReason, raw_len: usize) -> Outcome {
        Outcome::Invalid {
            name: self.tool(),
            reason,
            raw_len,
        }
    }

    /// The decided call, its raw the first `raw_len` held bytes.
    fn take(&mut self, raw_len: usize) -> Outcome {
        match self.decided.take() {
            Some(Outcome::Call {
                name, arguments, ..
            }) => Outcome::Call {
                name,
                arguments,
                raw_len,
            },
            Some(Outcome::Invalid { name, reason, .. }) => Outcome::Invalid {
                name,
                reason,
                raw_len,
            },
            _ => Outcome::Text { raw_len },
        }
    }

    /// The block grew too large.
    pub(crate) fn too_large(&mut self, held: &str) -> Outcome {
        match self.phase {
            Phase::Closed { end, .. } => self.take(end),
            _ => self.invalid(InvalidReason::TooLarge, held.len()),
        }
    }

    /// The message ended inside the block.
    pub(crate) fn finish(&mut self, held: &str) -> Outcome {
        match self.phase {
            Phase::Name | Phase::Args => self.invalid(InvalidReason::Unclosed, held.len()),
            Phase::Trailer { end } => self.take(end),
            Phase::AfterComma => self.take(held.len()),
            Phase::Closed { end, .. } => self.take(end),
        }
    }
}

/// Appends `input[..n]` to `held`; `n` sits before an ASCII byte or at the
/// end, checked rather than assumed.
fn push(held: &mut String, input: &str, n: usize) {
    if let Some(part) = input.get(..n) {
        held.push_str(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ToolNames {
        ToolNames::new(["get_weather", "get_time"])
    }

    #[test]
    fn a_list_opens_only_at_a_declared_name_and_its_parenthesis() {
        let m = |s: &str| match_list_open(s.as_bytes(), &names());
        assert_eq!(
            m("[get_weather(city"),
            OpenMatch::Full {
                len: 13,
                opened: Opened::PythonList(1)
            }
        );
        assert!(matches!(
            m("[\n  get_time("),
            OpenMatch::Full { len: 13, .. }
        ));
        assert_eq!(m("["), OpenMatch::Partial);
        assert_eq!(m("[ get_w"), OpenMatch::Partial);
        assert_eq!(m("[get_weather"), OpenMatch::Partial);
        assert_eq!(m("[1]"), OpenMatch::No);
        assert_eq!(m("[get_weather]"), OpenMatch::No);
        assert_eq!(m("[get_weather ("), OpenMatch::No);
        assert_eq!(m("[link](http://x)"), OpenMatch::No);
        assert_eq!(
            m(&format!("[{}get_time(", " ".repeat(MAX_LEAD + 1))),
            OpenMatch::No
        );
    }
}

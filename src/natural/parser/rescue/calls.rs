//! Reading the calls after a rescue format's opener, sans-IO.
//!
//! After the opener (its bytes already held): whitespace, then one of
//!
//! * a call object, `{"name": …, "arguments": …}`, and more after a
//!   separator (or whitespace alone);
//! * a list of call objects, `[{…}, {…}]`, when the shape allows it;
//! * in Mistral's v11 form, a declared name, `[ARGS]` (after an optional
//!   `[CALL_ID]id`) and the arguments object;
//! * in Llama's `<function=…>` form, a declared name, `>` and the arguments
//!   object;
//!
//! then the shape's closer, if it has one, and any special tokens a server
//! left in the text. Each call is its own [`Outcome`]: a call's raw runs
//! from the opener (or the previous call's end) through its object, and the
//! separator, closing bracket, closer and end tokens after it; the block
//! goes on with [`CallsBlock::next_call`] when another object follows.
//!
//! What decides (the same rule for every format): an object that
//! [`classify`] calls a call is one (a declared name, arguments an object);
//! broken JSON naming a declared tool is invalid; anything else, and an
//! opener followed by no call at all, is text. A call whose closer never
//! comes (other text follows, or the message ends) is still the call; what
//! follows its last piece is read again as text.

use crate::natural::parser::event::InvalidReason;
use crate::natural::parser::json_call::{broken, classify};
use crate::natural::parser::json_scan::{JsonScanner, Scan};
use crate::natural::parser::names::ToolNames;
use crate::natural::parser::outcome::{Outcome, Step};
use crate::natural::parser::rescue::{Format, Shape, TERMINATORS};

/// Longest `[CALL_ID]` value read before `[ARGS]` must come.
const MAX_CALL_ID: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Whitespace after the opener; nothing committed.
    Lead,
    /// After a list's `[`: whitespace, then the first object.
    ListLead,
    /// A call object started at held offset `start`.
    Object { start: usize },
    /// Mistral v11 and Llama's form: the name, from held offset `start`.
    Name { start: usize },
    /// Mistral v11: a `[ARGS]` or `[CALL_ID]` marker from `start`.
    Marker { start: usize },
    /// Mistral v11: the call id, until the `[` of `[ARGS]`.
    CallId { start: usize },
    /// After a name: whitespace, then the arguments object.
    ArgsLead,
    /// The arguments object after a name, from `start`.
    Args { start: usize },
    /// After a decided call.
    Trailer(Trailer),
}

/// Where the bytes after a call stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trailer {
    /// Held bytes up to here belong to the call (its object, and what
    /// closed it so far).
    end: usize,
    /// A separator was read after `end`.
    separated: bool,
    /// The list (if any) was closed by `]`.
    list_closed: bool,
    /// The shape's closer was read.
    closed: bool,
    /// A multi-byte token (closer, end token, opener) starts here.
    token: Option<usize>,
}

/// An open rescue block. Its bytes live in the parser's held buffer,
/// opener included; offsets index into it.
#[derive(Debug)]
pub(crate) struct CallsBlock {
    format: Format,
    shape: Shape,
    phase: Phase,
    scanner: JsonScanner,
    /// Inside a list's brackets.
    in_list: bool,
    /// The declared name read (Mistral v11, Llama's form).
    name: Option<String>,
    /// The call read, awaiting what follows it.
    decided: Option<Outcome>,
    /// The block ended as a call where the next one's object began.
    repeats: bool,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl CallsBlock {
    /// A block of `format` whose opener is held.
    pub(crate) fn new(format: Format) -> Self {
        CallsBlock {
            format,
            shape: format.shape(),
            phase: Phase::Lead,
            scanner: JsonScanner::new(),
            in_list: false,
            name: None,
            decided: None,
            repeats: false,
        }
    }

    /// After a call that ended where another object began: the block that
    /// reads it (its bytes are the held ones after this call's raw).
    pub(crate) fn next_call(&self) -> Option<CallsBlock> {
        self.repeats.then(|| CallsBlock {
            phase: Phase::Object { start: 0 },
            in_list: self.in_list,
            ..CallsBlock::new(self.format)
        })
    }

    /// Consumes a prefix of `input`, appending it to `held`.
    pub(crate) fn step(&mut self, held: &mut String, input: &str, names: &ToolNames) -> Step {
        match self.phase {
            Phase::Object { start } | Phase::Args { start } => {
                return self.step_value(held, input, names, start);
            }
            Phase::Trailer(t) => return self.step_trailer(held, input, t),
            _ => {}
        }
        for (i, &b) in input.as_bytes().iter().enumerate() {
            let at = held.len() + i;
            // The next phase, and whether this byte is its first (read
            // again there) or was consumed here.
            let (next, again) = match self.phase {
                Phase::Lead | Phase::ListLead | Phase::ArgsLead if is_ws(b) => continue,
                Phase::Lead if b == b'[' && self.shape.list => {
                    self.in_list = true;
                    (Phase::ListLead, false)
                }
                Phase::Lead | Phase::ListLead if b == b'{' => (Phase::Object { start: at }, true),
                Phase::Lead
                    if self.shape.name_end.is_some_and(|end| b != end)
                        && b.is_ascii_graphic()
                        && b != b'[' =>
                {
                    (Phase::Name { start: at }, true)
                }
                Phase::Name { start } if Some(b) == self.shape.name_end => {
                    let mut name = held.get(start..).unwrap_or_default().to_owned();
                    name.push_str(input.get(..i).unwrap_or_default());
                    if !names.contains(&name) {
                        return self.text(held, input, i);
                    }
                    self.name = Some(name);
                    if b == b'[' {
                        // Mistral's markers, from this `[` on.
                        (Phase::Marker { start: at }, true)
                    } else {
                        (Phase::ArgsLead, false)
                    }
                }
                Phase::Name { start }
                    if b.is_ascii_graphic() && at - start < names.longest().max(1) =>
                {
                    continue;
                }
                Phase::Marker { start } => {
                    let mut marker = held.as_bytes().get(start..).unwrap_or_default().to_vec();
                    marker.extend_from_slice(input.as_bytes().get(..=i).unwrap_or_default());
                    if marker == b"[ARGS]" {
                        (Phase::ArgsLead, false)
                    } else if marker == b"[CALL_ID]" {
                        (Phase::CallId { start: at + 1 }, false)
                    } else if b"[ARGS]".starts_with(&marker) || b"[CALL_ID]".starts_with(&marker) {
                        continue;
                    } else {
                        return self.text(held, input, i);
                    }
                }
                Phase::CallId { start } if b == b'[' && at > start => {
                    (Phase::Marker { start: at }, true)
                }
                Phase::CallId { start }
                    if b.is_ascii_graphic() && b != b'[' && at - start < MAX_CALL_ID =>
                {
                    continue;
                }
                Phase::ArgsLead if b == b'{' => (Phase::Args { start: at }, true),
                // Not a call after all: the opener and what followed it are text.
                _ => return self.text(held, input, i),
            };
            self.phase = next;
            let used = if again { i } else { i + 1 };
            push(held, input, used);
            return Step::Continue(used);
        }
        held.push_str(input);
        Step::Continue(input.len())
    }

    /// Everything held, and `input[..n]`, is text; the byte at `n` is read again.
    fn text(&self, held: &mut String, input: &str, n: usize) -> Step {
        push(held, input, n);
        Step::Finished(
            n,
            Outcome::Text {
                raw_len: held.len(),
            },
        )
    }

    /// Inside the call object (or Mistral's arguments) from `start`.
    fn step_value(
        &mut self,
        held: &mut String,
        input: &str,
        names: &ToolNames,
        start: usize,
    ) -> Step {
        match self.scanner.scan(input.as_bytes()) {
            Scan::NeedMore => {
                held.push_str(input);
                Step::Continue(input.len())
            }
            Scan::Done { consumed } => {
                push(held, input, consumed);
                let value = held.get(start..).unwrap_or_default();
                let outcome = match self.name.take() {
                    Some(name) => named_call(name, value, held.len()),
                    None => classify(value, names).with_raw_len(held.len()),
                };
                if !matches!(outcome, Outcome::Call { .. }) {
                    return Step::Finished(consumed, outcome);
                }
                self.decided = Some(outcome);
                self.phase = Phase::Trailer(Trailer {
                    end: held.len(),
                    separated: false,
                    list_closed: false,
                    closed: false,
                    token: None,
                });
                Step::Continue(consumed)
            }
            Scan::Error { at, reason } => {
                push(held, input, at);
                let reason = InvalidReason::BadJson(reason.into());
                Step::Finished(at, self.broken(held, names, start, reason))
            }
        }
    }

    /// The value from `start` broke off for `reason`.
    fn broken(
        &mut self,
        held: &str,
        names: &ToolNames,
        start: usize,
        reason: InvalidReason,
    ) -> Outcome {
        if let Some(name) = self.name.take() {
            return Outcome::Invalid {
                name: Some(name),
                reason,
                raw_len: held.len(),
            };
        }
        let value = held.get(start..).unwrap_or_default();
        match broken(value, names, reason) {
            invalid @ Outcome::Invalid { .. } => invalid.with_raw_len(held.len()),
            _ => Outcome::Text {
                raw_len: held.len(),
            },
        }
    }

    /// After a call: separators, the list's `]`, the closer and end tokens
    /// belong to it; another object starts the next call; the opener again
    /// (after whitespace) ends it there; anything else ends it at its last
    /// piece.
    fn step_trailer(&mut self, held: &mut String, input: &str, mut t: Trailer) -> Step {
        let bytes = input.as_bytes();
        let base = held.len();
        for (i, &b) in bytes.iter().enumerate() {
            let at = base + i;
            let list_open = self.in_list && !t.list_closed;
            if t.token.is_none() {
                if is_ws(b) {
                    continue;
                }
                let next_object = if self.in_list {
                    list_open && t.separated
                } else {
                    !t.closed
                };
                if b == b'{' && next_object {
                    // The next call: this one's raw runs up to its object.
                    push(held, input, i);
                    self.repeats = true;
                    return Step::Finished(i, self.take(at));
                }
                if !t.separated && !t.closed && !t.list_closed {
                    let separator = if self.in_list {
                        b == b','
                    } else {
                        self.shape.separators.contains(&b)
                    };
                    if separator {
                        t.separated = true;
                        continue;
                    }
                }
                if b == b']' && list_open {
                    t.list_closed = true;
                    t.separated = false;
                    t.end = at + 1;
                    continue;
                }
                t.token = Some(at);
            }
            let start = t.token.unwrap_or(at);
            let mut token = held.as_bytes().get(start..).unwrap_or_default().to_vec();
            token.extend_from_slice(
                bytes
                    .get(start.saturating_sub(base)..=i)
                    .unwrap_or_default(),
            );
            let mut partial = false;
            let mut matches = |literal: &[u8]| {
                if token.len() >= literal.len() {
                    token == literal
                } else {
                    partial |= literal.starts_with(&token);
                    false
                }
            };
            let after_calls = !t.separated && !list_open;
            let closer = self.shape.closer;
            if after_calls && !t.closed && !closer.is_empty() && matches(closer) {
                t.closed = true;
                t.end = at + 1;
                t.token = None;
                continue;
            }
            if after_calls && TERMINATORS.iter().any(|term| matches(term)) {
                t.end = at + 1;
                t.token = None;
                continue;
            }
            let again = self.shape.again;
            if after_calls && (t.closed || closer.is_empty()) && !again.is_empty() && matches(again)
            {
                // The next block: the whitespace before it is this call's.
                push(held, input, i + 1);
                return Step::Finished(i + 1, self.take(start));
            }
            if partial {
                continue;
            }
            // Something else: the call ends with its last piece, and this
            // byte (maybe the first of a character) is read again as text.
            push(held, input, i);
            return Step::Finished(i, self.take(t.end));
        }
        held.push_str(input);
        self.phase = Phase::Trailer(t);
        Step::Continue(input.len())
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
            other => other.unwrap_or(Outcome::Text { raw_len }),
        }
    }

    /// The block grew too large.
    pub(crate) fn too_large(&mut self, held: &str, names: &ToolNames) -> Outcome {
        self.ended(held, names, InvalidReason::TooLarge)
    }

    /// The message ended inside the block.
    pub(crate) fn finish(&mut self, held: &str, names: &ToolNames) -> Outcome {
        self.ended(held, names, InvalidReason::Unclosed)
    }

    fn ended(&mut self, held: &str, names: &ToolNames, reason: InvalidReason) -> Outcome {
        self.repeats = false;
        match self.phase {
            Phase::Object { start } | Phase::Args { start } => {
                self.broken(held, names, start, reason)
            }
            // A call at the message's end takes the whitespace after it.
            Phase::Trailer(t) if t.token.is_none() && !t.separated => self.take(held.len()),
            Phase::Trailer(t) => self.take(t.end),
            Phase::ArgsLead => Outcome::Invalid {
                name: self.name.take(),
                reason,
                raw_len: held.len(),
            },
            _ => Outcome::Text {
                raw_len: held.len(),
            },
        }
    }
}

/// A call written as a name and its arguments (Mistral v11, Llama's form):
/// `name` was read and declared; `value` is its complete arguments JSON.
fn named_call(name: String, value: &str, raw_len: usize) -> Outcome {
    use serde_json::Value;
    match serde_json::from_str::<Value>(value) {
        Ok(Value::Object(arguments)) => Outcome::Call {
            name,
            arguments,
            raw_len,
        },
        Ok(_) => Outcome::Invalid {
            name: Some(name),
            reason: InvalidReason::NotAnObject,
            raw_len,
        },
        Err(e) => Outcome::Invalid {
            name: Some(name),
            reason: InvalidReason::BadJson(e.to_string()),
            raw_len,
        },
    }
}

/// Appends `input[..n]` to `held`; `n` is always a char boundary (it sits
/// before an ASCII byte or at the end), checked rather than assumed.
fn push(held: &mut String, input: &str, n: usize) {
    if let Some(part) = input.get(..n) {
        held.push_str(part);
    }
}

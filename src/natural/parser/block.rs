//! The body of a tag-style block (`<Tool>` or `<tool_call name="Tool">`):
//! optional fence, one JSON value, optional closing fence, closing tag.
//!
//! Two rules decide what a body that goes wrong becomes:
//!
//! * Until the block *commits* it can still turn out to be prose ("use the
//!   `<GetWeather>` tool"): the opener, whitespace and a partial fence line
//!   are held, and if the next byte is neither part of a fence line
//!   (```` ``` ```` or ```` ```json ````, any case, then a newline) nor the start
//!   of a JSON value (`{ [ " -` or a digit) the whole thing is emitted as
//!   text. A complete fence line or a JSON start commits the block.
//! * After committing, an error (bad JSON, text where only whitespace, a
//!   fence or the closing tag may appear) makes the block invalid. The
//!   parser then looks for the closing tag within [`RECOVERY_WINDOW`] bytes of
//!   the error: if found, the invalid block's raw runs through it; if not,
//!   the raw ends where the error was found and the bytes looked at are
//!   parsed again as ordinary text.
//! * Near misses whose intent is plain: when the JSON object itself was
//!   complete and valid, a block that never gets its closing tag (the
//!   message ends, or other text follows and no closing tag comes within the
//!   window) is the call, its raw ending where the trouble began; what
//!   follows is text.
//! * Several calls in one block, as models write a second call of the same
//!   tool: after a complete, valid value, another object (`{`) or, after a
//!   closing fence, another fence starts the next call of the same tool.
//!   The block ends as a call there and [`Block::next_call`] is the block
//!   that reads the next one, under the same closing tag.

use memchr::memmem;

use crate::natural::parser::event::InvalidReason;
use crate::natural::parser::json_scan::{JsonScanner, Scan};
use crate::natural::parser::outcome::{Outcome, Step};

/// How far past an error the closing tag is searched for.
pub(crate) const RECOVERY_WINDOW: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Whitespace after the opener; not committed.
    Lead,
    /// 1 or 2 backticks of an opening fence; not committed.
    FenceTicks(u8),
    /// After the opening backticks, `n` bytes of "json" matched; not committed
    /// (nor are the two phases below).
    FenceInfo(u8),
    /// Spaces after the fence info string.
    FenceSpace,
    /// A `\r` on the fence line; `\n` must follow.
    FenceCr,
    /// Whitespace between the fence line and the value; committed.
    AfterFence,
    /// Inside the JSON value.
    Value,
    /// After the value; `fenced` once the closing fence was seen.
    Trailer { fenced: bool },
    /// `n` backticks of the closing fence starting at held offset `start`.
    TrailerTicks { n: u8, start: usize },
    /// `n` bytes of the closing tag starting at held offset `start`.
    Close { n: usize, start: usize },
    /// After an error at held offset `error_at`; no closing tag starts
    /// before `searched`.
    Recover { error_at: usize, searched: usize },
}

/// State of one open tag-style block. The bytes live in the parser's held
/// buffer; offsets here index into it.
#[derive(Debug)]
pub(crate) struct Block {
    name: String,
    close: Vec<u8>,
    phase: Phase,
    scanner: JsonScanner,
    value_start: usize,
    arguments: Option<serde_json::Map<String, serde_json::Value>>,
    error: Option<InvalidReason>,
    /// The JSON object was complete and valid: a missing closing tag is a
    /// near miss, not an invalid block.
    value_ok: bool,
    /// An opening fence came before the value.
    opened_fence: bool,
    /// Where a closing fence after an unfenced value began: if text follows
    /// on its line, it opened something else, and a near miss ends before it.
    stray_fence: Option<usize>,
    /// The block ended as a call where another call of its tool began.
    repeats: bool,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Bytes that commit an unfenced body: JSON starts that are unlikely in prose.
fn commits(b: u8) -> bool {
    matches!(b, b'{' | b'[' | b'"' | b'-' | b'0'..=b'9')
}

impl Block {
    /// A block for `name` whose closing tag is `close`.
    pub(crate) fn new(name: String, close: Vec<u8>) -> Self {
        Block {
            name,
            close,
            phase: Phase::Lead,
            scanner: JsonScanner::new(),
            value_start: 0,
            arguments: None,
            error: None,
            value_ok: false,
            opened_fence: false,
            stray_fence: None,
            repeats: false,
        }
    }

    /// After the block ended as a call where another value (or fence)
    /// followed: the block that reads the next call of the same tool, its
    /// bytes the held ones after this call's raw.
    pub(crate) fn next_call(&self) -> Option<Block> {
        self.repeats
            .then(|| Block::new(self.name.clone(), self.close.clone()))
    }

    fn committed(&self) -> bool {
        !matches!(
            self.phase,
            Phase::Lead
                | Phase::FenceTicks(_)
                | Phase::FenceInfo(_)
                | Phase::FenceSpace
                | Phase::FenceCr
        )
    }

    /// Consumes a prefix of `input`, appending it to `held`.
    pub(crate) fn step(&mut self, held: &mut String, input: &str) -> Step {
        match self.phase {
            Phase::Value => return self.step_value(held, input),
            Phase::Recover { error_at, searched } => {
                return self.step_recover(held, input, error_at, searched);
            }
            _ => {}
        }
        let base = held.len();
        let bytes = input.as_bytes();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            let at = base + i;
            let next = match self.phase {
                Phase::Lead if is_ws(b) => Phase::Lead,
                Phase::Lead if b == b'`' => Phase::FenceTicks(1),
                Phase::Lead if commits(b) => Phase::Value,
                Phase::FenceTicks(n) if b == b'`' => {
                    if n >= 2 {
                        Phase::FenceInfo(0)
                    } else {
                        Phase::FenceTicks(n + 1)
                    }
                }
                Phase::FenceInfo(n)
                    if n < 4 && b.to_ascii_lowercase() == b"json"[usize::from(n)] =>
                {
                    Phase::FenceInfo(n + 1)
                }
                Phase::FenceInfo(0 | 4) | Phase::FenceSpace if matches!(b, b' ' | b'\t') => {
                    Phase::FenceSpace
                }
                Phase::FenceInfo(0 | 4) | Phase::FenceSpace if b == b'\r' => Phase::FenceCr,
                Phase::FenceInfo(0 | 4) | Phase::FenceSpace | Phase::FenceCr if b == b'\n' => {
                    self.opened_fence = true;
                    Phase::AfterFence
                }
                Phase::Lead
                | Phase::FenceTicks(_)
                | Phase::FenceInfo(_)
                | Phase::FenceSpace
                | Phase::FenceCr => {
                    // Not a call after all (e.g. a ```python block after a
                    // tag mentioned in prose): everything so far is text.
                    push(held, input, i);
                    let raw_len = held.len();
                    return Step::Finished(i, Outcome::Text { raw_len });
                }
                Phase::AfterFence if is_ws(b) => Phase::AfterFence,
                Phase::AfterFence if JsonScanner::is_value_start(b) => Phase::Value,
                Phase::AfterFence => {
                    self.fail(InvalidReason::Malformed("expected a JSON value".into()), at)
                }
                Phase::Trailer { fenced } if is_ws(b) => Phase::Trailer { fenced },
                // Another call of the same tool: another object, or another
                // fenced block after this one's closing fence.
                Phase::Trailer { fenced }
                    if self.value_ok && (b == b'{' || (fenced && b == b'`')) =>
                {
                    push(held, input, i);
                    self.repeats = true;
                    let raw_len = held.len();
                    return Step::Finished(i, self.complete(raw_len));
                }
                Phase::Trailer { fenced: false } if b == b'`' => {
                    Phase::TrailerTicks { n: 1, start: at }
                }
                Phase::Trailer { .. } if b == b'<' => Phase::Close { n: 1, start: at },
                Phase::Trailer { .. } => self.fail(
                    InvalidReason::Malformed("unexpected text after the JSON value".into()),
                    at,
                ),
                Phase::TrailerTicks { n, start } if b == b'`' => {
                    if n >= 2 {
                        if !self.opened_fence {
                            self.stray_fence = Some(start);
                        }
                        Phase::Trailer { fenced: true }
                    } else {
                        Phase::TrailerTicks { n: n + 1, start }
                    }
                }
                Phase::TrailerTicks { start, .. } => self.fail(
                    InvalidReason::Malformed("incomplete closing fence".into()),
                    start,
                ),
                Phase::Close { n, start } if self.close.get(n) == Some(&b) => {
                    if n + 1 == self.close.len() {
                        push(held, input, i + 1);
                        return Step::Finished(i + 1, self.complete(held.len()));
                    }
                    Phase::Close { n: n + 1, start }
                }
                Phase::Close { start, .. } => self.fail(
                    InvalidReason::Malformed("expected the closing tag".into()),
                    start,
                ),
                Phase::Value | Phase::Recover { .. } => self.phase,
            };
            if matches!(next, Phase::Value | Phase::Recover { .. }) {
                // The byte at `i` is handled by the value scanner or the
                // recovery search on the next call.
                push(held, input, i);
                self.value_start = held.len();
                self.phase = next;
                return Step::Continue(i);
            }
            self.phase = next;
            i += 1;
        }
        push(held, input, bytes.len());
        Step::Continue(bytes.len())
    }

    /// Records the first error and switches to searching for the closing tag.
    fn fail(&mut self, reason: InvalidReason, error_at: usize) -> Phase {
        self.error.get_or_insert(reason);
        Phase::Recover {
            error_at,
            searched: error_at,
        }
    }

    fn step_value(&mut self, held: &mut String, input: &str) -> Step {
        match self.scanner.scan(input.as_bytes()) {
            Scan::NeedMore => {
                held.push_str(input);
                Step::Continue(input.len())
            }
            Scan::Done { consumed } => {
                push(held, input, consumed);
                self.value_done(held);
                Step::Continue(consumed)
            }
            Scan::Error { at, reason } => {
                push(held, input, at);
                self.phase = self.fail(InvalidReason::BadJson(reason.into()), held.len());
                Step::Continue(at)
            }
        }
    }

    /// The value's extent is known: let serde judge it, then expect the trailer.
    fn value_done(&mut self, held: &str) {
        let text = held.get(self.value_start..).unwrap_or_default();
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => {
                self.value_ok = self.error.is_none();
                self.arguments = Some(map);
            }
            Ok(_) => {
                self.error.get_or_insert(InvalidReason::NotAnObject);
            }
            Err(e) => {
                self.error
                    .get_or_insert(InvalidReason::BadJson(e.to_string()));
            }
        }
        self.phase = Phase::Trailer { fenced: false };
    }

    fn step_recover(
        &mut self,
        held: &mut String,
        input: &str,
        error_at: usize,
        searched: usize,
    ) -> Step {
        let room = (error_at + RECOVERY_WINDOW).saturating_sub(held.len());
        let take = floor_char_boundary(input, room);
        if take == 0 {
            return Step::Finished(0, self.give_up(error_at));
        }
        let old = held.len();
        push(held, input, take);
        let window = held.as_bytes().get(searched..).unwrap_or_default();
        if let Some(pos) = memmem::find(window, &self.close) {
            let end = searched + pos + self.close.len();
            let outcome = Outcome::Invalid {
                name: Some(self.name.clone()),
                reason: self.take_error(),
                raw_len: end,
            };
            if end >= old {
                // Only keep what belongs to the block; the rest is re-read.
                held.truncate(end);
                return Step::Finished(end - old, outcome);
            }
            return Step::Finished(take, outcome);
        }
        let searched = held
            .len()
            .saturating_sub(self.close.len() - 1)
            .max(searched);
        self.phase = Phase::Recover { error_at, searched };
        Step::Continue(take)
    }

    fn take_error(&mut self) -> InvalidReason {
        self.error.take().unwrap_or(InvalidReason::Unclosed)
    }

    fn give_up(&mut self, error_at: usize) -> Outcome {
        // A fence followed by text on its line (` ```json `) opened a new block.
        let raw_len = match self.stray_fence {
            Some(start) if error_at == start + 3 => start,
            _ => error_at,
        };
        if let Some(call) = self.near_miss(raw_len) {
            return call;
        }
        Outcome::Invalid {
            name: Some(self.name.clone()),
            reason: self.take_error(),
            raw_len: error_at,
        }
    }

    /// The call, when only the closing tag went wrong after a valid object.
    fn near_miss(&mut self, raw_len: usize) -> Option<Outcome> {
        if !self.value_ok {
            return None;
        }
        self.error = None;
        Some(Outcome::Call {
            name: self.name.clone(),
            arguments: self.arguments.take()?,
            raw_len,
        })
    }

    /// The closing tag matched.
    fn complete(&mut self, raw_len: usize) -> Outcome {
        match (self.error.take(), self.arguments.take()) {
            (None, Some(arguments)) => Outcome::Call {
                name: self.name.clone(),
                arguments,
                raw_len,
            },
            (error, _) => Outcome::Invalid {
                name: Some(self.name.clone()),
                reason: error.unwrap_or(InvalidReason::BadJson("missing value".into())),
                raw_len,
            },
        }
    }

    /// The block reached `max_block_bytes` with `held_len` bytes held.
    pub(crate) fn too_large(&mut self, held_len: usize) -> Outcome {
        match self.phase {
            _ if !self.committed() => Outcome::Text { raw_len: held_len },
            Phase::Recover { error_at, .. } => self.give_up(error_at),
            _ => Outcome::Invalid {
                name: Some(self.name.clone()),
                reason: InvalidReason::TooLarge,
                raw_len: held_len,
            },
        }
    }

    /// The message ended with the block open.
    pub(crate) fn finish(&mut self, held_len: usize) -> Outcome {
        match self.phase {
            _ if !self.committed() => Outcome::Text { raw_len: held_len },
            Phase::Recover { error_at, .. } => self.give_up(error_at),
            Phase::Trailer { .. } | Phase::TrailerTicks { .. } | Phase::Close { .. }
                if self.value_ok =>
            {
                self.near_miss(held_len)
                    .unwrap_or(Outcome::Text { raw_len: held_len })
            }
            _ => Outcome::Invalid {
                name: Some(self.name.clone()),
                reason: self.take_error(),
                raw_len: held_len,
            },
        }
    }
}

/// Appends `input[..n]` to `held`; `n` is always a char boundary (it sits
/// before an ASCII byte or at the end), checked rather than assumed.
fn push(held: &mut String, input: &str, n: usize) {
    if let Some(part) = input.get(..n) {
        held.push_str(part);
    }
}

/// The largest char boundary of `s` that is `<= max`.
pub(crate) fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    let mut n = max;
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

//! The incremental, sans-IO parser that turns a model's streamed text into
//! text, tool calls and rejected blocks.
//!
//! Feed it the text deltas of one message in order; it appends [`Event`]s.
//! It never does IO and never panics. Text that cannot begin a call is
//! released in the same `feed` it arrived in; only a suffix that may still
//! become an opener (`<Get` while `GetWeather` is declared, `<thi`) and the
//! bytes of an open block are held back, and [`Parser::held_bytes`] says how
//! many.
//!
//! Nothing the model wrote is lost: concatenating every `Text`, `Call::raw`
//! and `Invalid::raw` in order reproduces the input exactly. In bracket syntax
//! the visible `[description]` is part of the `Text` and the call's `raw` is
//! the JSON object after it, so the same concatenation still holds. In
//! python syntax a list's first call's `raw` begins with its `[` and the
//! last's ends with its `]`.
//!
//! With [`ParserOptions::rescue`] the parser reads an answer written by a
//! model with no tool format given: every syntax's openers are live, and so
//! are the formats open models write calls in ([`rescue`]: `<tool_call>`,
//! fences, bare objects, `<|python_tag|>`, `[TOOL_CALLS]`, and Python call
//! lists, which run as the python syntax's block).
//!
//! The submodules each hold one concept: [`names`] (declared tools), [`opener`]
//! (opening tags and fences), [`text`] (prose scanning), [`json_scan`] (where a
//! JSON value ends), [`block`] (tag-style block bodies and their error rules),
//! [`json_call`] (a call written as one JSON object), [`bracket`] (the
//! bracket syntax's description), [`python`] (python syntax's call lists),
//! [`python_literal`] (Python calls and literals read into JSON), [`rescue`]
//! (the formats rescue reads) and
//! [`event`] (what is emitted).

mod block;
mod bracket;
mod event;
mod json_call;
mod json_scan;
mod names;
mod opener;
mod outcome;
pub mod python;
pub mod python_literal;
pub mod rescue;
mod text;

#[cfg(test)]
mod tests;

pub use event::{Event, InvalidBlock, InvalidReason, ParsedCall};

use block::{Block, floor_char_boundary};
use bracket::Desc;
use event::Sink;
use json_call::JsonBlock;
use names::ToolNames;
use opener::{OpenMatch, Opened, Openers, THINK_CLOSE, match_literal, max_opener_len};
use outcome::{Outcome, Step};
use python::PyBlock;
use rescue::calls::CallsBlock;
use text::{Matcher, Position, TextStop, scan_think};

use crate::natural::syntax::Syntax;

/// How the parser reads the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParserOptions {
    /// Which call syntax to recognise.
    pub syntax: Syntax,
    /// Treat `<think>...</think>` as text that is never parsed for calls.
    pub skip_think: bool,
    /// Largest block (opening tag to closing tag, or bracket JSON) held before
    /// it is rejected as `TooLarge`; bounds memory per stream.
    pub max_block_bytes: usize,
    /// Recognise calls in every syntax and as JSON objects, not `syntax`
    /// alone: for answers of models that were given no tool format.
    pub rescue: bool,
}

impl Default for ParserOptions {
    fn default() -> Self {
        ParserOptions {
            syntax: Syntax::default(),
            skip_think: true,
            max_block_bytes: 256 * 1024,
            rescue: false,
        }
    }
}

impl ParserOptions {
    fn openers(&self) -> Openers {
        if self.rescue {
            Openers::Rescue
        } else {
            Openers::Syntax(self.syntax)
        }
    }
}

/// What the parser is inside of.
#[derive(Debug)]
enum Mode {
    /// Prose; `held` is a possible opener.
    Text,
    /// A think block; `held` is a possible `</think>`.
    Think,
    /// A tag-style block; `held` is its source so far.
    Block(Box<Block>),
    /// A JSON-object call; `held` is its source so far.
    Json(Box<JsonBlock>),
    /// A call of a python call list; `held` is its source so far.
    Python(Box<PyBlock>),
    /// A rescue format's calls; `held` is their source so far.
    Rescue(Box<CallsBlock>),
}

/// Incremental natural-text tool-call parser for one message.
#[derive(Debug)]
pub struct Parser {
    names: ToolNames,
    options: ParserOptions,
    mode: Mode,
    held: String,
    at: Position,
    max_opener: usize,
    /// Reused buffer for matching a held opener against new input.
    scratch: Vec<u8>,
}

impl Parser {
    /// A parser recognising calls of `tool_names` (names that could never be
    /// written inside a tag, e.g. with whitespace or `<`, are ignored).
    pub fn new<I, S>(tool_names: I, options: ParserOptions) -> Parser
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names = ToolNames::new(tool_names);
        let max_opener = max_opener_len(options.openers(), &names);
        Parser {
            names,
            options,
            mode: Mode::Text,
            held: String::new(),
            at: Position::default(),
            max_opener,
            scratch: Vec::new(),
        }
    }

    /// Bytes currently held back: an undecided possible opener, or the source
    /// of an open block.
    pub fn held_bytes(&self) -> usize {
        self.held.len()
    }

    /// Whether a call block is open (its bytes are held until it closes).
    pub fn in_block(&self) -> bool {
        matches!(
            self.mode,
            Mode::Block(_) | Mode::Json(_) | Mode::Python(_) | Mode::Rescue(_)
        )
    }

    /// Feeds the next piece of the message and appends the resulting events.
    pub fn feed(&mut self, text: &str, out: &mut Vec<Event>) {
        let mut sink = Sink::new(out);
        self.run(text, &mut sink);
    }

    /// Ends the message: held text is released, an open block becomes
    /// `Invalid(Unclosed)` (or text, if it never committed to being a call).
    /// The parser is then ready for a new message.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        let mut sink = Sink::new(out);
        loop {
            let held_len = self.held.len();
            let outcome = match &mut self.mode {
                Mode::Text | Mode::Think => {
                    sink.text(&self.held);
                    break;
                }
                Mode::Block(block) => block.finish(held_len),
                Mode::Json(block) => block.finish(&self.held, &self.names),
                Mode::Python(block) => block.finish(&self.held),
                Mode::Rescue(block) => block.finish(&self.held, &self.names),
            };
            if let Some(tail) = self.apply(outcome, &mut sink) {
                self.run(&tail, &mut sink);
            }
        }
        self.held.clear();
        self.mode = Mode::Text;
        self.at = Position::default();
    }

    /// Runs `text` through the state machine. Bytes a block looked at but
    /// did not keep are re-run before the rest of the input (a stack keeps
    /// that order even if re-running them leaves bytes over again).
    fn run(&mut self, text: &str, sink: &mut Sink<'_>) {
        let mut pos = 0;
        let mut replays: Vec<(String, usize)> = Vec::new();
        loop {
            let input = match replays.last() {
                Some((s, p)) => s.get(*p..).unwrap_or_default(),
                None => text.get(pos..).unwrap_or_default(),
            };
            if input.is_empty() {
                if replays.pop().is_some() {
                    continue;
                }
                return;
            }
            let (used, tail) = self.step(input, sink);
            match replays.last_mut() {
                Some((_, p)) => *p += used,
                None => pos += used,
            }
            if let Some(tail) = tail {
                replays.push((tail, 0));
            }
        }
    }

    /// One step in the current mode: bytes consumed and bytes to re-run.
    fn step(&mut self, input: &str, sink: &mut Sink<'_>) -> (usize, Option<String>) {
        let held_len = self.held.len();
        let room = self.options.max_block_bytes.saturating_sub(held_len);
        let limited = input
            .get(..floor_char_boundary(input, room))
            .unwrap_or_default();
        let (used, outcome) = match &mut self.mode {
            Mode::Text | Mode::Think => return self.step_text(input, sink),
            Mode::Block(block) if limited.is_empty() => (0, block.too_large(held_len)),
            Mode::Json(block) if limited.is_empty() => {
                (0, block.too_large(&self.held, &self.names))
            }
            Mode::Python(block) if limited.is_empty() => (0, block.too_large(&self.held)),
            Mode::Block(block) => match block.step(&mut self.held, limited) {
                Step::Continue(n) => return (n, None),
                Step::Finished(n, outcome) => {
                    if let Some(next) = block.next_call() {
                        // Another call of the same tool follows in the block.
                        let tail = self.apply(outcome, sink);
                        self.mode = Mode::Block(Box::new(next));
                        return (n, tail);
                    }
                    (n, outcome)
                }
            },
            Mode::Json(block) => match block.step(&mut self.held, limited, &self.names) {
                Step::Continue(n) => return (n, None),
                Step::Finished(n, outcome) => (n, outcome),
            },
            Mode::Python(block) => match block.step(&mut self.held, limited, &self.names) {
                Step::Continue(n) => return (n, None),
                Step::Finished(n, outcome) => {
                    if let Some(next) = block.next_call() {
                        // The list's next call follows.
                        let tail = self.apply(outcome, sink);
                        self.mode = Mode::Python(Box::new(next));
                        return (n, tail);
                    }
                    (n, outcome)
                }
            },
            Mode::Rescue(block) if limited.is_empty() => {
                (0, block.too_large(&self.held, &self.names))
            }
            Mode::Rescue(block) => match block.step(&mut self.held, limited, &self.names) {
                Step::Continue(n) => return (n, None),
                Step::Finished(n, outcome) => {
                    if let Some(next) = block.next_call() {
                        // Another call object follows in the same block.
                        let tail = self.apply(outcome, sink);
                        self.mode = Mode::Rescue(Box::new(next));
                        return (n, tail);
                    }
                    (n, outcome)
                }
            },
        };
        (used, self.apply(outcome, sink))
    }

    /// Emits a decided block and returns to prose; returns the held bytes
    /// after the block's raw, which must be parsed again.
    fn apply(&mut self, outcome: Outcome, sink: &mut Sink<'_>) -> Option<String> {
        let mut held = std::mem::take(&mut self.held);
        let json = matches!(self.mode, Mode::Json(_));
        self.mode = Mode::Text;
        let raw_len = match &outcome {
            Outcome::Call { raw_len, .. }
            | Outcome::Invalid { raw_len, .. }
            | Outcome::Text { raw_len } => *raw_len,
        };
        // Bytes read again after a block that ended with a line break
        // start a line (a rescue fence or object may open there).
        let line_start = held
            .get(..raw_len)
            .is_some_and(|raw| raw.trim_end_matches([' ', '\t']).ends_with('\n'));
        self.at = Position {
            line_start,
            // A JSON-object call may be followed by the next one's object.
            desc: if json && matches!(outcome, Outcome::Call { .. }) {
                Desc::AfterCall
            } else {
                Desc::Outside
            },
        };
        let tail = if raw_len < held.len() && held.is_char_boundary(raw_len) {
            Some(held.split_off(raw_len))
        } else {
            None
        };
        match outcome {
            Outcome::Call {
                name, arguments, ..
            } => sink.call(ParsedCall {
                name,
                arguments,
                raw: held,
            }),
            Outcome::Invalid { name, reason, .. } => sink.invalid(InvalidBlock {
                name,
                raw: held,
                reason,
            }),
            Outcome::Text { .. } => sink.text(&held),
        }
        tail
    }

    /// Prose or think text: release everything that cannot open something;
    /// returns the bytes consumed and held bytes to read again.
    fn step_text(&mut self, input: &str, sink: &mut Sink<'_>) -> (usize, Option<String>) {
        if !self.held.is_empty() {
            return self.continue_held(input, sink);
        }
        let think = matches!(self.mode, Mode::Think);
        let matcher = Matcher {
            openers: self.options.openers(),
            names: &self.names,
            skip_think: self.options.skip_think,
        };
        let stop = if think {
            scan_think(input.as_bytes())
        } else {
            matcher.scan_prose(input.as_bytes(), &mut self.at)
        };
        let (before, rest) = match stop {
            TextStop::End => (input, ""),
            TextStop::Open { at, .. } | TextStop::Hold { at } | TextStop::Json { at } => {
                input.split_at_checked(at).unwrap_or((input, ""))
            }
        };
        sink.text(before);
        let used = match stop {
            TextStop::End => input.len(),
            TextStop::Hold { .. } => {
                self.held.push_str(rest);
                input.len()
            }
            TextStop::Json { at } => {
                self.mode = Mode::Json(Box::new(JsonBlock::bare()));
                at
            }
            TextStop::Open { at, len, opened } => {
                let opener = rest.get(..len).unwrap_or(rest);
                self.opened(opener, opened, sink);
                at + opener.len()
            }
        };
        (used, None)
    }

    /// A possible opener is held: see whether `input` completes or refutes it.
    fn continue_held(&mut self, input: &str, sink: &mut Sink<'_>) -> (usize, Option<String>) {
        let held_len = self.held.len();
        let take = input
            .len()
            .min(self.max_opener.saturating_sub(held_len) + 1);
        self.scratch.clear();
        self.scratch.extend_from_slice(self.held.as_bytes());
        self.scratch
            .extend_from_slice(input.as_bytes().get(..take).unwrap_or_default());
        let found = if matches!(self.mode, Mode::Think) {
            match_literal(&self.scratch, THINK_CLOSE)
        } else {
            self.matcher().opener(&self.scratch)
        };
        match found {
            // (`<|python_tag|>` is whole once the byte after it is not a list.)
            OpenMatch::Full { len, opened } if len >= held_len => {
                let used = len - held_len;
                let mut opener = std::mem::take(&mut self.held);
                opener.push_str(input.get(..used).unwrap_or_default());
                self.opened(&opener, opened, sink);
                (used, None)
            }
            OpenMatch::Partial if take == input.len() => {
                self.held.push_str(input);
                (input.len(), None)
            }
            _ => {
                // Refuted: the held bytes are text. They hold no other `<`
                // (names cannot contain one), backtick or `[`, and are no
                // longer a line's start. A held `[` (a prefix of
                // `[TOOL_CALLS]` or of a Python list's `[ name(`) may begin a
                // bracket description, and a line break in a list's lead
                // starts a line: the bytes after it are read again.
                let again = if self.held.starts_with('[') {
                    self.at.desc = Desc::Inside(0);
                    Some(self.held.split_off(1)).filter(|rest| !rest.is_empty())
                } else {
                    None
                };
                sink.text(&self.held);
                self.held.clear();
                self.at.line_start = false;
                (0, again)
            }
        }
    }

    /// A complete opener (or `</think>` inside a think block) was read.
    fn opened(&mut self, opener: &str, opened: Opened, sink: &mut Sink<'_>) {
        match (&self.mode, opened) {
            (Mode::Think, _) => {
                sink.text(opener);
                self.mode = Mode::Text;
            }
            (_, Opened::Think) => {
                sink.text(opener);
                self.mode = Mode::Think;
                self.at.desc = Desc::Outside;
            }
            (_, Opened::Tag(index)) => {
                let name = self.names.get(index).unwrap_or_default().to_owned();
                let close = format!("</{name}>").into_bytes();
                self.open_block(opener, Mode::Block(Box::new(Block::new(name, close))));
            }
            (_, Opened::NamedToolCall(index)) => {
                let name = self.names.get(index).unwrap_or_default().to_owned();
                let close = b"</tool_call>".to_vec();
                self.open_block(opener, Mode::Block(Box::new(Block::new(name, close))));
            }
            (_, Opened::PythonList(index)) => {
                let name = self.names.get(index).unwrap_or_default().to_owned();
                // The opener ends with the name and its `(`.
                let call_start = opener.len().saturating_sub(name.len() + 1);
                // Rescue: end tokens a server left after the list are its.
                let end_tokens = if self.options.rescue {
                    rescue::TERMINATORS
                } else {
                    &[]
                };
                let block = PyBlock::opened(name, call_start, end_tokens);
                self.open_block(opener, Mode::Python(Box::new(block)));
            }
            (_, Opened::Rescue(format)) => {
                let block = CallsBlock::new(format);
                self.open_block(opener, Mode::Rescue(Box::new(block)));
            }
        }
    }

    /// Holds `opener` as the start of a block in `mode`.
    fn open_block(&mut self, opener: &str, mode: Mode) {
        self.held.clear();
        // Typical calls fit; saves the reallocations of growing from empty.
        self.held.reserve(256);
        self.held.push_str(opener);
        self.mode = mode;
    }

    fn matcher(&self) -> Matcher<'_> {
        Matcher {
            openers: self.options.openers(),
            names: &self.names,
            skip_think: self.options.skip_think,
        }
    }
}

//! Scanning prose (and think blocks) for the next place a block may open.
//!
//! This is the hot path: tool-free text is skipped with `memchr` to the next
//! `<` (or `[` in the bracket and python syntaxes), and only the bytes after it are checked.
//! Scanning stops at an opener, at a suffix that may still become one (which
//! the parser holds back), or at the end of the input (all of it is text).
//!
//! Rescue (every syntax at once, and the rescue formats) looks at each byte:
//! besides `<` and bracket descriptions, a `[` may open `[TOOL_CALLS]` or a
//! Python list of calls (`[` and a declared name's `(`), and a line that
//! starts (after spaces) with `{` or a ```` ``` ```` fence may be a call.

use memchr::{memchr, memchr2};

use crate::natural::parser::bracket::{Desc, MAX_DESC};
use crate::natural::parser::names::ToolNames;
use crate::natural::parser::opener::{
    OpenMatch, Opened, Openers, THINK_CLOSE, match_literal, match_opener,
};
use crate::natural::parser::rescue::Format;
use crate::natural::syntax::Syntax;

/// Where scanning stopped. Bytes before `at` are text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextStop {
    /// All of the input is text.
    End,
    /// An opener (or, in a think block, the closer) of `len` bytes is at `at`.
    Open {
        at: usize,
        len: usize,
        opened: Opened,
    },
    /// The bytes from `at` to the end may still become an opener.
    Hold { at: usize },
    /// The `{` at `at` may start a JSON-object call: it directly follows a
    /// `[description]`, or (rescue) starts a line.
    Json { at: usize },
}

/// What the scanner needs to know about the parser's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matcher<'a> {
    pub(crate) openers: Openers,
    pub(crate) names: &'a ToolNames,
    pub(crate) skip_think: bool,
}

/// Where the released text left off, for the scanners that care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// A possible bracket description.
    pub(crate) desc: Desc,
    /// Only spaces since the last line break or the message's start.
    pub(crate) line_start: bool,
}

impl Default for Position {
    fn default() -> Self {
        Position {
            desc: Desc::Outside,
            line_start: true,
        }
    }
}

impl Matcher<'_> {
    /// Matches an opener at the start of `bytes` (which begin with `<`, or
    /// in rescue with a backtick at a line start).
    pub(crate) fn opener(&self, bytes: &[u8]) -> OpenMatch {
        match_opener(bytes, self.openers, self.names, self.skip_think)
    }

    /// Scans prose for the next opener.
    pub(crate) fn scan_prose(&self, input: &[u8], at: &mut Position) -> TextStop {
        match self.openers {
            Openers::Rescue => return self.scan_rescue_prose(input, at),
            Openers::Syntax(Syntax::Bracket) => {
                return self.scan_bracket_prose(input, &mut at.desc);
            }
            Openers::Syntax(Syntax::Python) => return self.scan_python_prose(input),
            Openers::Syntax(_) => {}
        }
        let mut i = 0;
        while let Some(off) = input.get(i..).and_then(|rest| memchr(b'<', rest)) {
            let at = i + off;
            if let Some(stop) = self.check_lt(input, at) {
                return stop;
            }
            i = at + 1;
        }
        TextStop::End
    }

    /// Checks the `<` (or python's `[`) at `at`; `None` if it is plain text.
    fn check_lt(&self, input: &[u8], at: usize) -> Option<TextStop> {
        match self.opener(input.get(at..)?) {
            OpenMatch::No => None,
            OpenMatch::Partial => Some(TextStop::Hold { at }),
            OpenMatch::Full { len, opened } => Some(TextStop::Open { at, len, opened }),
        }
    }

    /// Python syntax: every `[` (a call list's start) and, when think
    /// blocks are skipped, `<`.
    fn scan_python_prose(&self, input: &[u8]) -> TextStop {
        let mut i = 0;
        loop {
            let rest = input.get(i..).unwrap_or_default();
            let found = if self.skip_think {
                memchr2(b'[', b'<', rest)
            } else {
                memchr(b'[', rest)
            };
            let Some(off) = found else {
                return TextStop::End;
            };
            if let Some(stop) = self.check_lt(input, i + off) {
                return stop;
            }
            i += off + 1;
        }
    }

    /// Bracket syntax: track `[description]` while looking for `]{` and,
    /// when think blocks are skipped, `<think>`.
    fn scan_bracket_prose(&self, input: &[u8], desc: &mut Desc) -> TextStop {
        let mut i = 0;
        while i < input.len() {
            match *desc {
                Desc::Closed => {
                    *desc = Desc::Outside;
                    if input.get(i) == Some(&b'{') {
                        return TextStop::Json { at: i };
                    }
                }
                Desc::AfterCall => match input.get(i) {
                    Some(b' ' | b'\t' | b'\r' | b'\n' | b',') => i += 1,
                    Some(b'{') => {
                        *desc = Desc::Outside;
                        return TextStop::Json { at: i };
                    }
                    _ => *desc = Desc::Outside,
                },
                Desc::Inside(mut n) => {
                    while let Some(&b) = input.get(i) {
                        match b {
                            b']' => {
                                *desc = Desc::Closed;
                                i += 1;
                                break;
                            }
                            b'[' => n = 0,
                            b'\n' | b'\r' => {
                                *desc = Desc::Outside;
                                i += 1;
                                break;
                            }
                            // Left for the `Outside` branch (it may be `<think>`).
                            b'<' => {
                                *desc = Desc::Outside;
                                break;
                            }
                            _ if n >= MAX_DESC => {
                                *desc = Desc::Outside;
                                break;
                            }
                            _ => n += 1,
                        }
                        i += 1;
                        *desc = Desc::Inside(n);
                    }
                }
                Desc::Outside => {
                    let rest = input.get(i..).unwrap_or_default();
                    let found = if self.skip_think {
                        memchr2(b'[', b'<', rest)
                    } else {
                        memchr(b'[', rest)
                    };
                    let Some(off) = found else {
                        return TextStop::End;
                    };
                    let at = i + off;
                    if input.get(at) == Some(&b'[') {
                        *desc = Desc::Inside(0);
                    } else if let Some(stop) = self.check_lt(input, at) {
                        return stop;
                    }
                    i = at + 1;
                }
            }
        }
        TextStop::End
    }
}

impl Matcher<'_> {
    /// Rescue: every opener, bracket descriptions, and at a line start a `{`
    /// or a fence. One byte at a time: rescue reads an answer only when the
    /// client declared tools, and such answers are short.
    fn scan_rescue_prose(&self, input: &[u8], at: &mut Position) -> TextStop {
        let mut i = 0;
        while let Some(&b) = input.get(i) {
            if at.desc == Desc::AfterCall {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' | b',' => {
                        at.line_start = b == b'\n' || (at.line_start && b != b',');
                        i += 1;
                        continue;
                    }
                    b'{' => {
                        at.desc = Desc::Outside;
                        return TextStop::Json { at: i };
                    }
                    _ => at.desc = Desc::Outside,
                }
            }
            if at.desc == Desc::Closed {
                at.desc = Desc::Outside;
                if b == b'{' {
                    at.line_start = false;
                    return TextStop::Json { at: i };
                }
            }
            if at.line_start {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => {
                        i += 1;
                        continue;
                    }
                    b'{' => {
                        at.line_start = false;
                        return TextStop::Open {
                            at: i,
                            len: 0,
                            opened: Opened::Rescue(Format::Bare),
                        };
                    }
                    b'`' => match self.opener(input.get(i..).unwrap_or_default()) {
                        OpenMatch::Full { len, opened } => {
                            at.line_start = false;
                            return TextStop::Open { at: i, len, opened };
                        }
                        OpenMatch::Partial => return TextStop::Hold { at: i },
                        OpenMatch::No => {}
                    },
                    _ => {}
                }
                at.line_start = false;
            }
            match (b, at.desc) {
                (b'\n', _) => {
                    at.line_start = true;
                    at.desc = Desc::Outside;
                }
                (b'<', _) => {
                    at.desc = Desc::Outside;
                    if let Some(stop) = self.check_lt(input, i) {
                        return stop;
                    }
                }
                (b'[', _) => match self.opener(input.get(i..).unwrap_or_default()) {
                    OpenMatch::Full { len, opened } => {
                        at.desc = Desc::Outside;
                        return TextStop::Open { at: i, len, opened };
                    }
                    OpenMatch::Partial => return TextStop::Hold { at: i },
                    OpenMatch::No => at.desc = Desc::Inside(0),
                },
                (b']', Desc::Inside(_)) => at.desc = Desc::Closed,
                (_, Desc::Inside(n)) if n >= MAX_DESC => at.desc = Desc::Outside,
                (_, Desc::Inside(n)) => at.desc = Desc::Inside(n + 1),
                _ => {}
            }
            i += 1;
        }
        TextStop::End
    }
}

/// Scans the inside of a think block for `</think>`.
pub(crate) fn scan_think(input: &[u8]) -> TextStop {
    let mut i = 0;
    while let Some(off) = input.get(i..).and_then(|rest| memchr(b'<', rest)) {
        let at = i + off;
        match match_literal(input.get(at..).unwrap_or_default(), THINK_CLOSE) {
            OpenMatch::No => i = at + 1,
            OpenMatch::Partial => return TextStop::Hold { at },
            OpenMatch::Full { len, opened } => return TextStop::Open { at, len, opened },
        }
    }
    TextStop::End
}

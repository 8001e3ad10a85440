//! An incremental scanner that finds where one JSON value ends.
//!
//! It does not build anything: it tracks string and escape state and the
//! stack of open `{`/`[`, one byte at a time, and can stop and resume at any
//! byte boundary. This is what lets a `</Tool>` or a ```` ``` ```` inside a JSON
//! string stay part of the string. Full validation is left to `serde_json`
//! once the extent is known; the scanner only reports bytes that can never
//! appear at their position (so a broken block is noticed early instead of
//! swallowing the rest of the message).

use memchr::memchr3;

/// Progress of the scan over one input slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scan {
    /// The whole slice was consumed and the value is not finished.
    NeedMore,
    /// The value ended; `consumed` bytes of this slice belong to it.
    Done { consumed: usize },
    /// The byte at `at` can't continue the value (it is not consumed).
    Error { at: usize, reason: &'static str },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the first byte of the value.
    Start,
    /// Between tokens inside a container.
    Container,
    /// Inside a string; `top` says whether the string is the whole value.
    Str {
        top: bool,
    },
    /// Just after a backslash inside a string.
    Escape {
        top: bool,
    },
    /// Inside a number or `true`/`false`/`null`; `top` as above.
    Literal {
        top: bool,
    },
    Done,
}

/// Resumable scanner for a single JSON value.
#[derive(Debug, Clone)]
pub(crate) struct JsonScanner {
    state: State,
    /// Open containers, innermost last: the closing byte each one expects.
    stack: Vec<u8>,
}

fn is_literal_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl JsonScanner {
    pub(crate) fn new() -> Self {
        JsonScanner {
            state: State::Start,
            stack: Vec::new(),
        }
    }

    /// Whether `b` can start a JSON value.
    pub(crate) fn is_value_start(b: u8) -> bool {
        matches!(
            b,
            b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
        )
    }

    /// Scans `input`, continuing where the previous call stopped.
    pub(crate) fn scan(&mut self, input: &[u8]) -> Scan {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Done => return Scan::Done { consumed: i },
                State::Start => {
                    let b = input[i];
                    self.state = match b {
                        b'{' => {
                            self.stack.push(b'}');
                            State::Container
                        }
                        b'[' => {
                            self.stack.push(b']');
                            State::Container
                        }
                        b'"' => State::Str { top: true },
                        _ if is_literal_byte(b) => State::Literal { top: true },
                        _ => {
                            return Scan::Error {
                                at: i,
                                reason: "expected a JSON value",
                            };
                        }
                    };
                    i += 1;
                }
                State::Str { top } => {
                    // Jump to the next byte that matters inside a string.
                    let Some(off) = memchr3(b'"', b'\\', b'\n', &input[i..]) else {
                        return Scan::NeedMore;
                    };
                    i += off;
                    match input[i] {
                        b'"' => self.state = self.after_value(top),
                        b'\\' => self.state = State::Escape { top },
                        _ => {
                            return Scan::Error {
                                at: i,
                                reason: "unterminated string",
                            };
                        }
                    }
                    i += 1;
                }
                State::Escape { top } => {
                    if input[i] == b'\n' {
                        return Scan::Error {
                            at: i,
                            reason: "unterminated string",
                        };
                    }
                    self.state = State::Str { top };
                    i += 1;
                }
                State::Literal { top } => {
                    let b = input[i];
                    if is_literal_byte(b) {
                        i += 1;
                    } else if top {
                        // A top-level literal ends at the first other byte,
                        // which belongs to whatever follows the value.
                        self.state = State::Done;
                        return Scan::Done { consumed: i };
                    } else {
                        self.state = State::Container;
                    }
                }
                State::Container => {
                    let b = input[i];
                    match b {
                        b'{' => self.stack.push(b'}'),
                        b'[' => self.stack.push(b']'),
                        b'}' | b']' => {
                            if self.stack.pop() != Some(b) {
                                return Scan::Error {
                                    at: i,
                                    reason: "mismatched bracket",
                                };
                            }
                            if self.stack.is_empty() {
                                self.state = State::Done;
                                return Scan::Done { consumed: i + 1 };
                            }
                        }
                        b'"' => self.state = State::Str { top: false },
                        b':' | b',' => {}
                        _ if is_ws(b) => {}
                        _ if is_literal_byte(b) => self.state = State::Literal { top: false },
                        _ => {
                            return Scan::Error {
                                at: i,
                                reason: "unexpected character",
                            };
                        }
                    }
                    i += 1;
                }
            }
        }
        if self.state == State::Done {
            Scan::Done { consumed: i }
        } else {
            Scan::NeedMore
        }
    }

    fn after_value(&self, top: bool) -> State {
        if top { State::Done } else { State::Container }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(s: &str) -> Scan {
        JsonScanner::new().scan(s.as_bytes())
    }

    fn bytewise(s: &str) -> (usize, Scan) {
        let mut sc = JsonScanner::new();
        for (i, b) in s.bytes().enumerate() {
            match sc.scan(&[b]) {
                Scan::NeedMore => {}
                Scan::Done { consumed } => return (i + consumed, Scan::Done { consumed }),
                e => return (i, e),
            }
        }
        (s.len(), Scan::NeedMore)
    }

    #[test]
    fn finds_the_end_of_values() {
        assert_eq!(
            whole(r#"{"a": "}</X>```"} tail"#),
            Scan::Done { consumed: 17 }
        );
        assert_eq!(whole(r#"[1, {"b": [true]}]x"#), Scan::Done { consumed: 18 });
        assert_eq!(whole(r#""s\"q" x"#), Scan::Done { consumed: 6 });
        assert_eq!(whole("-12.5e3<"), Scan::Done { consumed: 7 });
        assert_eq!(whole("{\"a\": 1"), Scan::NeedMore);
        assert_eq!(bytewise(r#"{"a": "}\"{"} tail"#).0, 13);
    }

    #[test]
    fn reports_impossible_bytes() {
        assert!(matches!(whole("{\"a\": 1]"), Scan::Error { at: 7, .. }));
        assert!(matches!(
            whole("{\"a\": \"x\n\"}"),
            Scan::Error { at: 8, .. }
        ));
        assert!(matches!(whole("{\"a\": 1\n```"), Scan::Error { at: 8, .. }));
        assert!(matches!(whole("<"), Scan::Error { at: 0, .. }));
        assert!(matches!(bytewise("{\"a\": 1 <").1, Scan::Error { .. }));
    }
}

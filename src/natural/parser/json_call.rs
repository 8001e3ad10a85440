//! A call written as one JSON object, `{"name": "Tool", "arguments": {...}}`:
//! bracket syntax's object after a `[description]`, and, in rescue, the
//! shapes models without a parsed tool format write on their own: a bare
//! object at a line start, the same in a ```` ```json ```` fence, or inside a
//! `<tool_call>` tag as Hermes-style chat templates ask.
//!
//! The object decides: a `"name"` that is a declared tool and `"arguments"`
//! (or `"parameters"`) that is an object, missing or `null` (no arguments),
//! or a string holding a JSON object, is a call; a declared name with any
//! other arguments is `Invalid(NotAnObject)`; JSON that breaks is `Invalid`
//! if a top-level `"name"` of a declared tool could be read before the
//! break, and text otherwise; anything else is text.
//!
//! After the object, a block with a closer (the fence, `</tool_call>`)
//! expects whitespace and then the closer. A call whose closer never comes,
//! because other text follows or the message ends, is still the call (its
//! intent is plain): its raw ends with the object, and the bytes looked at
//! after it are read again as text.

use crate::natural::parser::event::InvalidReason;
use crate::natural::parser::json_scan::{JsonScanner, Scan};
use crate::natural::parser::names::ToolNames;
use crate::natural::parser::outcome::{Outcome, Step};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Whitespace before the object (only after an opener).
    Lead,
    /// Inside the object, which started at held offset `start`.
    Value { start: usize },
    /// After the object (which ended at held offset `end`), `matched` bytes
    /// of the closer seen.
    Trailer { end: usize, matched: usize },
}

/// An open JSON-object call. Its bytes live in the parser's held buffer,
/// opener included; offsets index into it.
#[derive(Debug)]
pub(crate) struct JsonBlock {
    scanner: JsonScanner,
    /// What must follow the object; empty when nothing does.
    closer: &'static [u8],
    phase: Phase,
    /// The object's verdict, once it is complete and a closer is awaited.
    decided: Option<Outcome>,
}

impl JsonBlock {
    /// The object starts at the next byte (bracket syntax, a bare object).
    pub(crate) fn bare() -> Self {
        JsonBlock {
            scanner: JsonScanner::new(),
            closer: b"",
            phase: Phase::Value { start: 0 },
            decided: None,
        }
    }

    /// An opener is held; whitespace, the object, then `closer` follow.
    pub(crate) fn enclosed(closer: &'static [u8]) -> Self {
        JsonBlock {
            scanner: JsonScanner::new(),
            closer,
            phase: Phase::Lead,
            decided: None,
        }
    }

    /// Consumes a prefix of `input`, appending it to `held`.
    pub(crate) fn step(&mut self, held: &mut String, input: &str, names: &ToolNames) -> Step {
        match self.phase {
            Phase::Lead => {
                let bytes = input.as_bytes();
                let n = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
                push(held, input, n);
                match bytes.get(n) {
                    None => Step::Continue(n),
                    Some(b'{') => {
                        self.phase = Phase::Value { start: held.len() };
                        Step::Continue(n)
                    }
                    // Not an object: the opener was prose after all.
                    Some(_) => Step::Finished(
                        n,
                        Outcome::Text {
                            raw_len: held.len(),
                        },
                    ),
                }
            }
            Phase::Value { start } => match self.scanner.scan(input.as_bytes()) {
                Scan::NeedMore => {
                    held.push_str(input);
                    Step::Continue(input.len())
                }
                Scan::Done { consumed } => {
                    push(held, input, consumed);
                    let value = held.get(start..).unwrap_or_default();
                    let outcome = classify(value, names).shifted(start, held.len());
                    if self.closer.is_empty() || !matches!(outcome, Outcome::Call { .. }) {
                        return Step::Finished(consumed, outcome);
                    }
                    self.decided = Some(outcome);
                    self.phase = Phase::Trailer {
                        end: held.len(),
                        matched: 0,
                    };
                    Step::Continue(consumed)
                }
                Scan::Error { at, reason } => {
                    push(held, input, at);
                    let value = held.get(start..).unwrap_or_default();
                    let outcome = broken(value, names, InvalidReason::BadJson(reason.into()));
                    Step::Finished(at, outcome.shifted(start, held.len()))
                }
            },
            Phase::Trailer { end, mut matched } => {
                for (i, &b) in input.as_bytes().iter().enumerate() {
                    if matched == 0 && b.is_ascii_whitespace() {
                        continue;
                    }
                    if self.closer.get(matched) == Some(&b) {
                        matched += 1;
                        if matched == self.closer.len() {
                            push(held, input, i + 1);
                            return Step::Finished(i + 1, self.take(held.len()));
                        }
                        continue;
                    }
                    // Something else follows: the call ends with its object.
                    push(held, input, i);
                    return Step::Finished(i, self.take(end));
                }
                held.push_str(input);
                self.phase = Phase::Trailer { end, matched };
                Step::Continue(input.len())
            }
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
            // Only calls await their closer.
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
        match self.phase {
            Phase::Lead => Outcome::Text {
                raw_len: held.len(),
            },
            Phase::Value { start } => {
                let value = held.get(start..).unwrap_or_default();
                broken(value, names, reason).shifted(start, held.len())
            }
            Phase::Trailer { end, .. } => self.take(end),
        }
    }
}

impl Outcome {
    /// An outcome about a value that starts `start` bytes into the held
    /// buffer: text and invalid blocks cover the opener too; a call's raw
    /// is the held bytes up to `held_len`.
    fn shifted(self, start: usize, held_len: usize) -> Outcome {
        match self {
            Outcome::Call {
                name, arguments, ..
            } => Outcome::Call {
                name,
                arguments,
                raw_len: held_len,
            },
            Outcome::Invalid {
                name,
                reason,
                raw_len,
            } => Outcome::Invalid {
                name,
                reason,
                raw_len: start + raw_len,
            },
            Outcome::Text { raw_len } => Outcome::Text {
                raw_len: start + raw_len,
            },
        }
    }
}

/// Decides what a complete JSON value is.
pub(crate) fn classify(raw: &str, names: &ToolNames) -> Outcome {
    use serde_json::Value;
    let text = Outcome::Text { raw_len: raw.len() };
    let mut obj = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => return text,
        Err(e) => return broken(raw, names, InvalidReason::BadJson(e.to_string())),
    };
    let name = match obj.get("name") {
        Some(Value::String(n)) if names.contains(n) => n.clone(),
        _ => return text,
    };
    let args = match obj.remove("arguments") {
        Some(a) => Some(a),
        None => obj.remove("parameters"),
    };
    let arguments = match args {
        None | Some(Value::Null) => Some(serde_json::Map::new()),
        Some(Value::Object(map)) => Some(map),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        },
        Some(_) => None,
    };
    match arguments {
        Some(arguments) => Outcome::Call {
            name,
            arguments,
            raw_len: raw.len(),
        },
        None => Outcome::Invalid {
            name: Some(name),
            reason: InvalidReason::NotAnObject,
            raw_len: raw.len(),
        },
    }
}

/// A broken object is a failed call if it visibly named a declared tool.
fn broken(raw: &str, names: &ToolNames, reason: InvalidReason) -> Outcome {
    match name_hint(raw.as_bytes(), names) {
        Some(name) => Outcome::Invalid {
            name: Some(name),
            reason,
            raw_len: raw.len(),
        },
        None => Outcome::Text { raw_len: raw.len() },
    }
}

fn skip_ws(raw: &[u8], mut i: usize) -> usize {
    while matches!(raw.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The bytes of the string starting at `raw[i]` (a `"`), and the index after
/// its closing quote.
fn read_string(raw: &[u8], i: usize) -> Option<(&[u8], usize)> {
    if raw.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match raw.get(j)? {
            b'"' => return Some((raw.get(i + 1..j)?, j + 1)),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
}

/// Walks the top-level members of a possibly broken object and returns the
/// `"name"` value if it is a declared tool.
pub(crate) fn name_hint(raw: &[u8], names: &ToolNames) -> Option<String> {
    if raw.first() != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(raw, 1);
    loop {
        let (key, next) = read_string(raw, i)?;
        i = skip_ws(raw, next);
        if raw.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(raw, i + 1);
        if key == b"name" {
            let (value, _) = read_string(raw, i)?;
            let value = std::str::from_utf8(value).ok()?;
            return names.contains(value).then(|| value.to_owned());
        }
        match JsonScanner::new().scan(raw.get(i..)?) {
            Scan::Done { consumed } => i = skip_ws(raw, i + consumed),
            _ => return None,
        }
        if raw.get(i) != Some(&b',') {
            return None;
        }
        i = skip_ws(raw, i + 1);
    }
}

/// Appends `input[..n]` to `held`; `n` is always a char boundary (it sits
/// before an ASCII byte or at the end), checked rather than assumed.
fn push(held: &mut String, input: &str, n: usize) {
    if let Some(part) = input.get(..n) {
        held.push_str(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ToolNames {
        ToolNames::new(["weather"])
    }

    #[test]
    fn hint_reads_the_name_anywhere_at_top_level() {
        let n = names();
        assert_eq!(
            name_hint(br#"{"name": "weather", "argu"#, &n).as_deref(),
            Some("weather")
        );
        assert_eq!(
            name_hint(br#"{"arguments": {"name": "x"}, "name" : "weather""#, &n).as_deref(),
            Some("weather")
        );
        assert_eq!(name_hint(br#"{"name": "other"}"#, &n), None);
        assert_eq!(name_hint(br#"{"name": "weat"#, &n), None);
        assert_eq!(name_hint(br#"{"x": [1, 2"#, &n), None);
        assert_eq!(name_hint(b"{", &n), None);
    }

    #[test]
    fn classification() {
        let n = names();
        let call = |s: &str| matches!(classify(s, &n), Outcome::Call { .. });
        assert!(call(
            r#"{"name": "weather", "parameters": {"location": "Berlin"}}"#
        ));
        assert!(call(
            r#"{"name": "weather", "arguments": {"location": "Berlin"}}"#
        ));
        assert!(call(r#"{"name": "weather"}"#));
        assert!(call(r#"{"name": "weather", "arguments": "{\"a\": 1}"}"#));
        assert!(matches!(
            classify(r#"{"name": "weather", "arguments": [1]}"#, &n),
            Outcome::Invalid {
                reason: InvalidReason::NotAnObject,
                ..
            }
        ));
        assert!(matches!(
            classify(r#"{"name": "nope", "arguments": {}}"#, &n),
            Outcome::Text { .. }
        ));
        assert!(matches!(classify(r#"{"a": 1}"#, &n), Outcome::Text { .. }));
        assert!(matches!(classify("{ok}", &n), Outcome::Text { .. }));
    }

    /// Feeds `input` a byte at a time after `opener` is held; the outcome
    /// and how many held bytes it covers.
    fn run(block: &mut JsonBlock, opener: &str, input: &str) -> (Outcome, usize) {
        let n = names();
        let mut held = opener.to_owned();
        let mut at = 0;
        while at < input.len() {
            let end = (at + 1..=input.len())
                .find(|&e| input.is_char_boundary(e))
                .unwrap();
            match block.step(&mut held, &input[at..end], &n) {
                Step::Continue(used) => at += used,
                Step::Finished(used, outcome) => return (outcome, at + used),
            }
        }
        (block.finish(&held, &n), input.len())
    }

    #[test]
    fn an_enclosed_call_runs_to_its_closer_or_ends_with_its_object() {
        let object = r#"{"name": "weather", "arguments": {"location": "Paris"}}"#;
        let fence = "```json\n";
        let (outcome, used) = run(
            &mut JsonBlock::enclosed(b"```"),
            fence,
            &format!("{object}\n```\nmore"),
        );
        assert!(
            matches!(outcome, Outcome::Call { raw_len, .. } if raw_len == fence.len() + object.len() + 4)
        );
        assert_eq!(
            used,
            object.len() + 4,
            "the closing fence belongs to the call"
        );

        // Text after the object instead of the closer: the call, raw up to
        // the object; what follows is read again.
        let (outcome, used) = run(
            &mut JsonBlock::enclosed(b"</tool_call>"),
            "<tool_call>",
            &format!("\n{object} and more"),
        );
        assert!(
            matches!(outcome, Outcome::Call { raw_len, .. } if raw_len == 11 + 1 + object.len())
        );
        assert_eq!(used, 1 + object.len() + 1);

        // The message ends before the closer: still the call.
        let (outcome, _) = run(
            &mut JsonBlock::enclosed(b"```"),
            fence,
            &format!("{object}\n``"),
        );
        assert!(
            matches!(outcome, Outcome::Call { raw_len, .. } if raw_len == fence.len() + object.len())
        );

        // Not a call: the opener and the object are text.
        let (outcome, _) = run(&mut JsonBlock::enclosed(b"```"), fence, "{\"a\": 1}\n```");
        assert!(matches!(outcome, Outcome::Text { raw_len } if raw_len == fence.len() + 8));
        let (outcome, used) = run(&mut JsonBlock::enclosed(b"```"), fence, "print(1)\n```");
        assert!(matches!(outcome, Outcome::Text { raw_len } if raw_len == fence.len()));
        assert_eq!(used, 0);
        // Broken JSON naming a declared tool is an invalid call, opener included.
        let (outcome, _) = run(
            &mut JsonBlock::enclosed(b"```"),
            fence,
            "{\"name\": \"weather\", \"arguments\": {\"location\": }",
        );
        assert!(
            matches!(outcome, Outcome::Invalid { name: Some(_), raw_len, .. } if raw_len > fence.len())
        );
    }
}

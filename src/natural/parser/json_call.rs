//! A call written as one JSON object, `{"name": "Tool", "arguments": {...}}`:
//! bracket syntax's object after a `[description]`, and the object rule the
//! rescue formats ([`rescue`](crate::natural::parser::rescue)) read calls by.
//!
//! The object decides: a `"name"` that is a declared tool and `"arguments"`
//! (or `"parameters"`) that is an object, missing or `null` (no arguments),
//! or a string holding a JSON object, is a call; a declared name with any
//! other arguments is `Invalid(NotAnObject)`; JSON that breaks is `Invalid`
//! if a top-level `"name"` of a declared tool could be read before the
//! break, and text otherwise; anything else is text.

use crate::natural::parser::event::InvalidReason;
use crate::natural::parser::json_scan::{JsonScanner, Scan};
use crate::natural::parser::names::ToolNames;
use crate::natural::parser::outcome::{Outcome, Step};

/// An open JSON-object call. Its bytes live in the parser's held buffer;
/// the object starts at its first byte.
#[derive(Debug)]
pub(crate) struct JsonBlock {
    scanner: JsonScanner,
}

impl JsonBlock {
    /// The object starts at the next byte.
    pub(crate) fn bare() -> Self {
        JsonBlock {
            scanner: JsonScanner::new(),
        }
    }

    /// Consumes a prefix of `input`, appending it to `held`.
    pub(crate) fn step(&mut self, held: &mut String, input: &str, names: &ToolNames) -> Step {
        match self.scanner.scan(input.as_bytes()) {
            Scan::NeedMore => {
                held.push_str(input);
                Step::Continue(input.len())
            }
            Scan::Done { consumed } => {
                push(held, input, consumed);
                Step::Finished(consumed, classify(held, names))
            }
            Scan::Error { at, reason } => {
                push(held, input, at);
                let outcome = broken(held, names, InvalidReason::BadJson(reason.into()));
                Step::Finished(at, outcome)
            }
        }
    }

    /// The block grew too large.
    pub(crate) fn too_large(&self, held: &str, names: &ToolNames) -> Outcome {
        broken(held, names, InvalidReason::TooLarge)
    }

    /// The message ended inside the block.
    pub(crate) fn finish(&self, held: &str, names: &ToolNames) -> Outcome {
        broken(held, names, InvalidReason::Unclosed)
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
pub(crate) fn broken(raw: &str, names: &ToolNames, reason: InvalidReason) -> Outcome {
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
}

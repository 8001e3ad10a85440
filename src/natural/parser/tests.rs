//! Shared harness for the parser tests: feeding in different chunkings,
//! summarising events, and the invariants every run must satisfy.

mod fixtures;
mod props;
mod python;

use crate::natural::parser::{Event, Mode, Parser, ParserOptions};
use crate::natural::syntax::Syntax;

pub(super) const NAMES: &[&str] = &["GetWeather", "BookRestaurant", "weather"];

pub(super) fn options(syntax: Syntax) -> ParserOptions {
    ParserOptions {
        syntax,
        ..ParserOptions::default()
    }
}

/// Feeds `chunks` then finishes, checking the hold-back rule after each feed.
pub(super) fn run_chunks(opts: &ParserOptions, chunks: &[&str]) -> Vec<Event> {
    run_chunks_with(NAMES, opts, chunks)
}

/// [`run_chunks`] with other tool names (the hold-back rule is checked for
/// [`NAMES`] only).
pub(super) fn run_chunks_with(names: &[&str], opts: &ParserOptions, chunks: &[&str]) -> Vec<Event> {
    let checked = names == NAMES;
    let mut parser = Parser::new(names, opts.clone());
    let mut out = Vec::new();
    let mut fed = String::new();
    for chunk in chunks {
        parser.feed(chunk, &mut out);
        fed.push_str(chunk);
        if checked {
            check_held(&parser, opts, &fed);
        }
    }
    parser.finish(&mut out);
    assert_eq!(parser.held_bytes(), 0);
    out
}

/// Events with adjacent text merged and empty text dropped, so runs with
/// different chunkings compare equal.
pub(super) fn merged(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (_, Event::Text(t)) if t.is_empty() => {}
            (Some(Event::Text(last)), Event::Text(t)) => last.push_str(&t),
            (_, e) => out.push(e),
        }
    }
    out
}

/// The concatenation that must reproduce the input.
pub(super) fn reproduce(events: &[Event]) -> String {
    let mut s = String::new();
    for e in events {
        match e {
            Event::Text(t) => s.push_str(t),
            Event::Call(c) => s.push_str(&c.raw),
            Event::Invalid(i) => s.push_str(&i.raw),
        }
    }
    s
}

/// Compact one-line-per-event form used by the fixtures.
pub(super) fn summary(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::Text(t) => format!("T:{t}"),
            Event::Call(c) => format!(
                "C:{}:{}",
                c.name,
                serde_json::Value::Object(c.arguments.clone())
            ),
            Event::Invalid(i) => format!(
                "I:{}:{:?}:{}",
                i.name.as_deref().unwrap_or("-"),
                i.reason,
                i.raw
            ),
        })
        .collect()
}

/// Parses `input` whole, split at every char boundary, one char at a time
/// and in a few fixed chunkings; all must agree and reproduce the input.
pub(super) fn parse_all_ways(opts: &ParserOptions, input: &str) -> Vec<Event> {
    let whole = merged(run_chunks(opts, &[input]));
    assert_eq!(reproduce(&whole), input, "whole: reproduction");
    for (i, _) in input.char_indices().skip(1) {
        let (a, b) = input.split_at(i);
        let got = merged(run_chunks(opts, &[a, b]));
        assert_eq!(got, whole, "split at {i} of {input:?}");
    }
    let chars: Vec<String> = input.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        merged(run_chunks(opts, &refs)),
        whole,
        "char by char: {input:?}"
    );
    whole
}

/// The hold-back rule: outside a block, the held bytes are the input's suffix
/// from its last `<`, and that suffix is a proper prefix of something that
/// can still open (a call, `<think>`, or `</think>` inside a think block).
fn check_held(parser: &Parser, opts: &ParserOptions, fed: &str) {
    let held = parser.held_bytes();
    let suffix = &fed[fed.len() - held..];
    if parser.in_block() {
        assert!(held > 0, "an open block holds its source");
        return;
    }
    if held == 0 {
        return;
    }
    if opts.rescue && suffix.starts_with('`') {
        assert!(
            fence_prefix(suffix),
            "held {suffix:?} cannot become a fence"
        );
        return;
    }
    if !opts.rescue && opts.syntax == Syntax::Python && suffix.starts_with('[') {
        assert!(
            python_prefix(suffix),
            "held {suffix:?} cannot become a call list"
        );
        return;
    }
    if opts.rescue && suffix.starts_with('[') {
        assert!(
            is_proper_prefix(suffix, "[TOOL_CALLS]") || python_prefix(suffix),
            "held {suffix:?} cannot become [TOOL_CALLS] or a call list"
        );
        return;
    }
    assert!(
        suffix.starts_with('<'),
        "held {suffix:?} must start at a '<'"
    );
    assert!(
        !suffix[1..].contains('<'),
        "held {suffix:?} holds more than one '<'"
    );
    let tag = || {
        NAMES
            .iter()
            .any(|n| is_proper_prefix(suffix, &format!("<{n}>")))
    };
    let ok = if matches!(parser.mode, Mode::Think) {
        is_proper_prefix(suffix, "</think>")
    } else if opts.rescue {
        (opts.skip_think && is_proper_prefix(suffix, "<think>"))
            || tag()
            || tool_call_prefix(suffix)
            || is_proper_prefix(suffix, "<tool_call>")
            || is_proper_prefix(suffix, "<|python_tag|>")
            // The tag waits for the byte after it: a call list may follow.
            || suffix == "<|python_tag|>"
            || suffix
                .strip_prefix("<|python_tag|>")
                .is_some_and(python_prefix)
    } else {
        (opts.skip_think && is_proper_prefix(suffix, "<think>"))
            || match opts.syntax {
                Syntax::Tag => tag(),
                Syntax::ToolCall => tool_call_prefix(suffix),
                Syntax::Bracket | Syntax::Python => false,
            }
    };
    assert!(ok, "held {suffix:?} cannot become an opener");
}

/// Reference for an unfinished fence line: three backticks, `json` in any
/// case, spaces, a carriage return; the line break would complete it.
fn fence_prefix(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("```") else {
        return "```".starts_with(s);
    };
    let lower = rest.to_ascii_lowercase();
    let rest = if lower.starts_with("json") {
        &rest[4..]
    } else if "json".starts_with(&lower) {
        return true;
    } else {
        rest
    };
    let spaces = rest.trim_start_matches([' ', '\t']);
    rest.len() - spaces.len() <= 16 && (spaces.is_empty() || spaces == "\r")
}

/// Reference for a call list's opener: `[`, at most 32 whitespace bytes,
/// a proper prefix of a declared name and its `(`.
fn python_prefix(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('[') else {
        return false;
    };
    let name = rest.trim_start_matches([' ', '\t', '\n', '\r']);
    rest.len() - name.len() <= 32
        && NAMES
            .iter()
            .any(|n| is_proper_prefix(name, &format!("{n}(")))
}

fn is_proper_prefix(s: &str, of: &str) -> bool {
    s.len() < of.len() && of.starts_with(s)
}

/// Reference for `<tool_call name = "X">` prefixes, written independently of
/// the matcher: strip each grammar piece in turn; running out of input while
/// everything so far matched means "proper prefix".
fn tool_call_prefix(s: &str) -> bool {
    fn lit<'a>(s: &'a str, l: &str) -> Result<&'a str, bool> {
        if s.len() < l.len() {
            return Err(l.starts_with(s));
        }
        s.strip_prefix(l).ok_or(false)
    }
    fn ws(s: &str, min: usize) -> Result<&str, bool> {
        let t = s.trim_start_matches([' ', '\t']);
        let n = s.len() - t.len();
        if n > 16 {
            return Err(false);
        }
        if t.is_empty() {
            return Err(true);
        }
        if n < min { Err(false) } else { Ok(t) }
    }
    let go = || -> Result<bool, bool> {
        let s = lit(s, "<tool_call")?;
        let s = ws(s, 1)?;
        let s = lit(s, "name")?;
        let s = ws(s, 0)?;
        let s = lit(s, "=")?;
        let s = ws(s, 0)?;
        let (q, s) = match s.chars().next() {
            None => return Err(true),
            Some(q @ ('"' | '\'')) => (q, &s[1..]),
            Some(_) => return Err(false),
        };
        let name_ok = NAMES.iter().any(|n| {
            let full = format!("{n}{q}");
            if s.len() < full.len() {
                full.starts_with(s)
            } else if let Some(rest) = s.strip_prefix(&full) {
                matches!(ws(rest, 0), Err(true))
            } else {
                false
            }
        });
        Err(name_ok)
    };
    matches!(go(), Err(true))
}

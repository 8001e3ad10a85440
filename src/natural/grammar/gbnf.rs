//! Writing GBNF, llama.cpp's grammar format: rules `name ::= expression`,
//! string literals, character classes. Only what the grammar writer needs,
//! each piece escaped so no declared name, enum value or key can end a
//! literal or a class early.

use std::fmt::Write as _;

/// A grammar being written: its rules in the order they were added.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Vec<(String, String)>,
}

impl Rules {
    /// Adds `name ::= body` (a rule's name is letters, digits and `-`).
    pub fn add(&mut self, name: impl Into<String>, body: impl Into<String>) {
        self.rules.push((name.into(), body.into()));
    }

    /// Whether a rule of this name was added.
    pub fn has(&self, name: &str) -> bool {
        self.rules.iter().any(|(n, _)| n == name)
    }

    /// The grammar's text, one rule a line, `root` first.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let root = self.rules.iter().filter(|(n, _)| n == "root");
        let rest = self.rules.iter().filter(|(n, _)| n != "root");
        for (name, body) in root.chain(rest) {
            let _ = writeln!(out, "{name} ::= {body}");
        }
        out
    }
}

/// `text` as a GBNF string literal: `"…"`, with `"`, `\` and control
/// characters escaped.
pub fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        escape_char(c, &['"', '\\'], &mut out);
    }
    out.push('"');
    out
}

/// A character class matching any one of `chars` (`negated`: any other).
pub fn class(chars: &[char], negated: bool) -> String {
    let mut out = String::from("[");
    if negated {
        out.push('^');
    }
    for &c in chars {
        escape_char(c, &['\\', ']', '[', '^', '-'], &mut out);
    }
    out.push(']');
    out
}

fn escape_char(c: char, special: &[char], out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if special.contains(&c) => {
            out.push('\\');
            out.push(c);
        }
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02X}", c as u32);
        }
        c => out.push(c),
    }
}

/// A rule name built from a prefix and parts (anything but letters and
/// digits becomes `-`).
pub fn name(prefix: &str, parts: &[&str]) -> String {
    let mut out = prefix.to_owned();
    for part in parts {
        out.push('-');
        out.extend(
            part.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_classes_escape_what_would_end_them() {
        assert_eq!(literal(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(literal("x\ny\u{1}"), r#""x\ny\x01""#);
        assert_eq!(class(&['a', ']', '-', '\\', '^'], true), r"[^a\]\-\\\^]");
        assert_eq!(name("args", &["get.weather", "2"]), "args-get-weather-2");
        let mut rules = Rules::default();
        rules.add("x", "\"a\"");
        rules.add("root", "x");
        assert_eq!(rules.text(), "root ::= x\nx ::= \"a\"\n");
    }
}

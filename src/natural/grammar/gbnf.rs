//! Writing GBNF, llama.cpp's grammar format: rules `name ::= expression`,
//! string literals, character classes. Only what the grammar writer needs,
//! each piece escaped so no declared name, enum value or key can end a
//! literal or a class early, and written with the escapes every llama.cpp
//! release reads (`\x \u \U \t \r \n \\ \" \[ \]`; older parsers answer
//! "unknown escape" to any other).

use std::collections::HashSet;
use std::fmt::Write as _;

use super::Budget;

/// A grammar being written: its rules in the order they were added, within
/// a [`Budget`] of rules and bytes.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<(String, String)>,
    names: HashSet<String>,
    /// The text's size so far (`name ::= body\n` a rule).
    bytes: usize,
    budget: Budget,
    /// Set once a limit of the budget is crossed; the writer stops there.
    over: Option<Over>,
    /// Schema nodes written so far.
    nodes: usize,
    /// Schema nodes read to tell subschemas apart (hashed, compared).
    read: usize,
}

/// Which limit of the [`Budget`] a grammar crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// More schema nodes than [`Budget::nodes`].
    Nodes,
    /// More rules than [`Budget::rules`].
    Rules,
    /// More text than [`Budget::bytes`].
    Bytes,
}

impl Default for Rules {
    fn default() -> Self {
        Rules::new(Budget::DEFAULT)
    }
}

impl Rules {
    /// An empty grammar that may grow to `budget`.
    pub fn new(budget: Budget) -> Rules {
        Rules {
            rules: Vec::new(),
            names: HashSet::new(),
            bytes: 0,
            budget,
            over: None,
            nodes: 0,
            read: 0,
        }
    }

    /// Adds `name ::= body` (a rule's name is letters, digits and `-`).
    /// Past the budget nothing more is kept: [`Rules::over`] says why.
    pub fn add(&mut self, name: impl Into<String>, body: impl Into<String>) {
        if self.over.is_some() {
            return;
        }
        let (name, body) = (name.into(), body.into());
        self.bytes += name.len() + body.len() + 6;
        if self.rules.len() >= self.budget.rules {
            self.over = Some(Over::Rules);
        } else if self.bytes > self.budget.bytes {
            self.over = Some(Over::Bytes);
        } else {
            self.names.insert(name.clone());
            self.rules.push((name, body));
        }
    }

    /// Counts one schema node written; `false` once past the budget (the
    /// writer then stops descending).
    pub fn visit(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes > self.budget.nodes && self.over.is_none() {
            self.over = Some(Over::Nodes);
        }
        self.over.is_none()
    }

    /// Counts `nodes` schema nodes read to find a subschema seen before;
    /// `false` once past 16 times the node budget (every node is read once
    /// for each of the at most 13 levels above it that the writer models).
    pub fn read(&mut self, nodes: usize) -> bool {
        self.read = self.read.saturating_add(nodes);
        if self.read > self.budget.nodes.saturating_mul(16) && self.over.is_none() {
            self.over = Some(Over::Nodes);
        }
        self.over.is_none()
    }

    /// Whether a rule of this name was added.
    pub fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The limit crossed, if any: the text is then incomplete.
    pub fn over(&self) -> Option<Over> {
        self.over
    }

    /// The grammar's text, one rule a line, `root` first.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(self.bytes);
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
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => plain_or_hex(c, &mut out),
        }
    }
    out.push('"');
    out
}

/// A character class matching any one of `chars` (`negated`: any other).
/// `[`, `]` and `\` are escaped as themselves; every other ASCII
/// punctuation mark (a `-` that would make a range, a `^` that would
/// negate) is written as `\xNN`.
pub fn class(chars: &[char], negated: bool) -> String {
    let mut out = String::from("[");
    if negated {
        out.push('^');
    }
    for &c in chars {
        match c {
            '[' | ']' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii_punctuation() => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => plain_or_hex(c, &mut out),
        }
    }
    out.push(']');
    out
}

/// `c` as it is, but line breaks and tabs as `\n \r \t` and other control
/// characters as `\xNN` / `\uNNNN`.
fn plain_or_hex(c: char, out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\x{:02X}", c as u32);
        }
        c if c.is_control() => {
            let _ = write!(out, "\\u{:04X}", c as u32);
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
        assert_eq!(literal("x\ny\u{1}\u{85}"), r#""x\ny\x01\u0085""#);
        assert_eq!(
            class(&['a', ']', '-', '\\', '^', '.'], true),
            r"[^a\]\x2D\\\x5E\x2E]"
        );
        assert_eq!(class(&['[', 'é', '\t'], false), r"[\[é\t]");
        assert_eq!(name("args", &["get.weather", "2"]), "args-get-weather-2");
        let mut rules = Rules::default();
        rules.add("x", "\"a\"");
        rules.add("root", "x");
        assert_eq!(rules.text(), "root ::= x\nx ::= \"a\"\n");
    }

    #[test]
    fn rules_stop_at_their_budget() {
        let budget = Budget {
            nodes: 2,
            rules: 2,
            bytes: 1 << 20,
        };
        let mut rules = Rules::new(budget);
        rules.add("a", "\"a\"");
        rules.add("b", "\"b\"");
        assert_eq!(rules.over(), None);
        rules.add("c", "\"c\"");
        assert_eq!(rules.over(), Some(Over::Rules));
        assert!(!rules.has("c"));

        let mut rules = Rules::new(Budget {
            bytes: 10,
            ..budget
        });
        rules.add("a", "\"0123456789\"");
        assert_eq!(rules.over(), Some(Over::Bytes));

        let mut rules = Rules::new(budget);
        assert!(rules.visit() && rules.visit());
        assert!(!rules.visit());
        assert_eq!(rules.over(), Some(Over::Nodes));
    }
}

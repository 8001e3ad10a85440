//! Pretty-printing JSON as it arrives, fragment by fragment.
//!
//! Native tool-call arguments stream in arbitrary fragments (`{"lo`, `cation":`,
//! ...). To show them pretty-printed without waiting for the whole object,
//! this printer rewrites the raw text incrementally, producing exactly what
//! `serde_json::to_string_pretty` would (two-space indent, `"key": value`,
//! `{}`/`[]` for empty containers). It holds back nothing but the line break
//! after an opening bracket, until the next character tells whether the
//! container is empty. Sans-IO; never panics; invalid JSON passes through as
//! best it can (the text is the model's, and must not be lost).
//!
//! Indentation stops growing at [`MAX_INDENT_LEVELS`]: otherwise 50k `[`
//! followed by 50k `,` would print 50k lines of up to 100k spaces each. With
//! the cap every input byte yields at most `2 + 2 * MAX_INDENT_LEVELS` bytes
//! of output. Deeper values print like `to_string_pretty` but flatter.

/// Nesting levels that are indented; deeper ones keep this indentation.
pub const MAX_INDENT_LEVELS: usize = 16;

/// The most output bytes one input byte can produce.
pub const MAX_BYTES_PER_INPUT_BYTE: usize = 2 + 2 * MAX_INDENT_LEVELS;

#[derive(Debug, Default)]
pub struct PrettyPrinter {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// An opening bracket was written; its line break waits for the next token.
    pending_open: bool,
    /// Depth returned to zero after a value: the document is complete.
    complete: bool,
    started: bool,
}

impl PrettyPrinter {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a whole top-level value has been printed.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Appends the pretty form of `fragment` to `out`.
    pub fn feed(&mut self, fragment: &str, out: &mut String) {
        for c in fragment.chars() {
            if self.in_string {
                out.push(c);
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_string = false;
                }
                continue;
            }
            if c.is_whitespace() {
                continue;
            }
            let closing = matches!(c, '}' | ']');
            if self.pending_open {
                self.pending_open = false;
                if !closing {
                    self.newline(out);
                }
            } else if closing {
                self.depth = self.depth.saturating_sub(1);
                self.newline(out);
                out.push(c);
                self.after_value();
                continue;
            }
            match c {
                '{' | '[' => {
                    self.started = true;
                    out.push(c);
                    self.depth += 1;
                    self.pending_open = true;
                }
                '}' | ']' => {
                    // Empty container: `{}` on one line.
                    self.depth = self.depth.saturating_sub(1);
                    out.push(c);
                    self.after_value();
                }
                ',' => {
                    out.push(',');
                    self.newline(out);
                }
                ':' => out.push_str(": "),
                '"' => {
                    self.started = true;
                    self.in_string = true;
                    out.push('"');
                }
                other => {
                    self.started = true;
                    out.push(other);
                }
            }
        }
    }

    /// The document ended: writes anything still held.
    pub fn finish(&mut self, out: &mut String) {
        if self.pending_open {
            self.pending_open = false;
            self.newline(out);
        }
    }

    fn after_value(&mut self) {
        if self.depth == 0 && self.started {
            self.complete = true;
        }
    }

    fn newline(&self, out: &mut String) {
        out.push('\n');
        for _ in 0..self.depth.min(MAX_INDENT_LEVELS) {
            out.push_str("  ");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn pretty_in_pieces(raw: &str, cuts: &[usize]) -> String {
        let mut p = PrettyPrinter::new();
        let mut out = String::new();
        let mut start = 0;
        for &cut in cuts {
            if cut > start && cut <= raw.len() && raw.is_char_boundary(cut) {
                p.feed(&raw[start..cut], &mut out);
                start = cut;
            }
        }
        p.feed(&raw[start..], &mut out);
        p.finish(&mut out);
        out
    }

    #[test]
    fn matches_serde_pretty_at_every_split() {
        let v = json!({"location": "San Francisco, CA", "nested": {"a": [1, 2, {}], "b": []}, "s": "q\"uote, {x}: [y]", "n": null, "e": {}});
        let raw = v.to_string();
        let want = serde_json::to_string_pretty(&v).unwrap();
        for i in 0..=raw.len() {
            assert_eq!(pretty_in_pieces(&raw, &[i]), want, "split at {i}");
        }
        assert_eq!(pretty_in_pieces("{}", &[1]), "{}");
    }

    #[test]
    fn completion_is_detected() {
        let mut p = PrettyPrinter::new();
        let mut out = String::new();
        p.feed("{\"a\": {\"b\": 1}", &mut out);
        assert!(!p.is_complete());
        p.feed("}", &mut out);
        assert!(p.is_complete());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z\"\\\\{}\\[\\]:, é😀]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,5}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_any_chunking_prints_like_serde(v in arb_json(), cuts in prop::collection::vec(0usize..200, 0..8)) {
            let raw = v.to_string();
            let mut cuts = cuts;
            cuts.sort_unstable();
            prop_assert_eq!(pretty_in_pieces(&raw, &cuts), serde_json::to_string_pretty(&v).unwrap());
        }
    }

    #[test]
    fn deep_nesting_then_commas_stays_linear() {
        let n = 50_000;
        let input = format!("{}{}", "[".repeat(n), ",".repeat(n));
        let mut p = PrettyPrinter::new();
        let mut out = String::new();
        p.feed(&input, &mut out);
        p.finish(&mut out);
        assert!(
            out.len() <= input.len() * MAX_BYTES_PER_INPUT_BYTE,
            "{}",
            out.len()
        );
        // Without the cap: about n^2 = 2.5e9 bytes of indentation.
        assert!(out.len() < 4 * 1024 * 1024);
    }

    #[test]
    fn indentation_is_exact_up_to_the_cap() {
        let value =
            (0..MAX_INDENT_LEVELS).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
        let mut p = PrettyPrinter::new();
        let mut out = String::new();
        p.feed(&value.to_string(), &mut out);
        p.finish(&mut out);
        assert_eq!(out, serde_json::to_string_pretty(&value).unwrap());
    }
}

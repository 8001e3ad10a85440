//! Whether a call's values come from the conversation (`on_ungrounded`).
//!
//! A call is *ungrounded* when one of its string or number argument values
//! (at any depth of its arguments) comes from nowhere in the conversation:
//! it is not in what the client and its tools wrote, and is neither one of
//! the schema's `enum` values nor its `default` at that place. What they wrote is the text of the request's `system`,
//! `developer`, `user` and `tool` messages (a string content, or the `text`
//! of its parts), as the client sent them, before natural mode's
//! instructions go in; the model's own messages are not in it.
//!
//! Text is compared normalised: lower-cased, every run of whitespace one
//! space, none at either end. A value is grounded when it is a substring of
//! that text, or when one of its *words* (runs of letters and digits) of at
//! least [`MIN_WORD`] characters is a word there: `"Los Angeles Lakers"`
//! after a question about "the lakers", `"2022-07-10"` after one about
//! July 2022. A value without such a word (`"all"`, `"km"`, `"x^2"`) is too
//! short to judge and passes; so does one empty once normalised.
//!
//! A number is grounded when it is one of the conversation's numbers (digits
//! with an optional decimal part, `1,000` as one number, or `half`,
//! `dozen`, `hundred`, `thousand`, `million`, `billion`), whatever its sign,
//! or a hundred times or a hundredth of one (a percentage as a fraction, or
//! the reverse). An integer from -10 to 10 is too small to judge (a count,
//! a precision, an option) and passes. Booleans and nulls are not checked.
//!
//! Measured on BFCL's recorded answers, this flags the invented values of
//! irrelevant calls (`"example"`, `"john"`, an invented date, a price of
//! `1.5` nobody gave) and lets through the values a right call derives
//! from the question (docs/natural-mode.md). Pure: the engine decides what
//! an ungrounded call leads to.

use std::collections::HashSet;

use serde_json::Value;

use crate::natural::tools::ToolSet;

/// The fewest characters a word needs to ground a value (shorter words,
/// `"the"`, `"all"`, `"km"`, say nothing of where a value came from).
pub const MIN_WORD: usize = 4;

/// What the client and its tools wrote, normalised, one message a line,
/// its words of at least [`MIN_WORD`] characters and its numbers (sorted,
/// each once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    text: String,
    words: HashSet<String>,
    numbers: Vec<f64>,
}

/// The most string and number values of one call that are checked (the
/// rest pass): the check's work is at most this many lookups against the
/// conversation, however large the model's arguments.
pub const MAX_CHECKED: usize = 256;

/// Integers this close to zero are too small to judge.
const SMALL: f64 = 10.0;

/// Number words, and the number each is.
const NUMBER_WORDS: &[(&str, f64)] = &[
    ("half", 0.5),
    ("dozen", 12.0),
    ("hundred", 100.0),
    ("thousand", 1e3),
    ("million", 1e6),
    ("billion", 1e9),
];

/// The numbers written in `text` as digits, without their sign: an
/// optional decimal part, and `,` before three digits read as a thousands
/// separator (`1,000` is one number, `1,2` two).
fn numbers_in(text: &str) -> Vec<f64> {
    let b = text.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !digit(i) {
            i += 1;
            continue;
        }
        let mut number = String::new();
        let mut point = false;
        while i < b.len() {
            if digit(i) {
                number.push(char::from(b[i]));
            } else if b[i] == b',' && !point && (1..=3).all(|k| digit(i + k)) && !digit(i + 4) {
                // A thousands separator: skipped.
            } else if b[i] == b'.' && !point && digit(i + 1) {
                point = true;
                number.push('.');
            } else {
                break;
            }
            i += 1;
        }
        if let Ok(n) = number.parse() {
            out.push(n);
        }
    }
    out
}

/// `a` and `b` are the same number, give or take rounding.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// A string value of a call that the conversation does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ungrounded {
    /// The tool called.
    pub tool: String,
    /// Where the value sits in the arguments, as `a.b[0]`.
    pub path: String,
    /// The value as the model wrote it (a string or a number).
    pub value: Value,
}

/// The words of `text` that can ground a value: runs of letters and digits
/// of at least [`MIN_WORD`] characters.
fn long_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().nth(MIN_WORD - 1).is_some())
}

/// `text` lower-cased, each run of whitespace one space, trimmed.
pub fn normalised(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().flat_map(char::to_lowercase));
    }
    out
}

impl Conversation {
    /// The client's `messages` (the request's array, before any rewrite).
    pub fn from_messages(messages: &[Value]) -> Conversation {
        let mut out = String::new();
        for message in messages {
            let role = message.get("role").and_then(Value::as_str);
            if !matches!(role, Some("system" | "developer" | "user" | "tool")) {
                continue;
            }
            let text = match message.get("content") {
                Some(Value::String(text)) => normalised(text),
                Some(Value::Array(parts)) => normalised(
                    &parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => continue,
            };
            out.push_str(&text);
            out.push('\n');
        }
        let words: HashSet<String> = long_words(&out).map(str::to_owned).collect();
        let mut numbers = numbers_in(&out);
        numbers.extend(
            NUMBER_WORDS
                .iter()
                .filter(|(word, _)| words.contains(*word))
                .map(|&(_, n)| n),
        );
        numbers.sort_by(f64::total_cmp);
        numbers.dedup();
        Conversation {
            text: out,
            words,
            numbers,
        }
    }

    /// Whether the number `n` could come from the conversation: one of its
    /// numbers (either sign), a hundred times or a hundredth of one, or an
    /// integer too small to judge.
    fn holds_number(&self, n: f64) -> bool {
        let n = n.abs();
        (n.fract() == 0.0 && n <= SMALL)
            || [n, n / 100.0, n * 100.0]
                .into_iter()
                .any(|x| self.has_number(x))
    }

    /// Whether `x` is one of the conversation's numbers, give or take
    /// rounding (a binary search: the numbers are sorted).
    fn has_number(&self, x: f64) -> bool {
        let at = self.numbers.partition_point(|&m| m < x && !same(m, x));
        self.numbers.get(at).is_some_and(|&m| same(m, x))
    }

    /// Whether `text` (normalised) could come from the conversation: it is
    /// in it, or one of its long words is a word of it, or it has no long
    /// word to judge by.
    fn holds(&self, text: &str) -> bool {
        if text.is_empty() || self.text.contains(text) {
            return true;
        }
        let mut words = long_words(text).peekable();
        words.peek().is_none() || words.any(|w| self.words.contains(w))
    }

    /// The ungrounded values of a call of `tool` (its name) with
    /// `arguments` (a JSON object's text); none when the arguments are not
    /// JSON (the validator has said so already).
    pub fn ungrounded(&self, tools: &ToolSet, tool: &str, arguments: &str) -> Vec<Ungrounded> {
        let Ok(arguments) = serde_json::from_str::<Value>(arguments) else {
            return Vec::new();
        };
        let schema = tools.get(tool).and_then(|t| t.parameters.as_ref());
        let mut out = Vec::new();
        let mut path = String::new();
        let mut budget = MAX_CHECKED;
        self.walk(
            &arguments,
            schema,
            &mut path,
            &mut budget,
            &mut |path, value| {
                out.push(Ungrounded {
                    tool: tool.to_owned(),
                    path: path.to_owned(),
                    value: value.clone(),
                });
            },
        );
        out
    }

    fn walk(
        &self,
        value: &Value,
        schema: Option<&Value>,
        path: &mut String,
        budget: &mut usize,
        found: &mut dyn FnMut(&str, &Value),
    ) {
        if matches!(value, Value::String(_) | Value::Number(_)) {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
        }
        match value {
            Value::Object(members) => {
                let properties = schema.and_then(|s| s.get("properties"));
                for (key, member) in members {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    self.walk(
                        member,
                        properties.and_then(|p| p.get(key)),
                        path,
                        budget,
                        found,
                    );
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let schema = schema.and_then(|s| s.get("items"));
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.walk(item, schema, path, budget, found);
                    path.truncate(len);
                }
            }
            Value::String(raw) => {
                let text = normalised(raw);
                if !self.holds(&text)
                    && !allowed(schema, |v| {
                        v.as_str().is_some_and(|s| normalised(s) == text)
                    })
                {
                    found(path, value);
                }
            }
            Value::Number(number) => {
                let Some(n) = number.as_f64() else { return };
                if !self.holds_number(n)
                    && !allowed(schema, |v| v.as_f64().is_some_and(|m| same(n, m)))
                {
                    found(path, value);
                }
            }
            _ => {}
        }
    }
}

/// Whether the schema at a value's place names it: one of its `enum`
/// values or its `default` is `named`.
fn allowed(schema: Option<&Value>, named: impl Fn(&Value) -> bool) -> bool {
    let Some(schema) = schema else {
        return false;
    };
    schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| values.iter().any(&named))
        || schema.get("default").is_some_and(&named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natural::tools::Tool;
    use serde_json::json;

    fn tools() -> ToolSet {
        ToolSet::from_tools(vec![Tool {
            name: "get_weather".into(),
            description: None,
            parameters: Some(json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "lang": {"type": "string", "default": "en"},
                "tags": {"type": "array", "items": {"type": "string"}},
            }})),
            strict: false,
            unlisted: false,
        }])
    }

    fn conversation() -> Conversation {
        Conversation::from_messages(&[
            json!({"role": "system", "content": "You help travellers."}),
            json!({"role": "user", "content": [{"type": "text", "text": "Weather in\n  NEW   York?"}]}),
            json!({"role": "assistant", "content": "Boston"}),
            json!({"role": "tool", "content": "Paris"}),
        ])
    }

    #[test]
    fn values_the_client_wrote_are_grounded_whatever_their_case_and_spacing() {
        let c = conversation();
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"new york"}"#)
                .is_empty()
        );
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"New\tYork "}"#)
                .is_empty()
        );
        assert!(
            c.ungrounded(&tools(), "get_weather", r#"{"city":"travellers"}"#)
                .is_empty()
        );
    }

    #[test]
    fn a_value_that_shares_a_long_word_with_the_conversation_is_grounded() {
        let c = conversation();
        for city in ["New York City", "york, usa", "Paris", "all", "NY", "x^2"] {
            assert!(
                c.ungrounded(&tools(), "get_weather", &format!(r#"{{"city":"{city}"}}"#))
                    .is_empty(),
                "{city}"
            );
        }
    }

    #[test]
    fn a_value_only_the_model_wrote_is_ungrounded() {
        let c = conversation();
        for city in ["Boston", "example", "Newark", "San Francisco"] {
            let found = c.ungrounded(&tools(), "get_weather", &format!(r#"{{"city":"{city}"}}"#));
            assert_eq!(
                found,
                vec![Ungrounded {
                    tool: "get_weather".into(),
                    path: "city".into(),
                    value: city.into()
                }]
            );
        }
    }

    #[test]
    fn enum_and_default_values_numbers_and_empty_strings_are_grounded() {
        let c = conversation();
        let args =
            r#"{"city":"New York","unit":"Celsius","lang":"en","days":3,"ok":true,"note":"  "}"#;
        assert!(c.ungrounded(&tools(), "get_weather", args).is_empty());
        // The enum holds at its place only.
        let found = c.ungrounded(&tools(), "get_weather", r#"{"city":"celsius"}"#);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn nested_values_are_found_with_their_path() {
        let c = conversation();
        let found = c.ungrounded(
            &tools(),
            "get_weather",
            r#"{"tags":["york","john"],"x":{"y":"smith"}}"#,
        );
        let paths: Vec<_> = found
            .iter()
            .map(|u| (u.path.as_str(), u.value.as_str().unwrap_or_default()))
            .collect();
        assert_eq!(paths, [("tags[1]", "john"), ("x.y", "smith")]);
    }

    #[test]
    fn numbers_are_grounded_by_the_numbers_written_in_the_conversation() {
        let c = Conversation::from_messages(&[json!({"role": "user", "content":
            "Seats for 1,500 guests at 7.30 in rooms 12 and 14, 25% off, half of them by -40 pounds."})]);
        let calls = |n: &str| c.ungrounded(&tools(), "get_weather", &format!(r#"{{"n":{n}}}"#));
        for n in [
            "1500", "7.3", "7.30", "12", "0.25", "25", "0.5", "40", "-40", "3", "-10", "0",
        ] {
            assert!(calls(n).is_empty(), "{n}");
        }
        for n in ["1.5", "2021", "100", "11", "-12.5", "1"] {
            let found = calls(n);
            if n == "1" {
                assert!(found.is_empty(), "small integers pass");
                continue;
            }
            assert_eq!(found.len(), 1, "{n}");
            assert_eq!(found[0].value, serde_json::from_str::<Value>(n).unwrap());
        }
        // Nested, and a number the schema names at its place.
        let found = c.ungrounded(&tools(), "get_weather", r#"{"x":[{"y":99}],"lang":2.5}"#);
        assert_eq!(found.len(), 2);
        let schema_default = ToolSet::from_tools(vec![Tool {
            name: "t".into(),
            description: None,
            parameters: Some(json!({"type": "object", "properties": {
                "price": {"type": "number", "default": 9.99},
                "size": {"type": "integer", "enum": [64, 128]},
            }})),
            strict: false,
            unlisted: false,
        }]);
        assert!(
            c.ungrounded(&schema_default, "t", r#"{"price":9.99,"size":128}"#)
                .is_empty()
        );
        assert_eq!(
            c.ungrounded(&schema_default, "t", r#"{"size":256}"#).len(),
            1
        );
    }

    #[test]
    fn at_most_max_checked_values_of_a_call_are_checked() {
        let c = conversation();
        let many: Vec<String> = (0..10 * MAX_CHECKED)
            .map(|i| format!("invented{i}"))
            .collect();
        let arguments = json!({"tags": many, "n": vec![1.5; 1000]}).to_string();
        assert_eq!(
            c.ungrounded(&tools(), "get_weather", &arguments).len(),
            MAX_CHECKED
        );
        // A large conversation's numbers are each kept once, sorted.
        let text: String = (0..20_000).map(|i| format!("{} ", i % 500 + 11)).collect();
        let big = Conversation::from_messages(&[json!({"role": "user", "content": text})]);
        assert_eq!(big.numbers.len(), 500);
        assert!(big.numbers.is_sorted());
        assert!(big.holds_number(510.0) && big.holds_number(5.1) && !big.holds_number(511.0));
    }

    #[test]
    fn numbers_in_text_read_thousands_separators_and_decimals() {
        assert_eq!(
            numbers_in("1,000,000 and 1,2 or 3.25. v2.0 x 12,34567"),
            [1e6, 1.0, 2.0, 3.25, 2.0, 12.0, 34567.0]
        );
    }

    #[test]
    fn normalising_lowers_and_collapses_whitespace() {
        assert_eq!(normalised("  A\t B\n\nÇ  "), "a b ç");
    }
}

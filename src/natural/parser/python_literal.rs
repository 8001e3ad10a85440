//! Python calls and literals read into JSON, for the `python` syntax:
//! `name(key=value, …)` with string, number, `True`/`False`/`None`, list,
//! tuple (as a list) and dict literals as values. Nothing is evaluated: a
//! name, an operator, a call or an f-string as a value is an error that
//! says what was found.
//!
//! [`parse_call_list`] reads a whole `[a(…), b(…)]`, for callers that hold
//! a complete list (rescuing a list written as text); the streaming parser
//! (`parser::python`) reads one call at a time with [`parse_call`].

use serde_json::{Map, Number, Value};

/// Nesting deeper than this is refused (the stack stays small).
const MAX_DEPTH: usize = 64;

/// A call's name and its keyword arguments as a JSON object.
pub type PyCall = (String, Map<String, Value>);

/// Reads a complete call list, `[name(k=v, …), …]` (whitespace around
/// anything, a trailing comma allowed), into its calls in order. Whether
/// the names are declared is the caller's business.
pub fn parse_call_list(text: &str) -> Result<Vec<PyCall>, String> {
    let mut r = Reader::new(text);
    r.ws();
    r.expect(b'[')?;
    let mut calls = Vec::new();
    loop {
        r.ws();
        if r.eat(b']') {
            break;
        }
        calls.push(r.call()?);
        r.ws();
        if r.eat(b',') {
            continue;
        }
        r.expect(b']')?;
        break;
    }
    r.ws();
    r.end()?;
    Ok(calls)
}

/// Reads one complete call, `name(k=v, …)`, surrounding whitespace allowed.
pub fn parse_call(text: &str) -> Result<PyCall, String> {
    let mut r = Reader::new(text);
    r.ws();
    let call = r.call()?;
    r.ws();
    r.end()?;
    Ok(call)
}

struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn new(s: &'a str) -> Self {
        Reader {
            s,
            b: s.as_bytes(),
            i: 0,
            depth: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' => self.i += 1,
                // A line continuation.
                b'\\' if matches!(self.b.get(self.i + 1), Some(b'\n')) => self.i += 2,
                _ => break,
            }
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(format!("expected `{}` {}", b as char, self.found()))
        }
    }

    fn end(&self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(format!("unexpected {}", self.found())),
        }
    }

    /// "at offset N, found `…`" for an error message.
    fn found(&self) -> String {
        let rest = self.s.get(self.i..).unwrap_or_default();
        match rest.chars().next() {
            None => "at the end".to_owned(),
            Some(_) => {
                let shown: String = rest.chars().take(12).collect();
                format!("at offset {}, found `{shown}`", self.i)
            }
        }
    }

    fn ident(&mut self) -> Option<&'a str> {
        let start = self.i;
        match self.peek() {
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => self.i += 1,
            _ => return None,
        }
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        {
            self.i += 1;
        }
        self.s.get(start..self.i)
    }

    /// `name(args)`.
    fn call(&mut self) -> Result<PyCall, String> {
        let name = self
            .ident()
            .ok_or_else(|| format!("expected a call {}", self.found()))?
            .to_owned();
        self.ws();
        self.expect(b'(')?;
        let mut args = Map::new();
        loop {
            self.ws();
            if self.eat(b')') {
                break;
            }
            self.argument(&mut args)?;
            self.ws();
            if self.eat(b',') {
                continue;
            }
            self.expect(b')')?;
            break;
        }
        Ok((name, args))
    }

    /// `key=value` or `**{…}`, added to `args`.
    fn argument(&mut self, args: &mut Map<String, Value>) -> Result<(), String> {
        if self.b.get(self.i..self.i + 2) == Some(b"**") {
            self.i += 2;
            self.ws();
            if self.peek() != Some(b'{') {
                return Err(format!("expected a dict after `**` {}", self.found()));
            }
            let Value::Object(members) = self.value()? else {
                return Err("expected a dict after `**`".to_owned());
            };
            for (key, value) in members {
                insert(args, key, value)?;
            }
            return Ok(());
        }
        let start = self.i;
        let key = self.ident().map(str::to_owned);
        self.ws();
        match key {
            Some(key) if self.peek() == Some(b'=') && self.b.get(self.i + 1) != Some(&b'=') => {
                self.i += 1;
                self.ws();
                let value = self.value()?;
                insert(args, key, value)
            }
            _ => {
                self.i = start;
                Err(format!(
                    "expected a keyword argument (name=value) {}",
                    self.found()
                ))
            }
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        let value = self.value_inner();
        self.depth -= 1;
        value
    }

    fn value_inner(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'"' | b'\'') => self.strings(),
            Some(b'[') => {
                self.i += 1;
                Ok(Value::Array(self.items(b']')?.0))
            }
            Some(b'(') => {
                self.i += 1;
                let (mut items, comma) = self.items(b')')?;
                // `(x)` is x; `(x,)` and `(x, y)` are tuples, read as lists.
                if items.len() == 1 && !comma {
                    Ok(items.pop().unwrap_or(Value::Null))
                } else {
                    Ok(Value::Array(items))
                }
            }
            Some(b'{') => {
                self.i += 1;
                self.dict()
            }
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                let start = self.i;
                let word = self.ident().unwrap_or_default();
                match word {
                    "True" | "true" => Ok(Value::Bool(true)),
                    "False" | "false" => Ok(Value::Bool(false)),
                    "None" | "null" => Ok(Value::Null),
                    "r" | "R" | "u" | "U" if matches!(self.peek(), Some(b'"' | b'\'')) => {
                        self.i = start;
                        self.strings()
                    }
                    _ if matches!(self.peek(), Some(b'"' | b'\'')) => Err(format!(
                        "a `{word}` string prefix is not a plain literal (only r and u are read)"
                    )),
                    _ => {
                        self.i = start;
                        Err(format!("expected a literal, not a name {}", self.found()))
                    }
                }
            }
            _ => Err(format!("expected a value {}", self.found())),
        }
    }

    /// Values up to `close`; whether the last was followed by a comma.
    fn items(&mut self, close: u8) -> Result<(Vec<Value>, bool), String> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            self.ws();
            if self.eat(close) {
                return Ok((items, comma));
            }
            items.push(self.value()?);
            self.ws();
            comma = self.eat(b',');
            if !comma {
                self.expect(close)?;
                return Ok((items, false));
            }
        }
    }

    fn dict(&mut self) -> Result<Value, String> {
        let mut members = Map::new();
        loop {
            self.ws();
            if self.eat(b'}') {
                return Ok(Value::Object(members));
            }
            let key = match self.value()? {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                _ => return Err("a dict key must be a string or a number".to_owned()),
            };
            self.ws();
            self.expect(b':')?;
            self.ws();
            let value = self.value()?;
            // Python keeps the last of repeated keys.
            members.insert(key, value);
            self.ws();
            if !self.eat(b',') {
                self.expect(b'}')?;
                return Ok(Value::Object(members));
            }
        }
    }

    /// One string literal, or several next to each other (joined, as
    /// Python joins them).
    fn strings(&mut self) -> Result<Value, String> {
        let mut out = String::new();
        loop {
            let raw = match self.peek() {
                Some(b'r' | b'R') => {
                    self.i += 1;
                    true
                }
                Some(b'u' | b'U') => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            self.string(raw, &mut out)?;
            let save = self.i;
            self.ws();
            let next = match self.peek() {
                Some(b'"' | b'\'') => true,
                Some(b'r' | b'R' | b'u' | b'U') => {
                    matches!(self.b.get(self.i + 1), Some(b'"' | b'\''))
                }
                _ => false,
            };
            if !next {
                self.i = save;
                return Ok(Value::String(out));
            }
        }
    }

    /// A quoted string at `self.i`, appended to `out` unescaped.
    fn string(&mut self, raw: bool, out: &mut String) -> Result<(), String> {
        let quote = self.peek().unwrap_or(b'"');
        self.i += 1;
        loop {
            let rest = self.s.get(self.i..).unwrap_or_default();
            let Some(c) = rest.chars().next() else {
                return Err("unterminated string".to_owned());
            };
            self.i += c.len_utf8();
            match c {
                '\n' => return Err("a line break inside a string".to_owned()),
                c if c as u32 == u32::from(quote) => return Ok(()),
                '\\' if raw => {
                    out.push('\\');
                    // `\'` does not end a raw string; both bytes stay.
                    if let Some(&b) = self.b.get(self.i)
                        && (b == quote || b == b'\\')
                    {
                        out.push(b as char);
                        self.i += 1;
                    }
                }
                '\\' => self.escape(out)?,
                c => out.push(c),
            }
        }
    }

    /// The escape after a backslash.
    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let rest = self.s.get(self.i..).unwrap_or_default();
        let Some(c) = rest.chars().next() else {
            return Err("unterminated string".to_owned());
        };
        self.i += c.len_utf8();
        match c {
            '\n' => {}
            '\\' | '\'' | '"' => out.push(c),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            'a' => out.push('\u{7}'),
            '0'..='7' => {
                let mut code = c as u32 - '0' as u32;
                for _ in 0..2 {
                    match self.peek() {
                        Some(d @ b'0'..=b'7') => {
                            code = code * 8 + u32::from(d - b'0');
                            self.i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            'x' => out.push(self.hex_char(2)?),
            'u' => {
                let code = self.hex(4)?;
                if (0xD800..0xDC00).contains(&code)
                    && self.b.get(self.i..self.i + 2) == Some(b"\\u")
                {
                    // A surrogate pair, as JSON writes characters past the BMP.
                    let save = self.i;
                    self.i += 2;
                    let low = self.hex(4)?;
                    if (0xDC00..0xE000).contains(&low) {
                        let joined = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                        out.push(char::from_u32(joined).unwrap_or('\u{fffd}'));
                        return Ok(());
                    }
                    self.i = save;
                }
                out.push(
                    char::from_u32(code)
                        .ok_or_else(|| format!("`\\u{code:04x}` is a lone surrogate"))?,
                );
            }
            'U' => out.push(self.hex_char(8)?),
            'N' => return Err("`\\N{…}` escapes are not read".to_owned()),
            // Python keeps an unknown escape as it is.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
        Ok(())
    }

    fn hex(&mut self, digits: usize) -> Result<u32, String> {
        let hex = self
            .s
            .get(self.i..self.i + digits)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| format!("expected {digits} hex digits {}", self.found()))?;
        self.i += digits;
        u32::from_str_radix(hex, 16).map_err(|e| e.to_string())
    }

    fn hex_char(&mut self, digits: usize) -> Result<char, String> {
        let code = self.hex(digits)?;
        char::from_u32(code).ok_or_else(|| format!("`{code:x}` is no character"))
    }

    /// An int or float: sign, digits with `_`, fraction, exponent; `0x`,
    /// `0o` and `0b` ints.
    fn number(&mut self) -> Result<Value, String> {
        let start = self.i;
        let mut text = String::new();
        if let Some(sign @ (b'-' | b'+')) = self.peek() {
            self.i += 1;
            if sign == b'-' {
                text.push('-');
            }
            self.ws();
        }
        let prefixed = match self.b.get(self.i..self.i + 2) {
            Some(b"0x" | b"0X") => Some(16),
            Some(b"0o" | b"0O") => Some(8),
            Some(b"0b" | b"0B") => Some(2),
            _ => None,
        };
        if let Some(radix) = prefixed {
            self.i += 2;
            let digits_start = self.i;
            while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_') {
                self.i += 1;
            }
            let digits: String = self
                .s
                .get(digits_start..self.i)
                .unwrap_or_default()
                .replace('_', "");
            let n = i64::from_str_radix(&digits, radix)
                .map_err(|e| format!("bad number at offset {start}: {e}"))?;
            let n = if text.starts_with('-') { -n } else { n };
            return Ok(Value::Number(n.into()));
        }
        let mut int_digits = 0;
        while let Some(b) = self.peek() {
            match b {
                b'0'..=b'9' => {
                    text.push(b as char);
                    int_digits += 1;
                }
                b'_' if int_digits > 0 => {}
                _ => break,
            }
            self.i += 1;
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.i += 1;
            float = true;
            if int_digits == 0 {
                text.push('0');
            }
            text.push('.');
            let mut frac = 0;
            while let Some(b) = self.peek() {
                match b {
                    b'0'..=b'9' => {
                        text.push(b as char);
                        frac += 1;
                    }
                    b'_' if frac > 0 => {}
                    _ => break,
                }
                self.i += 1;
            }
            if frac == 0 {
                if int_digits == 0 {
                    self.i = start;
                    return Err(format!("expected a value {}", self.found()));
                }
                text.push('0');
            }
        } else if int_digits == 0 {
            self.i = start;
            return Err(format!("expected a number {}", self.found()));
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            float = true;
            self.i += 1;
            text.push('e');
            if let Some(sign @ (b'-' | b'+')) = self.peek() {
                text.push(sign as char);
                self.i += 1;
            }
            let mut exp = 0;
            while let Some(b @ b'0'..=b'9') = self.peek() {
                text.push(b as char);
                self.i += 1;
                exp += 1;
            }
            if exp == 0 {
                return Err(format!(
                    "bad number at offset {start}: an exponent without digits"
                ));
            }
        }
        if matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("bad number {}", self.found()));
        }
        // Python ints have no leading zeros but `0`; JSON numbers neither.
        if !float {
            let digits = text.trim_start_matches('-');
            let trimmed = digits.trim_start_matches('0');
            let digits = if trimmed.is_empty() { "0" } else { trimmed };
            text = if text.starts_with('-') {
                format!("-{digits}")
            } else {
                digits.to_owned()
            };
        } else {
            let negative = text.starts_with('-');
            let body = text.trim_start_matches('-');
            let (int, rest) = body.split_at(body.find(['.', 'e']).unwrap_or(body.len()));
            let int = int.trim_start_matches('0');
            let int = if int.is_empty() { "0" } else { int };
            text = format!("{}{int}{rest}", if negative { "-" } else { "" });
        }
        serde_json::from_str::<Number>(&text)
            .map(Value::Number)
            .map_err(|e| format!("bad number at offset {start}: {e}"))
    }
}

/// Adds a keyword argument; Python refuses one given twice.
fn insert(args: &mut Map<String, Value>, key: String, value: Value) -> Result<(), String> {
    if args.contains_key(&key) {
        return Err(format!("keyword argument `{key}` given twice"));
    }
    args.insert(key, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(text: &str) -> Result<Value, String> {
        parse_call(text).map(|(_, args)| Value::Object(args))
    }

    #[test]
    fn literals_read_as_json() {
        assert_eq!(
            args(
                r#"f(s="a\"b\\c\n\x41\u00e9\U0001F600\101", t='it\'s', n=-12, x=1.5e-3,
                 y=.5, z=1_000, h=0x1F, b=True, c=False, d=None, l=[1, 'a', [True]],
                 u=(1, 2), p=(3), q=(4,), e={"k": {'n': None}, 1: 2}, r=r'a\d', j="a" 'b')"#
            ),
            Ok(
                json!({"s": "a\"b\\c\nAé😀A", "t": "it's", "n": -12, "x": 0.0015,
                "y": 0.5, "z": 1000, "h": 31, "b": true, "c": false, "d": null,
                "l": [1, "a", [true]], "u": [1, 2], "p": 3, "q": [4],
                "e": {"k": {"n": null}, "1": 2}, "r": "a\\d", "j": "ab"})
            )
        );
        assert_eq!(args("f()"), Ok(json!({})));
        assert_eq!(args("f( a = 1 , )"), Ok(json!({"a": 1})));
        assert_eq!(
            args(r#"f(**{"first-name": "Ada"}, age=36)"#),
            Ok(json!({"first-name": "Ada", "age": 36}))
        );
        assert_eq!(
            args("f(a=007, b=1., c=-0.0)"),
            Ok(json!({"a": 7, "b": 1.0, "c": -0.0}))
        );
        assert_eq!(args(r#"f(a="\ud83d\ude00")"#), Ok(json!({"a": "😀"})));
    }

    #[test]
    fn what_is_not_a_literal_is_an_error_that_says_so() {
        for (text, says) in [
            ("f(1)", "keyword argument"),
            ("f(a=b)", "not a name"),
            ("f(a=g(1))", "not a name"),
            ("f(a=1+2)", "expected `)`"),
            ("f(a=f'x')", "string prefix"),
            ("f(a=1, a=2)", "given twice"),
            ("f(a='x", "unterminated"),
            ("f(a='x\n')", "line break"),
            ("f(a=1", "expected `)`"),
            ("f(a=[1 2])", "expected `]`"),
            ("f(a={1})", "expected `:`"),
            ("f(a=1e)", "exponent"),
            ("f(a=12abc)", "bad number"),
            (r#"f(a="\ud800")"#, "surrogate"),
            ("f(a=1) x", "unexpected"),
        ] {
            let err = args(text).expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
        let deep = format!("f(a={}{})", "[".repeat(100), "]".repeat(100));
        assert!(args(&deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn a_whole_list_reads_every_call_in_order() {
        let calls =
            parse_call_list("[get_weather(city=\"Paris\"), get_time(tz='UTC'),\n  noop(),]")
                .unwrap();
        let names: Vec<&str> = calls.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time", "noop"]);
        assert_eq!(Value::Object(calls[1].1.clone()), json!({"tz": "UTC"}));
        assert_eq!(parse_call_list("[]").unwrap(), vec![]);
        assert!(parse_call_list("[a(x=1) b()]").is_err());
        assert!(parse_call_list("[a(x=1)] and text").is_err());
        assert!(parse_call_list("a(x=1)").is_err());
    }
}

//! A validating JSON reader over a byte slice, for the hot path.
//!
//! The stream rewriters read every upstream chunk. Through serde_json, a
//! 220-byte chunk cost about 4,800 instructions: a visitor call per token,
//! every key parsed into a string and matched, every unknown value walked
//! by `IgnoredAny`. [`Reader`] walks the same bytes once, borrowing, and
//! lets the caller pick the fields it needs. It is at least as strict as
//! serde_json: anything serde_json rejects, it rejects, so a fast path built
//! on it never accepts a chunk the general path would refuse (a lone
//! surrogate escape included, even in a value the caller skips, which
//! serde_json's `IgnoredAny` would let pass but its `Value` refuses). Where
//! it is stricter (a key with escapes, nesting past [`MAX_DEPTH`]), its
//! caller simply takes the general path.
//!
//! The fuzz target `chunk_reader` checks the fast chunk reader built on it
//! against serde_json on arbitrary input.

use std::borrow::Cow;

/// Deeper nesting is refused (serde_json's own limit is 128).
pub const MAX_DEPTH: u32 = 64;

/// A cursor over one JSON text. Every method returns `None` on anything it
/// does not accept; the reader is then spent.
pub struct Reader<'a> {
    text: &'a str,
    at: usize,
    depth: u32,
}

/// A string value: its raw bytes between the quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Str<'a> {
    /// With its quotes, as it appears in the text.
    pub quoted: &'a str,
    /// It contains a backslash escape.
    pub escaped: bool,
}

impl<'a> Str<'a> {
    /// The text between the quotes, escapes included.
    pub fn raw(&self) -> &'a str {
        &self.quoted[1..self.quoted.len() - 1]
    }

    /// The decoded string: borrowed unless it holds escapes. `None` for an
    /// escape serde_json refuses to decode (the reader refuses those already).
    pub fn decode(&self) -> Option<Cow<'a, str>> {
        if !self.escaped {
            return Some(Cow::Borrowed(self.raw()));
        }
        serde_json::from_str::<String>(self.quoted)
            .ok()
            .map(Cow::Owned)
    }

    /// The string as a borrowed `&str`: only when it holds no escapes.
    pub fn borrowed(&self) -> Option<&'a str> {
        (!self.escaped).then(|| self.raw())
    }
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which must be UTF-8.
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        Some(Reader {
            text,
            at: 0,
            depth: 0,
        })
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    #[inline]
    fn ws(&mut self) {
        let bytes = self.bytes();
        let mut i = self.at;
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        self.at = i;
    }

    /// Consumes `byte` after whitespace.
    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Skips whitespace.
    pub fn skip_ws(&mut self) {
        self.ws();
    }

    /// The byte offset reached.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The text from `start` (a [`Reader::position`]) to here.
    pub fn since(&self, start: usize) -> &'a str {
        &self.text[start..self.at]
    }

    /// Only whitespace is left.
    pub fn end(mut self) -> Option<()> {
        self.ws();
        (self.at == self.text.len()).then_some(())
    }

    /// The next value is `null`; consumed if so.
    pub fn null(&mut self) -> bool {
        self.ws();
        if self.bytes()[self.at..].starts_with(b"null") && !self.literal_continues(self.at + 4) {
            self.at += 4;
            true
        } else {
            false
        }
    }

    fn literal_continues(&self, at: usize) -> bool {
        self.bytes().get(at).is_some_and(u8::is_ascii_alphanumeric)
    }

    /// An object: `field` is called with each key (escapes refused) and must
    /// consume its value.
    pub fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.sequence(b'{', b'}', |r| {
            r.ws();
            let key = r.string()?.borrowed()?;
            r.eat(b':')?;
            field(r, key)
        })
    }

    /// An array: `element` is called for each element and must consume it.
    pub fn array(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.sequence(b'[', b']', element)
    }

    /// `open`, then `item`s separated by commas, then `close`; one level deeper.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(open)?;
        self.enter()?;
        self.ws();
        if self.peek()? != close {
            loop {
                item(self)?;
                self.ws();
                match self.peek()? {
                    b',' => self.at += 1,
                    b if b == close => break,
                    _ => return None,
                }
            }
        }
        self.at += 1;
        self.depth -= 1;
        Some(())
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Any value, validated and skipped; its text.
    pub fn skip(&mut self) -> Option<&'a str> {
        self.ws();
        let start = self.at;
        match self.peek()? {
            b'{' => self.object(|r, _| r.skip().map(drop))?,
            b'[' => self.array(|r| r.skip().map(drop))?,
            b'"' => {
                self.string()?;
            }
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            b'n' => self.literal("null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        Some(&self.text[start..self.at])
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        if self.bytes()[self.at..].starts_with(word.as_bytes())
            && !self.literal_continues(self.at + word.len())
        {
            self.at += word.len();
            Some(())
        } else {
            None
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, within `f64`'s
    /// range: serde_json refuses a number that overflows it (this refuses
    /// from 1e300 up, short of where the two might round differently).
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        if self.literal_continues(self.at) {
            return None;
        }
        let text = &self.text[start..self.at];
        // Up to 18 digits, an integer is far inside the range.
        if text.len() > 18 || text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            let value: f64 = text.parse().ok()?;
            if value.is_nan() || value.abs() >= 1e300 {
                return None;
            }
        }
        Some(())
    }

    fn digits(&mut self) {
        let bytes = self.bytes();
        let mut i = self.at;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        self.at = i;
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// A non-negative integer that fits a `u64`, written without fraction
    /// or exponent (what serde_json reads into a `u64`).
    pub fn u64(&mut self) -> Option<u64> {
        self.ws();
        let start = self.at;
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) || self.literal_continues(self.at) {
            return None;
        }
        self.text[start..self.at].parse().ok()
    }

    /// A string, validated: no raw control characters, only JSON's escapes.
    pub fn string(&mut self) -> Option<Str<'a>> {
        self.ws();
        let bytes = self.bytes();
        let start = self.at;
        if bytes.get(start) != Some(&b'"') {
            return None;
        }
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            i = plain_run(bytes, i);
            match *bytes.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match *bytes.get(i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => i = unicode_escape(bytes, i)?,
                        _ => return None,
                    }
                }
                // A raw control character.
                _ => return None,
            }
        }
        self.at = i + 1;
        Some(Str {
            quoted: &self.text[start..self.at],
            escaped,
        })
    }
}

/// The end of the `\\uXXXX` escape at `at`, or of the surrogate pair it
/// opens. A lone surrogate is refused wherever it is: serde_json refuses
/// one in any string it reads into a value.
fn unicode_escape(bytes: &[u8], at: usize) -> Option<usize> {
    let hex = |at: usize| -> Option<u16> {
        let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u16::from_str_radix(digits, 16).ok()
    };
    match hex(at + 2)? {
        0xD800..=0xDBFF => {
            if bytes.get(at + 6..at + 8)? != b"\\u" {
                return None;
            }
            matches!(hex(at + 8)?, 0xDC00..=0xDFFF).then_some(at + 12)
        }
        0xDC00..=0xDFFF => None,
        _ => Some(at + 6),
    }
}

/// The end of the run of plain bytes (see [`PLAIN`]) starting at `at`.
///
/// Eight bytes at a time while they last: a word holds no special byte
/// when none of its bytes is below 0x20, a quote or a backslash. Each test
/// is the classic "has a zero/less byte" bit trick; its flags are exact up
/// to the first special byte, so the lowest flag marks it.
#[inline]
fn plain_run(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTE: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASH: u64 = u64::from_ne_bytes([b'\\'; 8]);
    const SPACE: u64 = u64::from_ne_bytes([0x20; 8]);
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    while let Some(word) = bytes.get(at..at + 8) {
        let x = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let special = zero(x ^ QUOTE) | zero(x ^ BACKSLASH) | (x.wrapping_sub(SPACE) & !x & HIGH);
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while at < bytes.len() && PLAIN[bytes[at] as usize] {
        at += 1;
    }
    at
}

/// Bytes a string holds as they are: not `"`, `\\` or a control character.
static PLAIN: [bool; 256] = {
    let mut table = [true; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = false;
        b += 1;
    }
    table[b'"' as usize] = false;
    table[b'\\' as usize] = false;
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn skips(text: &str) -> bool {
        Reader::new(text.as_bytes())
            .and_then(|mut r| {
                r.skip()?;
                r.end()
            })
            .is_some()
    }

    #[test]
    fn accepts_what_serde_json_accepts_on_ordinary_json() {
        for text in [
            r#"{}"#,
            r#"[]"#,
            r#" {"a": [1, -2.5e+3, 0, 0.25, 1E9, true, false, null, "x\"y\\z\u00e9\n"]} "#,
            r#"{"nested":{"deeper":[[{}],[]]},"é":"ünïcode"}"#,
            r#""just a string""#,
            "12",
        ] {
            assert!(skips(text), "{text}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        for text in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "-",
            "1.",
            ".5",
            "1e",
            "+1",
            "tru",
            "nulls",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "\"\x01\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"open",
            "{} {}",
            "[\"a\"]x",
            "1true",
            "NaN",
            "'a'",
            "1.5e710",
            "-1e400",
        ] {
            assert!(!skips(text), "{text:?}");
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text:?}"
            );
        }
        assert!(Reader::new(b"\"\xff\"").is_none(), "not UTF-8");
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(!skips(&deep));
        let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(skips(&ok));
    }

    #[test]
    fn strings_decode_like_serde_json() {
        let mut r = Reader::new(br#""plain" "a\u00e9\n\"b\ud83d\ude00""#).unwrap();
        let plain = r.string().unwrap();
        assert_eq!(plain.decode().unwrap(), "plain");
        assert!(matches!(plain.decode().unwrap(), Cow::Borrowed(_)));
        let escaped = r.string().unwrap();
        assert_eq!(escaped.decode().unwrap(), "aé\n\"b😀");
        assert_eq!(escaped.borrowed(), None);
    }

    #[test]
    fn a_lone_surrogate_is_refused_even_in_a_skipped_value() {
        for text in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud800x""#,
            r#""\ud800\""#,
            r#""\ud800\ud800""#,
            r#"{"skipped":"\uDBFF"}"#,
        ] {
            assert!(!skips(text), "{text}");
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text}"
            );
        }
        for text in [
            r#""\ud800\udc00""#,
            r#""\uDBFF\uDFFF""#,
            r#""\uE000\uFFFF""#,
        ] {
            assert!(skips(text), "{text}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
        }
    }

    #[test]
    fn the_word_scan_stops_where_the_byte_table_does() {
        let slow = |bytes: &[u8], mut at: usize| {
            while at < bytes.len() && PLAIN[bytes[at] as usize] {
                at += 1;
            }
            at
        };
        // Every byte value at every offset of a word, after plain bytes of
        // every kind (ASCII, UTF-8 high bytes, just above the control range).
        for fill in [b'a', 0xc3, 0x7f, 0x20, b'!', b'#', b'[', b']'] {
            for len in 0..20 {
                for special in 0..=255u8 {
                    let mut bytes = vec![fill; len];
                    bytes.push(special);
                    bytes.extend_from_slice(b"tail\"\x01");
                    for start in 0..bytes.len().min(3) {
                        assert_eq!(
                            plain_run(&bytes, start),
                            slow(&bytes, start),
                            "{fill:#x} x{len} then {special:#x} from {start}"
                        );
                    }
                }
            }
        }
        assert_eq!(plain_run(b"", 0), 0);
        assert_eq!(plain_run(b"abcdefghijklmnopq", 0), 17);
    }

    #[test]
    fn u64_is_an_integer_without_fraction_or_exponent() {
        let read = |t: &str| Reader::new(t.as_bytes()).and_then(|mut r| r.u64());
        assert_eq!(read("0"), Some(0));
        assert_eq!(read(" 42"), Some(42));
        assert_eq!(read("18446744073709551615"), Some(u64::MAX));
        for t in ["18446744073709551616", "1.0", "1e2", "-1", "01", "1x"] {
            assert_eq!(read(t), None, "{t}");
        }
    }
}

//! The chunks of one stream differ in one string: a stencil reads them by
//! comparing bytes instead of parsing.
//!
//! An upstream writes every content chunk of a stream the same way: the same
//! `id`, `created`, `model`, the same keys in the same order, and only the
//! delta's `content` (or a call's `arguments`) changes. Once one chunk has
//! been read in full, the next is that chunk again if it has the same bytes
//! before and after that string value and a valid string token in between.
//! JSON's grammar makes this exact: swapping one string token for another
//! in a valid text gives a valid text with the same structure, and every
//! other value is byte for byte the one already read. So a fitting chunk
//! costs two comparisons and one string scan, and anything that does not
//! fit (a finish chunk, a varying field such as an obfuscation pad) is read
//! in full as before.
//!
//! The fuzz target `chunk_stencil` checks a fit against a full read of the
//! same text.

use std::ops::Range;

use crate::json::{Reader, Str};

/// A longer chunk is not kept: the stencil lives as long as its stream, and
/// a chunk that size is rare enough to read in full.
pub const MAX_STENCIL_BYTES: usize = 16 * 1024;

/// The bytes of a chunk read in full, with the span of one string token:
/// the hole later chunks may fill differently.
#[derive(Debug, Default)]
pub struct Stencil {
    bytes: Vec<u8>,
    hole: Range<usize>,
    /// Where `choices` is; it holds the hole.
    choices: Range<usize>,
}

/// A chunk that fits: its string in the hole and where its `choices` are.
#[derive(Debug)]
pub struct Fit<'a> {
    pub text: Str<'a>,
    data: &'a [u8],
    choices: Range<usize>,
}

impl Stencil {
    /// Cuts a stencil from `data` (a chunk [`crate::upstream::plain::read`]
    /// accepted) around `hole`, a string token inside `choices`. A chunk
    /// over [`MAX_STENCIL_BYTES`] leaves the stencil empty.
    pub fn learn(&mut self, data: &[u8], hole: Range<usize>, choices: Range<usize>) {
        debug_assert!(choices.start <= hole.start && hole.end <= choices.end);
        if data.len() > MAX_STENCIL_BYTES {
            *self = Stencil::default();
            return;
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(data);
        self.hole = hole;
        self.choices = choices;
    }

    /// `data` read through the stencil: `None` unless it is the learned
    /// chunk with another string token in the hole.
    pub fn fit<'a>(&self, data: &'a [u8]) -> Option<Fit<'a>> {
        if self.bytes.is_empty() {
            return None;
        }
        let before = &self.bytes[..self.hole.start];
        let after = &self.bytes[self.hole.end..];
        let end = data.len().checked_sub(after.len())?;
        if end < before.len() || !data.starts_with(before) || !data.ends_with(after) {
            return None;
        }
        // Whitespace around the token is whitespace around a value: as valid.
        let mut token = Reader::new(&data[before.len()..end])?;
        let text = token.string()?;
        token.end()?;
        let tail = self.bytes.len() - self.choices.end;
        Some(Fit {
            text,
            data,
            choices: self.choices.start..data.len() - tail,
        })
    }
}

impl Fit<'_> {
    /// The bytes before and after the value of `choices`.
    pub fn around_choices(&self) -> (&[u8], &[u8]) {
        (
            &self.data[..self.choices.start],
            &self.data[self.choices.end..],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::plain;

    const FIRST: &str = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Let "},"logprobs":null,"finish_reason":null}]}"#;

    fn stencil(data: &str) -> Stencil {
        let read = plain::read(data.as_bytes()).unwrap();
        let mut stencil = Stencil::default();
        stencil.learn(
            data.as_bytes(),
            read.holes.content.clone().unwrap(),
            read.choices_span(),
        );
        stencil
    }

    #[test]
    fn a_chunk_that_differs_only_in_the_string_fits() {
        let stencil = stencil(FIRST);
        for (next, text) in [
            (FIRST.replace("\"Let \"", "\"me \""), "me "),
            (FIRST.replace("\"Let \"", "\"\""), ""),
            (
                FIRST.replace("\"Let \"", r#""a \"q\" \n é""#),
                r#"a \"q\" \n é"#,
            ),
            (FIRST.replace("\"Let \"", r#"  "x" "#), "x"),
        ] {
            let fit = stencil.fit(next.as_bytes()).expect(&next);
            assert_eq!(fit.text.raw(), text);
            let full = plain::read(next.as_bytes()).unwrap();
            assert_eq!(
                fit.text.decode(),
                full.chunk.choices[0].delta.content.clone()
            );
            assert_eq!(fit.around_choices(), full.around_choices());
        }
    }

    #[test]
    fn anything_else_does_not_fit() {
        let stencil = stencil(FIRST);
        for next in [
            FIRST.replace("\"Let \"", "null"),
            FIRST.replace("\"Let \"", "1"),
            FIRST.replace("\"Let \"", r#""a" "b""#),
            FIRST.replace("\"Let \"", r#""a","x":"b""#),
            FIRST.replace("\"Let \"", r#""a\x""#),
            FIRST.replace("\"Let \"", "\"\u{1}\""),
            FIRST.replace("\"Let \"", "\"open"),
            FIRST.replace("\"Let \"", ""),
            FIRST.replace("\"c\"", "\"d\""),
            FIRST.replace("null}]}", "\"stop\"}]}"),
            format!("{FIRST} "),
            "{}".into(),
        ] {
            assert!(stencil.fit(next.as_bytes()).is_none(), "{next}");
        }
        assert!(Stencil::default().fit(FIRST.as_bytes()).is_none());
        // A chunk too large to keep leaves nothing behind.
        let mut forgotten = self::stencil(FIRST);
        let long = FIRST.replace("Let ", &"x".repeat(MAX_STENCIL_BYTES));
        let read = plain::read(long.as_bytes()).unwrap();
        let hole = read.holes.content.clone().unwrap();
        forgotten.learn(long.as_bytes(), hole, read.choices_span());
        assert_eq!(forgotten.bytes.capacity(), 0);
        assert!(forgotten.fit(FIRST.as_bytes()).is_none());
        assert!(forgotten.fit(long.as_bytes()).is_none());
        let mut bad = FIRST.replace("\"Let \"", "\"é\"").into_bytes();
        let at = bad.iter().position(|&b| b == 0xa9).unwrap();
        bad[at] = 0xff;
        assert!(stencil.fit(&bad).is_none(), "not UTF-8");
    }
}

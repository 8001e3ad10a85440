//! Incremental SSE decoding (WHATWG HTML, "Server-sent events", 9.2.6).
//!
//! Fed bytes split anywhere (inside a line, inside a CRLF, inside a
//! multi-byte UTF-8 character), it yields each event once its blank line has
//! arrived. Only `data` matters to toolgate; `event`, `id` and `retry` fields
//! are kept as the event's name where present and otherwise ignored, and
//! comments (`: keep-alive`) are dropped.

use memchr::memchr2;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, when the upstream sent one.
    pub name: Option<String>,
    /// The `data:` lines joined with `\n`, as bytes (UTF-8 is checked by
    /// whoever parses the payload).
    pub data: Vec<u8>,
}

/// Upper bound on one line: an upstream that never sends a newline must not
/// make the gateway buffer without limit.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Upper bound on one event's `data`, all its lines together: an upstream
/// that sends `data:` lines and never a blank line must not either.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// A dispatched event's buffer up to this size is kept for the next event.
const MAX_RECYCLED_BYTES: usize = 64 * 1024;

/// Why decoding stopped; the stream cannot continue after either.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("SSE line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("SSE event larger than {MAX_EVENT_BYTES} bytes")]
    EventTooLarge,
}

impl DecodeError {
    /// The error `code` the client sees in the stream's error event.
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::LineTooLong => "upstream_invalid_event",
            DecodeError::EventTooLarge => "upstream_stream_too_large",
        }
    }
}

#[derive(Debug, Default)]
pub struct Decoder {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The last byte seen was `\r`: a following `\n` belongs to it.
    after_cr: bool,
    event: Event,
    has_data: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `input`, appending every completed event to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
        if self.after_cr && input.first() == Some(&b'\n') {
            input = &input[1..];
        }
        self.after_cr = false;
        while let Some(end) = memchr2(b'\n', b'\r', input) {
            let line_end = input[end];
            if self.line.is_empty() {
                self.process_line(&input[..end], out)?;
            } else {
                self.line.extend_from_slice(&input[..end]);
                let line = std::mem::take(&mut self.line);
                let processed = self.process_line(&line, out);
                self.line = line;
                self.line.clear();
                processed?;
            }
            input = &input[end + 1..];
            if line_end == b'\r' {
                match input.first() {
                    Some(b'\n') => input = &input[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if self.line.len() + input.len() > MAX_LINE_BYTES {
            return Err(DecodeError::LineTooLong);
        }
        self.line.extend_from_slice(input);
        Ok(())
    }

    /// Hands back a dispatched event's `data` for the next event to fill, so
    /// a stream of small events reuses one buffer. Large buffers are let go.
    pub fn recycle(&mut self, mut data: Vec<u8>) {
        if self.event.data.capacity() == 0 && data.capacity() <= MAX_RECYCLED_BYTES {
            data.clear();
            self.event.data = data;
        }
    }

    /// End of the byte stream: an event not terminated by a blank line is
    /// discarded, as the SSE specification requires.
    pub fn finish(&mut self) -> bool {
        let incomplete = self.has_data || !self.line.is_empty();
        *self = Decoder::default();
        incomplete
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> Result<(), DecodeError> {
        if line.is_empty() {
            if self.has_data {
                out.push(std::mem::take(&mut self.event));
                self.has_data = false;
            } else {
                self.event.name = None;
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.event.data.len() + 1 + value.len() > MAX_EVENT_BYTES {
                    // Nothing of the event will be used: free it now.
                    self.event = Event::default();
                    self.has_data = false;
                    return Err(DecodeError::EventTooLarge);
                }
                if self.has_data {
                    self.event.data.push(b'\n');
                }
                self.event.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event.name = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], split: &[usize]) -> Vec<Event> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &s in split.iter().chain(std::iter::once(&input.len())) {
            d.feed(&input[start..s], &mut out).unwrap();
            start = s;
        }
        out
    }

    const STREAM: &[u8] = b": hello\n\ndata: {\"a\":\"\xc3\xa9\xe2\x82\xac\"}\r\n\r\nevent: x\ndata: 1\ndata:2\n\ndata: [DONE]\r\r";

    fn expected() -> Vec<Event> {
        vec![
            Event {
                name: None,
                data: "{\"a\":\"é€\"}".as_bytes().to_vec(),
            },
            Event {
                name: Some("x".into()),
                data: b"1\n2".to_vec(),
            },
            Event {
                name: None,
                data: b"[DONE]".to_vec(),
            },
        ]
    }

    #[test]
    fn a_recycled_buffer_is_reused_and_never_mixes_events() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        d.feed(b"data: first event\n\n", &mut out).unwrap();
        let data = out.pop().unwrap().data;
        let at = data.as_ptr();
        d.recycle(data);
        d.feed(b"data: x\n\n", &mut out).unwrap();
        let event = out.pop().unwrap();
        assert_eq!(event.data, b"x");
        assert_eq!(event.data.as_ptr(), at, "the same buffer");
        // An event being filled keeps its own buffer.
        d.feed(b"data: a\n", &mut out).unwrap();
        d.recycle(b"stale".to_vec());
        d.feed(b"data: b\n\n", &mut out).unwrap();
        assert_eq!(out.pop().unwrap().data, b"a\nb");
        // A large buffer is let go.
        d.recycle(Vec::with_capacity(MAX_RECYCLED_BYTES + 1));
        assert_eq!(d.event.data.capacity(), 0);
    }

    #[test]
    fn whole_input() {
        assert_eq!(decode_in_pieces(STREAM, &[]), expected());
    }

    #[test]
    fn every_two_way_split() {
        for i in 0..=STREAM.len() {
            assert_eq!(decode_in_pieces(STREAM, &[i]), expected(), "split at {i}");
        }
    }

    #[test]
    fn every_three_way_split() {
        for i in 0..=STREAM.len() {
            for j in i..=STREAM.len() {
                assert_eq!(
                    decode_in_pieces(STREAM, &[i, j]),
                    expected(),
                    "split at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn unterminated_event_is_reported_not_dispatched() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        d.feed(b"data: {\"partial\"", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(d.finish());
    }

    #[test]
    fn endless_line_is_an_error() {
        let mut d = Decoder::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut out = Vec::new();
        let mut result = Ok(());
        for _ in 0..17 {
            result = d.feed(&chunk, &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(DecodeError::LineTooLong));
    }

    #[test]
    fn endless_event_is_an_error_and_its_data_is_freed() {
        // Short lines, but never the blank line that ends the event.
        let mut d = Decoder::new();
        let mut chunk = b"data: ".to_vec();
        chunk.extend(std::iter::repeat_n(b'x', 64 * 1024));
        chunk.push(b'\n');
        let mut out = Vec::new();
        let mut fed = 0;
        let result = loop {
            if let Err(e) = d.feed(&chunk, &mut out) {
                break e;
            }
            fed += chunk.len();
            assert!(fed <= MAX_EVENT_BYTES + chunk.len(), "never stopped");
        };
        assert_eq!(result, DecodeError::EventTooLarge);
        assert_eq!(result.code(), "upstream_stream_too_large");
        assert!(out.is_empty());
        assert!(d.event.data.is_empty() && d.event.data.capacity() == 0);
    }
}

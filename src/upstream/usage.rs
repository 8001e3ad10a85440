//! What an upstream's answer says of itself: the tokens it used, the model
//! that answered, why it finished. Read (sans IO) from copies of the
//! answer's first and last 2 KiB, where every API this gateway speaks puts
//! them: a chat completion's `usage` (last chunk, or the end of a whole
//! answer), a Responses `response.completed`, Anthropic's `message_start`
//! (input) and `message_delta` (output). What the middle of a long answer
//! holds is never kept, and no frame is held: a held frame would pin the
//! connection's read buffer for as long as the answer lasts.

use std::sync::LazyLock;

use memchr::memmem::{Finder, FinderRev};
use serde::Deserialize;

/// The bytes kept from the start of an answer.
const HEAD: usize = 2 * 1024;
/// The bytes kept from the end of an answer (at least; up to [`TAIL_ROOM`]
/// between compactions).
const TAIL: usize = 2 * 1024;
/// The tail's one allocation: half of [`TAIL`] to spare, so the kept bytes
/// move at most once per `TAIL / 2` bytes pushed. Both copies are allocated
/// at their full size once, never grown: an open stream holds at most
/// `HEAD + TAIL_ROOM` bytes here.
const TAIL_ROOM: usize = TAIL + TAIL / 2;

static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
static MODEL: LazyLock<FinderRev<'static>> = LazyLock::new(|| FinderRev::new(b"\"model\""));
static FINISH: LazyLock<[Finder<'static>; 2]> = LazyLock::new(|| {
    [
        Finder::new(b"\"finish_reason\""),
        Finder::new(b"\"stop_reason\""),
    ]
});

#[derive(Debug, Default)]
pub struct Scan {
    head: Vec<u8>,
    tail: Vec<u8>,
    /// Whether bytes between head and tail were let go: they are then read apart.
    gap: bool,
}

/// What the answer reported; `None` where it said nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Seen {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub model: Option<String>,
    pub finish_reasons: Vec<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl Scan {
    /// Notes one frame of the answer (its bytes are copied within the bounds).
    pub fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < HEAD {
            if self.head.capacity() == 0 {
                self.head.reserve_exact(HEAD);
            }
            let n = (HEAD - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if self.tail.capacity() == 0 {
            self.tail.reserve_exact(TAIL_ROOM);
        }
        if data.len() >= TAIL {
            self.gap |= !self.tail.is_empty() || data.len() > TAIL;
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - TAIL..]);
            return;
        }
        if self.tail.len() + data.len() > TAIL_ROOM {
            // The last bytes that, with `data`, make TAIL.
            let gone = self.tail.len() - (TAIL - data.len()).min(self.tail.len());
            self.tail.drain(..gone);
            self.gap |= gone > 0;
        }
        self.tail.extend_from_slice(data);
    }

    /// What the kept bytes say: the usage always, the model and finish
    /// reasons when `details` (a span wants them).
    pub fn finish(&self, details: bool) -> Seen {
        let mut seen = Seen::default();
        if self.tail.is_empty() {
            read(&self.head, details, &mut seen);
        } else if self.gap {
            read(&self.head, details, &mut seen);
            read(&self.tail, details, &mut seen);
        } else {
            // Contiguous: read as one text, so nothing split by a frame is missed.
            let mut all = Vec::with_capacity(self.head.len() + self.tail.len());
            all.extend_from_slice(&self.head);
            all.extend_from_slice(&self.tail);
            read(&all, details, &mut seen);
        }
        seen
    }
}

/// Reads every `"usage"` of `text` (the later ones winning) and, with
/// `details`, its last `"model"` and every finish reason.
fn read(text: &[u8], details: bool, seen: &mut Seen) {
    for at in USAGE.find_iter(text) {
        if let Some(value) = value_after(text, at + 7)
            && value.first() == Some(&b'{')
            && let Some(Ok(usage)) = serde_json::Deserializer::from_slice(value)
                .into_iter::<Usage>()
                .next()
        {
            if let Some(n) = usage.prompt_tokens.or(usage.input_tokens) {
                seen.input_tokens = Some(n);
            }
            if let Some(n) = usage.completion_tokens.or(usage.output_tokens) {
                seen.output_tokens = Some(n);
            }
        }
    }
    if !details {
        return;
    }
    // Every chunk of a stream names the model: the last one is enough.
    if let Some(model) = MODEL
        .rfind_iter(text)
        .find_map(|at| string_after(text, at + 7))
    {
        seen.model = Some(model);
    }
    for key in FINISH.iter() {
        for at in key.find_iter(text) {
            if let Some(reason) = string_after(text, at + key.needle().len())
                && !seen.finish_reasons.contains(&reason)
            {
                seen.finish_reasons.push(reason);
            }
        }
    }
}

/// The text after `key_end` once a `:` and whitespace are skipped.
fn value_after(text: &[u8], key_end: usize) -> Option<&[u8]> {
    let rest = text.get(key_end..)?;
    let rest = rest.trim_ascii_start().strip_prefix(b":")?;
    Some(rest.trim_ascii_start())
}

fn string_after(text: &[u8], key_end: usize) -> Option<String> {
    let value = value_after(text, key_end)?;
    if value.first() != Some(&b'"') {
        return None;
    }
    serde_json::Deserializer::from_slice(value)
        .into_iter::<String>()
        .next()?
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(frames: &[&str]) -> Seen {
        let mut scan = Scan::default();
        for f in frames {
            scan.push(f.as_bytes());
        }
        scan.finish(true)
    }

    #[test]
    fn a_chat_stream_s_usage_model_and_finish_are_read_at_any_split() {
        let text = "data: {\"id\":\"c\",\"model\":\"qwen\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"say \\\"usage\\\": {\"}}]}\n\n\
            data: {\"id\":\"c\",\"model\":\"qwen\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
            data: {\"id\":\"c\",\"model\":\"qwen\",\"choices\":[],\"usage\":{\"prompt_tokens\":31,\"completion_tokens\":7,\"total_tokens\":38}}\n\ndata: [DONE]\n\n";
        let want = Seen {
            input_tokens: Some(31),
            output_tokens: Some(7),
            model: Some("qwen".into()),
            finish_reasons: vec!["tool_calls".into()],
        };
        for cut in 0..text.len() {
            assert_eq!(scan(&[&text[..cut], &text[cut..]]), want, "cut at {cut}");
        }
    }

    #[test]
    fn anthropic_input_comes_from_the_start_and_output_from_the_end() {
        let start = format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"model\":\"claude\",\"usage\":{{\"input_tokens\":25,\"output_tokens\":1}}}}}}\n\n{}",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        let middle = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n".repeat(200);
        let end = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n";
        let seen = scan(&[&start, &middle, end]);
        assert_eq!(seen.input_tokens, Some(25));
        assert_eq!(seen.output_tokens, Some(15));
        assert_eq!(seen.model.as_deref(), Some("claude"));
        assert_eq!(seen.finish_reasons, ["end_turn"]);
    }

    #[test]
    fn a_whole_responses_answer_and_an_answer_without_usage() {
        let seen = scan(&[
            r#"{"id":"resp_1","object":"response","model":"gpt","output":[],"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":0},"output_tokens":3}}"#,
        ]);
        assert_eq!((seen.input_tokens, seen.output_tokens), (Some(9), Some(3)));
        let none = scan(&[
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":null}],\"usage\":null}\n\n",
        ]);
        assert_eq!(none, Seen::default());
    }

    #[test]
    fn a_whole_answer_in_one_long_frame_is_read_at_its_end() {
        let text = format!(
            r#"{{"model":"m1","choices":[{{"index":0,"message":{{"content":"{}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":5,"completion_tokens":70000}}}}"#,
            "x".repeat(70_000)
        );
        let seen = scan(&[&text]);
        assert_eq!(
            (seen.input_tokens, seen.output_tokens),
            (Some(5), Some(70000))
        );
        assert_eq!(seen.model.as_deref(), Some("m1"));
        assert_eq!(seen.finish_reasons, ["stop"]);
    }

    #[test]
    fn the_kept_tail_is_bounded() {
        let mut s = Scan::default();
        for _ in 0..1000 {
            s.push(&[b'x'; 1000]);
        }
        assert!(
            s.head.len() == HEAD && s.tail.len() <= TAIL_ROOM && s.tail.len() >= TAIL,
            "{}",
            s.tail.len()
        );
        s.push(&vec![b'y'; 1 << 20]);
        assert_eq!(s.tail.len(), TAIL);
        // Frames of every size: the copies never grow past their one allocation.
        for size in [1, 7, 300, 1023, 1024, 1500, 2047] {
            for _ in 0..20 {
                s.push(&vec![b'z'; size]);
                assert!(s.tail.len() >= TAIL && s.tail.len() <= TAIL_ROOM);
            }
        }
        assert_eq!(
            (s.head.capacity(), s.tail.capacity()),
            (HEAD, TAIL_ROOM),
            "an open stream's copies are allocated once, at their bound"
        );
    }

    #[test]
    fn a_short_answer_is_kept_whole_and_read_as_one_text() {
        // Under TAIL_ROOM after the head: nothing is let go.
        let frames = [
            "x".repeat(HEAD),
            "y".repeat(1000),
            "\"usage\"".into(),
            ":{\"prompt_tokens\":4}".into(),
        ];
        let mut s = Scan::default();
        for f in &frames {
            s.push(f.as_bytes());
        }
        assert!(!s.gap);
        assert_eq!(s.finish(false).input_tokens, Some(4));
    }
}

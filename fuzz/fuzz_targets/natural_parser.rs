//! The natural-text call parser in every syntax (and rescue, all at once),
//! fed arbitrary text in pieces: it never panics, and text, calls and invalid
//! blocks together hold no more than the input (nothing invented, nothing
//! doubled).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::natural::parser::{Event, Parser, ParserOptions};
use toolgate::natural::syntax::Syntax;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let syntax = match mode % 4 {
        0 => Syntax::Tag,
        1 => Syntax::ToolCall,
        2 => Syntax::Bracket,
        _ => Syntax::Python,
    };
    let options = ParserOptions {
        syntax,
        skip_think: mode & 4 != 0,
        max_block_bytes: 4096,
        rescue: mode & 8 != 0,
    };
    let mut parser = Parser::new(["a", "ab", "Get_Weather", "tool_call", "think"], options);
    let mut events = Vec::new();
    // Pieces of 1 to 16 bytes (from the mode byte), cut at char boundaries.
    let step = usize::from(mode >> 4) + 1;
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + step).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        parser.feed(&text[start..end], &mut events);
        start = end;
    }
    parser.finish(&mut events);
    let out: usize = events
        .iter()
        .map(|e| match e {
            Event::Text(t) => t.len(),
            Event::Invalid(b) => b.raw.len(),
            Event::Call(c) => c.raw.len(),
        })
        .sum();
    assert!(out <= text.len(), "{out} bytes out of {}", text.len());
});

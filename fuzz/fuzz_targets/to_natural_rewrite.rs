//! to_natural's history rewrite (natural text back into native calls and
//! results) of any body: never a panic, and the new body grows at most
//! linearly. The smallest call the text can hold (`<a>{}</a>`, 9 bytes)
//! becomes a native call with an id, a type and a name, under 300 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::natural::syntax::Syntax;
use toolgate::to_natural::history::{HistoryOptions, rewrite};

const PER_BYTE: usize = 40;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let options = HistoryOptions {
        syntax: match mode % 3 {
            0 => Syntax::Tag,
            1 => Syntax::ToolCall,
            _ => Syntax::Bracket,
        },
        max_tool_result_chars: 20_000,
    };
    if let Ok(Some(out)) = rewrite(body, &options) {
        let bound = PER_BYTE * body.len() + 4096;
        assert!(
            out.len() <= bound,
            "{} bytes from {}",
            out.len(),
            body.len()
        );
    }
});

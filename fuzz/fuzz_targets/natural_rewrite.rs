//! The natural-mode request rewrite of any body: an answer (a new body or a
//! 400) and never a panic. The new body is the instruction block (at most
//! `MAX_BLOCK_BYTES`) plus the history as text, which grows at most
//! `PER_BYTE` times the input: calls' arguments are pretty-printed, and
//! serde_json nests at most 128 levels, so one input byte becomes at most
//! 2 + 2 × 128 bytes of indentation and line break.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::natural::prompt::MAX_BLOCK_BYTES;
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};
use toolgate::natural::syntax::Syntax;

const PER_BYTE: usize = 2 + 2 * 128 + 16;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let options = NaturalOptions {
        syntax: match mode % 4 {
            0 => Syntax::Tag,
            1 => Syntax::ToolCall,
            2 => Syntax::Bracket,
            _ => Syntax::Python,
        },
        ..NaturalOptions::default()
    };
    let cache = ContractCache::default();
    if let Ok(Rewrite::Rewritten { body: out, .. }) = rewrite(body, &options, &cache) {
        let bound = MAX_BLOCK_BYTES + PER_BYTE * body.len() + 4096;
        assert!(
            out.len() <= bound,
            "{} bytes from {}",
            out.len(),
            body.len()
        );
    }
});

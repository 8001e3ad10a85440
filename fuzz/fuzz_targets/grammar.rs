//! The constrained-call grammar (`constrain = "gbnf"`) of any declared
//! tools: a grammar or a 400, never a panic, and never more than its
//! budget. The text grows at most linearly with the tools' JSON: every
//! distinct subschema is written once, as at most a few rules whose names
//! are bounded by the depth the writer models (13 levels), so one schema
//! byte costs at most `PER_BYTE` bytes of grammar. libFuzzer's `-timeout`
//! (`fuzz/run.sh`) flags any input whose grammar takes seconds to write.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::natural::grammar::{Budget, for_tools};
use toolgate::natural::policy::{Choice, Policy};
use toolgate::natural::syntax::Syntax;
use toolgate::natural::tools::ToolSet;

const PER_BYTE: usize = 128;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let Ok(tools) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let Ok(set) = ToolSet::from_request(Some(&tools), None) else {
        return;
    };
    let syntax = match mode % 4 {
        0 => Syntax::Tag,
        1 => Syntax::ToolCall,
        2 => Syntax::Bracket,
        _ => Syntax::Python,
    };
    let policy = Policy {
        choice: if mode & 4 == 0 {
            Choice::Auto
        } else {
            Choice::Required
        },
        parallel: mode & 8 == 0,
        ..Policy::default()
    };
    if let Ok(Some(grammar)) = for_tools(&set, syntax, &policy) {
        let written = grammar.gbnf.len();
        assert!(written <= Budget::DEFAULT.bytes, "{written} bytes");
        let bound = PER_BYTE * body.len() + 16 * 1024;
        assert!(written <= bound, "{written} bytes from {}", body.len());
    }
});

//! Example arguments synthesised from any JSON schema (self-references
//! included) fit their byte budget as written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::schema_example::{self as example, MAX_EXAMPLE_BYTES};

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let example = example::bounded(Some(&schema));
    let written = serde_json::to_string_pretty(&example.value).unwrap().len();
    assert!(written <= MAX_EXAMPLE_BYTES, "{written} bytes");
});

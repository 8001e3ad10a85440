//! The borrowed chunk reader both stream rewriters take their fast path on,
//! against serde_json: whenever it reads a chunk, serde_json reads the same
//! chunk (whole-text validity included) to the same values, and the fields
//! it writes back are the chunk. It may decline what serde_json accepts
//! (the general path takes those), never the reverse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::upstream::plain;

fuzz_target!(|data: &[u8]| {
    let Some(fast) = plain::read(data) else {
        return;
    };
    assert_eq!(Some(&fast.chunk), plain::reference(data).as_ref());
    let whole: serde_json::Value =
        serde_json::from_slice(data).expect("accepted text must be valid JSON");
    let (before, after) = fast.around_choices();
    let again = [before, fast.choices_text(), after].concat();
    let again: serde_json::Value = serde_json::from_slice(&again).expect("written back as JSON");
    assert_eq!(again, whole);
});

//! The SSE decoder, fed arbitrary bytes split at any point: it never panics,
//! and every event's data came from the input (no byte invented or doubled).
//! A name's bytes that are not UTF-8 become U+FFFD, so a name is counted in
//! characters: each came from at least one input byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::sse::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let cut = (usize::from(cut) * input.len() / 255).min(input.len());
    let mut decoder = Decoder::new();
    let mut events = Vec::new();
    if decoder.feed(&input[..cut], &mut events).is_ok() {
        let _ = decoder.feed(&input[cut..], &mut events);
    }
    let yielded: usize = events
        .iter()
        .map(|e| e.data.len() + e.name.as_ref().map_or(0, |n| n.chars().count()))
        .sum();
    assert!(
        yielded <= input.len(),
        "{yielded} bytes out of {}",
        input.len()
    );
});

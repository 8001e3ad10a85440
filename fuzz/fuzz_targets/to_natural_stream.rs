//! to_natural's stream renderer, fed any events (one per input line): never
//! a panic, and the output grows at most linearly: arguments are
//! pretty-printed at most `MAX_BYTES_PER_INPUT_BYTE` per byte, and each
//! event adds one chunk envelope.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use toolgate::natural::syntax::Syntax;
use toolgate::to_natural::RenderOptions;
use toolgate::to_natural::pretty::MAX_BYTES_PER_INPUT_BYTE;
use toolgate::to_natural::stream::StreamRenderer;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    let mut renderer = StreamRenderer::new(
        RenderOptions {
            syntax: match mode % 3 {
                0 => Syntax::Tag,
                1 => Syntax::ToolCall,
                _ => Syntax::Bracket,
            },
            pretty: mode & 4 != 0,
            separator: "\n".into(),
        },
        // Whether the client asked for usage.
        mode & 8 != 0,
    );
    let mut out = BytesMut::new();
    let mut events = 0;
    for line in input.split(|&b| b == b'\n') {
        renderer.on_event(line, &mut out);
        events += 1;
    }
    renderer.finish(&mut out);
    let bound = (MAX_BYTES_PER_INPUT_BYTE + 8) * input.len() + 512 * (events + 1);
    assert!(
        out.len() <= bound,
        "{} bytes from {}",
        out.len(),
        input.len()
    );
});

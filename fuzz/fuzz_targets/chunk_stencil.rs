//! The stencil against the full chunk reader: the input is two chunks, one
//! line each. When the second fits the stencil cut from the first, the full
//! reader accepts the second too, reads exactly the first chunk with the
//! hole's string changed, and both see the same bytes around `choices`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::upstream::plain;
use toolgate::upstream::stencil::Stencil;

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == b'\n') else {
        return;
    };
    let (first, second) = (&data[..split], &data[split + 1..]);
    let Some(read) = plain::read(first) else {
        return;
    };
    for arguments in [false, true] {
        let hole = if arguments {
            read.holes.arguments.clone()
        } else {
            read.holes.content.clone()
        };
        let Some(hole) = hole else { continue };
        let mut stencil = Stencil::default();
        stencil.learn(first, hole, read.choices_span());
        let Some(fit) = stencil.fit(second) else {
            continue;
        };
        let Some(text) = fit.text.decode() else {
            // Not decodable: the full reader must refuse it as well.
            assert!(plain::read(second).is_none());
            continue;
        };
        let full = plain::read(second).expect("a chunk that fits is a chunk");
        let mut expected = read.chunk.clone();
        let delta = &mut expected.choices[0].delta;
        let slot = if arguments {
            let call = delta.tool_calls.as_mut().and_then(|c| c.last_mut());
            &mut call.and_then(|c| c.function.as_mut()).unwrap().arguments
        } else {
            &mut delta.content
        };
        *slot = Some(text);
        assert_eq!(full.chunk, expected);
        assert_eq!(fit.around_choices(), full.around_choices());
    }
});

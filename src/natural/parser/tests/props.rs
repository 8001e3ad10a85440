//! Property tests: any chunking gives the same events as feeding the whole
//! input, the input is always reproduced, the hold-back rule holds after every
//! feed (checked inside `run_chunks`), and nothing panics.

use proptest::prelude::*;

use super::{merged, options, reproduce, run_chunks};
use crate::natural::parser::ParserOptions;
use crate::natural::syntax::Syntax;

/// Pieces that exercise every state: openers, partial openers, fences, JSON
/// fragments, think tags, bracket parts, CRLF and multi-byte text.
const PIECES: &[&str] = &[
    "<GetWeather>",
    "</GetWeather>",
    "<GetWea",
    "<GetWeatherX>",
    "<getweather>",
    "<BookRestaurant>",
    "</BookRestaurant>",
    "<tool_call name=\"GetWeather\">",
    "<tool_call name='weather' >",
    "</tool_call>",
    "<tool_call",
    "<tool_call>",
    "{\"name\": \"GetWeather\", \"arguments\": {\"l\": 1}}",
    "<|python_tag|>",
    "<|py",
    "<|eom_id|>",
    "[TOOL_CALLS]",
    "[TOOL",
    "GetWeather[ARGS]",
    "[CALL_ID]a1",
    ";",
    "```json\n",
    "```\n",
    "```",
    "\r\n",
    "\n",
    " ",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\",
    ":",
    ",",
    "{\"a\": 1}",
    "{\"q\": \"</GetWeather>```\"}",
    "\"s\"",
    "42",
    "true",
    "<think>",
    "</think>",
    "<thi",
    "[desc]",
    "[checking]{\"name\": \"weather\", \"parameters\": {\"l\": \"B\"}}",
    "{\"name\": \"weather\"",
    ", \"arguments\": {}}",
    "a[0]",
    "[link](url)",
    "hello ",
    "a < b",
    "é",
    "天气",
    "🌤️",
    "<",
    ">",
    "`",
    "[GetWeather(",
    "[weather(l=\"B\")]",
    "[ weather(",
    "BookRestaurant(",
    "l='x'",
    "=",
    "(",
    ")",
    "True",
    "None",
    "-1.5e3",
];

fn syntax() -> impl Strategy<Value = Syntax> {
    prop_oneof![
        Just(Syntax::Tag),
        Just(Syntax::ToolCall),
        Just(Syntax::Bracket),
        Just(Syntax::Python)
    ]
}

fn opts() -> impl Strategy<Value = ParserOptions> {
    (
        syntax(),
        any::<bool>(),
        prop_oneof![Just(256 * 1024), 16usize..200],
        any::<bool>(),
    )
        .prop_map(
            |(syntax, skip_think, max_block_bytes, rescue)| ParserOptions {
                syntax,
                skip_think,
                max_block_bytes,
                rescue,
            },
        )
}

fn pieced() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat())
}

fn nasty() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            &[
                "<",
                ">",
                "[",
                "]",
                "{",
                "}",
                "\"",
                "\\",
                "`",
                "/",
                "GetWeather",
                "weather",
                "name",
                ":",
                " ",
                "\n",
                "think",
                "tool_call",
                "(",
                ")",
                "=",
                "'",
                "é",
            ][..],
        ),
        0..60,
    )
    .prop_map(|v| v.concat())
}

/// Splits `input` at the given cut points (rounded down to char boundaries).
fn chunk(input: &str, cuts: &[usize]) -> Vec<String> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| {
            let mut c = c % (input.len() + 1);
            while !input.is_char_boundary(c) {
                c -= 1;
            }
            c
        })
        .collect();
    points.push(0);
    points.push(input.len());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| input[w[0]..w[1]].to_owned())
        .collect()
}

fn check_chunkings(opts: &ParserOptions, input: &str, cuts: &[usize]) {
    let whole = merged(run_chunks(opts, &[input]));
    assert_eq!(reproduce(&whole), input);
    let chunks = chunk(input, cuts);
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let got = merged(run_chunks(opts, &refs));
    assert_eq!(got, whole, "chunks {refs:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chunking_never_changes_the_result(
        opts in opts(),
        input in pieced(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        check_chunkings(&opts, &input, &cuts);
    }

    #[test]
    fn nasty_strings_reproduce(
        opts in opts(),
        input in nasty(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        check_chunkings(&opts, &input, &cuts);
    }

    #[test]
    fn arbitrary_strings_reproduce(
        syntax in syntax(),
        input in ".*",
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        check_chunkings(&options(syntax), &input, &cuts);
    }

    #[test]
    fn one_char_at_a_time_matches_whole(opts in opts(), input in pieced()) {
        let whole = merged(run_chunks(&opts, &[&input]));
        let chars: Vec<String> = input.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        prop_assert_eq!(merged(run_chunks(&opts, &refs)), whole);
    }
}

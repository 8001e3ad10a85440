//! Property tests for issue 15: hostile input never panics the sans-IO parts
//! and their output stays within a stated function of the input's size.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate::natural::parser::{Event, Parser, ParserOptions};
use toolgate::natural::request::{ContractCache, NaturalOptions, rewrite};
use toolgate::schema_example::{self as example, MAX_EXAMPLE_BYTES};
use toolgate::sse::Decoder;
use toolgate::to_natural::history::{self as to_natural, HistoryOptions};
use toolgate::to_natural::pretty::{MAX_BYTES_PER_INPUT_BYTE, PrettyPrinter};

/// JSON Schema-ish values: objects with the keywords example synthesis
/// follows, including `$ref`s back to the root.
fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({"$ref": "#"})),
        Just(json!({"type": "string"})),
        Just(json!({"type": "integer", "minimum": 3})),
        Just(json!({"type": "array", "items": {"$ref": "#"}, "minItems": 3})),
        any::<bool>().prop_map(Value::Bool),
        "[a-z]{0,8}".prop_map(|s| json!({"default": s})),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-z]{1,3}", inner.clone(), 0..8).prop_map(|props| {
                let required: Vec<&String> = props.keys().collect();
                json!({"type": "object", "properties": props, "required": required})
            }),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"anyOf": v})),
            prop::collection::vec(inner, 1..4).prop_map(|v| json!({"allOf": v})),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every event's data came from the input: the decoder never holds or
    /// yields more than it was fed.
    #[test]
    fn sse_decoder_output_is_bounded_by_input(input in prop::collection::vec(any::<u8>(), 0..4096), cut in 0usize..4096) {
        let mut decoder = Decoder::new();
        let mut events = Vec::new();
        let cut = cut.min(input.len());
        let _ = decoder.feed(&input[..cut], &mut events);
        let _ = decoder.feed(&input[cut..], &mut events);
        let yielded: usize = events.iter().map(|e| e.data.len()).sum();
        prop_assert!(yielded <= input.len());
    }

    /// Output ≤ MAX_BYTES_PER_INPUT_BYTE × input, plus the held line break.
    #[test]
    fn pretty_printer_output_is_linear(text in "[\\[\\]{},:\"a1 \\\\]{0,2000}") {
        let mut printer = PrettyPrinter::new();
        let mut out = String::new();
        printer.feed(&text, &mut out);
        printer.finish(&mut out);
        prop_assert!(out.len() <= (text.len() + 1) * MAX_BYTES_PER_INPUT_BYTE);
    }

    /// Whatever the schema, the example fits its byte budget as written.
    #[test]
    fn example_synthesis_is_bounded(schema in schema()) {
        let example = example::bounded(Some(&schema));
        let written = serde_json::to_string_pretty(&example.value).unwrap().len();
        prop_assert!(written <= MAX_EXAMPLE_BYTES);
    }

    /// The parser never panics and never invents text: every byte it emits
    /// as text or raw block came from the input.
    #[test]
    fn natural_parser_never_panics(text in "[<>/a-zA-Z_\"'`\\[\\]{}:, \n]{0,1000}") {
        let mut parser = Parser::new(["a", "ab", "Get_Weather"], ParserOptions::default());
        let mut events = Vec::new();
        parser.feed(&text, &mut events);
        parser.finish(&mut events);
        let text_out: usize = events
            .iter()
            .map(|e| match e {
                Event::Text(t) => t.len(),
                Event::Invalid(b) => b.raw.len(),
                Event::Call(_) => 0,
            })
            .sum();
        prop_assert!(text_out <= text.len());
    }

    /// Request rewrites of arbitrary tool declarations and histories answer
    /// (a rewrite or an error), never panic.
    #[test]
    fn request_rewrites_never_panic(schema in schema(), name in "[a-zA-Z_'`\\[\\]<>]{0,6}", content in "[<>a-z\" \n/]{0,200}") {
        let body = json!({
            "model": "m",
            "tools": [{"type": "function", "function": {"name": name, "parameters": schema}}],
            "messages": [
                {"role": "user", "content": content},
                {"role": "assistant", "content": content, "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": content}}]},
                {"role": "tool", "tool_call_id": "c", "content": content},
            ]
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        let _ = rewrite(&bytes, &NaturalOptions::default(), &ContractCache::default());
        let options = HistoryOptions { syntax: Default::default(), max_tool_result_chars: 100 };
        let _ = to_natural::rewrite(&bytes, &options);
    }
}

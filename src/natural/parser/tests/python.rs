//! The python syntax: call lists parsed whole, split at every char
//! boundary and one char at a time; what is not a call list stays text;
//! any arguments written by `Syntax::render_call` read back as they were.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{NAMES, merged, options, parse_all_ways, run_chunks_with, summary};
use crate::natural::parser::{Event, python_literal};
use crate::natural::syntax::Syntax;

fn check(input: &str, want: &[&str]) {
    let got = summary(&parse_all_ways(&options(Syntax::Python), input));
    assert_eq!(got, want, "input: {input:?}");
}

#[test]
fn a_list_of_calls_is_one_call_each_and_the_text_around_stays() {
    check(
        "Checking both.\n[GetWeather(location=\"Paris\", unit='celsius'), weather(l=\"B\", days=2)]\nDone.",
        &[
            "T:Checking both.\n",
            r#"C:GetWeather:{"location":"Paris","unit":"celsius"}"#,
            r#"C:weather:{"l":"B","days":2}"#,
            "T:\nDone.",
        ],
    );
    // Whitespace and line breaks inside the list, a trailing comma.
    check(
        "[\n  GetWeather(\n    location=\"Oslo\",\n  ),\n  BookRestaurant(n=None, ok=True, p=[1, -2.5e1], d={'k': (1, 2)}),\n]",
        &[
            r#"C:GetWeather:{"location":"Oslo"}"#,
            r#"C:BookRestaurant:{"n":null,"ok":true,"p":[1,-25.0],"d":{"k":[1,2]}}"#,
        ],
    );
    check("[weather()]", &["C:weather:{}"]);
}

#[test]
fn the_raw_of_a_list_is_its_calls() {
    let events = merged(run_chunks_with(
        NAMES,
        &options(Syntax::Python),
        &["a [weather(l=1) , GetWeather(location='x')] b"],
    ));
    let raws: Vec<&str> = events
        .iter()
        .map(|e| match e {
            Event::Text(t) => t.as_str(),
            Event::Call(c) => c.raw.as_str(),
            Event::Invalid(i) => i.raw.as_str(),
        })
        .collect();
    assert_eq!(
        raws,
        ["a ", "[weather(l=1) , ", "GetWeather(location='x')]", " b"]
    );
}

#[test]
fn brackets_that_open_no_call_stay_text() {
    for prose in [
        "See [1] and [the docs](https://x.y/z).",
        "a[0] = [GetWeather] or [GetWeatherX(1)]",
        "[ GetWeather (location='x')]",
        "an array [1, 2] and [\"GetWeather\"]",
        "[unknown(a=1)]",
        "[",
        "[GetWea",
    ] {
        check(prose, &[&format!("T:{prose}")]);
    }
}

#[test]
fn a_malformed_call_is_invalid_and_nothing_is_lost() {
    // Arguments that are no literals: the whole call, list included.
    check(
        "x [GetWeather(location=Paris)] y",
        &[
            "T:x ",
            "I:GetWeather:Malformed(\"expected a literal, not a name at offset 20, found `Paris)`\"):[GetWeather(location=Paris)]",
            "T: y",
        ],
    );
    check(
        "[GetWeather(\"Paris\")]",
        &[
            "I:GetWeather:Malformed(\"expected a keyword argument (name=value) at offset 11, found `\\\"Paris\\\")`\"):[GetWeather(\"Paris\")]",
        ],
    );
    // A byte no call holds ends the call there; the rest is text again.
    check(
        "[GetWeather(location='Paris <b>')] [GetWeather(l=1 <b>)]",
        &[
            "C:GetWeather:{\"location\":\"Paris <b>\"}",
            "T: ",
            "I:GetWeather:Malformed(\"unexpected `<` in a call\"):[GetWeather(l=1 ",
            "T:<b>)]",
        ],
    );
    check(
        "[GetWeather(location=\"Paris)]\nThen more.",
        &[
            "I:GetWeather:Malformed(\"a line break inside a string\"):[GetWeather(location=\"Paris)]",
            "T:\nThen more.",
        ],
    );
    // A later call of an undeclared tool is invalid; the others are calls.
    check(
        "[weather(l=1), launch(x=2), GetWeather(location='x')]",
        &[
            "C:weather:{\"l\":1}",
            "I:-:Malformed(\"`launch` is not a declared tool\"):launch(x=2), ",
            "C:GetWeather:{\"location\":\"x\"}",
        ],
    );
    // The message ends inside a call.
    check(
        "[GetWeather(location='Pa",
        &["I:GetWeather:Unclosed:[GetWeather(location='Pa"],
    );
}

#[test]
fn a_list_that_is_not_closed_keeps_its_calls() {
    check(
        "[weather(l=1) and then",
        &["C:weather:{\"l\":1}", "T: and then"],
    );
    check("[weather(l=1)", &["C:weather:{\"l\":1}"]);
    check("[weather(l=1), ", &["C:weather:{\"l\":1}"]);
}

#[test]
fn think_blocks_are_not_read_for_calls() {
    check(
        "<think>[weather(l=1)]</think>[weather(l=2)]",
        &["T:<think>[weather(l=1)]</think>", "C:weather:{\"l\":2}"],
    );
}

#[test]
fn the_whole_list_reader_agrees_with_the_stream() {
    let list = "[GetWeather(location=\"Paris\"), weather(l=[1, {'a': None}])]";
    let from_stream: Vec<(String, Value)> =
        merged(run_chunks_with(NAMES, &options(Syntax::Python), &[list]))
            .into_iter()
            .filter_map(|e| match e {
                Event::Call(c) => Some((c.name, Value::Object(c.arguments))),
                _ => None,
            })
            .collect();
    let whole: Vec<(String, Value)> = python_literal::parse_call_list(list)
        .unwrap()
        .into_iter()
        .map(|(n, a)| (n, Value::Object(a)))
        .collect();
    assert_eq!(from_stream, whole);
    assert_eq!(whole.len(), 2);
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((".*", inner), 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the arguments, the call `render_call` writes is read back
    /// as the same call, with text around it.
    #[test]
    fn rendered_calls_read_back(
        arguments in prop::collection::vec(("[a-z_][a-z0-9_]{0,8}|.{0,6}", json_value()), 0..6),
        cut in any::<usize>(),
    ) {
        let arguments: Map<String, Value> = arguments.into_iter().collect();
        let mut text = String::from("Sure.\n");
        Syntax::Python.render_call("GetWeather", &Value::Object(arguments.clone()), &mut text);
        text.push_str("\nok");
        let mut at = cut % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let (a, b) = text.split_at(at);
        let events = merged(run_chunks_with(NAMES, &options(Syntax::Python), &[a, b]));
        let calls: Vec<&Event> = events.iter().filter(|e| !matches!(e, Event::Text(_))).collect();
        prop_assert_eq!(calls.len(), 1, "{:?}", events);
        match calls[0] {
            Event::Call(c) => prop_assert_eq!(&c.arguments, &arguments),
            other => prop_assert!(false, "{:?} from {}", other, text),
        }
    }
}

//! Fixed inputs covering every edge case, each parsed whole, split at every
//! char boundary and one char at a time (see `parse_all_ways`).

use super::{options, parse_all_ways, summary};
use crate::natural::parser::ParserOptions;
use crate::natural::syntax::Syntax;

fn check(syntax: Syntax, input: &str, want: &[&str]) {
    check_opts(&options(syntax), input, want);
}

fn check_opts(opts: &ParserOptions, input: &str, want: &[&str]) {
    let got = summary(&parse_all_ways(opts, input));
    assert_eq!(got, want, "input: {input:?}");
}

const WEATHER: &str = r#"{"location":"San Francisco, CA","unit":"fahrenheit"}"#;

#[test]
fn seed_tag_example() {
    let block = "<GetWeather>\n```json\n{\n  \"location\": \"San Francisco, CA\",\n  \"unit\": \"fahrenheit\"\n}\n```\n</GetWeather>";
    let input = format!("I'll get the weather for San Francisco today in Fahrenheit.\n\n{block}");
    check(
        Syntax::Tag,
        &input,
        &[
            "T:I'll get the weather for San Francisco today in Fahrenheit.\n\n",
            &format!("C:GetWeather:{WEATHER}"),
        ],
    );
    let booking = "Booking.\n\n<BookRestaurant>\n```json\n{\"restaurantName\": \"Chez Paul\", \"date\": \"2025-05-15\", \"time\": \"19:00\", \"numberOfPeople\": 4}\n```\n</BookRestaurant>\nDone.";
    check(
        Syntax::Tag,
        booking,
        &[
            "T:Booking.\n\n",
            r#"C:BookRestaurant:{"restaurantName":"Chez Paul","date":"2025-05-15","time":"19:00","numberOfPeople":4}"#,
            "T:\nDone.",
        ],
    );
}

#[test]
fn seed_tool_call_example() {
    let input = "I'll check.\n\n<tool_call name=\"GetWeather\">\n```json\n{\"location\": \"San Francisco, CA\", \"unit\": \"fahrenheit\"}\n```\n</tool_call>\n\nBased on";
    check(
        Syntax::ToolCall,
        input,
        &[
            "T:I'll check.\n\n",
            &format!("C:GetWeather:{WEATHER}"),
            "T:\n\nBased on",
        ],
    );
    check(
        Syntax::ToolCall,
        "<tool_call name = 'GetWeather' >{\"a\":1}</tool_call>",
        &[r#"C:GetWeather:{"a":1}"#],
    );
    // In tool_call syntax a bare <GetWeather> is prose.
    check(
        Syntax::ToolCall,
        "<GetWeather>{\"a\":1}</GetWeather>",
        &["T:<GetWeather>{\"a\":1}</GetWeather>"],
    );
}

#[test]
fn seed_bracket_example() {
    let input = r#"Hi, let me check the weather for you [checking weather in Berlin]{"name": "weather", "parameters": {"location": "Berlin"}}. Nice."#;
    check(
        Syntax::Bracket,
        input,
        &[
            "T:Hi, let me check the weather for you [checking weather in Berlin]",
            r#"C:weather:{"location":"Berlin"}"#,
            "T:. Nice.",
        ],
    );
    let two = r#"Both [Berlin]{"name": "weather", "parameters": {"location": "Berlin"}} and [Paris]{"name": "weather", "arguments": {"location": "Paris"}}."#;
    check(
        Syntax::Bracket,
        two,
        &[
            "T:Both [Berlin]",
            r#"C:weather:{"location":"Berlin"}"#,
            "T: and [Paris]",
            r#"C:weather:{"location":"Paris"}"#,
            "T:.",
        ],
    );
}

#[test]
fn bracket_edge_cases() {
    let unknown = r#"x [d]{"name": "nope", "arguments": {}} y"#;
    check(Syntax::Bracket, unknown, &[&format!("T:{unknown}")]);
    let prose = "a[0] = b; see [link](url) and [x] {\"name\": \"weather\"} and {braces} [[n]]";
    check(Syntax::Bracket, prose, &[&format!("T:{prose}")]);
    let broken = r#"[d]{"name": "weather", "arguments": {"a": 1]} after"#;
    check(
        Syntax::Bracket,
        broken,
        &[
            "T:[d]",
            r#"I:weather:BadJson("mismatched bracket"):{"name": "weather", "arguments": {"a": 1"#,
            "T:]} after",
        ],
    );
    check(
        Syntax::Bracket,
        r#"[d]{"x": 1, <b>"#,
        &[r#"T:[d]{"x": 1, <b>"#],
    );
    check(
        Syntax::Bracket,
        r#"[d]{"name": "weather", "arguments": {"#,
        &[
            "T:[d]",
            r#"I:weather:Unclosed:{"name": "weather", "arguments": {"#,
        ],
    );
    check(
        Syntax::Bracket,
        r#"[d]{"name": "weather", "arguments": 3}"#,
        &[
            "T:[d]",
            r#"I:weather:NotAnObject:{"name": "weather", "arguments": 3}"#,
        ],
    );
    let long = format!("[{}]{{\"name\": \"weather\"}}", "d".repeat(201));
    check(Syntax::Bracket, &long, &[&format!("T:{long}")]);
    // Tags mean nothing in bracket syntax.
    check(
        Syntax::Bracket,
        "<GetWeather>{}</GetWeather>",
        &["T:<GetWeather>{}</GetWeather>"],
    );
}

#[test]
fn fences_whitespace_and_crlf() {
    let want = [r#"C:GetWeather:{"a":"b"}"#];
    for body in [
        "{\"a\":\"b\"}",
        "\n{\"a\":\"b\"}\n",
        "\n```\n{\"a\":\"b\"}\n```\n",
        "\n```JSON\n{\"a\":\"b\"}\n```\n",
        "\r\n```json\r\n{\"a\":\"b\"}\r\n```\r\n",
        " \t```json  \n  {\"a\":\"b\"}  ```",
        "\n```json\n{\"a\":\"b\"}\n",
    ] {
        check(
            Syntax::Tag,
            &format!("<GetWeather>{body}</GetWeather>"),
            &want,
        );
    }
}

#[test]
fn json_strings_may_contain_tags_and_fences() {
    check(
        Syntax::Tag,
        "<GetWeather>{\"q\": \"</GetWeather> ``` <GetWeather>\"}</GetWeather>",
        &[r#"C:GetWeather:{"q":"</GetWeather> ``` <GetWeather>"}"#],
    );
    check(
        Syntax::ToolCall,
        "<tool_call name=\"GetWeather\">```json\n{\"q\": \"```\\n</tool_call>\\\"\"}\n```\n</tool_call>",
        &[r#"C:GetWeather:{"q":"```\n</tool_call>\""}"#],
    );
}

#[test]
fn unicode_text_and_arguments() {
    check(
        Syntax::Tag,
        "天气 🌤️ <GetWeather>{\"城市\": \"東京 🗼\", \"é\": \"\\u00e9\"}</GetWeather> ✓",
        &[
            "T:天气 🌤️ ",
            r#"C:GetWeather:{"城市":"東京 🗼","é":"é"}"#,
            "T: ✓",
        ],
    );
}

#[test]
fn several_calls_and_positions() {
    let c = |n: u8| format!("<GetWeather>{{\"n\":{n}}}</GetWeather>");
    let input = format!("{}a{}b\n{}", c(1), c(2), c(3));
    check(
        Syntax::Tag,
        &input,
        &[
            r#"C:GetWeather:{"n":1}"#,
            "T:a",
            r#"C:GetWeather:{"n":2}"#,
            "T:b\n",
            r#"C:GetWeather:{"n":3}"#,
        ],
    );
    let two = format!("x{}{}", c(1), "<BookRestaurant>{\"p\": 2}</BookRestaurant>");
    check(
        Syntax::Tag,
        &two,
        &[
            "T:x",
            r#"C:GetWeather:{"n":1}"#,
            r#"C:BookRestaurant:{"p":2}"#,
        ],
    );
}

#[test]
fn things_that_stay_text() {
    for input in [
        "a < b and c<d, x <> y",
        "<GetWeatherX>{\"a\":1}</GetWeatherX>",
        "<getweather>{\"a\":1}</getweather>",
        "lone </GetWeather> closing",
        "<div>html</div> <Unknown>{}</Unknown>",
        "use the <GetWeather> tool to check",
        "empty <GetWeather></GetWeather> pair",
        "<GetWeather>\n```python\nprint()\n```",
        "<GetWeather> true",
        "ends with <GetWea",
        "ends with <GetWeather>\n",
        "<thin",
    ] {
        check(Syntax::Tag, input, &[&format!("T:{input}")]);
    }
}

#[test]
fn invalid_blocks() {
    check(
        Syntax::Tag,
        "a <GetWeather>{\"a\": 1,}</GetWeather> b",
        &[
            "T:a ",
            "I:GetWeather:BadJson(\"trailing comma at line 1 column 9\"):<GetWeather>{\"a\": 1,}</GetWeather>",
            "T: b",
        ],
    );
    check(
        Syntax::Tag,
        "<GetWeather>\n```json\n{\"a\": 1\n```\n</GetWeather>\nafter",
        &[
            "I:GetWeather:BadJson(\"unexpected character\"):<GetWeather>\n```json\n{\"a\": 1\n```\n</GetWeather>",
            "T:\nafter",
        ],
    );
    check(
        Syntax::Tag,
        "<GetWeather>[1, 2]</GetWeather>",
        &["I:GetWeather:NotAnObject:<GetWeather>[1, 2]</GetWeather>"],
    );
    check(
        Syntax::Tag,
        "<GetWeather>\n```json\ntrue\n```\n</GetWeather>",
        &["I:GetWeather:NotAnObject:<GetWeather>\n```json\ntrue\n```\n</GetWeather>"],
    );
    check(
        Syntax::Tag,
        "<GetWeather>{\"a\": 1} trailing words</GetWeather>.",
        &[
            "I:GetWeather:Malformed(\"unexpected text after the JSON value\"):<GetWeather>{\"a\": 1} trailing words</GetWeather>",
            "T:.",
        ],
    );
    // A broken object never closed stays invalid; a valid one is the near
    // miss below.
    check(
        Syntax::Tag,
        "<GetWeather>\n```json\n{\"a\": 1,\n",
        &["I:GetWeather:Unclosed:<GetWeather>\n```json\n{\"a\": 1,\n"],
    );
    check(
        Syntax::Tag,
        "<GetWeather>```json\n```\n</GetWeather>",
        &[
            "I:GetWeather:Malformed(\"expected a JSON value\"):<GetWeather>```json\n```\n</GetWeather>",
        ],
    );
    // No closing tag within the recovery window: the raw stops at the error
    // and what follows is parsed again, here finding a good call.
    let filler = "z".repeat(1100);
    let input = format!("<GetWeather>{{\"a\": x<\n{filler}<GetWeather>{{}}</GetWeather>");
    check(
        Syntax::Tag,
        &input,
        &[
            "I:GetWeather:BadJson(\"unexpected character\"):<GetWeather>{\"a\": x",
            &format!("T:<\n{filler}"),
            "C:GetWeather:{}",
        ],
    );
}

#[test]
fn too_large_blocks() {
    let opts = ParserOptions {
        max_block_bytes: 40,
        ..options(Syntax::Tag)
    };
    let input = "<GetWeather>{\"a\": \"0123456789012345678901234567890\"}</GetWeather>";
    check_opts(
        &opts,
        input,
        &[
            "I:GetWeather:TooLarge:<GetWeather>{\"a\": \"012345678901234567890",
            "T:1234567890\"}</GetWeather>",
        ],
    );
    check_opts(
        &opts,
        "<GetWeather>{\"a\": 1}</GetWeather>",
        &[r#"C:GetWeather:{"a":1}"#],
    );
    let bracket = ParserOptions {
        max_block_bytes: 20,
        ..options(Syntax::Bracket)
    };
    check_opts(
        &bracket,
        r#"[d]{"name": "weather", "arguments": {}}"#,
        &[
            "T:[d]",
            r#"I:weather:TooLarge:{"name": "weather", "#,
            r#"T:"arguments": {}}"#,
        ],
    );
}

#[test]
fn think_blocks() {
    let input = "<think>maybe <GetWeather>{\"a\":1}</GetWeather></think>now <GetWeather>{\"a\":2}</GetWeather>";
    check(
        Syntax::Tag,
        input,
        &[
            "T:<think>maybe <GetWeather>{\"a\":1}</GetWeather></think>now ",
            r#"C:GetWeather:{"a":2}"#,
        ],
    );
    let bracket = r#"<think>[d]{"name": "weather"}</think>[d]{"name": "weather"}"#;
    check(
        Syntax::Bracket,
        bracket,
        &[
            r#"T:<think>[d]{"name": "weather"}</think>[d]"#,
            "C:weather:{}",
        ],
    );
    check(
        Syntax::Tag,
        "<think>unclosed <GetWeather>{}</GetWeather>",
        &["T:<think>unclosed <GetWeather>{}</GetWeather>"],
    );
    let off = ParserOptions {
        skip_think: false,
        ..options(Syntax::Tag)
    };
    check_opts(
        &off,
        "<think><GetWeather>{}</GetWeather></think>",
        &["T:<think>", "C:GetWeather:{}", "T:</think>"],
    );
}

#[test]
fn hold_back_is_minimal_and_immediate() {
    let mut p = crate::natural::parser::Parser::new(["GetWeather"], options(Syntax::Tag));
    let mut out = Vec::new();
    p.feed("Hello <Get", &mut out);
    assert_eq!(summary(&out), ["T:Hello "]);
    assert_eq!(p.held_bytes(), 4);
    out.clear();
    p.feed("Foo", &mut out);
    assert_eq!(summary(&out), ["T:<GetFoo"]);
    assert_eq!(p.held_bytes(), 0);
    out.clear();
    p.feed("a < b", &mut out);
    assert_eq!(summary(&out), ["T:a < b"]);
    assert_eq!(p.held_bytes(), 0);
}

#[test]
fn what_the_request_side_renders_parses_back() {
    // The exact shapes `Syntax::render_call` writes into history.
    check(
        Syntax::Tag,
        "<GetWeather>\n```json\n{\n  \"location\": \"Paris\"\n}\n```\n</GetWeather>",
        &[r#"C:GetWeather:{"location":"Paris"}"#],
    );
    check(
        Syntax::ToolCall,
        "<tool_call name=\"GetWeather\">\n{}\n</tool_call>",
        &["C:GetWeather:{}"],
    );
    check(
        Syntax::Bracket,
        "[Calling GetWeather]{\"name\": \"GetWeather\", \"arguments\": {\"location\":\"Paris\",\"days\":2}}",
        &[
            "T:[Calling GetWeather]",
            r#"C:GetWeather:{"location":"Paris","days":2}"#,
        ],
    );
}

#[test]
fn rescue_reads_every_shape_a_model_writes_on_its_own() {
    let rescue = ParserOptions {
        rescue: true,
        ..ParserOptions::default()
    };
    let call = r#"C:GetWeather:{"location":"Paris"}"#;
    // What Qwen2.5-Coder writes when its chat template declared the tools.
    check_opts(
        &rescue,
        "```json\n{\n  \"name\": \"GetWeather\",\n  \"arguments\": {\n    \"location\": \"Paris\"\n  }\n}\n```",
        &[call],
    );
    check_opts(
        &rescue,
        "Let me check.\n\n```json\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}\n```\nOne moment.",
        &["T:Let me check.\n\n", call, "T:\nOne moment."],
    );
    // Hermes-style templates' own tag, a bare object, every natural syntax.
    check_opts(
        &rescue,
        "<tool_call>\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
        &[call],
    );
    check_opts(
        &rescue,
        "  {\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}",
        &["T:  ", call],
    );
    check_opts(
        &rescue,
        "<GetWeather>\n```json\n{\"location\": \"Paris\"}\n```\n</GetWeather>",
        &[call],
    );
    check_opts(
        &rescue,
        "<tool_call name=\"GetWeather\">{\"location\": \"Paris\"}</tool_call>",
        &[call],
    );
    check_opts(
        &rescue,
        "[Weather]{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}",
        &["T:[Weather]", call],
    );
    // A closer that never comes: the call, and the text after it stays text.
    check_opts(
        &rescue,
        "<tool_call>{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}} done",
        &[call, "T: done"],
    );
}

/// The formats open models write when their server's parser missed them:
/// each call native, the openers, separators, closers and end tokens
/// around them part of the calls, nothing else hidden.
#[test]
fn rescue_reads_the_formats_of_open_models() {
    let rescue = ParserOptions {
        rescue: true,
        ..ParserOptions::default()
    };
    let paris = r#"C:GetWeather:{"location":"Paris"}"#;
    let table = r#"C:BookRestaurant:{"people":2}"#;
    let cases: &[(&str, &[&str])] = &[
        // Hermes / Qwen: one block per call, whitespace between them hidden.
        (
            "<tool_call>\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"BookRestaurant\", \"arguments\": {\"people\": 2}}\n</tool_call>",
            &[paris, table],
        ),
        // Two objects in one block.
        (
            "<tool_call>\n{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}\n{\"name\": \"BookRestaurant\", \"arguments\": {\"people\": 2}}\n</tool_call><|im_end|>",
            &[paris, table],
        ),
        // Llama 3.x: bare JSON with `parameters`, `;` between calls, end tokens.
        (
            "{\"name\": \"GetWeather\", \"parameters\": {\"location\": \"Paris\"}}; {\"name\": \"BookRestaurant\", \"parameters\": {\"people\": 2}}<|eot_id|>",
            &[paris, table],
        ),
        (
            "<|python_tag|>{\"name\": \"GetWeather\", \"parameters\": {\"location\": \"Paris\"}}<|eom_id|>",
            &[paris],
        ),
        (
            "Sure.\n<|python_tag|>{\"name\": \"GetWeather\", \"parameters\": {\"location\": \"Paris\"}};{\"name\": \"BookRestaurant\", \"parameters\": {\"people\": 2}}",
            &["T:Sure.\n", paris, table],
        ),
        // Mistral before v11: a list after [TOOL_CALLS].
        (
            "[TOOL_CALLS] [{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}, {\"name\": \"BookRestaurant\", \"arguments\": {\"people\": 2}}]</s>",
            &[paris, table],
        ),
        // Mistral v11+: a name, [ARGS] (after an optional [CALL_ID]), the arguments.
        (
            "[TOOL_CALLS]GetWeather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]BookRestaurant[CALL_ID]a1B2c3D4e[ARGS]{\"people\": 2}",
            &[paris, table],
        ),
        // A fence holding a list.
        (
            "Calling both:\n```json\n[\n  {\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}},\n  {\"name\": \"BookRestaurant\", \"arguments\": {\"people\": 2}}\n]\n```\nDone.",
            &["T:Calling both:\n", paris, table, "T:\nDone."],
        ),
        // A list element that is no call ends the calls there; it stays
        // text (the separator before it went with the call before).
        (
            "[TOOL_CALLS][{\"name\": \"GetWeather\", \"arguments\": {\"location\": \"Paris\"}}, {\"name\": \"other\"}]",
            &[paris, "T:{\"name\": \"other\"}]"],
        ),
    ];
    for (input, want) in cases {
        check_opts(&rescue, input, want);
    }
    // Not calls: every byte stays text.
    for text in [
        "[TOOL_CALLS]Unknown[ARGS]{\"a\": 1}",
        "[TOOL_CALLS] maybe later",
        "<|python_tag|>brave_search.call(query=\"x\")",
        "[TOOLS are listed]{not json}",
        "```json\n[{\"name\": \"example\", \"arguments\": {}}]\n```",
    ] {
        check_opts(&rescue, text, &[&format!("T:{text}")]);
    }
}

#[test]
fn rescue_leaves_everything_else_as_it_was() {
    let rescue = ParserOptions {
        rescue: true,
        ..ParserOptions::default()
    };
    for text in [
        "```python\nprint({\"name\": \"GetWeather\"})\n```",
        "```json\n{\"name\": \"Unknown\", \"arguments\": {}}\n```",
        "```json\n[1, 2]\n```",
        "Here is JSON: {\"name\": \"GetWeather\", \"arguments\": {}}",
        "{\"city\": \"Paris\"}\nok",
        "a ``` b",
        "<tool_call>not json</tool_call>",
        "<tool_calls>",
        "[link](url) and [x]{y}",
    ] {
        check_opts(&rescue, text, &[&format!("T:{text}")]);
    }
}

/// What Qwen2.5-Coder-0.5B writes when it nearly follows the instructions:
/// a valid object whose closing tag never comes. The call is plain; what
/// follows it stays text. A block that does get its closing tag after text
/// is still invalid (the text was inside it).
#[test]
fn near_misses_with_a_valid_object_are_calls() {
    let call = r#"C:calculator:{"expression":"(12.5 * 4) - 7"}"#;
    let names = ParserOptions::default();
    let run = |syntax: Syntax, input: &str, want: &[&str]| {
        let opts = ParserOptions {
            syntax,
            ..names.clone()
        };
        let got = summary(&super::merged(super::run_chunks_with(
            &["calculator", "clock"],
            &opts,
            &[input],
        )));
        assert_eq!(got, want, "{input:?}");
    };
    // The message ends after the fence: no closing tag.
    run(
        Syntax::Tag,
        "<calculator>\n```json\n{\n  \"expression\": \"(12.5 * 4) - 7\"\n}\n```",
        &[call],
    );
    // A closing fence that was never opened, then the end.
    run(
        Syntax::ToolCall,
        "<tool_call name=\"calculator\">\n{\n  \"expression\": \"(12.5 * 4) - 7\"\n}\n```",
        &[call],
    );
    // Text after the object, and no closing tag in the window: the model
    // made up a result; it stays text.
    run(
        Syntax::ToolCall,
        "<tool_call name=\"calculator\">\n{\"expression\": \"(12.5 * 4) - 7\"}\n```json\n{\"result\": 43}\n```",
        &[call, "T:```json\n{\"result\": 43}\n```"],
    );
    // Still refused: a broken object, and text inside a closed block.
    run(
        Syntax::Tag,
        "<calculator>{\"expression\": }",
        &[
            "I:calculator:BadJson(\"expected value at line 1 column 16\"):<calculator>{\"expression\": }",
        ],
    );
    run(
        Syntax::Tag,
        "<calculator>{\"expression\": \"1\"} words</calculator>",
        &[
            "I:calculator:Malformed(\"unexpected text after the JSON value\"):<calculator>{\"expression\": \"1\"} words</calculator>",
        ],
    );
}

/// The shapes models write for a second call where the intent is plain.
#[test]
fn second_calls_in_the_shapes_models_write_them() {
    // Bracket: several objects after one description, back to back, one a
    // line, or comma-separated.
    for sep in ["", "\n", " , ", ",\n"] {
        let input = format!(
            r#"[Two cities]{{"name": "weather", "arguments": {{"location": "Paris"}}}}{sep}{{"name": "weather", "arguments": {{"location": "Rome"}}}} Done."#
        );
        let between = format!("T:{sep}");
        let mut want = vec!["T:[Two cities]", r#"C:weather:{"location":"Paris"}"#];
        if !sep.is_empty() {
            want.push(&between);
        }
        want.extend([r#"C:weather:{"location":"Rome"}"#, "T: Done."]);
        check(Syntax::Bracket, &input, &want);
    }
    // After a call, an object that is no call is text, and so is prose.
    check(
        Syntax::Bracket,
        r#"[d]{"name": "weather", "arguments": {}} {"x": 1} then {"name": "weather"}"#,
        &[
            "T:[d]",
            r#"C:weather:{}"#,
            r#"T: {"x": 1} then {"name": "weather"}"#,
        ],
    );
    // tool_call: the second call's arguments after the first's, in the one
    // block, its closing tag once at the end or never.
    for close in ["\n</tool_call>", "\n```", ""] {
        let input = format!(
            "<tool_call name=\"weather\">\n{{\"location\": \"Paris\"}}\n{{\"location\": \"Rome\"}}{close}"
        );
        let events = summary(&parse_all_ways(&options(Syntax::ToolCall), &input));
        let calls: Vec<&String> = events.iter().filter(|e| e.starts_with("C:")).collect();
        assert_eq!(
            calls,
            [
                r#"C:weather:{"location":"Paris"}"#,
                r#"C:weather:{"location":"Rome"}"#
            ],
            "{input:?}: {events:?}"
        );
    }
    // Tag: a second fenced block inside the tag.
    check(
        Syntax::Tag,
        "<weather>\n```json\n{\"location\": \"Paris\"}\n```\n```json\n{\"location\": \"Rome\"}\n```\n</weather>",
        &[
            "C:weather:{\"location\":\"Paris\"}",
            "C:weather:{\"location\":\"Rome\"}",
        ],
    );
    // Consecutive blocks, the first never closed.
    check(
        Syntax::Tag,
        "<weather>\n```json\n{\"location\": \"Paris\"}\n```\n\n<weather>\n```json\n{\"location\": \"Rome\"}\n```",
        &[
            "C:weather:{\"location\":\"Paris\"}",
            "C:weather:{\"location\":\"Rome\"}",
        ],
    );
    // A broken second object is an invalid call, not text.
    let events = summary(&parse_all_ways(
        &options(Syntax::ToolCall),
        "<tool_call name=\"weather\">\n{\"location\": \"Paris\"}\n{\"location\": }\n</tool_call>",
    ));
    assert_eq!(events[0], r#"C:weather:{"location":"Paris"}"#, "{events:?}");
    assert!(events[1].starts_with("I:weather:BadJson"), "{events:?}");
}

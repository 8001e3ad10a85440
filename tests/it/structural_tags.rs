//! `constrain = "structural_tag"` against the real engine: the structural
//! tag toolgate sends for each syntax and tool policy is compiled by
//! xgrammar (what vLLM and SGLang compile `response_format` with), and its
//! matcher takes the calls toolgate's own golden history writes and the
//! text a model writes around them, and refuses calls that break a schema
//! (a wrong type, a missing required argument, a value outside an enum), a
//! call to an undeclared tool where only calls may be written, and a call
//! left open. Python's xgrammar comes from `bash tests/run.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::binary::run_with_input;

use serde_json::{Value, json};
use toolgate::config::Constrain;
use toolgate::natural::parser::{Event, Parser, ParserOptions};
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};
use toolgate::natural::syntax::Syntax;
use toolgate::natural::tools::ToolSet;

const SYNTAXES: [Syntax; 4] = [
    Syntax::Tag,
    Syntax::ToolCall,
    Syntax::Bracket,
    Syntax::Python,
];

/// The golden history's tools (tests/golden/natural).
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "GetWeather", "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            },
            "required": ["location"]}}},
        {"type": "function", "function": {"name": "BookRestaurant", "parameters": {
            "type": "object",
            "properties": {
                "restaurantName": {"type": "string"},
                "date": {"type": "string"},
                "time": {"type": "string"},
                "numberOfPeople": {"type": "integer"}
            },
            "required": ["restaurantName", "date", "time", "numberOfPeople"]}}}
    ])
}

/// The `response_format` toolgate sends for these tools in `syntax`, with
/// `extra` fields (`tool_choice`, `parallel_tool_calls`) in the request.
fn sent_tag(syntax: Syntax, extra: Value) -> Value {
    let mut body =
        json!({"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": tools()});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let options = NaturalOptions {
        syntax,
        constrain: Constrain::StructuralTag,
        ..NaturalOptions::default()
    };
    let bytes = serde_json::to_vec(&body).unwrap();
    match rewrite(&bytes, &options, &ContractCache::default()) {
        Ok(Rewrite::Rewritten { body, .. }) => {
            let out: Value = serde_json::from_slice(&body).unwrap();
            assert!(out.get("grammar").is_none(), "never both");
            out["response_format"].clone()
        }
        other => panic!("{other:?}"),
    }
}

/// A call as the instructions show it (bracket with its description).
fn call(syntax: Syntax, name: &str, arguments: Value) -> String {
    let mut out = String::new();
    syntax.render_call(name, &arguments, &mut out);
    out
}

/// The first assistant turn of the golden history in `syntax`: text, then
/// two calls, as toolgate writes a model's calls back.
fn golden_turn(syntax: Syntax) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/golden/natural/history_{}.txt",
        syntax.as_str()
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    let turn = text.split("=== assistant\n").nth(1).unwrap();
    turn.split("\n=== ").next().unwrap().to_owned()
}

/// The calls toolgate's parser reads from `text`, and whether a block was invalid.
fn parsed(text: &str, syntax: Syntax) -> (Vec<String>, bool) {
    let set = ToolSet::from_request(Some(&tools()), None).unwrap();
    let options = ParserOptions {
        syntax,
        ..ParserOptions::default()
    };
    let mut parser = Parser::new(set.names(), options);
    let mut events = Vec::new();
    parser.feed(text, &mut events);
    parser.finish(&mut events);
    let mut calls = Vec::new();
    let mut invalid = false;
    for event in events {
        match event {
            Event::Call(c) => calls.push(c.name),
            Event::Invalid(_) => invalid = true,
            Event::Text(_) => {}
        }
    }
    (calls, invalid)
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("XGRAMMAR_TESTS_PYTHON") {
        return PathBuf::from(p);
    }
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xgrammar/.venv/bin/python");
    assert!(
        default.exists(),
        "\n\n*** The structural tag tests need xgrammar, which `bash tests/run.sh` installs. ***\n\
         $XGRAMMAR_TESTS_PYTHON is not set and {} does not exist.\n",
        default.display()
    );
    default
}

/// What xgrammar says of each (tag, text): `Ok(accepted)`, or the
/// compiler's error.
fn xgrammar(cases: &[(&Value, &str)]) -> Vec<Result<bool, String>> {
    let input: Vec<Value> = cases
        .iter()
        .map(|(tag, text)| json!({"tag": tag, "text": text}))
        .collect();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xgrammar/check.py");
    let out = run_with_input(
        Command::new(python()).arg(script),
        &serde_json::to_vec(&input).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results.len(), cases.len());
    results
        .into_iter()
        .map(|r| match r.get("accepted") {
            Some(a) => Ok(a.as_bool().unwrap()),
            None => Err(r["error"].as_str().unwrap_or_default().to_owned()),
        })
        .collect()
}

/// One expectation: under `tag`, xgrammar accepts `text` or not.
struct Case {
    what: String,
    tag: Value,
    text: String,
    accept: bool,
}

fn check(cases: &[Case]) {
    let pairs: Vec<(&Value, &str)> = cases.iter().map(|c| (&c.tag, c.text.as_str())).collect();
    let results = xgrammar(&pairs);
    let mut wrong = Vec::new();
    for (case, result) in cases.iter().zip(results) {
        match result {
            Ok(accepted) if accepted == case.accept => {}
            Ok(accepted) => wrong.push(format!(
                "{}: xgrammar {} {:?}",
                case.what,
                if accepted { "accepted" } else { "refused" },
                case.text
            )),
            Err(e) => wrong.push(format!("{}: the tag did not compile: {e}", case.what)),
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn xgrammar_compiles_every_syntaxs_tag_and_holds_calls_to_their_schemas() {
    let mut cases = Vec::new();
    let mut case = |what: String, tag: &Value, text: String, accept: bool| {
        cases.push(Case {
            what,
            tag: tag.clone(),
            text,
            accept,
        });
    };
    for syntax in SYNTAXES {
        let s = syntax.as_str();
        let auto = sent_tag(syntax, json!({}));
        let single = sent_tag(syntax, json!({"parallel_tool_calls": false}));
        let required = sent_tag(syntax, json!({"tool_choice": "required"}));
        let weather = call(syntax, "GetWeather", json!({"location": "Oslo"}));
        let booking = |args: Value| call(syntax, "BookRestaurant", args);
        let good = json!({"restaurantName": "Chez Paul", "date": "2025-05-16", "time": "19:00", "numberOfPeople": 4});

        // What is valid: free text, the golden history's calls, calls
        // between text, one call alone where only calls may be written.
        let golden = golden_turn(syntax);
        assert_eq!(
            parsed(&golden, syntax),
            (vec!["GetWeather".into(), "BookRestaurant".into()], false)
        );
        case(format!("{s}: the golden turn"), &auto, golden, true);
        case(format!("{s}: no call"), &auto, String::new(), true);
        let prose = "Plain text, with <b>markup</b>, [brackets], {\"braces\": 1} and émoji ☀.";
        case(format!("{s}: prose"), &auto, prose.into(), true);
        case(
            format!("{s}: text, a call, text"),
            &auto,
            format!("Let me look.\n{weather}\nDone."),
            true,
        );
        case(
            format!("{s}: a booking"),
            &auto,
            booking(good.clone()),
            true,
        );
        case(
            format!("{s}: required, one call"),
            &required,
            weather.clone(),
            true,
        );
        // Python's calls are one list; the others', one after another.
        let two = |first: &str, second: &str| match syntax {
            Syntax::Python => format!("{}, {}", &first[..first.len() - 1], &second[1..]),
            _ => format!("{first}\n{second}"),
        };
        case(
            format!("{s}: required, two calls"),
            &required,
            two(&weather, &booking(good.clone())),
            true,
        );
        case(
            format!("{s}: one call, not parallel"),
            &single,
            format!("Sure.\n{weather}"),
            true,
        );

        // What is not.
        let mut wrong_type = good.clone();
        wrong_type["numberOfPeople"] = json!("four");
        case(
            format!("{s}: a wrong type"),
            &auto,
            booking(wrong_type),
            false,
        );
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("time");
        case(
            format!("{s}: a missing required argument"),
            &auto,
            booking(missing),
            false,
        );
        case(
            format!("{s}: a value outside the enum"),
            &auto,
            call(
                syntax,
                "GetWeather",
                json!({"location": "Oslo", "unit": "kelvin"}),
            ),
            false,
        );
        let undeclared = call(syntax, "GetTime", json!({"zone": "UTC"}));
        case(
            format!("{s}: required, an undeclared tool"),
            &required,
            undeclared.clone(),
            false,
        );
        case(
            format!("{s}: required, text"),
            &required,
            "I would rather talk.".into(),
            false,
        );
        case(
            format!("{s}: required, text before the call"),
            &required,
            format!("Sure.\n{weather}"),
            false,
        );
        case(
            format!("{s}: two calls, not parallel"),
            &single,
            two(&weather, &weather),
            false,
        );
        let open = &weather[..weather.len() - 3];
        case(format!("{s}: a call left open"), &auto, open.into(), false);

        // A call to an undeclared tool, where text is free, is text: no
        // trigger starts it, and the parser reads no call from it either.
        case(
            format!("{s}: auto, an undeclared tool"),
            &auto,
            undeclared.clone(),
            true,
        );
        assert_eq!(parsed(&undeclared, syntax), (vec![], false), "{s}");
        if syntax == Syntax::Python {
            // Inside a list a trigger opened, every call is a declared one.
            case(
                format!("{s}: auto, an undeclared tool after a declared one"),
                &auto,
                two(&weather, &undeclared),
                false,
            );
        }

        // The matcher reads the schema toolgate sends: with `location` an
        // integer in the tag, the valid call is refused.
        let mut broken = auto.clone();
        let content = &mut broken["format"]["tags"][0]["content"];
        if syntax == Syntax::Python {
            // The keyword's value rule, a string in the grammar sent.
            let grammar = content["grammar"].as_str().unwrap();
            let string = "args-0-0 ::= py-string\n";
            assert!(grammar.contains(string), "{grammar}");
            content["grammar"] = json!(grammar.replace(string, "args-0-0 ::= py-int\n"));
        } else {
            content["json_schema"]["properties"]["location"]["type"] = json!("integer");
        }
        case(
            format!("{s}: a tag whose schema wants an integer"),
            &broken,
            weather.clone(),
            false,
        );
    }
    check(&cases);
}

/// Through the gateway: the upstream receives the tag in `response_format`
/// (and neither `tools` nor a grammar), the call it answers comes back as a
/// native call, and a client's own `response_format` next to tools is a
/// `400` naming it, before anything is sent.
#[tokio::test]
async fn the_gateway_sends_the_tag_and_refuses_a_clients_own_format() {
    use crate::common::{Mock, Reply, post, tools_gateway, upstream_completion};
    let answer =
        "Checking.\n<tool_call name=\"GetWeather\">\n{\"location\": \"Oslo\"}\n</tool_call>";
    let mock = Mock::start(move |_| Reply::json(&upstream_completion(answer))).await;
    let gw = tools_gateway(
        &mock,
        "natural",
        "syntax = \"tool_call\"\nconstrain = \"structural_tag\"",
    )
    .await;
    let mut body = json!({"model": crate::common::UP_MODEL,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": tools()});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "GetWeather", "{}", r.text());
    let sent = mock.requests.lock().unwrap()[0].json();
    assert_eq!(
        sent["response_format"],
        sent_tag(Syntax::ToolCall, json!({}))
    );
    for field in ["tools", "grammar", "grammar_lazy", "grammar_triggers"] {
        assert!(sent.get(field).is_none(), "{field}");
    }

    body["response_format"] = json!({"type": "json_object"});
    let r = post(&gw.url("/v1/chat/completions"), &body.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["param"],
        "response_format",
        "{}",
        r.text()
    );
    assert_eq!(
        mock.requests.lock().unwrap().len(),
        1,
        "nothing more was sent"
    );
}

//! `toolgate probe` through the gateway's own path, against a mock model
//! that answers each syntax in its own way, and the real binary against the
//! embedded demo model.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{Mock, Reply, TestConfig, upstream_completion};
use serde_json::{Value, json};
use toolgate::commands::probe::{self, Arm};
use toolgate::config::Config;
use toolgate::natural::syntax::Syntax;

/// The call a cooperative model makes for each built-in prompt.
fn call_for(prompt: &str) -> (&'static str, Value) {
    if prompt.contains("weather") {
        ("get_weather", json!({"location": "Paris"}))
    } else if prompt.contains("Tokyo") {
        ("get_time", json!({"timezone": "Asia/Tokyo"}))
    } else if prompt.contains("email") {
        (
            "send_email",
            json!({"to": "alice@example.com", "subject": "lunch", "body": "See you at noon."}),
        )
    } else if prompt.contains("thermostat") {
        (
            "set_thermostat",
            json!({"temperature": 21, "unit": "celsius"}),
        )
    } else if prompt.contains("17 * 23") {
        ("calculator", json!({"expression": "17 * 23 + 4"}))
    } else if prompt.contains("12.5") {
        ("calculator", json!({"expression": "(12.5 * 4) - 7"}))
    } else if prompt.contains("date") {
        ("clock", json!({}))
    } else {
        // The prompt that needs no tool: this model calls one anyway.
        ("get_weather", json!({"location": "Paris"}))
    }
}

/// Tag and python syntaxes: a good call for every prompt, and an answer
/// quoting the result once it is back. tool_call: a block whose arguments break the
/// schema. Bracket: plain text. Native tools: the call as a fenced JSON
/// object in the text (what Qwen2.5-Coder does), which only rescue reads.
fn model(request: &Value) -> Reply {
    if request["response_format"]["type"] == "structural_tag" {
        // llama.cpp takes no structural tag.
        return refuse(
            "response_format type must be one of \"text\" or \"json_object\", but got: structural_tag",
        );
    }
    if let Some(grammar) = request.get("grammar") {
        // A server that follows the grammar: the one string it admits.
        let only = grammar.as_str().unwrap().split('"').nth(1).unwrap();
        return Reply::json(&upstream_completion(only));
    }
    let messages = request["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    if request.get("tools").is_some() {
        let text = if last["role"] == "tool" {
            format!("The tool says: {}", last["content"].as_str().unwrap())
        } else {
            let (name, arguments) = call_for(last["content"].as_str().unwrap());
            format!(
                "```json\n{}\n```",
                json!({"name": name, "arguments": arguments})
            )
        };
        return Reply::json(&upstream_completion(&text));
    }
    let system = messages[0]["content"].as_str().unwrap_or_default();
    let user = last["content"].as_str().unwrap();
    if let Some(result) = user.split("<tool_response").nth(1) {
        // The loop: the result came back as text; answer with it.
        let result = result.split_once(">\n").map_or(result, |(_, r)| r);
        let result = result.split("</tool_response>").next().unwrap();
        return Reply::json(&upstream_completion(&format!("The tool says: {result}")));
    }
    let (name, arguments) = call_for(user);
    let text = if system.contains("<tool_call name=\"ToolName\">") {
        format!("<tool_call name=\"{name}\">{{\"nope\": 1}}</tool_call>")
    } else if system.contains("<ToolName>") {
        format!("Sure.\n<{name}>\n```json\n{arguments}\n```\n</{name}>")
    } else if system.contains("[ToolName(") {
        let mut list = "Sure.\n[".to_owned();
        toolgate::natural::syntax::python::write_call(name, &arguments, &mut list);
        list + "]"
    } else {
        "Bonjour ! I cannot do that.".to_owned()
    };
    Reply::json(&upstream_completion(&text))
}

/// A 400 with an OpenAI-shaped error.
fn refuse(message: &str) -> Reply {
    Reply::Full {
        status: 400,
        headers: vec![("content-type", "application/json".into())],
        body: json!({"error": {"message": message, "type": "invalid_request_error"}})
            .to_string()
            .into(),
    }
}

/// The one answer a structural tag of `triggered_tags` admits, when it
/// must open with its only tag and stop after it.
fn only_answer(format: &Value) -> Option<String> {
    let tag = &format["tags"][0];
    (format["type"] == "triggered_tags" && format["at_least_one"] == true).then(|| {
        format!(
            "{}{}{}",
            tag["begin"].as_str().unwrap(),
            tag["content"]["value"].as_str().unwrap(),
            tag["end"].as_str().unwrap()
        )
    })
}

fn options(arms: Vec<Arm>, runs: usize) -> probe::Options {
    probe::Options {
        provider: "local".into(),
        model: None,
        arms,
        cases: probe::cases::builtin(),
        runs,
        max_tokens: 64,
        timeout: Duration::from_secs(10),
    }
}

/// An arm's report without its name and timings: what it counted.
fn counts(arm: &Value) -> Value {
    match arm {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(k, _)| *k != "syntax" && !k.contains("latency"))
                .map(|(k, v)| (k.clone(), counts(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(counts).collect()),
        other => other.clone(),
    }
}

fn arm<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["syntaxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["syntax"] == name)
        .unwrap()
}

#[tokio::test]
async fn probe_counts_each_syntax_through_the_gateways_own_path() {
    let mock = Mock::start(|r| model(&r.json())).await;
    let toml = TestConfig::new()
        .provider(
            "local",
            &mock.url(),
            "[\"small-model\"]",
            // The probe counts invalid blocks whatever the provider does with them.
            "[providers.tools]\nmode = \"passthrough\"\non_invalid = \"text\"\n",
        )
        .toml();
    let config = Config::from_toml(&toml).unwrap();
    let mut seen = Vec::new();
    let report = probe::run(config, &options(Arm::ALL.to_vec(), 2), &mut |p| {
        seen.push(p.done);
    })
    .await
    .unwrap();
    assert_eq!(
        seen,
        (1..=96).collect::<Vec<_>>(),
        "progress after every prompt: 2 runs x 8 cases x 6 arms"
    );
    let json = report.json();

    let tag = arm(&json, "tag");
    assert_eq!(tag["attempts"], 10);
    assert_eq!(tag["expected_call"], 8, "{tag:#}");
    assert_eq!(tag["valid_arguments"], 8);
    assert_eq!(tag["wrong_tool"], 0);
    assert_eq!(tag["unwanted_calls"], 2);
    assert_eq!(tag["invalid_blocks"], 0);
    // Every expected call's result went back, and the answer quoted it.
    assert_eq!(tag["loops"], 8, "{tag:#}");
    assert_eq!(tag["loops_closed"], 8);
    assert_eq!(tag["loops_result_used"], 8);
    let agent = |name: &str| {
        json["agent"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["syntax"] == name)
            .unwrap()
            .clone()
    };
    let tag_agent = agent("tag");
    assert_eq!(tag_agent["attempts"], 6, "{tag_agent:#}");
    assert_eq!(tag_agent["text_answers"], 6);
    assert_eq!(tag_agent["result_used"], 6, "395, 43 and today's date");
    assert_eq!(tag_agent["gateway_calls"], 6);
    assert_eq!(tag_agent["repeated_calls"], 0);
    assert_eq!(agent("bracket")["result_used"], 0, "prose, no call");
    assert_eq!(
        counts(&agent("python")),
        counts(&tag_agent),
        "a list of the same calls"
    );
    assert_eq!(agent("native")["gateway_calls"], 0, "the JSON stays text");
    assert_eq!(agent("rescue")["result_used"], 6, "{:#}", agent("rescue"));
    // Rescue and tag tie on everything; the first listed wins.
    assert_eq!(json["best"], "tag");

    // The python arm makes the tag arm's calls, as lists: the same counts.
    assert_eq!(counts(arm(&json, "python")), counts(tag));

    let tool_call = arm(&json, "tool_call");
    assert_eq!(tool_call["invalid_blocks"], 10, "{tool_call:#}");
    assert_eq!(tool_call["expected_call"], 0);
    assert_eq!(tool_call["loops"], 0, "no call, no loop");

    let bracket = arm(&json, "bracket");
    assert_eq!(bracket["no_call"], 8, "{bracket:#}");
    assert_eq!(bracket["unwanted_calls"], 0);
    assert_eq!(bracket["errors"], 0);

    let native = arm(&json, "native");
    assert_eq!(native["no_call"], 8, "{native:#}");
    let rescue = arm(&json, "rescue");
    assert_eq!(rescue["expected_call"], 8, "{rescue:#}");
    assert_eq!(rescue["loops_result_used"], 8, "{rescue:#}");

    // What the upstream received: the provider's model name without the
    // probe's routing prefix, the contracts in the arm's syntax, max_tokens.
    let requests = mock.requests.lock().unwrap().clone();
    // 60 first prompts, 24 loops (tag, python, rescue), agent prompts: two
    // rounds each in tag, python and rescue, one in bracket and native; in
    // tool_call the clock's `{"nope": 1}` fits its schema (it runs: two
    // rounds), the calculator's does not.
    // ... and two questions: does the server follow a grammar, and a
    // structural tag?
    assert_eq!(requests.len(), 2 + 60 + 24 + 12 + 12 + 12 + 8 + 6 + 6);
    let (grammar, requests): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .partition(|r| r.json().get("grammar").is_some());
    assert_eq!(grammar.len(), 1);
    assert_eq!(grammar[0].json()["model"], "small-model");
    assert_eq!(json["grammars"], "followed");
    let (tagged, requests): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .partition(|r| r.json().get("response_format").is_some());
    assert_eq!(tagged.len(), 1);
    assert_eq!(tagged[0].json()["model"], "small-model");
    assert_eq!(json["structural_tags"], "refused");
    for r in &requests {
        let body = r.json();
        assert_eq!(body["model"], "small-model");
        assert_eq!(body["max_tokens"], 64);
    }
    let natural = requests
        .iter()
        .filter(|r| r.json().get("tools").is_none())
        .count();
    assert_eq!(
        natural,
        40 + 16 + 24 + 8 + 6,
        "four natural arms, the tools as contracts"
    );
    for r in &requests {
        assert_eq!(r.json()["temperature"], 0, "a probe is repeatable");
    }

    let table = report.table();
    assert!(
        table.contains("provider local, model small-model: 5 cases x 2 run(s)"),
        "{table}"
    );
    let tag_row = table.lines().find(|l| l.starts_with("tag ")).unwrap();
    assert!(
        tag_row.contains("8/8 100%") && tag_row.contains("2/2 100%"),
        "{table}"
    );
    assert!(table.contains("gateway tools (3 agent prompts"), "{table}");
    let recommendation = report.recommendation();
    assert!(
        recommendation.contains(
            "[providers.tools]\nmode = \"natural\"\nsyntax = \"tag\"\nconstrain = \"gbnf\"\n"
        ),
        "{recommendation}"
    );
    Config::from_toml(&format!(
        "[[providers]]\nname = \"x\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"x\"]\n{recommendation}"
    ))
    .expect("the recommendation pastes into a config");
    assert!(table.lines().any(|l| l.starts_with("rescue ")), "{table}");
}

/// A server like vLLM or SGLang: it ignores llama.cpp's `grammar` field and
/// follows a structural tag in `response_format`; one that takes only the
/// older shape of the field refuses it. The probe tells them apart and
/// recommends `constrain = "structural_tag"` for the first only.
#[tokio::test]
async fn probe_recognises_a_server_that_follows_structural_tags() {
    for follows in [true, false] {
        let mock = Mock::start(move |r| {
            let request = r.json();
            let format = &request["response_format"];
            if format["type"] == "structural_tag" {
                if !follows || format.get("format").is_none() {
                    return refuse(
                        "1 validation error: response_format.structures: Field required",
                    );
                }
                return match only_answer(&format["format"]) {
                    Some(answer) => Reply::json(&upstream_completion(&answer)),
                    None => Reply::json(&upstream_completion("Hello!")),
                };
            }
            // Unknown fields, `grammar` among them, are ignored; a natural
            // request gets a good tag call, a native one none.
            let messages = request["messages"].as_array().unwrap();
            let user = messages.last().unwrap()["content"]
                .as_str()
                .unwrap_or_default();
            let system = messages[0]["content"].as_str().unwrap_or_default();
            if system.contains("<ToolName>") && !user.contains("<tool_response") {
                let (name, arguments) = call_for(user);
                let text = format!("<{name}>\n```json\n{arguments}\n```\n</{name}>");
                return Reply::json(&upstream_completion(&text));
            }
            Reply::json(&upstream_completion("Hello! The tool says so."))
        })
        .await;
        let toml = TestConfig::new()
            .provider("local", &mock.url(), "[\"small-model\"]", "")
            .toml();
        let config = Config::from_toml(&toml).unwrap();
        let mut o = options(vec![Arm::Natural(Syntax::Tag)], 1);
        o.cases.agent.clear();
        let report = probe::run(config, &o, &mut |_| {}).await.unwrap();
        let json = report.json();
        assert_eq!(json["grammars"], "ignored", "{json:#}");
        let recommendation = report.recommendation();
        let table = report.table();
        if follows {
            assert_eq!(json["structural_tags"], "followed");
            assert!(
                recommendation.ends_with("constrain = \"structural_tag\"\n"),
                "{recommendation}"
            );
            assert!(
                table.contains(
                    "structural tags: followed: `constrain = \"structural_tag\"` works here"
                ),
                "{table}"
            );
            Config::from_toml(&format!(
                "[[providers]]\nname = \"x\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"x\"]\n{recommendation}"
            ))
            .expect("the recommendation pastes into a config");
        } else {
            assert_eq!(json["structural_tags"], "refused");
            assert!(
                !recommendation.lines().any(|l| l.starts_with("constrain")),
                "{recommendation}"
            );
            assert!(
                recommendation.contains("# Structural tags: refused (400: 1 validation error"),
                "{recommendation}"
            );
        }
    }
}

#[tokio::test]
async fn probe_refuses_what_it_cannot_measure() {
    let toml = TestConfig::new()
        .provider("any", "http://127.0.0.1:9/v1", "[\"llama-*\"]", "")
        .toml();
    let run = |name: &str, model: Option<&str>| {
        let config = Config::from_toml(&toml).unwrap();
        let mut o = options(vec![Arm::Native], 1);
        o.provider = name.into();
        o.model = model.map(str::to_owned);
        async move { probe::run(config, &o, &mut |_| {}).await }
    };
    let e = run("nope", None).await.unwrap_err();
    assert!(e.contains("no provider named \"nope\""), "{e}");
    let e = run("any", None).await.unwrap_err();
    assert!(e.contains("--model"), "{e}");
    // With a model named, a dead upstream is a report of errors, not a crash.
    let report = run("any", Some("llama-3")).await.unwrap();
    let table = report.table();
    let report = report.json();
    assert_eq!(arm(&report, "native")["errors"], 5);
    assert_eq!(report["best"], Value::Null);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("native ") && l.contains("unavailable")),
        "{table}"
    );
    assert!(
        Arm::parse_list("tag,json")
            .unwrap_err()
            .contains("\"json\"")
    );
    assert_eq!(
        Arm::parse_list("bracket, tag,bracket").unwrap(),
        vec![
            Arm::Natural(toolgate::natural::syntax::Syntax::Bracket),
            Arm::Natural(toolgate::natural::syntax::Syntax::Tag)
        ]
    );
}

#[test]
fn the_binary_probes_the_demo_model_with_a_cases_file() {
    let dir = std::env::temp_dir().join(format!("toolgate-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = dir.join("cases.jsonl");
    let tool = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}});
    let lines = [
        json!({"name": "look up", "prompt": "Please lookup `rust`.", "tools": [tool], "expect": {"name": "lookup", "arguments": {"query": "rust"}}}),
        json!({"name": "chat", "prompt": "Hi there", "tools": [tool], "tool_choice": "none"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&cases, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "probe",
            "--provider",
            "demo",
            "--syntaxes",
            "bracket,native",
            "--json",
            "--cases",
        ])
        .arg(&cases)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["provider"], "demo");
    // The demo answers as it always does, grammar or not.
    assert_eq!(report["grammars"], "ignored");
    assert_eq!(report["structural_tags"], "ignored");
    let recommendation = report["recommendation"].as_str().unwrap();
    assert!(
        recommendation.contains("# Grammars: ignored")
            && recommendation.contains("# Structural tags: ignored")
            && !recommendation.lines().any(|l| l.starts_with("constrain")),
        "{recommendation}"
    );
    for name in ["bracket", "native"] {
        let a = arm(&report, name);
        // The demo copies a code span into the first string argument and
        // honours tool_choice "none".
        assert_eq!(a["expected_call"], 1, "{a:#}");
        assert_eq!(a["unwanted_calls"], 0, "{a:#}");
        assert_eq!(a["cases"][1]["name"], "chat");
    }

    std::fs::write(&cases, "{\"prompt\": \"hi\"}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["probe", "--provider", "demo", "--cases"])
        .arg(&cases)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1") && err.contains("`tools`"), "{err}");
}

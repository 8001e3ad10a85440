//! End-to-end tests of the natural-mode request rewrite, through the same
//! entry point the gateway calls: every request shape of conformance rules
//! 17-20 (`tests/it/conformance`), the tool policies, errors and caching.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::config::Constrain;
use toolgate::natural::request::{
    ContractCache, NaturalOptions, RequestError, ResponsePlan, Rewrite, rewrite,
};
use toolgate::natural::syntax::Syntax;
use toolgate::natural::tools::Choice;

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "GetWeather",
        "description": "Get the weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
    }})
}

fn clock() -> Value {
    json!({"type": "function", "function": {"name": "GetTime"}})
}

fn run_with(body: Value, options: &NaturalOptions) -> Result<Rewrite, RequestError> {
    let bytes = serde_json::to_vec(&body).expect("serializable");
    rewrite(&bytes, options, &ContractCache::default())
}

/// Rewrites `body` with default options, expecting a rewrite.
fn run(body: Value) -> (Value, Option<ResponsePlan>) {
    run_opts(body, &NaturalOptions::default())
}

fn run_opts(body: Value, options: &NaturalOptions) -> (Value, Option<ResponsePlan>) {
    match run_with(body, options) {
        Ok(Rewrite::Rewritten { body, plan }) => {
            (serde_json::from_slice(&body).expect("valid JSON"), plan)
        }
        other => panic!("expected a rewrite, got {other:?}"),
    }
}

fn error_param(body: Value) -> Option<String> {
    match run_with(body, &NaturalOptions::default()) {
        Err(err) => err.param().map(str::to_string),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn system_text(body: &Value) -> &str {
    body["messages"][0]["content"]
        .as_str()
        .expect("system text")
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

// ---- pass-through and field handling ------------------------------------

#[test]
fn request_without_tools_is_unchanged() {
    let body = json!({"model": "m", "messages": [user("hi")], "stream": true});
    let result = run_with(body, &NaturalOptions::default()).expect("ok");
    assert!(matches!(result, Rewrite::Unchanged));
}

#[test]
fn other_fields_keep_their_values_and_order() {
    let body = json!({
        "model": "m",
        "temperature": 0.7,
        "tools": [weather()],
        "x_vendor": {"b": 1, "a": [true, null]},
        "tool_choice": "auto",
        "messages": [user("hi")],
        "parallel_tool_calls": true,
        "stream": true,
        "stream_options": {"include_usage": true},
        "response_format": {"type": "text"}
    });
    let (out, plan) = run(body.clone());
    let keys: Vec<&str> = out
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "model",
            "temperature",
            "x_vendor",
            "messages",
            "stream",
            "stream_options",
            "response_format"
        ]
    );
    for key in [
        "temperature",
        "x_vendor",
        "stream_options",
        "response_format",
    ] {
        assert_eq!(out[key], body[key], "{key}");
    }
    let nested: Vec<&str> = out["x_vendor"]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(nested, ["b", "a"]);
    assert!(plan.is_some());
}

#[test]
fn untouched_fields_travel_as_the_clients_bytes() {
    // Parsed and serialized again, 0.50 would become 0.5 and the escapes
    // would be decoded: the upstream must get what the client wrote.
    let body = format!(
        r#"{{"model":"m","temperature":0.50,"x_vendor":{{"note":"caf\u00e9","n":1e2}},"tools":[{}],"messages":[{}]}}"#,
        weather(),
        user("hi")
    );
    let out = match rewrite(
        body.as_bytes(),
        &NaturalOptions::default(),
        &ContractCache::default(),
    ) {
        Ok(Rewrite::Rewritten { body, .. }) => String::from_utf8(body).expect("utf-8"),
        other => panic!("unexpected {other:?}"),
    };
    assert!(
        out.starts_with(r#"{"model":"m","temperature":0.50,"x_vendor":{"note":"caf\u00e9","n":1e2},"messages":["#),
        "{out}"
    );
}

#[test]
fn tool_fields_without_tools_are_stripped_with_no_plan() {
    let (out, plan) =
        run(json!({"model": "m", "messages": [user("hi")], "tools": [], "tool_choice": "auto"}));
    assert!(plan.is_none());
    assert_eq!(out, json!({"model": "m", "messages": [user("hi")]}));
}

// ---- system prompt placement ---------------------------------------------

#[test]
fn block_goes_before_the_existing_system_prompt() {
    let (out, _) = run(
        json!({"messages": [{"role": "system", "content": "Be brief."}, user("hi")], "tools": [weather()]}),
    );
    let system = system_text(&out);
    assert!(system.starts_with("# Tools\n"));
    assert!(system.ends_with("\n\nBe brief."));
    assert_eq!(out["messages"].as_array().map(Vec::len), Some(2));
}

#[test]
fn system_message_is_created_when_missing() {
    let (out, _) = run(json!({"messages": [user("hi")], "tools": [weather()]}));
    assert_eq!(out["messages"][0]["role"], "system");
    assert!(system_text(&out).contains("## GetWeather\n"));
    assert_eq!(out["messages"][1], user("hi"));
}

#[test]
fn developer_message_with_parts_gets_a_text_part_prepended() {
    let (out, _) = run(json!({
        "messages": [user("first"), {"role": "developer", "content": [{"type": "text", "text": "Rules."}]}],
        "tools": [weather()]
    }));
    let parts = out["messages"][1]["content"].as_array().expect("parts");
    assert_eq!(parts.len(), 2);
    assert!(
        parts[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("# Tools") && t.ends_with("\n\n"))
    );
    assert_eq!(parts[1], json!({"type": "text", "text": "Rules."}));
    assert_eq!(out["messages"][1]["role"], "developer");
}

#[test]
fn contract_layout_rules_hold() {
    let (out, _) = run(json!({"messages": [user("hi")], "tools": [weather(), clock()]}));
    let text = system_text(&out);
    let lines: Vec<&str> = text.lines().collect();
    let sections: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("## "))
        .copied()
        .collect();
    assert_eq!(sections, ["## GetWeather", "## GetTime"]);
    for (i, line) in lines.iter().enumerate() {
        if *line == "Example:" {
            let block: Vec<&&str> = lines[i + 1..]
                .iter()
                .take_while(|l| !l.is_empty())
                .collect();
            assert!(!block.is_empty());
        }
    }
    assert!(text.ends_with("<GetTime>\n```json\n{}\n```\n</GetTime>"));
}

// ---- tool policy -----------------------------------------------------------

#[test]
fn tool_choice_none_renders_no_contracts() {
    let (out, plan) =
        run(json!({"messages": [user("hi")], "tools": [weather()], "tool_choice": "none"}));
    assert!(plan.is_none());
    assert_eq!(out["messages"], json!([user("hi")]));
}

#[test]
fn auto_and_absent_offer_every_tool() {
    for choice in [json!("auto"), Value::Null] {
        let (out, plan) = run(
            json!({"messages": [user("hi")], "tools": [weather(), clock()], "tool_choice": choice}),
        );
        let plan = plan.expect("plan");
        assert_eq!(plan.choice, Choice::Auto);
        assert!(plan.parallel_tool_calls);
        assert_eq!(
            plan.tools.names().collect::<Vec<_>>(),
            ["GetWeather", "GetTime"]
        );
        assert!(system_text(&out).contains("When no tool fits the request, answer directly"));
    }
}

#[test]
fn required_says_must_call() {
    let (out, plan) =
        run(json!({"messages": [user("hi")], "tools": [weather()], "tool_choice": "required"}));
    assert_eq!(plan.expect("plan").choice, Choice::Required);
    assert!(system_text(&out).contains("You MUST call at least one tool"));
}

#[test]
fn named_choice_renders_only_that_tool() {
    let (out, plan) = run(json!({
        "messages": [user("hi")], "tools": [weather(), clock()],
        "tool_choice": {"type": "function", "function": {"name": "GetTime"}}
    }));
    let plan = plan.expect("plan");
    assert_eq!(plan.choice, Choice::Named("GetTime".into()));
    assert_eq!(plan.tools.len(), 1);
    let text = system_text(&out);
    assert!(!text.contains("## GetWeather"));
    assert!(text.contains("## GetTime"));
    assert!(text.contains("You MUST call the tool GetTime in this reply, and no other tool."));
}

#[test]
fn allowed_tools_filter_and_mode() {
    let (out, plan) = run(json!({
        "messages": [user("hi")], "tools": [weather(), clock()],
        "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "GetWeather"}}]}}
    }));
    let plan = plan.expect("plan");
    assert_eq!(plan.choice, Choice::Required);
    assert_eq!(plan.tools.names().collect::<Vec<_>>(), ["GetWeather"]);
    assert!(!system_text(&out).contains("## GetTime"));
    assert!(system_text(&out).contains("You MUST call at least one tool"));
}

#[test]
fn parallel_false_allows_one_call() {
    let (out, plan) =
        run(json!({"messages": [user("hi")], "tools": [weather()], "parallel_tool_calls": false}));
    assert!(!plan.expect("plan").parallel_tool_calls);
    let text = system_text(&out);
    assert!(text.contains("Make at most one call per reply."));
    assert!(!text.contains("several calls"));
}

#[test]
fn legacy_functions_and_function_call() {
    let functions = json!([{"name": "GetTime", "parameters": {"type": "object", "properties": {}}}, {"name": "Other"}]);
    let (out, plan) = run(
        json!({"messages": [user("hi")], "functions": functions, "function_call": {"name": "GetTime"}}),
    );
    let plan = plan.expect("plan");
    assert_eq!(plan.choice, Choice::Named("GetTime".into()));
    assert!(system_text(&out).contains("## GetTime"));
    assert!(out.get("functions").is_none() && out.get("function_call").is_none());

    let (_, plan) =
        run(json!({"messages": [user("hi")], "functions": functions, "function_call": "none"}));
    assert!(plan.is_none());
    let (_, plan) =
        run(json!({"messages": [user("hi")], "functions": functions, "function_call": "auto"}));
    assert_eq!(plan.expect("plan").tools.len(), 2);
}

#[test]
fn user_template_replaces_the_placeholder() {
    let options = NaturalOptions {
        instructions: Some("TOOLS:\n{contracts}".into()),
        ..NaturalOptions::default()
    };
    assert!(options.validate().is_ok());
    let (out, _) = run_opts(
        json!({"messages": [user("hi")], "tools": [weather()], "tool_choice": "required"}),
        &options,
    );
    let text = system_text(&out);
    assert!(text.starts_with("TOOLS:\n## GetWeather\n"));
    assert!(text.ends_with("\n\n- You MUST call at least one tool in this reply."));
    let broken = NaturalOptions {
        instructions: Some("no placeholder".into()),
        ..NaturalOptions::default()
    };
    assert!(broken.validate().is_err());
}

// ---- errors ----------------------------------------------------------------

#[test]
fn errors_name_the_offending_param() {
    let msgs = json!([user("hi")]);
    let cases = [
        (json!({"messages": msgs, "tools": {}}), "tools"),
        (
            json!({"messages": msgs, "tools": [weather(), {"type": "function", "function": {"description": "x"}}]}),
            "tools[1].function.name",
        ),
        (
            json!({"messages": msgs, "tools": [weather(), {"type": "function", "function": {"name": 5}}]}),
            "tools[1].function.name",
        ),
        (
            json!({"messages": msgs, "tools": [weather(), weather()]}),
            "tools[1].function.name",
        ),
        (
            json!({"messages": msgs, "tools": [{"type": "function"}]}),
            "tools[0].function",
        ),
        (
            json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "has space"}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"messages": msgs, "tools": [weather()], "functions": [{"name": "GetWeather"}]}),
            "functions[0].name",
        ),
        (
            json!({"messages": msgs, "tools": [weather()], "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"messages": msgs, "tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "Nope"}}}),
            "tool_choice.function.name",
        ),
        (
            json!({"messages": msgs, "tools": [weather()], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "Nope"}}]}}}),
            "tool_choice.allowed_tools.tools[0].function.name",
        ),
        (
            json!({"messages": msgs, "functions": [{"name": "a"}], "function_call": {"name": "b"}}),
            "function_call.name",
        ),
        (
            json!({"messages": msgs, "tools": [weather()], "parallel_tool_calls": "no"}),
            "parallel_tool_calls",
        ),
        (
            json!({"messages": msgs, "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"messages": [user("hi"), 3], "tools": [weather()]}),
            "messages[1]",
        ),
        (json!({"tools": [weather()]}), "messages"),
    ];
    for (body, param) in cases {
        assert_eq!(error_param(body.clone()).as_deref(), Some(param), "{body}");
    }
}

#[test]
fn body_level_errors() {
    let options = NaturalOptions::default();
    let cache = ContractCache::default();
    assert!(matches!(
        rewrite(b"{not json", &options, &cache),
        Err(RequestError::InvalidJson { .. })
    ));
    assert!(matches!(
        rewrite(b"[1]", &options, &cache),
        Err(RequestError::NotAnObject)
    ));
    let err = rewrite(b"[1]", &options, &cache).expect_err("error");
    assert_eq!(err.status(), 400);
}

// ---- caching ---------------------------------------------------------------

#[test]
fn cache_hit_returns_the_same_arc() {
    let cache = ContractCache::default();
    let options = NaturalOptions::default();
    let body =
        serde_json::to_vec(&json!({"messages": [user("hi")], "tools": [weather()]})).expect("json");
    let plan = |result| match result {
        Ok(Rewrite::Rewritten {
            plan: Some(plan), ..
        }) => plan,
        other => panic!("unexpected {other:?}"),
    };
    let first = plan(rewrite(&body, &options, &cache));
    let second = plan(rewrite(&body, &options, &cache));
    assert!(Arc::ptr_eq(&first.tools, &second.tools));
    assert_eq!(cache.len(), 1);

    let serial = serde_json::to_vec(
        &json!({"messages": [user("hi")], "tools": [weather()], "parallel_tool_calls": false}),
    )
    .expect("json");
    let third = plan(rewrite(&serial, &options, &cache));
    assert!(!Arc::ptr_eq(&first.tools, &third.tools));
    assert_eq!(cache.len(), 2);
}

#[test]
fn cache_is_keyed_on_the_declarations_as_written() {
    let cache = ContractCache::default();
    let options = NaturalOptions::default();
    let compact = format!(r#"{{"messages":[{}],"tools":[{}]}}"#, user("hi"), weather());
    let spaced = format!(
        r#"{{"messages":[{}],"tools":[ {} ]}}"#,
        user("hi"),
        weather()
    );
    let out = |body: &str| match rewrite(body.as_bytes(), &options, &cache) {
        Ok(Rewrite::Rewritten { body, .. }) => {
            serde_json::from_slice::<Value>(&body).expect("json")
        }
        other => panic!("unexpected {other:?}"),
    };
    let first = out(&compact);
    assert_eq!(out(&compact), first);
    assert_eq!(cache.len(), 1);
    // Other spacing is another entry, rendered to the same request.
    assert_eq!(out(&spaced), first);
    assert_eq!(cache.len(), 2);
    // A broken declaration is never served from the cache.
    let broken = format!(
        r#"{{"messages":[{}],"tools":[{{"type":"function"}}]}}"#,
        user("hi")
    );
    assert!(rewrite(broken.as_bytes(), &options, &cache).is_err());
    assert!(rewrite(broken.as_bytes(), &options, &cache).is_err());
    assert_eq!(cache.len(), 2);
}

#[test]
fn tag_syntax_is_the_default_and_others_render_their_own_examples() {
    let bracket = NaturalOptions {
        syntax: Syntax::Bracket,
        ..NaturalOptions::default()
    };
    let (out, _) = run_opts(
        json!({"messages": [user("hi")], "tools": [clock()]}),
        &bracket,
    );
    assert!(
        system_text(&out)
            .ends_with("Example:\n[Calling GetTime]{\"name\": \"GetTime\", \"arguments\": {}}")
    );
    let (out, _) = run(json!({"messages": [user("hi")], "tools": [clock()]}));
    assert!(system_text(&out).ends_with("Example:\n<GetTime>\n```json\n{}\n```\n</GetTime>"));
}

// ---- hostile schemas (issue 15) -------------------------------------------

/// A tool whose object refers to itself from each of `n` required properties:
/// 1.5 KB of JSON whose unbounded example has n^8 nodes.
fn self_referencing_tool(name: &str, n: usize) -> Value {
    let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    let properties: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| (name.clone(), json!({"$ref": "#"})))
        .collect();
    json!({"type": "function", "function": {
        "name": name,
        "parameters": {"type": "object", "properties": properties, "required": names}
    }})
}

#[test]
fn a_self_referencing_schema_gets_a_bounded_prompt() {
    let tool = self_referencing_tool("Tree", 20);
    let request_bytes = tool.to_string().len();
    let (body, _) = run(json!({"model": "m", "messages": [user("hi")], "tools": [tool]}));
    let system = system_text(&body);
    // The instructions, the schema shown as JSON (a few times its size) and
    // an example cut off at 256 KiB, marked as abridged.
    assert!(
        system.len() <= 256 * 1024 + 16 * request_bytes + 16 * 1024,
        "{} bytes",
        system.len()
    );
    assert!(system.contains("The example below is abridged"));
}

#[test]
fn contracts_past_the_block_cap_are_a_400_naming_the_tool() {
    // Each abridged example is up to 256 KiB: some contract after the 16th
    // crosses 4 MiB.
    let tools: Vec<Value> = (0..24)
        .map(|i| self_referencing_tool(&format!("Tree{i}"), 20))
        .collect();
    let err = run_with(
        json!({"model": "m", "messages": [user("hi")], "tools": tools}),
        &NaturalOptions::default(),
    )
    .expect_err("too large");
    assert_eq!(err.status(), 400);
    assert_eq!(err.error_type(), "invalid_request_error");
    assert_eq!(err.param(), Some("tools"));
    let RequestError::ContractTooLarge { name, .. } = &err else {
        panic!("{err:?}");
    };
    let index: usize = name
        .strip_prefix("Tree")
        .and_then(|i| i.parse().ok())
        .unwrap();
    assert!((16..24).contains(&index), "{name}");
    assert!(err.to_string().contains(&format!("'{name}'")), "{err}");
}

#[test]
fn names_the_parser_cannot_read_are_a_400_naming_the_tool() {
    for name in ["it's", "back`tick", "arr[0]", "close]"] {
        let err = run_with(
            json!({"model": "m", "messages": [user("hi")], "tools": [weather(), {"type": "function", "function": {"name": name}}]}),
            &NaturalOptions::default(),
        )
        .expect_err(name);
        assert_eq!(err.param(), Some("tools[1].function.name"), "{name}");
        assert!(err.to_string().contains(name), "{err}");
    }
}

// ---- constrained calls (constrain = "gbnf") ---------------------------------

fn constrained(syntax: Syntax) -> NaturalOptions {
    NaturalOptions {
        syntax,
        constrain: Constrain::Gbnf,
        ..NaturalOptions::default()
    }
}

#[test]
fn constrained_requests_carry_a_lazy_grammar_with_the_syntax_triggers() {
    let body = json!({"model": "m", "messages": [user("weather in Paris?")], "tools": [weather(), clock()]});
    for (syntax, trigger) in [
        (Syntax::Tag, "<GetWeather>"),
        (Syntax::ToolCall, "<tool_call name=\"GetWeather\""),
        (Syntax::Bracket, "]{\"name\": \"GetWeather\""),
        (Syntax::Python, "[GetWeather("),
    ] {
        let (out, plan) = run_opts(body.clone(), &constrained(syntax));
        assert!(plan.is_some());
        let grammar = out["grammar"].as_str().expect("a grammar");
        assert!(grammar.starts_with("root ::= "), "{grammar}");
        assert!(grammar.contains("GetWeather") && grammar.contains("GetTime"));
        assert_eq!(out["grammar_lazy"], true);
        let triggers = out["grammar_triggers"].as_array().expect("triggers");
        assert!(
            triggers.contains(&json!({"type": 1, "value": trigger})),
            "{syntax:?}: {triggers:?}"
        );
        assert!(out.get("tools").is_none());
    }
    // Off (the default): no grammar.
    let (out, _) = run(body);
    assert!(out.get("grammar").is_none() && out.get("grammar_lazy").is_none());
}

#[test]
fn required_and_named_choices_make_the_grammar_eager() {
    for choice in [
        json!("required"),
        json!({"type": "function", "function": {"name": "GetWeather"}}),
    ] {
        let body = json!({"model": "m", "messages": [user("go")], "tools": [weather(), clock()], "tool_choice": choice});
        let (out, _) = run_opts(body, &constrained(Syntax::ToolCall));
        assert_eq!(out["grammar_lazy"], false, "{choice}");
        assert!(out.get("grammar_triggers").is_none());
    }
    // `none`: nothing may be called, so nothing is constrained.
    let body = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "tool_choice": "none"});
    let (out, plan) = run_opts(body, &constrained(Syntax::Tag));
    assert!(plan.is_none());
    assert!(out.get("grammar").is_none());
}

#[test]
fn a_clients_own_grammar_next_to_tools_is_refused_not_dropped() {
    for field in ["grammar", "grammar_lazy", "grammar_triggers", "json_schema"] {
        let mut body = json!({"model": "m", "messages": [user("go")], "tools": [weather()]});
        body[field] = json!("root ::= \"x\"");
        match run_with(body.clone(), &constrained(Syntax::Tag)) {
            Err(err) => {
                assert_eq!(err.status(), 400);
                assert_eq!(err.param(), Some(field));
            }
            other => panic!("{field}: expected an error, got {other:?}"),
        }
        // Unconstrained, the client's grammar goes upstream as it came.
        let (out, _) = run(body);
        assert_eq!(out[field], json!("root ::= \"x\""));
    }
}

// ---- constrained calls (constrain = "structural_tag") -----------------------

fn tagged(syntax: Syntax) -> NaturalOptions {
    NaturalOptions {
        syntax,
        constrain: Constrain::StructuralTag,
        ..NaturalOptions::default()
    }
}

#[test]
fn structural_tag_requests_carry_response_format_and_no_grammar() {
    let body = json!({"model": "m", "messages": [user("weather in Paris?")], "tools": [weather(), clock()]});
    for (syntax, trigger) in [
        (Syntax::Tag, "<GetWeather>"),
        (Syntax::ToolCall, "<tool_call name=\"GetWeather\""),
        (Syntax::Bracket, "{\"name\": \"GetWeather\""),
        (Syntax::Python, "[GetWeather("),
    ] {
        let (out, plan) = run_opts(body.clone(), &tagged(syntax));
        assert!(plan.is_some());
        let format = &out["response_format"];
        assert_eq!(format["type"], "structural_tag", "{syntax:?}: {out}");
        assert_eq!(format["format"]["type"], "triggered_tags");
        let triggers = format["format"]["triggers"].as_array().unwrap();
        assert!(
            triggers.contains(&json!(trigger)),
            "{syntax:?}: {triggers:?}"
        );
        assert_eq!(format["format"]["tags"].as_array().unwrap().len(), 2);
        for field in ["grammar", "grammar_lazy", "grammar_triggers", "tools"] {
            assert!(out.get(field).is_none(), "{syntax:?}: {field}");
        }
    }
    let body = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "tool_choice": "required"});
    let (out, _) = run_opts(body, &tagged(Syntax::Tag));
    assert_eq!(
        out["response_format"]["format"]["type"],
        "tags_with_separator"
    );
    let body = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "tool_choice": "none"});
    let (out, plan) = run_opts(body, &tagged(Syntax::Tag));
    assert!(plan.is_none() && out.get("response_format").is_none());
}

#[test]
fn a_clients_own_response_format_next_to_tools_is_refused_not_dropped() {
    for (field, value) in [
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
        ),
        ("response_format", json!({"type": "json_object"})),
        ("structured_outputs", json!({"regex": "[a-z]+"})),
        ("guided_json", json!({"type": "object"})),
        ("regex", json!("[a-z]+")),
        ("ebnf", json!("root ::= \"x\"")),
    ] {
        let mut body = json!({"model": "m", "messages": [user("go")], "tools": [weather()]});
        body[field] = value.clone();
        match run_with(body.clone(), &tagged(Syntax::ToolCall)) {
            Err(err) => {
                assert_eq!(err.status(), 400);
                assert_eq!(err.param(), Some(field));
                assert!(err.to_string().contains("structural_tag"), "{err}");
            }
            other => panic!("{field}: expected an error, got {other:?}"),
        }
        // Unconstrained, and without tools, it goes upstream as it came.
        let (out, _) = run(body);
        assert_eq!(out[field], value);
        let plain = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "tool_choice": "none", field: value});
        let (out, _) = run_opts(plain, &tagged(Syntax::ToolCall));
        assert_eq!(out[field], value, "{field}");
    }
    // `{"type": "text"}` asks for nothing: the tag takes its place.
    let body = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "response_format": {"type": "text"}});
    let (out, _) = run_opts(body, &tagged(Syntax::Tag));
    assert_eq!(out["response_format"]["type"], "structural_tag");
    // A llama.cpp grammar field is not a structural tag's business (and
    // gbnf's refusals stay its own).
    let body = json!({"model": "m", "messages": [user("go")], "tools": [weather()], "response_format": {"type": "json_object"}});
    let (out, _) = run_opts(body, &constrained(Syntax::Tag));
    assert_eq!(out["response_format"]["type"], "json_object");
}

#[test]
fn the_contract_cache_keeps_constrained_and_free_renderings_apart() {
    let cache = ContractCache::default();
    let body =
        serde_json::to_vec(&json!({"model": "m", "messages": [user("go")], "tools": [weather()]}))
            .unwrap();
    let grammar_of = |options: &NaturalOptions| match rewrite(&body, options, &cache) {
        Ok(Rewrite::Rewritten { body, .. }) => {
            serde_json::from_slice::<Value>(&body).unwrap()["grammar"].clone()
        }
        other => panic!("{other:?}"),
    };
    assert!(grammar_of(&constrained(Syntax::Tag)).is_string());
    assert!(grammar_of(&NaturalOptions::default()).is_null());
    assert!(grammar_of(&constrained(Syntax::Tag)).is_string());
    assert_eq!(cache.len(), 2);
}

/// The 1,037-byte request that made the grammar writer allocate until it was
/// killed: twelve levels whose `type` names `object` four times.
#[test]
fn a_type_bomb_is_a_small_grammar() {
    let mut n = json!({"type": "string"});
    for _ in 0..12 {
        n = json!({"type": ["object", "object", "object", "object"], "properties": {"a": n}});
    }
    let body = json!({"model": "m", "messages": [user("hi")],
        "tools": [{"type": "function", "function": {"name": "d", "parameters": n}}]});
    assert!(serde_json::to_vec(&body).unwrap().len() < 1_100);
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let (out, _) = run_opts(body.clone(), &constrained(syntax));
        let grammar = out["grammar"].as_str().expect("a grammar");
        assert!(
            grammar.len() < 16 * 1024,
            "{syntax:?}: {} bytes",
            grammar.len()
        );
    }
}

/// Tools whose grammar crosses the budget are refused before anything is
/// sent, naming the tool; unconstrained, the same tools are fine.
#[test]
fn a_grammar_over_its_budget_is_a_400_naming_the_tool() {
    let properties: serde_json::Map<String, Value> = (0..70_000)
        .map(|i| (format!("p{i}"), json!({"enum": [i]})))
        .collect();
    let body = json!({"model": "m", "messages": [user("hi")], "tools": [weather(),
        {"type": "function", "function": {"name": "wide", "parameters": {"type": "object", "properties": properties}}}]});
    let err = run_with(body.clone(), &constrained(Syntax::ToolCall)).expect_err("over budget");
    assert_eq!((err.status(), err.param()), (400, Some("tools")));
    assert!(err.to_string().contains("'wide'"), "{err}");
    assert!(run_with(body, &NaturalOptions::default()).is_ok());
}

/// A name is written into the prompt, the grammar and each call: longer
/// than 64 characters, it is refused (20,000 distinct characters cost
/// seconds of a worker before).
#[test]
fn tool_names_longer_than_64_characters_are_refused() {
    let long: String = (0..20_000u32)
        .map(|i| char::from_u32(0x4E00 + i).unwrap())
        .collect();
    let at_limit: String = long.chars().take(64).collect();
    let tool = |name: &str| json!({"type": "function", "function": {"name": name}});
    let body = json!({"model": "m", "messages": [user("hi")], "tools": [tool(&long)]});
    let err = run_with(body, &constrained(Syntax::Tag)).expect_err("too long");
    assert_eq!(err.param(), Some("tools[0].function.name"));
    assert!(
        err.to_string().contains("longer than 64 characters"),
        "{err}"
    );
    let body = json!({"model": "m", "messages": [user("hi")], "tools": [tool(&at_limit)]});
    let (out, _) = run_opts(body, &constrained(Syntax::Tag));
    assert!(out["grammar"].as_str().unwrap().contains(&at_limit));
}

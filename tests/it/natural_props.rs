//! Property tests: no request body makes the rewrite panic, and the contract
//! layout the demo model relies on holds for any schema.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};
use toolgate::natural::syntax::Syntax;

/// Any JSON value, biased towards the keys and strings the rewrite looks at.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("role".to_string()),
        Just("content".to_string()),
        Just("tool_calls".to_string()),
        Just("tool_call_id".to_string()),
        Just("function".to_string()),
        Just("name".to_string()),
        Just("arguments".to_string()),
        Just("type".to_string()),
        Just("properties".to_string()),
        Just("required".to_string()),
        Just("items".to_string()),
        Just("$ref".to_string()),
        Just("anyOf".to_string()),
        Just("enum".to_string()),
        "[a-z#/$\n ]{0,6}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("assistant".to_string()),
            Just("tool".to_string()),
            Just("function".to_string()),
            Just("system".to_string()),
            Just("user".to_string()),
            Just("object".to_string()),
            Just("string".to_string()),
            Just("#/$defs/a".to_string()),
            Just("{\"a\": [1, {}]}".to_string()),
            ".{0,12}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn syntax() -> impl Strategy<Value = Syntax> {
    prop_oneof![
        Just(Syntax::Tag),
        Just(Syntax::ToolCall),
        Just(Syntax::Bracket),
        Just(Syntax::Python)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn rewrite_never_panics(
        messages in prop::collection::vec(json_value(), 0..6),
        tools in json_value(),
        choice in json_value(),
        syntax in syntax(),
        max in 0usize..40,
    ) {
        let body = json!({"messages": messages, "tools": tools, "tool_choice": choice});
        let options = NaturalOptions { syntax, max_tool_result_chars: max, ..NaturalOptions::default() };
        let bytes = serde_json::to_vec(&body).expect("json");
        if let Ok(Rewrite::Rewritten { body, .. }) = rewrite(&bytes, &options, &ContractCache::new(4)) {
            prop_assert!(serde_json::from_slice::<Value>(&body).is_ok());
        }
    }

    #[test]
    fn contract_layout_holds_for_any_schema(
        parameters in json_value(),
        description in prop_oneof![".{0,40}", "(Example:|## A|[a-z]|\n){0,12}"],
        syntax in syntax(),
    ) {
        let parameters = match parameters {
            Value::Object(_) => parameters,
            other => json!({"type": "object", "properties": {"p": other}}),
        };
        let tools = json!([
            {"type": "function", "function": {"name": "A", "description": description, "parameters": parameters}},
            {"type": "function", "function": {"name": "B"}}
        ]);
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools});
        let options = NaturalOptions { syntax, ..NaturalOptions::default() };
        let bytes = serde_json::to_vec(&body).expect("json");
        let Ok(Rewrite::Rewritten { body, .. }) = rewrite(&bytes, &options, &ContractCache::new(4)) else {
            return Err(TestCaseError::fail("expected a rewrite"));
        };
        let body: Value = serde_json::from_slice(&body).expect("json");
        let text = body["messages"][0]["content"].as_str().unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let sections: Vec<&str> = lines.iter().filter(|l| l.starts_with("## ")).copied().collect();
        prop_assert_eq!(sections, vec!["## A", "## B"]);
        let examples: Vec<usize> = (0..lines.len()).filter(|i| lines[*i] == "Example:").collect();
        prop_assert_eq!(examples.len(), 2);
        for start in examples {
            let block: Vec<&&str> = lines[start + 1..].iter().take_while(|l| !l.is_empty()).collect();
            prop_assert!(!block.is_empty());
            // The block is the last thing of its section.
            let after = start + 1 + block.len();
            prop_assert!(after == lines.len() || lines.get(after + 1).is_none_or(|l| l.starts_with("## ")));
        }
    }
}

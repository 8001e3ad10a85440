//! Golden files for what the upstream model reads in natural mode.
//!
//! The rendered text is the product here: a change in wording or layout
//! changes model behaviour, so it must show up in review as a diff of these
//! files. Run with `UPDATE_GOLDEN=1` to accept a change.

use std::path::PathBuf;
use std::{env, fs};

use serde_json::{Value, json};
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};
use toolgate::natural::syntax::Syntax;

const GOLDEN_DIR: &str = "tests/golden/natural";

/// Two example tools with the schemas of the natural-mode specification.
fn seed_tools() -> Value {
    json!([
        {
            "type": "function",
            "function": {
                "name": "GetWeather",
                "description": "Get the current weather in a given location",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "The city and state, e.g. San Francisco, CA"
                        },
                        "unit": {
                            "type": "string",
                            "enum": ["celsius", "fahrenheit"],
                            "description": "The temperature unit to use"
                        }
                    },
                    "required": ["location"]
                }
            }
        },
        {
            "type": "function",
            "function": {
                "name": "BookRestaurant",
                "description": "Book a table at a restaurant",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "restaurantName": {"type": "string", "description": "Name of the restaurant"},
                        "date": {"type": "string", "description": "Date of booking in YYYY-MM-DD format"},
                        "time": {"type": "string", "description": "Time of booking in HH:MM format"},
                        "numberOfPeople": {"type": "integer", "description": "Number of people for the reservation"}
                    },
                    "required": ["restaurantName", "date", "time", "numberOfPeople"]
                }
            }
        }
    ])
}

/// A finished turn with two parallel calls whose results arrive out of order.
fn history() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What's the weather in Paris, and book Chez Paul for 4 tomorrow at 7 PM."},
        {
            "role": "assistant",
            "content": "I'll check the weather and book the table.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "GetWeather", "arguments": "{\"location\": \"Paris, France\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "BookRestaurant", "arguments": "{\"restaurantName\":\"Chez Paul\",\"date\":\"2025-05-16\",\"time\":\"19:00\",\"numberOfPeople\":4}"}}
            ]
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "{\"confirmed\": true, \"table\": 12}"},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, cloudy"},
        {"role": "assistant", "content": "It is 18 degrees and cloudy in Paris; your table 12 is booked."},
        {"role": "user", "content": "Thanks!"}
    ])
}

fn rewritten(syntax: Syntax, messages: Value) -> Value {
    let body = json!({"model": "demo", "messages": messages, "tools": seed_tools()});
    let options = NaturalOptions {
        syntax,
        ..NaturalOptions::default()
    };
    let bytes = serde_json::to_vec(&body).expect("serializable");
    match rewrite(&bytes, &options, &ContractCache::default()) {
        Ok(Rewrite::Rewritten { body, .. }) => serde_json::from_slice(&body).expect("valid JSON"),
        other => panic!("expected a rewrite, got {other:?}"),
    }
}

#[test]
fn system_block_golden_per_syntax() {
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let messages = json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather like in San Francisco today?"}
        ]);
        let body = rewritten(syntax, messages);
        let system = body["messages"][0]["content"]
            .as_str()
            .expect("system text");
        check_golden(&format!("system_{}.txt", syntax.as_str()), system);
    }
}

#[test]
fn history_golden_per_syntax() {
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        let body = rewritten(syntax, history());
        // The system block is covered above; here only the conversation.
        let messages: Vec<Value> = body["messages"].as_array().expect("messages")[1..].to_vec();
        let mut text = String::new();
        for message in messages {
            text.push_str(&format!(
                "=== {}\n",
                message["role"].as_str().unwrap_or("?")
            ));
            text.push_str(message["content"].as_str().unwrap_or("<non-text content>"));
            text.push('\n');
        }
        check_golden(&format!("history_{}.txt", syntax.as_str()), &text);
    }
}

/// Compares `actual` with the golden file `name`, or rewrites the file when
/// `UPDATE_GOLDEN=1`.
fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(GOLDEN_DIR)
        .join(name);
    if env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "cannot read {}: {err}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "{name} differs from the golden file (run with UPDATE_GOLDEN=1 to accept):\n{}",
            line_diff(&expected, actual)
        );
    }
}

/// A line-by-line diff: enough to see what changed in prose.
fn line_diff(expected: &str, actual: &str) -> String {
    let expected: Vec<&str> = expected.split('\n').collect();
    let actual: Vec<&str> = actual.split('\n').collect();
    let mut out = String::new();
    for line in 0..expected.len().max(actual.len()) {
        let (left, right) = (expected.get(line), actual.get(line));
        if left != right {
            if let Some(left) = left {
                out.push_str(&format!("{:>4} - {left}\n", line + 1));
            }
            if let Some(right) = right {
                out.push_str(&format!("{:>4} + {right}\n", line + 1));
            }
        }
    }
    out
}

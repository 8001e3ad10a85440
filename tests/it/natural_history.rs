//! Tool history rewriting through the gateway's entry point: every content
//! shape of conformance rules 17-18 (`tests/it/conformance`) and every odd pairing of calls and
//! results.

use serde_json::{Value, json};
use toolgate::config::ResultRole;
use toolgate::natural::history::ANSWER_NOW;
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};

/// A results message the model answers next: it ends by asking for the answer.
fn answer_now(results: &str) -> String {
    format!("{results}\n\n{ANSWER_NOW}")
}

/// Rewrites `messages` (no tools declared) and returns the new messages.
fn history(messages: Value) -> Vec<Value> {
    history_with(messages, &NaturalOptions::default())
}

fn history_with(messages: Value, options: &NaturalOptions) -> Vec<Value> {
    let bytes = serde_json::to_vec(&json!({"model": "m", "messages": messages})).expect("json");
    match rewrite(&bytes, options, &ContractCache::default()) {
        Ok(Rewrite::Rewritten { body, plan }) => {
            assert!(plan.is_none(), "no tools declared, so nothing to parse");
            let body: Value = serde_json::from_slice(&body).expect("json");
            body["messages"].as_array().cloned().expect("messages")
        }
        other => panic!("expected a rewrite, got {other:?}"),
    }
}

fn call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

fn tool(id: &str, content: Value) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

fn text(message: &Value) -> &str {
    message["content"].as_str().expect("text content")
}

const A_CALL: &str = "<A>\n```json\n{\n  \"x\": 1\n}\n```\n</A>";

#[test]
fn parallel_calls_with_results_out_of_order_and_text_around() {
    let messages = history(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Before.", "tool_calls": [call("c1", "A", "{\"x\":1}"), call("c2", "B", "{}")]},
        tool("c2", json!("two")),
        tool("c1", json!("one")),
        {"role": "assistant", "content": "After."}
    ]));
    assert_eq!(messages.len(), 4);
    assert_eq!(
        text(&messages[1]),
        format!("Before.\n\n{A_CALL}\n\n<B>\n```json\n{{}}\n```\n</B>")
    );
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(
        text(&messages[2]),
        "<tool_response name=\"A\">\none\n</tool_response>\n---\n<tool_response name=\"B\">\ntwo\n</tool_response>"
    );
    assert_eq!(
        messages[3],
        json!({"role": "assistant", "content": "After."})
    );
    for message in &messages {
        for key in ["tool_calls", "tool_call_id", "function_call"] {
            assert!(message.get(key).is_none());
        }
    }
}

#[test]
fn every_assistant_content_shape_with_calls() {
    let shapes = [
        (Some(json!(null)), ""),
        (Some(json!("")), ""),
        (None, ""),
        (Some(json!("Hi.")), "Hi.\n\n"),
        (Some(json!([{"type": "text", "text": "Hi."}])), "Hi.\n\n"),
        (
            Some(json!([{"type": "refusal", "refusal": "No."}])),
            "No.\n\n",
        ),
    ];
    for (content, prefix) in shapes {
        let mut assistant = json!({"role": "assistant", "tool_calls": [call("c1", "A", "{\"x\": 1}")], "refusal": null});
        if let Some(content) = content {
            assistant["content"] = content;
        }
        let messages =
            history(json!([{"role": "user", "content": "go"}, assistant, tool("c1", json!("ok"))]));
        assert_eq!(text(&messages[1]), format!("{prefix}{A_CALL}"));
        // Unknown extra keys stay.
        assert!(
            messages[1]
                .as_object()
                .is_some_and(|m| m.contains_key("refusal"))
        );
    }
}

#[test]
fn result_shapes_text_parts_json_and_images() {
    let image = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}});
    let messages = history(json!([
        {"role": "assistant", "tool_calls": [call("c1", "A", "{}"), call("c2", "B", "{}"), call("c3", "C", "{}")]},
        tool("c1", json!([{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}])),
        tool("c2", json!("{\"temp\": 18, \"sky\": [\"cloudy\"]}")),
        tool("c3", json!([{"type": "text", "text": "see picture"}, image.clone()]))
    ]));
    let parts = messages[1]["content"]
        .as_array()
        .expect("parts, because of the image");
    let joined = parts[0]["text"].as_str().expect("text part");
    assert!(joined.contains("<tool_response name=\"A\">\npart one\npart two\n</tool_response>"));
    assert!(joined.contains("<tool_response name=\"B\">\n{\n  \"temp\": 18,\n  \"sky\": [\n    \"cloudy\"\n  ]\n}\n</tool_response>"));
    assert!(joined.contains("<tool_response name=\"C\">\nsee picture\n</tool_response>"));
    assert_eq!(parts[parts.len() - 2], image);
    assert_eq!(
        parts.last(),
        Some(&json!({"type": "text", "text": ANSWER_NOW}))
    );
}

#[test]
fn plain_results_stay_as_they_are() {
    let messages = history(json!([
        {"role": "assistant", "tool_calls": [call("c1", "A", "{}"), call("c2", "B", "{}")]},
        tool("c1", json!("42")),
        tool("c2", json!("true"))
    ]));
    assert!(text(&messages[1]).contains("\n42\n"));
    assert!(text(&messages[1]).contains("\ntrue\n"));
}

#[test]
fn user_image_parts_are_kept_when_merging() {
    let image = json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}});
    let messages = history(json!([
        {"role": "assistant", "content": "Checking.", "tool_calls": [call("c1", "A", "{}")]},
        tool("c1", json!("done")),
        {"role": "user", "content": [{"type": "text", "text": "And this?"}, image.clone()]}
    ]));
    assert_eq!(messages.len(), 2);
    let parts = messages[1]["content"].as_array().expect("parts");
    assert_eq!(
        parts[0]["text"],
        "<tool_response name=\"A\">\ndone\n</tool_response>"
    );
    assert_eq!(parts.last(), Some(&image));
    assert!(parts.iter().any(|p| p["text"] == "And this?"));
}

#[test]
fn odd_calls_and_results_never_fail() {
    let messages = history(json!([
        {"role": "assistant", "content": "", "tool_calls": [
            call("c1", "A", ""),
            call("c2", "B", "{not json"),
            call("c3", "C", "{}")
        ]},
        tool("c2", json!("b")),
        tool("zzz", json!("stray")),
        {"role": "tool", "content": "no id at all"}
    ]));
    let calls = text(&messages[0]);
    assert!(calls.starts_with("<A>\n```json\n{}\n```\n</A>"));
    assert!(calls.contains("<B>\n```json\n{not json\n```\n</B>"));
    let results = text(&messages[1]);
    // c1 and c3 have no result: no block is invented for them.
    assert_eq!(
        results,
        answer_now(
            "<tool_response name=\"B\">\nb\n</tool_response>\n---\n<tool_response name=\"zzz\">\nstray\n</tool_response>\n---\n<tool_response name=\"unknown\">\nno id at all\n</tool_response>"
        )
    );
}

#[test]
fn results_far_from_their_call_still_get_its_name() {
    let messages = history(json!([
        {"role": "assistant", "tool_calls": [call("c1", "A", "{}")]},
        {"role": "user", "content": "interjection"},
        tool("c1", json!("late"))
    ]));
    assert_eq!(
        text(&messages[1]),
        answer_now("interjection\n\n<tool_response name=\"A\">\nlate\n</tool_response>")
    );
}

#[test]
fn legacy_function_call_and_function_role() {
    let messages = history(json!([
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": null, "function_call": {"name": "GetTime", "arguments": "{\"tz\": \"UTC\"}"}},
        {"role": "function", "name": "GetTime", "content": "12:00"}
    ]));
    assert_eq!(
        text(&messages[1]),
        "<GetTime>\n```json\n{\n  \"tz\": \"UTC\"\n}\n```\n</GetTime>"
    );
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(
        text(&messages[2]),
        answer_now("<tool_response name=\"GetTime\">\n12:00\n</tool_response>")
    );
}

#[test]
fn long_results_are_truncated_at_a_char_boundary() {
    let options = NaturalOptions {
        max_tool_result_chars: 5,
        ..NaturalOptions::default()
    };
    let messages = history_with(
        json!([
            {"role": "assistant", "tool_calls": [call("c1", "A", "{}")]},
            tool("c1", json!("héllo wörld"))
        ]),
        &options,
    );
    assert_eq!(
        text(&messages[1]),
        answer_now(
            "<tool_response name=\"A\">\nhéllo\n[... truncated 6 characters]\n</tool_response>"
        )
    );
}

#[test]
fn assistant_result_role_merges_into_the_calling_message() {
    let options = NaturalOptions {
        result_role: ResultRole::Assistant,
        ..NaturalOptions::default()
    };
    let messages = history_with(
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "Sure.", "tool_calls": [call("c1", "A", "{\"x\":1}")]},
            tool("c1", json!("one")),
            {"role": "assistant", "content": "Done."}
        ]),
        &options,
    );
    assert_eq!(messages.len(), 2);
    assert_eq!(
        text(&messages[1]),
        format!("Sure.\n\n{A_CALL}\n\n<tool_response name=\"A\">\none\n</tool_response>\n\nDone.")
    );
}

#[test]
fn speakers_with_different_names_are_not_merged() {
    let messages = history(json!([
        {"role": "user", "name": "ann", "content": "a"},
        {"role": "user", "name": "bob", "content": "b"},
        {"role": "assistant", "tool_calls": []}
    ]));
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2], json!({"role": "assistant", "content": ""}));
}

#[test]
fn tool_calls_with_object_arguments_and_custom_tools() {
    let messages = history(json!([
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "A", "arguments": {"x": 1}}},
            {"id": "c2", "type": "custom", "custom": {"name": "Shell", "input": "ls -l"}}
        ]}
    ]));
    let calls = text(&messages[0]);
    assert!(calls.starts_with(A_CALL));
    assert!(calls.ends_with("<Shell>\n```json\nls -l\n```\n</Shell>"));
}

#[test]
fn each_call_takes_the_earliest_result_by_id_or_by_name() {
    // Results with ids answer only the call with that id; results without an
    // id answer the first call of their name that is still unanswered.
    let messages = history(json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [
            call("c1", "A", "{}"), call("c2", "A", "{}"), call("c3", "B", "{}")
        ]},
        {"role": "tool", "name": "A", "content": "by name"},
        tool("c3", json!("three")),
        tool("c1", json!("one")),
        tool("zz", json!("stray")),
    ]));
    let blocks: Vec<&str> = text(&messages[2]).split("\n---\n").collect();
    assert_eq!(
        blocks,
        [
            // c1 is answered by the earlier name-only result, c2 by none
            // (its id never comes), so "one" goes with the leftovers.
            "<tool_response name=\"A\">\nby name\n</tool_response>",
            "<tool_response name=\"B\">\nthree\n</tool_response>",
            "<tool_response name=\"A\">\none\n</tool_response>",
            &answer_now("<tool_response name=\"zz\">\nstray\n</tool_response>"),
        ]
    );
}

/// A bracket call's `[description]` reaches the client as text, and the
/// client sends it back in the assistant's content: the history writes it
/// once, as the call's own, exactly as the model wrote it (a doubled call
/// made Qwen2.5-Coder call the same tool again after every result).
#[test]
fn bracket_descriptions_sent_back_are_not_written_twice() {
    use toolgate::natural::syntax::Syntax;
    let bracket = NaturalOptions {
        syntax: Syntax::Bracket,
        ..NaturalOptions::default()
    };
    let messages = history_with(
        json!([
            {"role": "user", "content": "Weather in Paris and Lyon?"},
            {"role": "assistant", "content": "Let me look.\n[Checking Paris]\n[Checking Lyon]",
             "tool_calls": [call("c1", "get_weather", "{\"location\":\"Paris\"}"),
                            call("c2", "get_weather", "{\"location\": \"Lyon\"}")]},
            tool("c1", json!("14 C")),
            tool("c2", json!("16 C")),
        ]),
        &bracket,
    );
    assert_eq!(
        text(&messages[1]),
        "Let me look.\n\n[Checking Paris]{\"name\": \"get_weather\", \"arguments\": {\"location\":\"Paris\"}}\n\n[Checking Lyon]{\"name\": \"get_weather\", \"arguments\": {\"location\":\"Lyon\"}}"
    );
    // Content that is only the description, and content without one.
    let messages = history_with(
        json!([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "[Calling get_weather]", "tool_calls": [call("c1", "get_weather", "{}")]},
            tool("c1", json!("14 C")),
            {"role": "assistant", "content": "It is 14 C [source]", "tool_calls": []},
            {"role": "assistant", "content": null, "tool_calls": [call("c2", "get_weather", "{}")]},
        ]),
        &bracket,
    );
    assert_eq!(
        text(&messages[1]),
        "[Calling get_weather]{\"name\": \"get_weather\", \"arguments\": {}}"
    );
    assert!(
        text(&messages[3]).starts_with("It is 14 C [source]\n\n[Calling get_weather]{"),
        "a description is only taken for a call: {}",
        text(&messages[3])
    );
}

/// Only a results message the model answers next asks for the answer; one
/// followed by more conversation, or merged into the assistant's turn
/// (`result_role = "assistant"`), does not.
#[test]
fn only_the_last_results_ask_for_the_answer() {
    let turns = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [call("c1", "A", "{}")]},
        tool("c1", json!("one")),
        {"role": "assistant", "content": "It is one."},
        {"role": "user", "content": "again"},
        {"role": "assistant", "tool_calls": [call("c2", "A", "{}")]},
        tool("c2", json!("two")),
    ]);
    let messages = history(turns.clone());
    assert_eq!(
        text(&messages[2]),
        "<tool_response name=\"A\">\none\n</tool_response>"
    );
    assert_eq!(
        text(&messages[6]),
        answer_now("<tool_response name=\"A\">\ntwo\n</tool_response>")
    );
    let assistant = NaturalOptions {
        result_role: ResultRole::Assistant,
        ..NaturalOptions::default()
    };
    let messages = history_with(turns, &assistant);
    assert!(
        messages.iter().all(|m| !text(m).contains(ANSWER_NOW)),
        "{messages:#?}"
    );
}

//! Hostile inputs for the request rewrites (issue 15, item 2): each step must
//! be linear in the body, so these run in time proportional to their size.
//! Two sizes per case show the scaling: a linear step takes about 8x longer
//! for 8x the input, a quadratic one 64x.
//!
//! - `keys/<n>`: a body with `n` distinct top-level keys (duplicate-key check).
//! - `tools/<n>`: `n` declared tools (duplicate-name check, lookups).
//! - `results/<n>`: an assistant turn with `n` calls, then `n` results in
//!   reverse order (call ↔ result matching).
//! - `merge/<n>`: `n` consecutive user messages (same-role merging).
//! - `to_natural/<n>`: a natural-text history of `n` calls answered in
//!   reverse order (to_natural's pending calls).
//! - `parser_names/<n>`: prose full of `<` openers against `n` tool names.
//! - `grammar/type_bomb/<levels>`: a `constrain = "gbnf"` rewrite of one
//!   tool whose schema nests `levels` objects, each naming `object` in its
//!   `type` four times (12 levels is a 1 KB body).
//! - `grammar/wide/<n>`: one tool of `n` distinct properties; at 70,000 the
//!   grammar crosses its node budget and the rewrite is a 400.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value, json};
use std::hint::black_box;
use toolgate::config::Constrain;
use toolgate::natural::parser::{Parser, ParserOptions};
use toolgate::natural::request::{ContractCache, NaturalOptions, rewrite};
use toolgate::natural::syntax::Syntax;
use toolgate::to_natural::history::{self as to_natural, HistoryOptions};

const SIZES: [usize; 2] = [5_000, 40_000];

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name}})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn keys_body(n: usize) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("model".into(), json!("m"));
    body.insert("messages".into(), json!([user("hi")]));
    body.insert("tools".into(), json!([tool("T")]));
    for i in 0..n {
        body.insert(format!("k{i}"), json!(i));
    }
    serde_json::to_vec(&body).unwrap()
}

fn tools_body(n: usize) -> Vec<u8> {
    let tools: Vec<Value> = (0..n).map(|i| tool(&format!("T{i}"))).collect();
    serde_json::to_vec(&json!({"model": "m", "messages": [user("hi")], "tools": tools})).unwrap()
}

fn results_body(n: usize) -> Vec<u8> {
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "T", "arguments": "{}"}}))
        .collect();
    let mut messages = vec![
        user("go"),
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
    ];
    messages.extend(
        (0..n)
            .rev()
            .map(|i| json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": "ok"})),
    );
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "tools": [tool("T")]})).unwrap()
}

fn merge_body(n: usize) -> Vec<u8> {
    let messages: Vec<Value> = (0..n)
        .map(|i| user(&format!("message {i} {}", "x".repeat(40))))
        .collect();
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "tools": [tool("T")]})).unwrap()
}

fn to_natural_body(n: usize) -> Vec<u8> {
    let mut calls = String::new();
    let mut results = String::new();
    for i in 0..n {
        calls.push_str(&format!(
            "<tool_call name=\"T{i}\">\n{{}}\n</tool_call>\n\n"
        ));
    }
    for i in (0..n).rev() {
        results.push_str(&format!(
            "<tool_response name=\"T{i}\">\nok\n</tool_response>\n\n"
        ));
    }
    let tools: Vec<Value> = (0..n).map(|i| tool(&format!("T{i}"))).collect();
    let messages = json!([user("go"), {"role": "assistant", "content": calls}, user(&results)]);
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "tools": tools})).unwrap()
}

fn natural(c: &mut Criterion, group: &str, make: fn(usize) -> Vec<u8>) {
    let options = NaturalOptions::default();
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    for n in SIZES {
        let body = make(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &body, |b, body| {
            b.iter(|| {
                let out = rewrite(black_box(body), &options, &ContractCache::default());
                assert!(out.is_ok(), "{out:?}");
            });
        });
    }
    g.finish();
}

fn grammar_body(parameters: Value) -> Vec<u8> {
    let tool = json!({"type": "function", "function": {"name": "d", "parameters": parameters}});
    serde_json::to_vec(&json!({"model": "m", "messages": [user("hi")], "tools": [tool]})).unwrap()
}

fn type_bomb(levels: usize) -> Vec<u8> {
    let mut n = json!({"type": "string"});
    for _ in 0..levels {
        n = json!({"type": ["object", "object", "object", "object"], "properties": {"a": n}});
    }
    grammar_body(n)
}

fn wide(n: usize) -> Vec<u8> {
    let properties: Map<String, Value> = (0..n)
        .map(|i| (format!("p{i}"), json!({"enum": [i]})))
        .collect();
    grammar_body(json!({"type": "object", "properties": properties}))
}

fn grammars(c: &mut Criterion) {
    let options = NaturalOptions {
        syntax: Syntax::ToolCall,
        constrain: Constrain::Gbnf,
        ..NaturalOptions::default()
    };
    let mut g = c.benchmark_group("grammar");
    g.sample_size(10);
    let cases = [
        ("type_bomb", 12, type_bomb(12)),
        ("type_bomb", 96, type_bomb(96)),
        ("wide", 8_000, wide(8_000)),
        ("wide", 64_000, wide(64_000)),
        ("wide", 70_000, wide(70_000)),
    ];
    for (name, n, body) in &cases {
        g.bench_with_input(BenchmarkId::new(*name, n), body, |b, body| {
            b.iter(|| {
                // A fresh cache each time: the grammar is written anew.
                let out = rewrite(black_box(body), &options, &ContractCache::default());
                black_box(out.is_ok())
            });
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    grammars(c);
    natural(c, "keys", keys_body);
    natural(c, "tools", tools_body);
    natural(c, "results", results_body);
    natural(c, "merge", merge_body);

    let options = HistoryOptions {
        syntax: Syntax::ToolCall,
        max_tool_result_chars: 20_000,
    };
    let mut g = c.benchmark_group("to_natural");
    g.sample_size(10);
    for n in [2_500, 20_000] {
        let body = to_natural_body(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &body, |b, body| {
            b.iter(|| {
                let out = to_natural::rewrite(black_box(body), &options);
                assert!(matches!(out, Ok(Some(_))), "{out:?}");
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("parser_names");
    g.sample_size(10);
    for n in SIZES {
        let names: Vec<String> = (0..n).map(|i| format!("T{i}")).collect();
        // Every `<T` could start a call: each is matched against the names.
        let prose = "see <T1x and <T22y then <Tq ".repeat(2_000);
        g.bench_with_input(BenchmarkId::from_parameter(n), &prose, |b, prose| {
            b.iter(|| {
                let mut parser = Parser::new(&names, ParserOptions::default());
                let mut events = Vec::new();
                parser.feed(black_box(prose), &mut events);
                parser.finish(&mut events);
                black_box(events.len())
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The request direction of natural mode: `natural::request::rewrite`.
//!
//! - `contracts/cold`: a fresh `ContractCache` per request, so every call
//!   parses the tools, builds examples and renders the Markdown contracts.
//! - `contracts/warm`: the same tool set again (what agents do every turn):
//!   a cache hit, so the cost is splitting the body, parsing `messages`,
//!   hashing and comparing the raw `tools` text, and writing the new body.
//! - `contracts/unchanged`: a chat request without tools (forwarded as is):
//!   the floor, one JSON parse.
//! - `history/<turns>`: a request whose history holds that many tool turns
//!   (a call and a ~1 KB result each), warm cache; throughput in bytes.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;
use toolgate::natural::request::{ContractCache, NaturalOptions, Rewrite, rewrite};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "GetWeather", "description": "Current weather for a place.",
            "parameters": {"type": "object", "properties": {
                "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["location"]}}},
        {"type": "function", "function": {
            "name": "BookRestaurant", "description": "Book a table at a restaurant.",
            "parameters": {"type": "object", "properties": {
                "restaurant": {"type": "string"},
                "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
                "time": {"type": "string", "format": "date-time"},
                "notes": {"type": "string"},
                "dietary": {"type": "array", "items": {"type": "string", "enum": ["vegan", "vegetarian", "gluten_free"]}}},
                "required": ["restaurant", "party_size", "time"]}}},
        {"type": "function", "function": {
            "name": "search_web", "description": "Search the web and return the top results.",
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "default": 5},
                "site": {"type": ["string", "null"]}},
                "required": ["query"]}}},
        {"type": "function", "function": {
            "name": "create_event", "description": "Create a calendar event.",
            "parameters": {"type": "object", "properties": {
                "title": {"type": "string"},
                "start": {"type": "string", "format": "date-time"},
                "end": {"type": "string", "format": "date-time"},
                "attendees": {"type": "array", "items": {"type": "object", "properties": {
                    "email": {"type": "string"}, "optional": {"type": "boolean"}}, "required": ["email"]}},
                "location": {"type": "object", "properties": {
                    "name": {"type": "string"}, "address": {"type": "string"}}}},
                "required": ["title", "start"]}}}
    ])
}

fn base_messages() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "You are a helpful assistant for travel planning."}),
        json!({"role": "user", "content": "What is the weather in Paris, and book me a table for two at 8pm?"}),
    ]
}

fn body(with_tools: bool, turns: usize) -> Vec<u8> {
    let mut messages = base_messages();
    let result = "Partly cloudy, 18 degrees Celsius, wind 12 km/h from the west. ".repeat(16);
    for i in 0..turns {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{i:024}"), "type": "function",
            "function": {"name": "GetWeather", "arguments": format!("{{\"location\":\"City {i}\",\"unit\":\"celsius\"}}")}}]}));
        messages.push(
            json!({"role": "tool", "tool_call_id": format!("call_{i:024}"), "content": result}),
        );
        messages.push(
            json!({"role": "user", "content": format!("And the next city, number {}?", i + 1)}),
        );
    }
    let mut request =
        json!({"model": "bench-natural", "stream": true, "temperature": 0.2, "messages": messages});
    if with_tools {
        request["tools"] = tools();
        request["tool_choice"] = json!("auto");
    }
    serde_json::to_vec(&request).expect("json")
}

fn check(out: Result<Rewrite, impl std::fmt::Debug>) -> usize {
    match out {
        Ok(Rewrite::Rewritten { body, .. }) => body.len(),
        Ok(Rewrite::Unchanged) => 0,
        Err(e) => panic!("rewrite failed: {e:?}"),
    }
}

fn bench_request(c: &mut Criterion) {
    let options = NaturalOptions::default();
    let mut group = c.benchmark_group("contracts");
    let with_tools = body(true, 0);
    group.bench_function("cold", |b| {
        b.iter(|| {
            let cache = ContractCache::default();
            black_box(check(rewrite(&with_tools, &options, &cache)))
        });
    });
    let warm = ContractCache::default();
    check(rewrite(&with_tools, &options, &warm));
    group.bench_function("warm", |b| {
        b.iter(|| black_box(check(rewrite(&with_tools, &options, &warm))));
    });
    let plain = body(false, 0);
    group.bench_function("unchanged", |b| {
        b.iter(|| black_box(check(rewrite(&plain, &options, &warm))));
    });
    group.finish();

    let mut group = c.benchmark_group("history");
    for turns in [10usize, 100] {
        let long = body(true, turns);
        group.throughput(Throughput::Bytes(long.len() as u64));
        group.bench_function(format!("{turns}_turns"), |b| {
            b.iter(|| black_box(check(rewrite(&long, &options, &warm))));
        });
    }
    group.finish();
}

criterion_group! {
    name = group;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(std::time::Duration::from_secs(2))
        .warm_up_time(std::time::Duration::from_millis(500));
    targets = bench_request
}
criterion_main!(group);

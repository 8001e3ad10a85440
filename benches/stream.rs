//! Cost per upstream SSE chunk of a natural-mode stream: `sse::Decoder` plus
//! `StreamRewriter::on_event` (parse the chunk, run the reply parser, forward
//! or re-encode), fed one event per frame as hyper delivers them.
//!
//! Throughput is in elements = upstream events, so criterion's "time per
//! element" is the time per chunk (the load target is 5 µs of CPU per chunk).
//!
//! - `decode_only`: the SSE decoder alone.
//! - `natural/prose`: content that never opens a call (the fast path that
//!   forwards the upstream's bytes).
//! - `natural/call`: prose followed by a `<GetWeather>` call, split in
//!   4-byte tokens (the held-back and re-encoded path, plus validation and the
//!   emitted call chunks).
//! - `to_natural/call`: the reverse direction: a native call whose arguments
//!   arrive in 4-byte fragments, written as a `<GetWeather>` block of text.
//! - `chunk/read` and `chunk/serde`: reading one typical content chunk's
//!   common shape with the borrowed reader both fast paths use, and with
//!   serde_json (its reference).

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use std::sync::Arc;
use toolgate::config::OnInvalid;
use toolgate::natural::parser::ParserOptions;
use toolgate::natural::reply::ReplySettings;
use toolgate::natural::request::{ContractCache, NaturalOptions, ResponsePlan, Rewrite, rewrite};
use toolgate::natural::stream::StreamRewriter;
use toolgate::natural::syntax::Syntax;
use toolgate::natural::validate::SchemaCache;
use toolgate::sse::transform::Transform;
use toolgate::sse::{Decoder, Event};
use toolgate::to_natural::RenderOptions;
use toolgate::to_natural::stream::StreamRenderer;

const CALL_TEXT: &str = "Let me check the current weather in Paris for you, so that you know \
whether to bring an umbrella today.\n\n<GetWeather>\n```json\n{\"location\": \"Paris, France\", \
\"unit\": \"celsius\"}\n```\n</GetWeather>";

const PROSE_TEXT: &str = "The weather in Paris is mild today, around eighteen degrees with a light \
breeze from the west and some clouds in the afternoon. Bring a light jacket if you go out tonight; \
the temperature drops quickly after sunset and the wind picks up near the river.";

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> Bytes {
    let c = json!({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000u64,
        "model": "bench-natural", "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    });
    Bytes::from(format!("data: {c}\n\n"))
}

/// One frame per event: role chunk, 4-byte content tokens, finish, `[DONE]`.
fn frames(text: &str) -> Vec<Bytes> {
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + 4).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(chunk(json!({"content": &text[start..end]}), None));
        start = end;
    }
    out.push(chunk(json!({}), Some("stop")));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

/// A native call: role chunk, the call's opening delta, its arguments in
/// 4-byte fragments, finish, `[DONE]`.
fn call_frames() -> Vec<Bytes> {
    let arguments = r#"{"location": "Paris, France", "unit": "celsius"}"#;
    let mut out = vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "GetWeather", "arguments": ""}}]}),
            None,
        ),
    ];
    for piece in arguments.as_bytes().chunks(4) {
        let piece = std::str::from_utf8(piece).expect("ascii");
        out.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            None,
        ));
    }
    out.push(chunk(json!({}), Some("tool_calls")));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

fn plan() -> ResponsePlan {
    let body = json!({
        "model": "bench-natural", "stream": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {
            "name": "GetWeather", "description": "Current weather for a place.",
            "parameters": {"type": "object", "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["location"]}}}]
    });
    let bytes = serde_json::to_vec(&body).expect("json");
    match rewrite(
        &bytes,
        &NaturalOptions::default(),
        &ContractCache::default(),
    ) {
        Ok(Rewrite::Rewritten {
            plan: Some(plan), ..
        }) => plan,
        other => panic!("expected a plan, got {other:?}"),
    }
}

fn bench_stream(c: &mut Criterion) {
    // The gateway installs the Prometheus recorder; the reply parser's
    // metrics cost what they cost in production only with it installed.
    let _ = toolgate::metrics::install();
    let plan = plan();
    let schemas = Arc::new(SchemaCache::new());
    let settings = ReplySettings::new(
        "bench",
        &plan,
        ParserOptions::default(),
        OnInvalid::Error,
        0,
        schemas,
    );

    let mut group = c.benchmark_group("sse");
    for (label, text) in [("prose", PROSE_TEXT), ("call", CALL_TEXT)] {
        let frames = frames(text);
        // Events carrying JSON chunks plus the [DONE] event.
        group.throughput(Throughput::Elements(frames.len() as u64));
        group.bench_function(format!("decode_only/{label}"), |b| {
            let mut events: Vec<Event> = Vec::new();
            b.iter(|| {
                let mut decoder = Decoder::new();
                let mut n = 0;
                for frame in &frames {
                    decoder.feed(frame, &mut events).expect("short lines");
                    n += events.len();
                    events.clear();
                }
                black_box(n)
            });
        });
        group.bench_function(format!("natural/{label}"), |b| {
            let mut events: Vec<Event> = Vec::new();
            b.iter(|| {
                let mut decoder = Decoder::new();
                let mut rewriter = StreamRewriter::new(settings.clone(), false);
                let mut out = BytesMut::new();
                let mut sent = 0;
                for frame in &frames {
                    decoder.feed(frame, &mut events).expect("short lines");
                    for event in events.drain(..) {
                        rewriter.on_event(&event.data, &mut out);
                    }
                    // As RewriteBody does: hand the bytes to hyper per frame.
                    sent += out.split().freeze().len();
                }
                assert!(rewriter.is_ended());
                black_box(sent)
            });
        });
    }

    let frames = call_frames();
    group.throughput(Throughput::Elements(frames.len() as u64));
    let options = RenderOptions {
        syntax: Syntax::Tag,
        pretty: true,
        separator: "---".into(),
    };
    group.bench_function("to_natural/call", |b| {
        let mut events: Vec<Event> = Vec::new();
        b.iter(|| {
            let mut decoder = Decoder::new();
            let mut renderer = StreamRenderer::new(options.clone(), false);
            let mut out = BytesMut::new();
            let mut sent = 0;
            for frame in &frames {
                decoder.feed(frame, &mut events).expect("short lines");
                for event in events.drain(..) {
                    renderer.on_event(&event.data, &mut out);
                }
                sent += out.split().freeze().len();
            }
            assert!(renderer.is_ended());
            black_box(sent)
        });
    });
    group.finish();

    let mut group = c.benchmark_group("chunk");
    let content = chunk(json!({"content": "Let "}), None);
    let data = content
        .strip_prefix(b"data: ")
        .and_then(|d| d.strip_suffix(b"\n\n"))
        .expect("an SSE frame");
    group.throughput(Throughput::Elements(1));
    group.bench_function("read", |b| {
        b.iter(|| black_box(toolgate::upstream::plain::read(black_box(data)).is_some()));
    });
    group.bench_function("serde", |b| {
        b.iter(|| black_box(toolgate::upstream::plain::reference(black_box(data)).is_some()));
    });
    // The next chunk of the same stream, read through the stencil of this one.
    let read = toolgate::upstream::plain::read(data).expect("a plain chunk");
    let mut stencil = toolgate::upstream::stencil::Stencil::default();
    stencil.learn(
        data,
        read.holes.content.clone().expect("content"),
        read.choices_span(),
    );
    let next = chunk(json!({"content": "me c"}), None);
    let next = next
        .strip_prefix(b"data: ")
        .and_then(|d| d.strip_suffix(b"\n\n"))
        .expect("an SSE frame");
    group.bench_function("stencil", |b| {
        b.iter(|| black_box(stencil.fit(black_box(next)).is_some()));
    });
    group.finish();
}

criterion_group! {
    name = group;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(std::time::Duration::from_secs(2))
        .warm_up_time(std::time::Duration::from_millis(500));
    targets = bench_stream
}
criterion_main!(group);

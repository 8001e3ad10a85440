//! Throughput of the natural-text parser, in bytes per second, for prose
//! without calls, prose with calls, and a worst case full of `<` and `[`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolgate::natural::parser::{Parser, ParserOptions};
use toolgate::natural::syntax::Syntax;

const NAMES: &[&str] = &["GetWeather", "BookRestaurant", "weather", "search_web"];

fn prose(len: usize) -> String {
    let para = "The quick brown fox jumps over the lazy dog while the weather stays \
                mild and the restaurant keeps a table for four people tonight. ";
    para.repeat(len / para.len() + 1)
}

fn with_calls(len: usize, syntax: Syntax) -> String {
    let call = match syntax {
        Syntax::Tag => {
            "<GetWeather>\n```json\n{\"location\": \"San Francisco, CA\", \"unit\": \"fahrenheit\"}\n```\n</GetWeather>\n"
        }
        Syntax::ToolCall => {
            "<tool_call name=\"GetWeather\">\n{\"location\": \"San Francisco, CA\", \"unit\": \"fahrenheit\"}\n</tool_call>\n"
        }
        Syntax::Bracket => {
            "[checking the weather]{\"name\": \"weather\", \"parameters\": {\"location\": \"Berlin\"}}\n"
        }
        Syntax::Python => "[GetWeather(location=\"San Francisco, CA\", unit=\"fahrenheit\")]\n",
    };
    let unit = format!("{}{call}", prose(300).get(..300).unwrap_or_default());
    unit.repeat(len / unit.len() + 1)
}

fn worst(len: usize) -> String {
    "a<b [c] <G [x]( <Get> <t [[ ]] << [".repeat(len / 36 + 1)
}

fn bench_one(c: &mut Criterion, label: &str, syntax: Syntax, input: &str, chunk: usize) {
    let mut group = c.benchmark_group(label);
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function(format!("{}/chunk{chunk}", syntax.as_str()), |b| {
        let mut out = Vec::new();
        b.iter(|| {
            let opts = ParserOptions {
                syntax,
                ..ParserOptions::default()
            };
            let mut p = Parser::new(NAMES, opts);
            let bytes = input.as_bytes();
            let mut start = 0;
            while start < bytes.len() {
                let mut end = (start + chunk).min(bytes.len());
                while !input.is_char_boundary(end) {
                    end += 1;
                }
                p.feed(&input[start..end], &mut out);
                start = end;
            }
            p.finish(&mut out);
            black_box(&out);
            out.clear();
        });
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let len = 1 << 20;
    let text = prose(len);
    bench_one(c, "prose", Syntax::Tag, &text, 1 << 20);
    bench_one(c, "prose", Syntax::Tag, &text, 64);
    bench_one(c, "prose", Syntax::Bracket, &text, 64);
    bench_one(c, "prose", Syntax::Python, &text, 64);
    for syntax in [
        Syntax::Tag,
        Syntax::ToolCall,
        Syntax::Bracket,
        Syntax::Python,
    ] {
        bench_one(c, "calls", syntax, &with_calls(len, syntax), 64);
        bench_one(c, "calls", syntax, &with_calls(len, syntax), 1 << 20);
    }
    let bad = worst(len);
    bench_one(c, "worst", Syntax::Tag, &bad, 64);
    bench_one(c, "worst", Syntax::Bracket, &bad, 64);
    bench_one(c, "worst", Syntax::Python, &bad, 64);
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(10).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = benches
}
criterion_main!(group);

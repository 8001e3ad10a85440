//! The rescue corpus (tests/corpus/rescue): replies of open models whose
//! calls their server left as text, each through `rescue_text_calls`'s
//! path, streamed (in many seeded random splits, char by char, whole, and
//! as recorded when the case has its server's SSE) and as a whole
//! completion; every run must end with the case's native calls and text,
//! exactly.
//!
//! Each subfolder holds the cases of one recognizer, named as
//! `toolgate::natural::parser::rescue::RECOGNIZERS` names it. A folder
//! whose recognizer toolgate does not have yet is listed in [`AWAITING`]
//! and skipped (said on stderr); any other folder must name a recognizer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::BytesMut;
use serde_json::{Map, Value, json};
use toolgate::config::OnInvalid;
use toolgate::natural::parser::ParserOptions;
use toolgate::natural::parser::rescue::recognizer;
use toolgate::natural::reply::ReplySettings;
use toolgate::natural::request::{ContractCache, NaturalOptions, plan};
use toolgate::natural::stream::StreamRewriter;
use toolgate::natural::validate::SchemaCache;

/// Folders of formats whose recognizer is not in toolgate yet (none now).
const AWAITING: &[&str] = &[];

/// Random splits per case.
const SPLITS: u64 = 200;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/rescue")
}

/// One case: what the client declared, what the model wrote, what the
/// client must get.
struct Case {
    path: PathBuf,
    tools: Value,
    reply: String,
    /// The server's own stream of the reply, when it was recorded.
    sse: Option<String>,
    calls: Vec<(String, Value)>,
    text: String,
}

fn load(path: &Path) -> Case {
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for key in ["source", "tools", "reply", "expect"] {
        assert!(v.get(key).is_some(), "{}: no {key:?}", path.display());
    }
    let sse = v["sse"].as_str().map(|file| {
        std::fs::read_to_string(path.with_file_name(file))
            .unwrap_or_else(|e| panic!("{}: {file}: {e}", path.display()))
    });
    let calls = v["expect"]["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: expect.calls", path.display()))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["arguments"].clone(),
            )
        })
        .collect();
    Case {
        path: path.to_owned(),
        tools: v["tools"].clone(),
        reply: v["reply"].as_str().unwrap().to_owned(),
        sse,
        calls,
        text: v["expect"]["text"].as_str().unwrap().to_owned(),
    }
}

/// The cases of every folder whose recognizer exists, by folder.
fn cases() -> Vec<(String, Vec<Case>)> {
    let mut folders = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("tests/corpus/rescue")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    entries.sort();
    for dir in entries {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if recognizer(&name).is_none() {
            assert!(
                AWAITING.contains(&name.as_str()),
                "tests/corpus/rescue/{name}: no recognizer of that name, and not awaited"
            );
            eprintln!("rescue corpus: {name}/ skipped: its recognizer is not in toolgate yet");
            continue;
        }
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        folders.push((name, files.iter().map(|f| load(f)).collect()));
    }
    folders
}

fn settings(tools: &Value) -> ReplySettings {
    let body = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
        "stream": true,
    });
    let plan = plan(
        &serde_json::to_vec(&body).unwrap(),
        &NaturalOptions::default(),
        &ContractCache::default(),
    )
    .expect("a valid request")
    .expect("tools: a plan");
    let parser = ParserOptions {
        rescue: true,
        ..ParserOptions::default()
    };
    ReplySettings::new(
        "p",
        &plan,
        parser,
        OnInvalid::Text,
        0,
        Arc::new(SchemaCache::new()),
    )
}

fn chunk(delta: Value, finish: Option<&str>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
    .unwrap()
}

/// What the client reads from a rewritten stream: its text and calls.
fn read_stream(out: &[u8]) -> (String, Vec<(String, Value)>) {
    let mut text = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for line in std::str::from_utf8(out).unwrap().lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        assert!(v.get("error").is_none(), "an error event: {v}");
        let delta = &v["choices"][0]["delta"];
        if let Some(t) = delta["content"].as_str() {
            text.push_str(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                calls.push((String::new(), String::new()));
            }
            let (name, args) = &mut calls[index];
            if let Some(n) = call["function"]["name"].as_str() {
                name.push_str(n);
            }
            if let Some(a) = call["function"]["arguments"].as_str() {
                args.push_str(a);
            }
        }
    }
    let calls = calls
        .into_iter()
        .map(|(name, args)| (name, serde_json::from_str(&args).unwrap()))
        .collect();
    (text, calls)
}

/// The reply streamed in `pieces` (each a content delta) through the rescue
/// rewriter.
fn streamed(case: &Case, pieces: &[&str]) -> (String, Vec<(String, Value)>) {
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    events.extend(pieces.iter().map(|p| chunk(json!({"content": p}), None)));
    events.push(chunk(json!({}), Some("stop")));
    run_events(case, events.iter().map(Vec::as_slice))
}

fn run_events<'a>(
    case: &Case,
    events: impl Iterator<Item = &'a [u8]>,
) -> (String, Vec<(String, Value)>) {
    let mut rewriter = StreamRewriter::new(settings(&case.tools), false);
    let mut out = BytesMut::new();
    for data in events {
        rewriter.on_event(data, &mut out);
    }
    rewriter.on_event(b"[DONE]", &mut out);
    read_stream(&out)
}

/// The reply as a whole completion through the rescue rewrite.
async fn whole(case: &Case) -> (Option<String>, Vec<(String, Value)>) {
    let body = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": case.reply}}],
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    let rewritten = toolgate::natural::complete::rescue(&bytes, &settings(&case.tools))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", case.path.display()));
    let v: Value = serde_json::from_slice(rewritten.as_deref().unwrap_or(&bytes)).unwrap();
    let message = &v["choices"][0]["message"];
    let calls = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let f = &c["function"];
            (
                f["name"].as_str().unwrap().to_owned(),
                serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap(),
            )
        })
        .collect();
    (message["content"].as_str().map(str::to_owned), calls)
}

/// A small seeded generator (xorshift64*), so every run splits the same way.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// The reply cut at random char boundaries into 1 to 12 pieces (some empty).
fn random_split<'a>(text: &'a str, rng: &mut Rng) -> Vec<&'a str> {
    let bounds: Vec<usize> = (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    let mut cuts: Vec<usize> = (0..rng.below(12))
        .map(|_| bounds[rng.below(bounds.len())])
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut at = 0;
    for cut in cuts.into_iter().chain([text.len()]) {
        pieces.push(&text[at..cut]);
        at = cut;
    }
    pieces
}

fn check(case: &Case, how: &str, got: (String, Vec<(String, Value)>)) {
    let (text, calls) = got;
    assert_eq!(
        calls,
        case.calls,
        "{} ({how}): the calls",
        case.path.display()
    );
    assert_eq!(text, case.text, "{} ({how}): the text", case.path.display());
}

#[tokio::test]
async fn every_case_parses_to_its_calls_and_text_streamed_and_whole() {
    let folders = cases();
    assert!(folders.len() >= 5, "a folder per recognizer");
    let mut total = 0;
    for (folder, cases) in &folders {
        assert!(!cases.is_empty(), "{folder}/ holds no case");
        for (n, case) in cases.iter().enumerate() {
            total += 1;
            check(case, "one delta", streamed(case, &[&case.reply]));
            let chars: Vec<String> = case.reply.chars().map(String::from).collect();
            let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
            check(case, "char by char", streamed(case, &chars));
            let mut rng = Rng(0x5EED_0000 + 7919 * (n as u64 + 1) + folder.len() as u64);
            for split in 0..SPLITS {
                let pieces = random_split(&case.reply, &mut rng);
                check(
                    case,
                    &format!("split {split}: {pieces:?}"),
                    streamed(case, &pieces),
                );
            }
            if let Some(sse) = &case.sse {
                let events: Vec<&str> = sse
                    .split("\n\n")
                    .filter_map(|e| e.trim().strip_prefix("data: "))
                    .filter(|d| *d != "[DONE]")
                    .collect();
                let recorded: String = events
                    .iter()
                    .filter_map(|d| {
                        let v: Value = serde_json::from_str(d).ok()?;
                        v["choices"][0]["delta"]["content"]
                            .as_str()
                            .map(str::to_owned)
                    })
                    .collect();
                assert_eq!(
                    recorded,
                    case.reply,
                    "{}: the recorded stream",
                    case.path.display()
                );
                check(
                    case,
                    "as recorded",
                    run_events(case, events.iter().map(|d| d.as_bytes())),
                );
            }
            let (content, calls) = whole(case).await;
            // Rule 16: content is null when only whitespace is left besides calls.
            let want = if case.calls.is_empty() {
                Some(case.reply.clone())
            } else {
                Some(case.text.clone()).filter(|t| !t.trim().is_empty())
            };
            assert_eq!(
                calls,
                case.calls,
                "{} (whole): the calls",
                case.path.display()
            );
            assert_eq!(
                content,
                want,
                "{} (whole): the content",
                case.path.display()
            );
        }
    }
    eprintln!("rescue corpus: {total} cases in {} folders", folders.len());
}

/// The corpus's own rules: every case declares tools, every expected call
/// names one of them with an object of arguments, and a case without calls
/// keeps its reply as its text (nothing the model wrote is lost).
#[test]
fn the_corpus_is_well_formed() {
    let mut all = Vec::new();
    for dir in std::fs::read_dir(corpus_dir()).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "json") {
                all.push(load(&f));
            }
        }
    }
    assert!(all.len() >= 30, "{} cases", all.len());
    for case in &all {
        let declared: Vec<&str> = case
            .tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        for (name, args) in &case.calls {
            assert!(
                declared.contains(&name.as_str()),
                "{}: {name}",
                case.path.display()
            );
            assert!(
                args.is_object(),
                "{}: {name}'s arguments",
                case.path.display()
            );
        }
        if case.calls.is_empty() {
            assert_eq!(case.text, case.reply, "{}", case.path.display());
        }
        let _: &Map<String, Value> = case.tools[0]["function"].as_object().unwrap();
    }
}

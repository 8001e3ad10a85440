//! Tenancy: every inbound key is an identity, and nothing one key stored
//! reaches another. Each attack the issue reproduced, against the real
//! binary with SQLite and PostgreSQL (two processes sharing one database
//! for the steps and chats), the per-key policy at each door, and a
//! property: random interleavings of several keys' requests never show one
//! key a marker only another key sent.

use crate::common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::agent::{sse, text_sse, text_then_calls_sse};
use common::binary::Binary;
use common::postgres::Postgres;
use common::{Collected, Mock, Recorded, TestConfig, TestGateway};
use http::{Method, Request};
use http_body_util::Full;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Keys of the in-process gateways, set once before any of them starts.
pub(crate) fn keys() {
    static KEYS: Once = Once::new();
    KEYS.call_once(|| {
        // SAFETY: set once, before any gateway of this binary reads the
        // environment (every test that starts one calls this first).
        unsafe {
            std::env::set_var("TENANCY_TEST_A", "key-a-1,key-a-2");
            std::env::set_var("TENANCY_TEST_B", "key-b-1");
            std::env::set_var("TENANCY_TEST_C", "key-c-1");
            std::env::set_var("TENANCY_TEST_PLAIN", "plain-key");
            std::env::set_var("TENANCY_TEST_ADMIN", "admin-key");
        }
    });
}

const KEY_ENV: [(&str, &str); 5] = [
    ("TENANCY_TEST_A", "key-a-1,key-a-2"),
    ("TENANCY_TEST_B", "key-b-1"),
    ("TENANCY_TEST_C", "key-c-1"),
    ("TENANCY_TEST_PLAIN", "plain-key"),
    ("TENANCY_TEST_ADMIN", "admin-key"),
];

/// `[server.auth]` with three named tenants, plain keys and an admin key.
pub(crate) const AUTH: &str = "[server.auth]\napi_keys_env = \"TENANCY_TEST_PLAIN\"\nadmin_keys_env = \"TENANCY_TEST_ADMIN\"\n\
    [[server.auth.keys]]\nname = \"team-a\"\nkey_env = \"TENANCY_TEST_A\"\n\
    [[server.auth.keys]]\nname = \"team-b\"\nkey_env = \"TENANCY_TEST_B\"\n\
    [[server.auth.keys]]\nname = \"team-c\"\nkey_env = \"TENANCY_TEST_C\"\n";

pub(crate) async fn call(
    method: Method,
    url: &str,
    key: &str,
    body: Option<Value>,
    chat: Option<&str>,
) -> Collected {
    let mut request = Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json");
    if let Some(chat) = chat {
        request = request.header("x-toolgate-chat-id", chat);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    common::send(request.body(Full::new(body)).unwrap()).await
}

async fn post(url: &str, key: &str, body: Value) -> Collected {
    call(Method::POST, url, key, Some(body), None).await
}

async fn get(url: &str, key: &str) -> Collected {
    call(Method::GET, url, key, None, None).await
}

fn sqlite_file(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolgate-tenancy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/t.db", dir.display())
}

/// The error of an unknown id, with the id taken out, to compare answers to
/// another tenant's id with.
fn shape(reply: &Collected, id: &str) -> (u16, String) {
    (reply.status.as_u16(), reply.text().replace(id, "ID"))
}

/// `GET`, `DELETE` and `previous_response_id` of another key's stored
/// response answer exactly as an unknown id does.
async fn stored_responses_are_their_keys_alone(store: &str) {
    let config = format!(
        "{AUTH}[store]\nurl = \"{store}\"\n[[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\nchunk_delay_ms = 0\n"
    );
    let gw = Binary::start(&config, &KEY_ENV);
    let created = post(
        &gw.url("/v1/responses"),
        "key-a-1",
        json!({"model": "demo", "input": "MARK-A: say hello"}),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/responses/{id}");
    // At once, while the response may still be queued for the writer (a
    // replica reads its own queued responses): still not another key's.
    // (Just after start the database may not be connected yet: then both
    // answer 503 alike.)
    let at_once = get(&gw.url(&path), "key-b-1").await;
    let never = "resp_fedcba9876543210fedcba9876543210";
    let unknown_now = get(&gw.url(&format!("/v1/responses/{never}")), "key-b-1").await;
    assert_eq!(at_once.status, unknown_now.status, "{}", at_once.text());
    assert!(!at_once.text().contains("MARK-A"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&gw.url(&path), "key-a-2").await.status != 200 {
        assert!(Instant::now() < deadline, "the response was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The owner reads a queued response before the database is connected;
    // what follows compares with the database's answers.
    while !get(&gw.url("/readyz"), "key-a-1")
        .await
        .text()
        .contains("store: up")
    {
        assert!(Instant::now() < deadline, "the store never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unknown = "resp_0123456789abcdef0123456789abcdef";
    let unknown_path = format!("/v1/responses/{unknown}");
    let theirs = get(&gw.url(&path), "key-b-1").await;
    assert_eq!(theirs.status, 404);
    assert_eq!(
        shape(&theirs, &id),
        shape(&get(&gw.url(&unknown_path), "key-b-1").await, unknown)
    );
    assert!(!theirs.text().contains("MARK-A"));
    let deleted = call(Method::DELETE, &gw.url(&path), "key-b-1", None, None).await;
    assert_eq!(
        shape(&deleted, &id),
        shape(
            &call(
                Method::DELETE,
                &gw.url(&unknown_path),
                "key-b-1",
                None,
                None
            )
            .await,
            unknown
        )
    );
    let continued = post(
        &gw.url("/v1/responses"),
        "key-b-1",
        json!({"model": "demo", "input": "and then?", "previous_response_id": id}),
    )
    .await;
    let continued_unknown = post(
        &gw.url("/v1/responses"),
        "key-b-1",
        json!({"model": "demo", "input": "and then?", "previous_response_id": unknown}),
    )
    .await;
    assert_eq!(continued.status, 400, "{}", continued.text());
    assert_eq!(shape(&continued, &id), shape(&continued_unknown, unknown));
    assert!(!continued.text().contains("MARK-A"));
    // A plain key is a tenant of its own too; A's response is still there.
    assert_eq!(get(&gw.url(&path), "plain-key").await.status, 404);
    let mine = get(&gw.url(&path), "key-a-1").await;
    assert_eq!(mine.status, 200);
    assert!(mine.text().contains("MARK-A"));
}

#[tokio::test]
async fn stored_responses_are_their_keys_alone_on_sqlite() {
    stored_responses_are_their_keys_alone(&sqlite_file("responses")).await;
}

#[tokio::test]
async fn stored_responses_are_their_keys_alone_on_postgres() {
    let pg = Postgres::start();
    stored_responses_are_their_keys_alone(&pg.url()).await;
}

/// A model that writes the user's marker as a step, then calls the gateway's
/// calculator and the client's `notify`; once the client's result is back,
/// it answers. Every request it gets is kept.
async fn stepping_model() -> Mock {
    Mock::start(|r: &Recorded| {
        let body = r.json();
        let messages = body["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "tool") {
            return sse(text_sse("done"));
        }
        let user = messages[0]["content"].as_str().unwrap_or_default();
        let marker = user.split(':').next().unwrap_or_default();
        sse(text_then_calls_sse(
            &format!("STEP-{marker}"),
            &[
                ("calculator", r#"{"expression": "1+1"}"#),
                ("notify", r#"{"text": "hi"}"#),
            ],
        ))
    })
    .await
}

fn notify() -> Value {
    json!({"type": "function", "function": {"name": "notify", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}})
}

/// The history a client sends back after `notify` ran: its first message,
/// the assistant turn as it got it, the result.
fn follow_up(first: &str, assistant: &Value, result: &str) -> Value {
    let id = assistant["tool_calls"][0]["id"].clone();
    json!({"model": "m", "tools": [notify()], "messages": [
        {"role": "user", "content": first},
        {"role": "assistant", "content": assistant["content"], "tool_calls": assistant["tool_calls"]},
        {"role": "tool", "tool_call_id": id, "content": result},
    ]})
}

/// Gateway steps and chats, across two processes on one PostgreSQL: a key
/// that replays another key's call ids gets none of its hidden steps, one
/// that names another key's chat or replays its history starts a chat of its
/// own, and the transcript API shows each key its own tenant's chats.
#[tokio::test]
async fn steps_and_chats_stay_with_their_key_across_replicas() {
    let pg = Postgres::start();
    let model = stepping_model().await;
    let config = format!(
        "{AUTH}[store]\nurl = \"{}\"\n[[providers]]\nname = \"up\"\nbase_url = \"{}\"\nmodels = [\"m\"]\n[providers.tools]\ngateway_tools = [\"builtin:calculator\"]\n",
        pg.url(),
        model.url()
    );
    let one = Binary::start(&config, &KEY_ENV);
    let two = Binary::start(&config, &KEY_ENV);
    let chat = |gw: &Binary| gw.url("/v1/chat/completions");

    // A's answer ends with the client's call; its gateway step is kept.
    let a_first = "MARK-A: go";
    let started = post(
        &chat(&one),
        "key-a-1",
        json!({"model": "m", "tools": [notify()], "messages": [{"role": "user", "content": a_first}]}),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.text());
    let a_chat = started.headers["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let assistant = started.json()["choices"][0]["message"].clone();
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "notify");

    // A's follow-up on the other replica gets its steps back (from the store).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(
            &chat(&two),
            "key-a-2",
            follow_up(a_first, &assistant, "sent"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        if model.last().json().to_string().contains("STEP-MARK-A") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A's steps never reached the other replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // B replays A's call ids (ids leak; the texts B never saw), on either
    // replica: none of A's steps.
    let mut replayed = assistant.clone();
    replayed["content"] = Value::Null;
    for gw in [&one, &two] {
        let r = post(
            &chat(gw),
            "key-b-1",
            follow_up("MARK-B: go", &replayed, "MARK-B"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let sent = model.last().json();
        let text = sent["messages"].to_string();
        assert!(text.contains("MARK-B"), "{text}");
        assert!(
            !text.contains("STEP-MARK-A") && !text.contains("calculator"),
            "A's hidden steps reached B's upstream request: {text}"
        );
        assert_ne!(r.headers["x-toolgate-chat-id"], a_chat.as_str());
    }
    // B replays A's whole history (texts included): a chat of B's own.
    let r = post(
        &chat(&two),
        "key-b-1",
        follow_up(a_first, &assistant, "MARK-B"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_ne!(
        r.headers["x-toolgate-chat-id"],
        a_chat.as_str(),
        "B's replay joined A's chat"
    );
    // B names A's chat: a new chat for B.
    let named = call(
        Method::POST,
        &chat(&one),
        "key-b-1",
        Some(json!({"model": "m", "tools": [notify()], "messages": [{"role": "user", "content": "MARK-B: hi"}]})),
        Some(&a_chat),
    )
    .await;
    assert_eq!(named.status, 200);
    let b_chat = named.headers["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(b_chat, a_chat);

    // The transcript API: each key its own tenant's chats; admin sees all.
    let chats = |body: &Value| -> Vec<(String, String)> {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_owned(),
                    c["tenant"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all = get(&two.url("/toolgate/api/chats"), "admin-key")
            .await
            .json();
        let ids: HashSet<String> = chats(&all).into_iter().map(|(id, _)| id).collect();
        if ids.contains(&a_chat) && ids.contains(&b_chat) {
            break;
        }
        assert!(Instant::now() < deadline, "chats not recorded: {all}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for gw in [&one, &two] {
        let b_list = get(&gw.url("/toolgate/api/chats"), "key-b-1").await;
        assert!(
            chats(&b_list.json()).iter().all(|(_, t)| t == "team-b"),
            "{}",
            b_list.text()
        );
        assert!(chats(&b_list.json()).iter().all(|(id, _)| *id != a_chat));
        let theirs = get(&gw.url(&format!("/toolgate/api/chats/{a_chat}")), "key-b-1").await;
        let none = get(&gw.url("/toolgate/api/chats/no-such-chat"), "key-b-1").await;
        assert_eq!(theirs.status, 404);
        assert_eq!(shape(&theirs, &a_chat), shape(&none, "no-such-chat"));
        let events = get(
            &gw.url(&format!("/toolgate/api/chats/{a_chat}/events")),
            "key-b-1",
        )
        .await;
        assert_eq!(events.status, 404);
        let mine = get(&gw.url(&format!("/toolgate/api/chats/{a_chat}")), "key-a-1").await;
        assert_eq!(mine.status, 200);
        assert!(
            mine.text().contains("MARK-A") && !mine.text().contains("MARK-B"),
            "{}",
            mine.text()
        );
    }
    let only_b = get(&one.url("/toolgate/api/chats?tenant=team-b"), "admin-key").await;
    let listed = chats(&only_b.json());
    assert!(!listed.is_empty() && listed.iter().all(|(_, t)| t == "team-b"));
    let asked = get(&one.url("/toolgate/api/chats?tenant=team-a"), "key-b-1").await;
    assert_eq!(asked.status, 403, "a client key cannot list another tenant");
}

/// A provider offering two gateway tools, in front of `model`.
fn policy_config(model: &Mock) -> String {
    TestConfig::new()
        .raw(AUTH)
        .raw("[[server.auth.keys]]\nname = \"narrow\"\nkey_env = \"TENANCY_TEST_NARROW\"\nmodels = [\"m\", \"gpt-*\"]\ngateway_tools = [\"builtin:clock\"]\n")
        .up(
            &model.url(),
            "[providers.tools]\ngateway_tools = [\"builtin:clock\", \"builtin:calculator\"]",
        )
        .toml()
}

/// The per-key policy at each door: a model outside the key's globs is a
/// `403 model_not_allowed` in the door's error shape, before anything goes
/// upstream; a gateway tool outside its list is never declared upstream,
/// and a call the model makes to it anyway is refused, never run.
#[tokio::test]
async fn each_door_applies_the_keys_policy() {
    keys();
    // SAFETY: see `keys`; this variable is read by this test's gateway only.
    unsafe { std::env::set_var("TENANCY_TEST_NARROW", "narrow-key") };
    let model = Mock::start(|r: &Recorded| {
        let body = r.json();
        if body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool")
        {
            return sse(text_sse("done"));
        }
        sse(text_then_calls_sse(
            "",
            &[("calculator", r#"{"expression": "6*7"}"#)],
        ))
    })
    .await;
    let gw = TestGateway::start(&policy_config(&model)).await;
    let doors = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}]}),
        ),
        ("/v1/responses", json!({"input": "hi"})),
        (
            "/v1/messages",
            json!({"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
        ),
    ];
    for (path, body) in &doors {
        let mut refused = body.clone();
        refused["model"] = json!("claude-3");
        let r = post(&gw.url(path), "narrow-key", refused).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        let error = r.json();
        if *path == "/v1/messages" {
            assert_eq!(error["type"], "error");
            assert_eq!(error["error"]["type"], "permission_error", "{error}");
        } else {
            assert_eq!(error["error"]["code"], "model_not_allowed", "{error}");
            assert_eq!(error["error"]["param"], "model");
        }
    }
    assert_eq!(model.count(), 0, "nothing went upstream");
    for (path, body) in &doors {
        let mut allowed = body.clone();
        allowed["model"] = json!("m");
        let before = model.count();
        let r = post(&gw.url(path), "narrow-key", allowed).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        let requests = model.requests.lock().unwrap()[before..].to_vec();
        let first = requests[0].json();
        let declared: Vec<&str> = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            declared,
            ["clock"],
            "{path}: only the key's tools are offered"
        );
        // The model called the calculator anyway: refused, and told so.
        let second = requests[1].json().to_string();
        assert!(
            second.contains("not available to this API key"),
            "{path}: {second}"
        );
        assert!(!second.contains("42"), "{path}: the calculator never ran");
        // The same request with a key without a policy is offered both.
        let mut open = body.clone();
        open["model"] = json!("m");
        let before = model.count();
        assert_eq!(post(&gw.url(path), "key-c-1", open).await.status, 200);
        let first = model.requests.lock().unwrap()[before].json();
        assert_eq!(first["tools"].as_array().unwrap().len(), 2);
    }
}

/// A gateway tool the key may not use does not exist for that key: a tool
/// the client declares under the same name is the client's own, and the
/// model's call to it comes back to the client as its call, at every door,
/// passthrough and natural, never as a refused gateway call whose message
/// would tell the key the hidden tool exists.
#[tokio::test]
async fn a_client_tool_named_like_a_withheld_gateway_tool_is_the_clients() {
    keys();
    // SAFETY: see `keys`; this variable is read by this test's gateways only.
    unsafe { std::env::set_var("TENANCY_TEST_NARROW", "narrow-key") };
    let schema = json!({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]});
    let doors = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "6*7?"}],
                "tools": [{"type": "function", "function": {"name": "calculator", "description": "The client's own.", "parameters": schema}}]}),
        ),
        (
            "/v1/responses",
            json!({"input": "6*7?",
                "tools": [{"type": "function", "name": "calculator", "description": "The client's own.", "parameters": schema}]}),
        ),
        (
            "/v1/messages",
            json!({"max_tokens": 64, "messages": [{"role": "user", "content": "6*7?"}],
                "tools": [{"name": "calculator", "description": "The client's own.", "input_schema": schema}]}),
        ),
    ];
    for mode in ["passthrough", "natural"] {
        // The model calls `calculator` however it is asked: natively, or
        // as natural-mode text.
        let model = Mock::start(move |_: &Recorded| {
            if mode == "natural" {
                sse(text_sse(
                    "<calculator>\n```json\n{\"expression\": \"6*7\"}\n```\n</calculator>\n",
                ))
            } else {
                sse(text_then_calls_sse(
                    "",
                    &[("calculator", r#"{"expression": "6*7"}"#)],
                ))
            }
        })
        .await;
        let gw = TestConfig::new()
            .raw(AUTH)
            .raw("[[server.auth.keys]]\nname = \"narrow\"\nkey_env = \"TENANCY_TEST_NARROW\"\ngateway_tools = [\"builtin:clock\"]\n")
            .agent(&model.url(), mode, &["builtin:clock", "builtin:calculator"], "")
            .start()
            .await;
        for (path, body) in &doors {
            let mut body = body.clone();
            body["model"] = json!("m");
            let before = model.count();
            let r = post(&gw.url(path), "narrow-key", body).await;
            assert_eq!(r.status, 200, "{mode} {path}: {}", r.text());
            assert_eq!(
                model.count() - before,
                1,
                "{mode} {path}: one round, the call is the client's: {}",
                r.text()
            );
            let text = r.text();
            assert!(
                !text.contains("not available") && !text.contains("withheld"),
                "{mode} {path}: {text}"
            );
            let answer = r.json();
            let called = match *path {
                "/v1/chat/completions" => {
                    assert_eq!(
                        answer["choices"][0]["finish_reason"], "tool_calls",
                        "{answer}"
                    );
                    assert!(
                        answer["choices"][0]["message"]["gateway_tool_calls"].is_null(),
                        "{answer}"
                    );
                    answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"].clone()
                }
                "/v1/responses" => {
                    let output = answer["output"].as_array().unwrap();
                    assert!(output.iter().all(|i| i["type"] != "mcp_call"), "{answer}");
                    output
                        .iter()
                        .find(|i| i["type"] == "function_call")
                        .map(|i| i["name"].clone())
                        .unwrap_or_default()
                }
                _ => {
                    assert_eq!(answer["stop_reason"], "tool_use", "{answer}");
                    assert!(!text.contains("mcp_tool_use"), "{answer}");
                    answer["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|b| b["type"] == "tool_use")
                        .map(|b| b["name"].clone())
                        .unwrap_or_default()
                }
            };
            assert_eq!(called, "calculator", "{mode} {path}: {answer}");
        }
    }
}

/// A model that echoes every text of the conversation it is sent, so that
/// whatever reached it shows in the answer; it also runs a gateway step
/// when asked to (`STEP` in the last user text). Requests are kept with the
/// tenant their client said (a header that goes upstream).
async fn echo_model() -> Mock {
    Mock::start(|r: &Recorded| {
        let body = r.json();
        let messages = body["messages"].as_array().unwrap();
        let texts: Vec<String> = messages
            .iter()
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let last_user = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let asked_step =
            last_user.contains("STEP") && !messages.iter().any(|m| m["role"] == "tool");
        if asked_step {
            return sse(text_then_calls_sse(
                &format!("step of {last_user}"),
                &[
                    ("calculator", r#"{"expression": "1+1"}"#),
                    ("notify", r#"{"text": "x"}"#),
                ],
            ));
        }
        sse(text_sse(&format!("echo: {}", texts.join(" | "))))
    })
    .await
}

#[derive(Debug, Clone)]
enum Op {
    /// A chat exchange (streamed or not), naming a known chat id or not.
    Chat {
        tenant: usize,
        stream: bool,
        name_chat: Option<usize>,
    },
    /// A Responses exchange, continuing a known response id or not.
    Respond {
        tenant: usize,
        previous: Option<usize>,
    },
    /// `GET` or `DELETE` of a known response id.
    Stored {
        tenant: usize,
        id: usize,
        delete: bool,
    },
    /// An answer that keeps a gateway step for the client's follow-up.
    Step { tenant: usize },
    /// A follow-up replaying a known call id.
    FollowUp { tenant: usize, call: usize },
    /// The transcript API: the list, or a known chat and its events.
    Transcripts { tenant: usize, chat: Option<usize> },
}

fn op() -> impl Strategy<Value = Op> {
    let t = 0usize..3;
    let pick = prop::option::of(0usize..64);
    prop_oneof![
        (t.clone(), any::<bool>(), pick.clone()).prop_map(|(tenant, stream, name_chat)| Op::Chat {
            tenant,
            stream,
            name_chat
        }),
        (t.clone(), pick.clone()).prop_map(|(tenant, previous)| Op::Respond { tenant, previous }),
        (t.clone(), 0usize..64, any::<bool>()).prop_map(|(tenant, id, delete)| Op::Stored {
            tenant,
            id,
            delete
        }),
        t.clone().prop_map(|tenant| Op::Step { tenant }),
        (t.clone(), 0usize..64).prop_map(|(tenant, call)| Op::FollowUp { tenant, call }),
        (t, pick).prop_map(|(tenant, chat)| Op::Transcripts { tenant, chat }),
    ]
}

pub(crate) const TENANT_KEYS: [&str; 3] = ["key-a-1", "key-b-1", "key-c-1"];

/// Runs `ops` against one gateway; returns a leak found, if any.
async fn interleave(ops: Vec<Op>) -> Result<(), String> {
    keys();
    let model = echo_model().await;
    let gw = TestConfig::new()
        .raw(AUTH)
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"all\"\n")
        .provider(
            "up",
            &model.url(),
            "[\"m\"]",
            "[providers.tools]\ngateway_tools = [\"builtin:calculator\"]",
        )
        .start()
        .await;
    let mark = |t: usize, n: usize| format!("MARK{t}x{n}");
    // What every tenant learned: chat ids, response ids, call turns.
    let chats: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut responses: Vec<String> = Vec::new();
    let mut turns: Vec<(usize, Value, String)> = Vec::new();
    let check = |t: usize, what: &str, text: &str| -> Result<(), String> {
        for other in (0..3).filter(|o| *o != t) {
            if text.contains(&format!("MARK{other}x")) {
                return Err(format!(
                    "tenant {t} saw tenant {other}'s marker in {what}: {text}"
                ));
            }
        }
        Ok(())
    };
    for (n, op) in ops.into_iter().enumerate() {
        let before = model.count();
        let (tenant, reply) = match op {
            Op::Chat {
                tenant,
                stream,
                name_chat,
            } => {
                let named = name_chat.and_then(|i| {
                    let chats = chats.lock().unwrap();
                    (!chats.is_empty()).then(|| chats[i % chats.len()].clone())
                });
                let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": mark(tenant, n)}]});
                let r = call(
                    Method::POST,
                    &gw.url("/v1/chat/completions"),
                    TENANT_KEYS[tenant],
                    Some(body),
                    named.as_deref(),
                )
                .await;
                (tenant, r)
            }
            Op::Respond { tenant, previous } => {
                let mut body = json!({"model": "m", "input": mark(tenant, n)});
                if let Some(i) = previous.filter(|_| !responses.is_empty()) {
                    body["previous_response_id"] = json!(responses[i % responses.len()]);
                }
                let r = post(&gw.url("/v1/responses"), TENANT_KEYS[tenant], body).await;
                if r.status == 200 {
                    responses.push(r.json()["id"].as_str().unwrap().to_owned());
                }
                (tenant, r)
            }
            Op::Stored { tenant, id, delete } => {
                if responses.is_empty() {
                    continue;
                }
                let path = format!("/v1/responses/{}", responses[id % responses.len()]);
                let method = if delete { Method::DELETE } else { Method::GET };
                (
                    tenant,
                    call(method, &gw.url(&path), TENANT_KEYS[tenant], None, None).await,
                )
            }
            Op::Step { tenant } => {
                let first = format!("{} STEP", mark(tenant, n));
                let body = json!({"model": "m", "tools": [notify()], "messages": [{"role": "user", "content": first}]});
                let r = post(&gw.url("/v1/chat/completions"), TENANT_KEYS[tenant], body).await;
                if r.status == 200 {
                    let message = r.json()["choices"][0]["message"].clone();
                    if message["tool_calls"].is_array() {
                        turns.push((tenant, message, first));
                    }
                }
                (tenant, r)
            }
            Op::FollowUp { tenant, call: i } => {
                if turns.is_empty() {
                    continue;
                }
                let (owner, assistant, first) = turns[i % turns.len()].clone();
                // A client replays only what it knows: another tenant's call
                // ids (ids leak), never its texts.
                let first = if owner == tenant {
                    first
                } else {
                    mark(tenant, n)
                };
                let mut assistant = assistant;
                if owner != tenant {
                    assistant["content"] = Value::Null;
                    assistant
                        .as_object_mut()
                        .unwrap()
                        .remove("gateway_tool_calls");
                }
                let r = post(
                    &gw.url("/v1/chat/completions"),
                    TENANT_KEYS[tenant],
                    follow_up(&first, &assistant, &mark(tenant, n)),
                )
                .await;
                (tenant, r)
            }
            Op::Transcripts { tenant, chat } => {
                let path = match chat {
                    Some(i) => {
                        let chats = chats.lock().unwrap();
                        if chats.is_empty() {
                            "/toolgate/api/chats".to_owned()
                        } else {
                            format!("/toolgate/api/chats/{}", chats[i % chats.len()])
                        }
                    }
                    None => "/toolgate/api/chats".to_owned(),
                };
                (tenant, get(&gw.url(&path), TENANT_KEYS[tenant]).await)
            }
        };
        if let Some(chat) = reply.headers.get("x-toolgate-chat-id") {
            chats
                .lock()
                .unwrap()
                .push(chat.to_str().unwrap().to_owned());
        }
        check(tenant, "an answer", &reply.text())?;
        for request in &model.requests.lock().unwrap()[before..] {
            check(
                tenant,
                "an upstream request",
                &String::from_utf8_lossy(&request.body),
            )?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn no_key_ever_sees_what_another_key_sent(ops in prop::collection::vec(op(), 8..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let found = runtime.block_on(interleave(ops));
        prop_assert!(found.is_ok(), "{}", found.unwrap_err());
    }
}

/// The property's runner can fail: a gateway without tenants (no
/// `[server.auth]`: one anonymous tenant, every key the same) lets a
/// replayed history continue another's stored response.
#[tokio::test]
async fn the_markers_would_show_a_leak() {
    let model = echo_model().await;
    let gw = TestConfig::new()
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .provider("up", &model.url(), "[\"m\"]", "")
        .start()
        .await;
    let first = post(
        &gw.url("/v1/responses"),
        "any",
        json!({"model": "m", "input": "MARK0x1"}),
    )
    .await;
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(
            &gw.url("/v1/responses"),
            "other",
            json!({"model": "m", "input": "MARK1x2", "previous_response_id": id}),
        )
        .await;
        if r.status == 200 {
            assert!(
                r.text().contains("MARK0x1"),
                "one tenant continues any response: {}",
                r.text()
            );
            break;
        }
        assert!(Instant::now() < deadline, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! Chats that begin alike: two users asking a deterministic model the same
//! first question (or one user retrying) make two chats that reached the
//! same conversation state. A follow-up that sends its history back
//! continues one of them, never a new chat: the one its request names, or
//! else the one that reached that state last. On every door, streamed and
//! whole, with and without keys, on SQLite and on PostgreSQL (two replicas
//! sharing one database, each answering part of the conversation).

use crate::common;
use crate::conformance;
use crate::tenancy::{AUTH, TENANT_KEYS, keys};

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::postgres::Postgres;
use common::{Collected, TestConfig, TestGateway};
use conformance::messages::check_messages;
use conformance::responses::check_responses;
use conformance::{Expect, check_stream};
use http_body_util::Full;
use serde_json::{Value, json};

/// The demo model with the gateway's calculator, as the embedded
/// `demo-agent` runs it.
const AGENT: &str = "[[providers]]\nname = \"demo-agent\"\nmodels = [\"demo-agent\"]\n\
    [providers.demo]\nchunk_delay_ms = 0\n\
    [providers.tools]\nmode = \"natural\"\nsyntax = \"tag\"\n\
    gateway_tools = [\"builtin:clock\", \"builtin:calculator\"]\nmax_rounds = 4\n";

#[derive(Debug, Clone, Copy)]
enum Door {
    Chat,
    Responses,
    Messages,
}

const DOORS: [Door; 3] = [Door::Chat, Door::Responses, Door::Messages];

async fn gateway(store: &str, auth: bool) -> TestGateway {
    let mut config = TestConfig::new().raw(&format!(
        "[store]\nurl = \"{store}\"\nrecord = \"all\"\nlink_wait_ms = 1000\n"
    ));
    if auth {
        keys();
        config = config.raw(AUTH);
    }
    config.raw(AGENT).start().await
}

/// One request of `door`'s shape, with `key` and the chat header if any.
async fn ask(
    gw: &TestGateway,
    key: Option<&str>,
    door: Door,
    stream: bool,
    history: &[Value],
    chat: Option<&str>,
) -> Collected {
    let (path, body) = match door {
        Door::Chat => (
            "/v1/chat/completions",
            json!({"model": "demo-agent", "stream": stream, "messages": history}),
        ),
        Door::Responses => (
            "/v1/responses",
            json!({"model": "demo-agent", "stream": stream, "input": history}),
        ),
        Door::Messages => (
            "/v1/messages",
            json!({"model": "demo-agent", "stream": stream, "max_tokens": 256, "messages": history}),
        ),
    };
    let mut request = http::Request::post(gw.url(path)).header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    if let Some(chat) = chat {
        request = request.header("x-toolgate-chat-id", chat);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let reply = common::send(request).await;
    assert_eq!(reply.status, 200, "{door:?} {stream}: {}", reply.text());
    reply
}

fn chat_of(reply: &Collected) -> String {
    reply.headers["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The answer as the door's SDK assembles it, to go back into the history.
fn echo(door: Door, stream: bool, reply: &Collected) -> Vec<Value> {
    match door {
        Door::Chat if stream => {
            let s = check_stream(&reply.body, &Expect::default()).unwrap();
            vec![json!({"role": "assistant", "content": s.choice().content})]
        }
        Door::Chat => vec![reply.json()["choices"][0]["message"].clone()],
        Door::Responses => {
            let response = if stream {
                check_responses(&reply.body).unwrap().response
            } else {
                reply.json()
            };
            response["output"].as_array().cloned().unwrap()
        }
        Door::Messages => {
            let message = if stream {
                check_messages(&reply.body).unwrap().message
            } else {
                reply.json()
            };
            vec![json!({"role": "assistant", "content": message["content"]})]
        }
    }
}

/// GET on the transcript API with `key`.
async fn api(gw: &TestGateway, key: Option<&str>, path: &str) -> Value {
    let mut request = http::Request::get(gw.url(path));
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let reply = common::send(request.body(Full::new(Bytes::new())).unwrap()).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.json()
}

/// The users' texts chat `id` holds once it holds `count` of them (the
/// writer lands rows behind the answers), or what it holds after 10 s.
async fn users_said(gw: &TestGateway, key: Option<&str>, id: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let chat = api(gw, key, &format!("/toolgate/api/chats/{id}")).await;
        let said: Vec<String> = chat["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user" && m["kind"] == "text")
            .filter_map(|m| m["text"].as_str().map(str::to_owned))
            .collect();
        if said.len() >= count || Instant::now() > deadline {
            return said;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The conversation on each door, streamed and whole: the same
/// question twice (the second time naming its chat), then each follow-up
/// with its history as it came back. `one` answers the first question and
/// both follow-ups, `two` the second question (the same gateway on SQLite,
/// two replicas on PostgreSQL).
async fn alike(one: &TestGateway, two: &TestGateway, key: Option<&str>, tag: &str) {
    let mut expected_chats = 0;
    for (n, door) in DOORS.into_iter().enumerate() {
        for stream in [false, true] {
            let combo = format!("{door:?} stream={stream}");
            let number = 10 + n * 2 + usize::from(stream);
            let question = format!("Ask the calculator: what is `{number} * 7`?");
            let first = vec![json!({"role": "user", "content": question})];
            let a = ask(one, key, door, stream, &first, None).await;
            let a_chat = chat_of(&a);
            let named = format!("named-{tag}-{number}");
            let b = ask(two, key, door, stream, &first, Some(&named)).await;
            assert_eq!(chat_of(&b), named, "{combo}");
            assert!(
                b.text().contains(&(number * 7).to_string()),
                "{combo}: the calculator ran: {}",
                b.text()
            );
            if one.url("") != two.url("") {
                // Another replica's answer is known once its writer landed
                // it (a batch, within milliseconds; a person reads first).
                users_said(one, key, &named, 1).await;
            }
            // The follow-up of the second, without its chat's name: the
            // chat that reached that state last, the named one.
            let mut history = first.clone();
            history.extend(echo(door, stream, &b));
            history.push(json!({"role": "user", "content": format!("Thanks ({combo})")}));
            let b2 = ask(one, key, door, stream, &history, None).await;
            assert_eq!(
                chat_of(&b2),
                named,
                "{combo}: the follow-up continues the latest of the chats it continues ({a_chat} and {named}), not a new one"
            );
            // The first asker's follow-up, naming its chat: its own.
            let mut history = first.clone();
            history.extend(echo(door, stream, &a));
            history.push(json!({"role": "user", "content": format!("And then? ({combo})")}));
            let a2 = ask(one, key, door, stream, &history, Some(&a_chat)).await;
            assert_eq!(chat_of(&a2), a_chat, "{combo}: the named chat");
            // Nothing recorded twice, nothing in the other chat.
            let said = users_said(one, key, &named, 2).await;
            assert_eq!(
                said,
                [question.clone(), format!("Thanks ({combo})")],
                "{combo}: the named chat"
            );
            let said = users_said(one, key, &a_chat, 2).await;
            assert_eq!(
                said,
                [question.clone(), format!("And then? ({combo})")],
                "{combo}: the first chat"
            );
            expected_chats += 2;
        }
    }
    let listed = api(one, key, "/toolgate/api/chats?limit=100").await;
    let chats = listed["data"].as_array().unwrap();
    assert_eq!(
        chats.len(),
        expected_chats,
        "no chat beyond the two each question made: {listed:#}"
    );
}

fn sqlite_file(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolgate-alike-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/t.db", dir.display())
}

#[tokio::test]
async fn a_follow_up_of_chats_alike_continues_one_of_them_on_sqlite() {
    let gw = gateway(&sqlite_file("open"), false).await;
    alike(&gw, &gw, None, "open").await;
}

#[tokio::test]
async fn a_follow_up_of_chats_alike_continues_one_of_them_with_keys_on_sqlite() {
    let gw = gateway(&sqlite_file("keys"), true).await;
    alike(&gw, &gw, Some(TENANT_KEYS[0]), "keys").await;
}

#[tokio::test]
async fn a_follow_up_of_chats_alike_continues_one_of_them_across_replicas_on_postgres() {
    let pg = Postgres::start();
    for (auth, db) in [(false, "alike_open"), (true, "alike_keys")] {
        pg.query(&format!("CREATE DATABASE {db}"));
        let url = pg.url().replace("/postgres", &format!("/{db}"));
        let one = gateway(&url, auth).await;
        let two = gateway(&url, auth).await;
        let key = auth.then_some(TENANT_KEYS[0]);
        alike(&one, &two, key, db).await;
    }
}

//! Transcripts in a real PostgreSQL (a throwaway cluster, see
//! `common::postgres`): two toolgate processes writing one chat, and the
//! database stopped while requests stream.

use crate::common;

use std::time::{Duration, Instant};

use common::binary::Binary;
use common::postgres::Postgres;
use serde_json::{Value, json};

/// A `toolgate` process serving the demo model with a gateway tool and a
/// store at `store_url`.
fn gateway(store_url: &str) -> Binary {
    gateway_with(store_url, "")
}

/// [`gateway`] with more `[store]` keys.
fn gateway_with(store_url: &str, store: &str) -> Binary {
    Binary::start(
        &format!(
            "[store]\nurl = \"{store_url}\"\n{store}[[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\nchunk_delay_ms = 1\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]\n"
        ),
        &[],
    )
}

/// A chat completion request to the process on `port`, in chat `chat` if
/// named, answered in full.
fn post(port: u16, body: &Value, chat: Option<&str>) -> common::Collected {
    let mut request = http::Request::post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .header("content-type", "application/json");
    if let Some(chat) = chat {
        request = request.header("x-toolgate-chat-id", chat);
    }
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(common::send(request))
}

fn ask(port: u16, chat: &str, n: usize) -> common::Collected {
    let body = json!({"model": "demo", "stream": true,
        "messages": [{"role": "user", "content": format!("Ask the calculator: what is `{n} * 2`?")}]});
    post(port, &body, Some(chat))
}

fn get(url: &str) -> common::Collected {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(common::get(url))
}

fn messages(gw: &Binary, chat: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(&gw.url(&format!("/toolgate/api/chats/{chat}")));
        if r.status == 200 {
            let m = r.json()["messages"].as_array().unwrap().clone();
            if m.len() >= count || Instant::now() > deadline {
                return m;
            }
        }
        assert!(Instant::now() < deadline, "{}", r.text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rows one exchange records: user text, assistant text, call, result,
/// aggregate, final text, usage.
const ROWS: usize = 7;

#[test]
fn two_processes_write_one_chat_without_losing_or_reordering() {
    let pg = Postgres::start();
    let a = gateway(&pg.url());
    let b = gateway(&pg.url());
    let answers: Vec<_> = (0..16)
        .map(|n| {
            let port = if n % 2 == 0 { a.port } else { b.port };
            std::thread::spawn(move || ask(port, "shared", n))
        })
        .collect();
    for answer in answers {
        let r = answer.join().unwrap();
        assert_eq!(r.status, 200);
        assert!(r.text().contains("data: [DONE]"));
    }
    // Read through the other process: both wrote to one database.
    let m = messages(&b, "shared", 16 * ROWS);
    assert_eq!(m.len(), 16 * ROWS, "nothing lost");
    for n in 0..16 {
        let question = format!("Ask the calculator: what is `{n} * 2`?");
        let asked = m.iter().position(|m| m["text"] == question).unwrap();
        let answered = m
            .iter()
            .position(|m| {
                m["kind"] == "tool_result" && m["result"].as_str() == Some(&*(n * 2).to_string())
            })
            .unwrap();
        assert!(asked < answered, "request {n} is before its result");
    }
    let chats = get(&a.url("/toolgate/api/chats")).json();
    assert_eq!(chats["data"].as_array().unwrap().len(), 1);
    assert_eq!(chats["data"][0]["tool_calls"], 16);
    assert_eq!(chats["data"][0]["messages"], 16 * ROWS);
    // Search and filters run on PostgreSQL too: a prompt's text, a tool's
    // result, and a filter that matches nothing.
    let found = |query: &str| {
        get(&a.url(&format!("/toolgate/api/chats?{query}"))).json()["data"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(found("q=what+is+%6015+*+2%60"), 1);
    assert_eq!(found("q=30"), 1, "the calculator's result");
    assert_eq!(found("q=nothing+like+this"), 0);
    assert_eq!(found("errors=1"), 0);
    assert_eq!(found("provider=demo&model=demo"), 1);
    assert_eq!(found("provider=other"), 0);
}

#[test]
fn a_stopped_database_costs_rows_not_traffic_and_writes_resume() {
    let pg = Postgres::start();
    let gw = gateway(&pg.url());
    assert_eq!(ask(gw.port, "before", 1).status, 200);
    assert_eq!(messages(&gw, "before", ROWS).len(), ROWS);

    pg.stop_server();
    let mut lost = Vec::new();
    for n in 0..5 {
        let r = ask(gw.port, "during", n);
        assert_eq!(r.status, 200, "traffic is unaffected");
        assert!(r.text().contains("\"status\":\"completed\"") && r.text().contains("[DONE]"));
        // Whether "during" is someone else's cannot be asked: a chat of
        // toolgate's naming.
        lost.push(r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned());
    }
    // The failed writes are counted and the store shows down in /readyz.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = get(&gw.url("/metrics")).text();
        let dropped = metrics
            .lines()
            .find(|l| l.starts_with("toolgate_store_dropped_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let ready = get(&gw.url("/readyz"));
        if dropped > 0.0 && ready.text().contains("store: down") {
            assert_eq!(ready.status, 200, "readiness does not depend on the store");
            break;
        }
        assert!(Instant::now() < deadline, "no drop counted: {metrics}");
        std::thread::sleep(Duration::from_millis(200));
    }

    pg.start_server();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(ask(gw.port, "after", 7).status, 200);
        let r = get(&gw.url("/toolgate/api/chats/after"));
        if r.status == 200 && r.json()["messages"].as_array().unwrap().len() >= ROWS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "writes never resumed: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(get(&gw.url("/readyz")).text().contains("store: up"));
    // Each exchange of the outage is recorded whole (it was still queued
    // when the database came back) or not at all, and then its chat says so.
    let mut marked = 0;
    for chat in &lost {
        let during = messages(&gw, chat, 1);
        let kinds: Vec<&str> = during.iter().map(|m| m["kind"].as_str().unwrap()).collect();
        if kinds.len() == ROWS {
            continue;
        }
        assert_eq!(kinds, ["error"], "a part of an exchange: {during:?}");
        assert_eq!(during[0]["code"], "not_recorded");
        assert!(
            during[0]["text"]
                .as_str()
                .unwrap()
                .starts_with("1 exchange(s) of this chat were not recorded"),
            "{during:?}"
        );
        marked += 1;
    }
    assert!(marked > 0, "no lost exchange was marked");
}

/// A follow-up sent at once to the other replica continues the chat the
/// first replica recorded, although that record lands only later: the
/// other replica looks again while `link_wait_ms` lasts. The record is held
/// back on purpose (a lock on the heads table, as a writer with a queue
/// would), so every follow-up arrives before it lands, however fast or slow
/// the machine is.
#[test]
fn a_follow_up_sent_at_once_to_the_other_replica_lands_in_the_same_chat() {
    use std::io::Write;
    use std::process::Stdio;
    use std::sync::mpsc;

    let pg = Postgres::start();
    let a = gateway_with(&pg.url(), "link_wait_ms = 10000\n");
    let b = gateway_with(&pg.url(), "link_wait_ms = 10000\n");
    let until = Instant::now() + Duration::from_secs(30);
    while pg.query("SELECT to_regclass('heads') IS NOT NULL") != "t" {
        assert!(Instant::now() < until, "the store was never migrated");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Writes to `heads` wait for this transaction; reads do not.
    let mut lock = pg
        .psql()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("psql");
    let mut script = lock.stdin.take().unwrap();
    script
        .write_all(b"BEGIN;\nLOCK TABLE heads IN EXCLUSIVE MODE;\n")
        .unwrap();
    script.flush().unwrap();
    let granted = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                   WHERE c.relname = 'heads' AND l.mode = 'ExclusiveLock' AND l.granted";
    while pg.query(granted) != "1" {
        assert!(Instant::now() < until, "the lock was never granted");
        std::thread::sleep(Duration::from_millis(20));
    }

    fn chat_of(r: &common::Collected) -> String {
        r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned()
    }
    // Sixteen conversations at once.
    let (a_port, b_port) = (a.port, b.port);
    let (answered, first_answers) = mpsc::channel();
    let runs: Vec<_> = (0..16)
        .map(|n| {
            let answered = answered.clone();
            std::thread::spawn(move || {
                let question = json!({"role": "user", "content": format!("Ask the calculator: what is `{n} * 3`?")});
                let first = post(a_port, &json!({"model": "demo", "messages": [question]}), None);
                assert_eq!(first.status, 200, "{}", first.text());
                let _ = answered.send(());
                let reply = first.json()["choices"][0]["message"].clone();
                let follow = json!({"model": "demo", "messages": [question, reply,
                    {"role": "user", "content": "Ask the calculator: what is `1 + 1`?"}]});
                let second = post(b_port, &follow, None);
                assert_eq!(second.status, 200, "{}", second.text());
                (n, chat_of(&first) == chat_of(&second))
            })
        })
        .collect();
    drop(answered);
    // Every first answer is out, none of them recorded yet: the follow-ups
    // are on their way to the other replica, which cannot find them.
    assert_eq!(
        first_answers.iter().take(16).count(),
        16,
        "a first answer failed"
    );
    std::thread::sleep(Duration::from_millis(300));
    let recorded = pg.query("SELECT count(*) FROM heads");
    script.write_all(b"COMMIT;\n").unwrap();
    drop(script);
    assert!(
        lock.wait().unwrap().success(),
        "the lock's transaction failed"
    );
    assert_eq!(recorded, "0", "the heads landed while the table was locked");
    let split: Vec<usize> = runs
        .into_iter()
        .map(|r| r.join().unwrap())
        .filter(|(_, same)| !same)
        .map(|(n, _)| n)
        .collect();
    assert!(
        split.is_empty(),
        "follow-ups that started a new chat: {split:?}"
    );
}

/// A conversation whose turns alternate between two replicas (a round-robin
/// balancer) is one chat with every message in it once: a replica that
/// remembers an earlier state of the conversation still finds the newer one
/// the other replica recorded, rather than record that replica's turn again.
#[test]
fn turns_alternating_between_replicas_record_every_message_once() {
    let pg = Postgres::start();
    let a = gateway_with(&pg.url(), "link_wait_ms = 10000\n");
    let b = gateway_with(&pg.url(), "link_wait_ms = 10000\n");
    let question = |turn: usize| format!("Ask the calculator: what is `{turn} + 1`?");
    let mut history: Vec<Value> = Vec::new();
    let mut chats = Vec::new();
    for (turn, gw) in [&a, &b, &a, &b].into_iter().enumerate() {
        history.push(json!({"role": "user", "content": question(turn)}));
        let r = post(
            gw.port,
            &json!({"model": "demo", "messages": history}),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        chats.push(r.headers["x-toolgate-chat-id"].to_str().unwrap().to_owned());
        history.push(r.json()["choices"][0]["message"].clone());
    }
    assert!(
        chats.iter().all(|c| *c == chats[0]),
        "turns split: {chats:?}"
    );
    // The last turn linked to the third's state once that was written, so
    // once its result is in, every earlier row is.
    let deadline = Instant::now() + Duration::from_secs(20);
    let m = loop {
        let m = messages(&a, &chats[0], 4 * ROWS);
        if m.iter()
            .any(|m| m["kind"] == "tool_result" && m["result"] == "4")
        {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the last turn was never recorded"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for turn in 0..4 {
        let asked = m.iter().filter(|m| m["text"] == question(turn)).count();
        assert_eq!(asked, 1, "turn {turn}'s question is recorded {asked} times");
    }
    assert_eq!(m.len(), 4 * ROWS, "{m:#?}");
}

/// Requests that waited `link_wait_ms` in vain, from the process's metrics.
fn link_waits(gw: &Binary) -> u64 {
    let metrics = get(&gw.url("/metrics")).text();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("toolgate_store_link_waits_total"))
        .unwrap_or_else(|| panic!("no link waits counter: {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A history whose last answer toolgate never recorded (few-shot examples
/// sent with every request) waits `link_wait_ms` once per replica: a later
/// request ending with the same answer looks it up once and goes on.
#[test]
fn a_made_up_answer_is_waited_for_once() {
    let pg = Postgres::start();
    let gw = gateway_with(&pg.url(), "link_wait_ms = 300\n");
    let shots = |question: &str| {
        json!({"model": "demo", "messages": [
            {"role": "user", "content": "Ask the calculator: what is `1 + 1`?"},
            {"role": "assistant", "content": "The calculator says 2."},
            {"role": "user", "content": question},
        ]})
    };
    assert_eq!(link_waits(&gw), 0);
    let first = post(
        gw.port,
        &shots("Ask the calculator: what is `2 + 2`?"),
        None,
    );
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(link_waits(&gw), 1, "the first request waits for the answer");
    for question in ["Ask the calculator: what is `3 + 3`?", "And `4 + 4`?"] {
        let r = post(gw.port, &shots(question), None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        link_waits(&gw),
        1,
        "the same made-up answer is not waited for again"
    );
    let other = json!({"model": "demo", "messages": [
        {"role": "user", "content": "Ask the calculator: what is `5 + 5`?"},
        {"role": "assistant", "content": "Another made-up answer."},
        {"role": "user", "content": "Ask the calculator: what is `6 + 6`?"},
    ]});
    assert_eq!(post(gw.port, &other, None).status, 200);
    assert_eq!(link_waits(&gw), 2, "another made-up answer is");
}

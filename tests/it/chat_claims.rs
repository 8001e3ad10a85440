//! Claiming a chat id: a chat a client names with `x-toolgate-chat-id` is
//! claimed at first sight, atomically, so two tenants naming one id at
//! once (on one replica or two) never share it, and no row of one tenant's
//! lands in a chat another owns. A fixed reproduction of the race on each
//! database, and a property over concurrent claims and follow-ups.

use crate::common;
use crate::tenancy::{AUTH, TENANT_KEYS, call, keys};

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::postgres::Postgres;
use common::{Collected, Mock, Recorded, Reply, TestConfig, TestGateway};
use http::Method;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{Value, json};

/// A model that echoes every text of the conversation, slowly (`pieces`
/// chunks `delay` apart), so that answers overlap.
async fn slow_echo(pieces: usize, delay: Duration) -> Mock {
    Mock::start(move |r: &Recorded| {
        let body = r.json();
        let texts: Vec<String> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let text = format!("echo: {}", texts.join(" | "));
        let cut = text.len().div_ceil(pieces);
        let parts: Vec<&str> = text
            .as_bytes()
            .chunks(cut)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        let stream = common::upstream_sse(&parts, None);
        let events: Vec<&str> = stream.split_inclusive("\n\n").collect();
        Reply::sse(&events, delay)
    })
    .await
}

async fn gateway(model: &Mock, store: &str) -> TestGateway {
    keys();
    TestConfig::new()
        .raw(AUTH)
        .raw(&format!(
            "[store]\nurl = \"{store}\"\nrecord = \"all\"\nlink_wait_ms = 2000\n"
        ))
        .provider("up", &model.url(), "[\"m\"]", "")
        .start()
        .await
}

async fn ask(gw: &TestGateway, tenant: usize, messages: Value, chat: Option<&str>) -> Collected {
    let body = json!({"model": "m", "stream": true, "messages": messages});
    call(
        Method::POST,
        &gw.url("/v1/chat/completions"),
        TENANT_KEYS[tenant],
        Some(body),
        chat,
    )
    .await
}

fn chat_of(reply: &Collected) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.headers["x-toolgate-chat-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The answer's text, put together from its stream.
fn answer_text(reply: &Collected) -> String {
    reply
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Chat `id` as `tenant` reads it: `None` when not found.
async fn read(gw: &TestGateway, tenant: usize, id: &str) -> Option<String> {
    let r = call(
        Method::GET,
        &gw.url(&format!("/toolgate/api/chats/{id}")),
        TENANT_KEYS[tenant],
        None,
        None,
    )
    .await;
    match r.status.as_u16() {
        200 => Some(r.text()),
        404 => None,
        other => panic!("GET chat {id}: {other} {}", r.text()),
    }
}

/// Chat `id` as `tenant` reads it once it holds every one of `texts`
/// (transcripts land behind the answer), or what it holds after 10 s.
async fn read_holding(gw: &TestGateway, tenant: usize, id: &str, texts: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = read(gw, tenant, id).await.unwrap_or_default();
        if texts.iter().all(|t| found.contains(t)) || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The reproduction: A streams a slow answer in chat `race-1` on
/// replica 1; B names the same id on replica 2 while A's answer is in
/// flight; A follows up on replica 1 without naming it.
async fn a_named_chat_stays_with_its_first_claimant(one: &TestGateway, two: &TestGateway) {
    let first = json!([{"role": "user", "content": "A-PROMPT"}]);
    let a = {
        let url = one.url("/v1/chat/completions");
        let body = json!({"model": "m", "stream": true, "messages": first});
        tokio::spawn(async move {
            call(
                Method::POST,
                &url,
                TENANT_KEYS[0],
                Some(body),
                Some("race-1"),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = ask(
        two,
        1,
        json!([{"role": "user", "content": "B-PROMPT"}]),
        Some("race-1"),
    )
    .await;
    let a = a.await.unwrap();
    assert_eq!(chat_of(&a), "race-1", "A named it first");
    let b_chat = chat_of(&b);
    assert_ne!(
        b_chat, "race-1",
        "B is told the id is taken: a chat of its own"
    );
    let follow_up = json!([
        {"role": "user", "content": "A-PROMPT"},
        {"role": "assistant", "content": answer_text(&a)},
        {"role": "user", "content": "A-FOLLOW-UP"},
    ]);
    let again = ask(one, 0, follow_up, None).await;
    assert_eq!(
        chat_of(&again),
        "race-1",
        "A's follow-up continues A's chat"
    );
    let a_view = read_holding(two, 0, "race-1", &["A-PROMPT", "A-FOLLOW-UP"]).await;
    assert!(
        a_view.contains("A-PROMPT") && a_view.contains("A-FOLLOW-UP"),
        "{a_view}"
    );
    assert!(!a_view.contains("B-PROMPT"), "{a_view}");
    assert_eq!(read(one, 1, "race-1").await, None, "B cannot read A's chat");
    assert_eq!(read(two, 1, "race-1").await, None, "on either replica");
    let b_view = read_holding(one, 1, &b_chat, &["B-PROMPT"]).await;
    assert!(
        b_view.contains("B-PROMPT") && !b_view.contains("A-"),
        "{b_view}"
    );
}

#[tokio::test]
async fn a_named_chat_stays_with_its_first_claimant_across_replicas_on_postgres() {
    let pg = Postgres::start();
    let model = slow_echo(10, Duration::from_millis(100)).await;
    let one = gateway(&model, &pg.url()).await;
    let two = gateway(&model, &pg.url()).await;
    a_named_chat_stays_with_its_first_claimant(&one, &two).await;
}

#[tokio::test]
async fn a_named_chat_stays_with_its_first_claimant_on_sqlite() {
    let model = slow_echo(10, Duration::from_millis(100)).await;
    let gw = gateway(&model, &sqlite_file("race")).await;
    a_named_chat_stays_with_its_first_claimant(&gw, &gw).await;
}

/// Two tenants naming one new id at the same moment, six times on one
/// SQLite replica: each id goes to one of them, whole.
#[tokio::test]
async fn simultaneous_claims_of_one_id_on_sqlite_give_it_to_one_tenant() {
    let model = slow_echo(4, Duration::from_millis(20)).await;
    let gw = gateway(&model, &sqlite_file("same-moment")).await;
    for run in 0..6 {
        let id = format!("both-{run}");
        let (a, b) = tokio::join!(
            ask(
                &gw,
                0,
                json!([{"role": "user", "content": format!("A{run}")}]),
                Some(&id)
            ),
            ask(
                &gw,
                1,
                json!([{"role": "user", "content": format!("B{run}")}]),
                Some(&id)
            ),
        );
        let (a, b) = (chat_of(&a), chat_of(&b));
        assert!(
            (a == id) != (b == id),
            "run {run}: exactly one gets {id}: {a} {b}"
        );
        let (owner, mine, other) = if a == id {
            (0, "A", "B")
        } else {
            (1, "B", "A")
        };
        let view = read_holding(&gw, owner, &id, &[&format!("{mine}{run}")]).await;
        assert!(
            view.contains(&format!("{mine}{run}")) && !view.contains(&format!("{other}{run}")),
            "run {run}: {view}"
        );
        assert_eq!(read(&gw, 1 - owner, &id).await, None);
    }
}

fn sqlite_file(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolgate-claims-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}/t.db", dir.display())
}

/// One request of a round: a tenant names one of a few ids, or follows up
/// on an answer it got earlier (without naming its chat), on one replica.
#[derive(Debug, Clone)]
struct Claim {
    tenant: usize,
    id: usize,
    replica: usize,
    follow_up: bool,
}

fn claim() -> impl Strategy<Value = Claim> {
    (0usize..2, 0usize..3, 0usize..2, any::<bool>()).prop_map(|(tenant, id, replica, follow_up)| {
        Claim {
            tenant,
            id,
            replica,
            follow_up,
        }
    })
}

fn rounds() -> impl Strategy<Value = Vec<Vec<Claim>>> {
    prop::collection::vec(prop::collection::vec(claim(), 2..6), 1..4)
}

/// Runs `rounds` (each round's requests at once) against `replicas`;
/// returns what broke, if anything.
async fn claims(replicas: &[TestGateway], rounds: Vec<Vec<Claim>>) -> Result<(), String> {
    let mark = |t: usize, n: usize| format!("MARK{t}x{n}");
    // What each tenant got: its marker, the chat it landed in, its answer.
    let mut answered: Vec<(usize, String, String, String)> = Vec::new();
    let mut n = 0;
    for round in rounds {
        let mut asks = Vec::new();
        for c in round {
            n += 1;
            let marker = mark(c.tenant, n);
            let earlier = answered
                .iter()
                .rev()
                .find(|(t, ..)| *t == c.tenant)
                .cloned();
            let (messages, named) = match earlier {
                Some((_, said, _, answer)) if c.follow_up => (
                    json!([
                        {"role": "user", "content": said},
                        {"role": "assistant", "content": answer},
                        {"role": "user", "content": marker},
                    ]),
                    None,
                ),
                _ => (
                    json!([{"role": "user", "content": marker}]),
                    Some(format!("claim-{}", c.id)),
                ),
            };
            let url = replicas[c.replica % replicas.len()].url("/v1/chat/completions");
            asks.push(async move {
                let body = json!({"model": "m", "stream": true, "messages": messages});
                let reply = call(
                    Method::POST,
                    &url,
                    TENANT_KEYS[c.tenant],
                    Some(body),
                    named.as_deref(),
                )
                .await;
                (c.tenant, marker, reply)
            });
        }
        for (tenant, marker, reply) in futures_join_all(asks).await {
            if reply.status != 200 {
                return Err(format!("{marker}: {} {}", reply.status, reply.text()));
            }
            let chat = chat_of(&reply);
            answered.push((tenant, marker, chat, answer_text(&reply)));
        }
    }
    let gw = &replicas[0];
    // Nothing a tenant said is lost: each exchange is in the chat it was
    // told, readable by its tenant.
    for (tenant, marker, chat, _) in &answered {
        let view = read_holding(gw, *tenant, chat, &[marker]).await;
        if !view.contains(marker.as_str()) {
            return Err(format!(
                "tenant {tenant}'s {marker} is not in its chat {chat}: {view}"
            ));
        }
    }
    // No chat a tenant can read holds another tenant's words, and a chat
    // is found by its owner alone.
    let mut owners: HashMap<String, usize> = HashMap::new();
    for (tenant, _, chat, _) in &answered {
        if let Some(owner) = owners.insert(chat.clone(), *tenant)
            && owner != *tenant
        {
            return Err(format!(
                "chat {chat} was answered to tenants {owner} and {tenant}"
            ));
        }
    }
    for (chat, owner) in &owners {
        let view = read(gw, *owner, chat).await.unwrap_or_default();
        if view.contains(&format!("MARK{}x", 1 - owner)) {
            return Err(format!(
                "tenant {owner}'s chat {chat} holds the other's words: {view}"
            ));
        }
        if read(gw, 1 - owner, chat).await.is_some() {
            return Err(format!(
                "tenant {} reads tenant {owner}'s chat {chat}",
                1 - owner
            ));
        }
    }
    Ok(())
}

/// `join_all` without the `futures` crate: the futures run at once on
/// the test's runtime.
async fn futures_join_all<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

fn runner() -> TestRunner {
    TestRunner::new(RunnerConfig {
        cases: 10,
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn concurrent_claims_never_mix_tenants_on_sqlite() {
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner()
        .run(&rounds(), |rounds| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let found = runtime().block_on(async {
                let model = slow_echo(3, Duration::from_millis(15)).await;
                let gw = gateway(&model, &sqlite_file(&format!("prop-{case}"))).await;
                claims(std::slice::from_ref(&gw), rounds).await
            });
            prop_assert!(found.is_ok(), "{}", found.unwrap_err());
            Ok(())
        })
        .unwrap();
}

#[test]
fn concurrent_claims_never_mix_tenants_across_replicas_on_postgres() {
    let pg = Postgres::start();
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner()
        .run(&rounds(), |rounds| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A database of its own per case, on the one cluster.
            pg.query(&format!("CREATE DATABASE claims_{case}"));
            let url = pg.url().replace("/postgres", &format!("/claims_{case}"));
            let found = runtime().block_on(async {
                let model = slow_echo(3, Duration::from_millis(15)).await;
                let replicas = [gateway(&model, &url).await, gateway(&model, &url).await];
                claims(&replicas, rounds).await
            });
            prop_assert!(found.is_ok(), "{}", found.unwrap_err());
            Ok(())
        })
        .unwrap();
}

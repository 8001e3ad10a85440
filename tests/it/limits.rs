//! A tenant's limits and budget: enforced exactly as configured (no
//! refusal below a limit, no admission above it), in this replica's memory
//! and in a real Redis shared by two toolgate processes; each door's `429`
//! with OpenAI's headers; tokens read from the upstream's usage (asked for
//! on streams whose client did not ask); spend priced by `pricing` in the
//! file's order; a Redis outage decided by `on_redis_error`. Bursts end
//! within one reservation of a budget or a minute, a stalled Redis leaves
//! no slot taken, and a budget's spend outlives an emptied Redis.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::binary::Binary;
use common::postgres::Postgres;
use common::redis::Redis;
use common::{Collected, Mock, Recorded, Reply, TestConfig};
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};

/// The tenants' keys, the same values every time they are set.
const KEYS: [(&str, &str); 12] = [
    ("LIMITS_TEST_ADMIN", "admin-key"),
    ("LIMITS_TEST_RPM", "rpm-key"),
    ("LIMITS_TEST_CONC", "conc-key"),
    ("LIMITS_TEST_TPM", "tpm-key"),
    ("LIMITS_TEST_BUDGET", "budget-key"),
    ("LIMITS_TEST_FREE", "free-key"),
    ("LIMITS_TEST_TOKENS_BUDGET", "tokens-budget-key"),
    ("LIMITS_TEST_BURST", "burst-key"),
    ("LIMITS_TEST_BURST_BUDGET", "burst-budget-key"),
    ("LIMITS_TEST_BURST_TPM", "burst-tpm-key"),
    ("LIMITS_TEST_CONC4", "conc4-key"),
    ("LIMITS_TEST_HEADERS", "headers-key"),
];

fn keys() {
    for (var, key) in KEYS {
        // SAFETY: this module's own variables, set to the same values before
        // its gateways read them.
        unsafe { std::env::set_var(var, key) };
    }
}

/// Tenants with one limit each, and one without.
const AUTH: &str = "[server.auth]\nadmin_keys_env = \"LIMITS_TEST_ADMIN\"\n\
    [[server.auth.keys]]\nname = \"rpm\"\nkey_env = \"LIMITS_TEST_RPM\"\n\
    [server.auth.keys.limits]\nrequests_per_minute = 3\n\
    [[server.auth.keys]]\nname = \"conc\"\nkey_env = \"LIMITS_TEST_CONC\"\n\
    [server.auth.keys.limits]\nmax_concurrent_requests = 1\n\
    [[server.auth.keys]]\nname = \"tpm\"\nkey_env = \"LIMITS_TEST_TPM\"\n\
    [server.auth.keys.limits]\ntokens_per_minute = 40\n\
    [[server.auth.keys]]\nname = \"budget\"\nkey_env = \"LIMITS_TEST_BUDGET\"\n\
    [server.auth.keys.budget]\nusd = 0.8\nperiod = \"1d\"\n\
    [[server.auth.keys]]\nname = \"tokens-budget\"\nkey_env = \"LIMITS_TEST_TOKENS_BUDGET\"\n\
    [server.auth.keys.budget]\ntokens = 50\nperiod = \"30d\"\n\
    [[server.auth.keys]]\nname = \"burst\"\nkey_env = \"LIMITS_TEST_BURST\"\n\
    [server.auth.keys.limits]\nrequests_per_minute = 7\nmax_concurrent_requests = 30\n\
    [[server.auth.keys]]\nname = \"burst-budget\"\nkey_env = \"LIMITS_TEST_BURST_BUDGET\"\n\
    [server.auth.keys.budget]\ntokens = 100\nperiod = \"1d\"\n\
    [[server.auth.keys]]\nname = \"burst-tpm\"\nkey_env = \"LIMITS_TEST_BURST_TPM\"\n\
    [server.auth.keys.limits]\ntokens_per_minute = 100\n\
    [[server.auth.keys]]\nname = \"conc4\"\nkey_env = \"LIMITS_TEST_CONC4\"\n\
    [server.auth.keys.limits]\nmax_concurrent_requests = 4\n\
    [[server.auth.keys]]\nname = \"headers\"\nkey_env = \"LIMITS_TEST_HEADERS\"\n\
    [server.auth.keys.limits]\nrequests_per_minute = 5\ntokens_per_minute = 1000\n\
    [[server.auth.keys]]\nname = \"free\"\nkey_env = \"LIMITS_TEST_FREE\"\n";

/// A request without `max_tokens` reserves this many output tokens.
const DEFAULT_MAX_TOKENS: &str = "default_max_tokens = 30\n";

/// `cheap*` costs $0.50 for the mock's 10 input and 20 output tokens. The
/// free `*` comes second in the file and first in sorted order: read in the
/// wrong order, nothing would cost anything.
const PRICING: &str = "[providers.pricing]\n\"cheap*\" = { input = 10000, output = 20000 }\n\"*\" = { input = 0, output = 0 }\n";

/// An upstream that reports 10 input and 20 output tokens: in the
/// completion, and on a stream only when asked (`include_usage`), as
/// OpenAI does.
async fn upstream() -> Mock {
    Mock::start(answer).await
}

fn answer(r: &Recorded) -> Reply {
    let request = r.json();
    if request["stream"] == true {
        let usage = (request["stream_options"]["include_usage"] == true)
            .then(|| json!({"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}));
        Reply::sse(
            &[&common::upstream_sse(&["hello"], usage.as_ref())],
            Duration::ZERO,
        )
    } else {
        Reply::json(&common::upstream_completion("hello"))
    }
}

/// A gateway with [`AUTH`]'s tenants in front of `mock`; `provider` are
/// more lines of its provider (its pricing).
async fn gateway(mock: &Mock, provider: &str) -> common::TestGateway {
    TestConfig::new()
        .server(AUTH)
        .up(&mock.url(), provider)
        .start()
        .await
}

async fn post(url: &str, key: &str, body: &Value) -> Collected {
    common::send(
        Request::post(url)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap(),
    )
    .await
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

fn header<'a>(r: &'a Collected, name: &str) -> &'a str {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {:?}", r.headers))
        .to_str()
        .unwrap()
}

/// The value of the metric line starting with `prefix`.
async fn metric(base: &str, prefix: &str) -> Option<f64> {
    let text = common::get(&format!("{base}/metrics")).await.text();
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn requests_per_minute_admit_exactly_the_limit_then_each_door_answers_429() {
    keys();
    let mock = upstream().await;
    let gw = gateway(&mock, "").await;
    let chat_url = gw.url("/v1/chat/completions");
    for i in 0..3 {
        let r = post(&chat_url, "rpm-key", &chat("m")).await;
        assert_eq!(
            r.status,
            200,
            "request {i} is within the limit: {}",
            r.text()
        );
    }
    let r = post(&chat_url, "rpm-key", &chat("m")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let error = &r.json()["error"];
    assert_eq!(error["type"], "rate_limit_exceeded");
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("3 requests per minute"),
        "{error}"
    );
    // 3 a minute: the next one is admitted 20 s after the burst.
    assert_eq!(header(&r, "retry-after"), "20");
    let ms: u64 = header(&r, "retry-after-ms").parse().unwrap();
    assert!((19_000..=20_000).contains(&ms), "{ms}");
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "3");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "0");
    assert!(header(&r, "x-ratelimit-reset-requests").ends_with('s'));
    assert_eq!(mock.count(), 3, "a refused request reaches no upstream");

    let r = post(
        &gw.url("/v1/responses"),
        "rpm-key",
        &json!({"model": "m", "input": "hi"}),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    let r = post(
        &gw.url("/v1/messages"),
        "rpm-key",
        &json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert_eq!(header(&r, "retry-after"), "20");

    // Another tenant is not counted.
    assert_eq!(post(&chat_url, "free-key", &chat("m")).await.status, 200);
    let refused = metric(
        &gw.url(""),
        "toolgate_rate_limited_total{tenant=\"rpm\",limit=\"requests\"}",
    )
    .await;
    assert_eq!(refused, Some(3.0));
}

#[tokio::test]
async fn concurrency_is_held_until_the_answer_ends() {
    keys();
    let (open, gate) = tokio::sync::watch::channel(false);
    let mock = Mock::start(move |r| Reply::Gated(gate.clone(), Box::new(answer(r)))).await;
    let gw = gateway(&mock, "").await;
    let url = gw.url("/v1/chat/completions");
    let first = tokio::spawn({
        let url = url.clone();
        async move { post(&url, "conc-key", &chat("m")).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.count() < 1 {
        assert!(Instant::now() < deadline, "the first request never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = post(&url, "conc-key", &chat("m")).await;
    assert_eq!(second.status, 429, "{}", second.text());
    assert!(
        second.text().contains("1 requests in flight"),
        "{}",
        second.text()
    );
    assert_eq!(mock.count(), 1);
    open.send_replace(true);
    assert_eq!(first.await.unwrap().status, 200);
    // The slot is free once the first answer's body ended.
    let third = post(&url, "conc-key", &chat("m")).await;
    assert_eq!(third.status, 200, "{}", third.text());
}

#[tokio::test]
async fn tokens_come_from_usage_the_client_did_not_ask_for_and_it_never_sees_it() {
    keys();
    let mock = upstream().await;
    let gw = gateway(&mock, "").await;
    let url = gw.url("/v1/chat/completions");
    let mut streamed = chat("m");
    streamed["stream"] = json!(true);
    // 40 tokens a minute; each answer uses 30.
    let first = post(&url, "tpm-key", &streamed).await;
    assert_eq!(first.status, 200);
    let upstream_got = mock.last().json();
    assert_eq!(upstream_got["stream_options"]["include_usage"], true);
    let text = first.text();
    assert!(
        text.contains("hello") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    assert!(
        !text.contains("\"choices\":[]") && !text.contains("prompt_tokens"),
        "the usage chunk the client did not ask for is dropped: {text}"
    );
    // 10 tokens left: admitted (an answer may overdraw the minute).
    let second = post(&url, "tpm-key", &chat("m")).await;
    assert_eq!(second.status, 200);
    let third = post(&url, "tpm-key", &streamed).await;
    assert_eq!(third.status, 429, "{}", third.text());
    assert!(third.text().contains("40 tokens per minute"));
    assert_eq!(header(&third, "x-ratelimit-limit-tokens"), "40");
    assert_eq!(header(&third, "x-ratelimit-remaining-tokens"), "0");
    // 60 tokens used of 40 a minute: free again 30 s from now, plus the
    // time one token takes (1.5 s).
    let wait: u64 = header(&third, "retry-after").parse().unwrap();
    assert!((31..=32).contains(&wait), "{wait}");

    // A tenant without limits: its stream goes upstream byte for byte.
    let body = streamed.to_string();
    let r = common::send(
        Request::post(&url)
            .header("authorization", "Bearer free-key")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(mock.last().body, body.as_bytes());
    // A client that asked for usage gets it.
    let mut asked = streamed.clone();
    asked["stream_options"] = json!({"include_usage": true});
    let budget = post(&url, "tokens-budget-key", &asked).await;
    assert!(
        budget.text().contains("\"prompt_tokens\":10"),
        "{}",
        budget.text()
    );
}

#[tokio::test]
async fn a_spent_budget_is_insufficient_quota_until_its_period_ends() {
    keys();
    let mock = upstream().await;
    let gw = gateway(&mock, PRICING).await;
    let url = gw.url("/v1/chat/completions");
    // $0.80 a day, $0.50 an answer: two pass, the third is refused.
    for _ in 0..2 {
        assert_eq!(post(&url, "budget-key", &chat("cheap-1")).await.status, 200);
    }
    let r = post(&url, "budget-key", &chat("cheap-1")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let error = &r.json()["error"];
    assert_eq!(error["code"], "insufficient_quota");
    assert_eq!(error["type"], "insufficient_quota");
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1))
        .format("%Y-%m-%dT00:00:00Z")
        .to_string();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("$0.80") && message.contains(&tomorrow),
        "{message}"
    );
    let wait: u64 = header(&r, "retry-after").parse().unwrap();
    assert!(wait <= 86_400);
    let cost = metric(
        &gw.url(""),
        "toolgate_cost_usd_total{provider=\"up\",tenant=\"budget\"}",
    )
    .await
    .unwrap();
    assert!((cost - 1.0).abs() < 1e-9, "two answers at $0.50: {cost}");

    // A budget in tokens: 50 tokens, 30 an answer.
    let other = chat("other");
    assert_eq!(post(&url, "tokens-budget-key", &other).await.status, 200);
    assert_eq!(post(&url, "tokens-budget-key", &other).await.status, 200);
    let spent = post(&url, "tokens-budget-key", &other).await;
    assert_eq!(spent.json()["error"]["code"], "insufficient_quota");
}

/// The config of a replica counting in the Redis at `url`.
fn replica_config(mock: &Mock, url: &str, on_error: &str) -> String {
    TestConfig::new()
        .server(&format!(
            "{AUTH}[server.limits]\nredis_url = \"{url}\"\non_redis_error = \"{on_error}\"\nredis_timeout_ms = 1000\n"
        ))
        .up(&mock.url(), &format!("{DEFAULT_MAX_TOKENS}{PRICING}"))
        .toml()
}

fn replicas(mock: &Mock, redis: &Redis, on_error: [&str; 2]) -> [Binary; 2] {
    on_error.map(|e| Binary::start(&replica_config(mock, &redis.url(), e), &KEYS))
}

#[tokio::test]
async fn two_replicas_sharing_redis_enforce_each_limit_exactly() {
    let redis = Redis::start();
    let (open, gate) = tokio::sync::watch::channel(true);
    let mock = Mock::start(move |r| Reply::Gated(gate.clone(), Box::new(answer(r)))).await;
    let [a, b] = replicas(&mock, &redis, ["allow", "allow"]);
    let urls = [a.url("/v1/chat/completions"), b.url("/v1/chat/completions")];

    // Requests: 3 a minute across both, taken in turn.
    let mut statuses = Vec::new();
    for i in 0..6 {
        statuses.push(
            post(&urls[i % 2], "rpm-key", &chat("m"))
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);

    // A burst: 24 requests at once, 12 on each replica, so that each
    // replica's checks queue while one batch of them is in Redis: exactly
    // 7 pass.
    let burst: Vec<_> = (0..24)
        .map(|i| {
            let url = urls[i % 2].clone();
            tokio::spawn(async move { post(&url, "burst-key", &chat("m")).await.status })
        })
        .collect();
    let mut passed = 0;
    for status in burst {
        let status = status.await.unwrap();
        assert!(status == 200 || status == 429, "{status}");
        passed += usize::from(status == 200);
    }
    assert_eq!(passed, 7);

    // Concurrency: one in flight across both.
    open.send_replace(false);
    let before = mock.count();
    let held = tokio::spawn({
        let url = urls[0].clone();
        async move { post(&url, "conc-key", &chat("m")).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.count() == before {
        assert!(Instant::now() < deadline, "the held request never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(post(&urls[1], "conc-key", &chat("m")).await.status, 429);
    open.send_replace(true);
    assert_eq!(held.await.unwrap().status, 200);
    // Settled after the answer: poll the other replica until the slot frees.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = post(&urls[1], "conc-key", &chat("m")).await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Tokens: 40 a minute, 30 an answer, charged on one replica and read on the other.
    assert_eq!(post(&urls[0], "tpm-key", &chat("m")).await.status, 200);
    // The first answer's settle (its reservation turned into 30 tokens) may
    // still be on its way: until it lands, the reservation can refuse the
    // second request, which is then not charged.
    let deadline = Instant::now() + Duration::from_secs(5);
    while post(&urls[1], "tpm-key", &chat("m")).await.status != 200 {
        assert!(
            Instant::now() < deadline,
            "10 tokens left were never granted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while post(&urls[0], "tpm-key", &chat("m")).await.status != 429 {
        assert!(Instant::now() < deadline, "60 tokens of 40 never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Budget: $0.80, $0.50 an answer, spent across both.
    assert_eq!(
        post(&urls[0], "budget-key", &chat("cheap-1")).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        post(&urls[1], "budget-key", &chat("cheap-1")).await.status,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = post(&urls[0], "budget-key", &chat("cheap-1")).await;
        if r.status == 429 && r.json()["error"]["code"] == "insufficient_quota" {
            break;
        }
        // Until the other replica's settle reaches Redis, its answer's
        // reservation holds the rest of the budget: refused, to be retried.
        if r.status == 429 {
            assert_eq!(
                r.json()["error"]["code"],
                "rate_limit_exceeded",
                "{}",
                r.text()
            );
            assert!(r.text().contains("reserved"), "{}", r.text());
        }
        assert!(Instant::now() < deadline, "a spent budget never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_redis_outage_follows_on_redis_error_and_limits_resume_after_it() {
    let mut redis = Redis::start();
    let mock = upstream().await;
    let [allow, deny] = replicas(&mock, &redis, ["allow", "deny"]);
    let url = |b: &Binary| b.url("/v1/chat/completions");
    assert_eq!(post(&url(&allow), "free-key", &chat("m")).await.status, 200);
    assert_eq!(post(&url(&allow), "rpm-key", &chat("m")).await.status, 200);

    redis.stop();
    for _ in 0..5 {
        let r = post(&url(&allow), "rpm-key", &chat("m")).await;
        assert_eq!(
            r.status,
            200,
            "allow serves while Redis is down: {}",
            r.text()
        );
    }
    let r = post(&url(&deny), "rpm-key", &chat("m")).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "limiter_unavailable");
    // When to try again: a replica tries Redis again a second after a
    // failed connection.
    assert_eq!(header(&r, "retry-after"), "1");
    // A tenant without limits never asks Redis.
    assert_eq!(post(&url(&deny), "free-key", &chat("m")).await.status, 200);
    let errors = metric(&allow.url(""), "toolgate_limiter_errors_total")
        .await
        .unwrap_or(0.0);
    assert!(errors >= 5.0, "{errors}");

    // Back (empty): limiting resumes, 3 a minute.
    redis.up();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut admitted = 0;
    loop {
        let r = post(&url(&deny), "rpm-key", &chat("m")).await;
        match r.status.as_u16() {
            200 => admitted += 1,
            429 => break,
            503 => {}
            other => panic!("{other}: {}", r.text()),
        }
        assert!(Instant::now() < deadline, "limits never resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(admitted, 3, "a fresh window admits exactly the limit");
}

async fn get(url: &str, key: &str) -> Collected {
    common::send(
        Request::get(url)
            .header("authorization", format!("Bearer {key}"))
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await
}

/// What each key used is kept per hour, key, provider and model, and read
/// back summed by what `group_by` names: each tenant its own, the admin
/// every tenant's. The tokens are the upstream's reported usage, the cost
/// that usage at the configured prices.
#[tokio::test]
async fn usage_is_kept_per_key_and_read_back_per_tenant_in_sqlite_and_postgresql() {
    keys();
    let pg = Postgres::start();
    for store in ["sqlite::memory:".to_owned(), pg.url()] {
        let mock = upstream().await;
        let gw = TestConfig::new()
            .server(AUTH)
            .up(&mock.url(), PRICING)
            .raw(&format!("[store]\nurl = \"{store}\"\nrecord = \"none\"\n"))
            .start()
            .await;
        let url = gw.url("/v1/chat/completions");
        for _ in 0..2 {
            assert_eq!(post(&url, "budget-key", &chat("cheap-1")).await.status, 200);
        }
        assert_eq!(post(&url, "free-key", &chat("other")).await.status, 200);
        // A stream whose client did not ask for usage, of a tenant without
        // limits: nothing is added to its request, so its tokens are estimated.
        let mut streamed = chat("other");
        streamed["stream"] = json!(true);
        assert_eq!(post(&url, "free-key", &streamed).await.status, 200);

        let usage = gw.url("/toolgate/api/usage");
        let deadline = Instant::now() + Duration::from_secs(10);
        let all = loop {
            let r = get(&format!("{usage}?group_by=tenant,model"), "admin-key").await;
            assert_eq!(r.status, 200, "{store}: {}", r.text());
            let data = r.json()["data"].clone();
            if data.as_array().unwrap().len() == 2 && data[1]["requests"] == 2 {
                break data;
            }
            assert!(
                Instant::now() < deadline,
                "{store}: usage never landed: {data}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // Dates are whole days, `to` included: today alone holds it all.
        let today = chrono::Utc::now().format("%Y-%m-%d");
        let day = get(
            &format!("{usage}?group_by=tenant,model&from={today}&to={today}"),
            "admin-key",
        )
        .await;
        assert_eq!(day.status, 200, "{store}: {}", day.text());
        assert_eq!(day.json()["data"], all, "{store}");
        // Two answers of 10 + 20 tokens at $10 000 and $20 000 a million.
        assert_eq!(all[0]["tenant"], "budget", "{store}: {all}");
        assert_eq!(all[0]["model"], "cheap-1");
        assert_eq!(
            (
                all[0]["requests"].as_i64(),
                all[0]["input_tokens"].as_i64(),
                all[0]["output_tokens"].as_i64()
            ),
            (Some(2), Some(20), Some(40))
        );
        assert!(
            (all[0]["cost_usd"].as_f64().unwrap() - 1.0).abs() < 1e-9,
            "{all}"
        );
        assert_eq!(all[0]["estimated_requests"], 0);
        assert!(all[0]["key"].is_null() && all[0]["provider"].is_null());
        assert_eq!(all[1]["tenant"], "free");
        assert_eq!(all[1]["estimated_requests"], 1, "{all}");
        assert_eq!(all[1]["cost_usd"], 0.0);

        // A client key reads its own tenant's, by key: the key's name, not the key.
        let own = get(&format!("{usage}?group_by=key,provider"), "budget-key").await;
        let data = &own.json()["data"];
        assert_eq!(data.as_array().unwrap().len(), 1, "{data}");
        let key = data[0]["key"].as_str().unwrap();
        assert!(
            key.starts_with("key-") && key.len() == 12 && !key.contains("budget-key"),
            "{key}"
        );
        assert_eq!(data[0]["provider"], "up");
        assert!(data[0]["tenant"].is_null());
        let other = get(&format!("{usage}?tenant=free"), "budget-key").await;
        assert_eq!(other.status, 403);
        assert_eq!(
            get(&format!("{usage}?group_by=colour"), "admin-key")
                .await
                .status,
            400
        );
        assert_eq!(
            get(&format!("{usage}?from=yesterday"), "admin-key")
                .await
                .status,
            400
        );
        // A range that ended before anything was used holds nothing.
        let old = get(
            &format!("{usage}?from=2020-01-01&to=2020-02-01"),
            "admin-key",
        )
        .await;
        assert_eq!(old.json()["data"], json!([]));
    }
}

/// The tokens counted are the tokens priced: an answer that reported no
/// usage is charged an estimate, and `toolgate_tokens_total` counts the
/// same estimate (`estimated="true"`). Money adds up in whole micro-dollars
/// and reads as the exact decimal in the metric and the usage API: $0.0015
/// and $0.003 are $0.0045, not the 0.0045000000000000005 floats sum to.
#[tokio::test]
async fn estimated_tokens_are_counted_as_priced_and_money_adds_up_exactly() {
    keys();
    let pg = Postgres::start();
    for (i, store) in ["sqlite::memory:".to_owned(), pg.url()].iter().enumerate() {
        let mock = upstream().await;
        // A provider of this test's own per store (the recorder is the test
        // binary's): `a*` answers cost 10 x 30 + 20 x 60 = 1,500
        // micro-dollars, `b*` answers 10 x 100 + 20 x 100 = 3,000.
        let provider = format!("money{i}");
        let gw = TestConfig::new()
            .server(AUTH)
            .provider(
                &provider,
                &mock.url(),
                "[\"*\"]",
                "[providers.pricing]\n\"a*\" = { input = 30, output = 60 }\n\"b*\" = { input = 100, output = 100 }\n",
            )
            .raw(&format!("[store]\nurl = \"{store}\"\nrecord = \"none\"\n"))
            .start()
            .await;
        let url = gw.url("/v1/chat/completions");
        assert_eq!(post(&url, "free-key", &chat("a-1")).await.status, 200);
        assert_eq!(post(&url, "free-key", &chat("b-1")).await.status, 200);
        let usage = gw.url("/toolgate/api/usage?group_by=tenant");
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let r = get(&usage, "admin-key").await;
            assert_eq!(r.status, 200, "{store}: {}", r.text());
            if r.json()["data"][0]["requests"] == 2 {
                break r.text();
            }
            assert!(Instant::now() < deadline, "{store}: usage never landed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            text.contains("\"cost_usd\":0.0045,") || text.contains("\"cost_usd\":0.0045}"),
            "{store}: {text}"
        );
        let series = |name: &str, rest: &str| {
            format!("{name}{{provider=\"{provider}\",tenant=\"free\"{rest}}}")
        };
        let cost = series("toolgate_cost_usd_total", "");
        let metrics = common::get(&gw.url("/metrics")).await.text();
        assert!(
            metrics.lines().any(|l| l == format!("{cost} 0.0045")),
            "{store}: {}",
            metrics
                .lines()
                .filter(|l| l.starts_with(&cost))
                .collect::<Vec<_>>()
                .join("\n")
        );

        // A stream of a tenant without limits: nothing asks the upstream for
        // usage, and none comes.
        let mut streamed = chat("a-2");
        streamed["stream"] = json!(true);
        assert_eq!(post(&url, "free-key", &streamed).await.status, 200);
        let tokens = |kind: &str, estimated: bool| {
            series(
                "toolgate_tokens_total",
                &format!(",kind=\"{kind}\",estimated=\"{estimated}\""),
            )
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let (input, output) = loop {
            let base = gw.url("");
            let input = metric(&base, &tokens("input", true)).await.unwrap_or(0.0);
            let output = metric(&base, &tokens("output", true)).await.unwrap_or(0.0);
            if input > 0.0 && output > 0.0 {
                break (input as u64, output as u64);
            }
            assert!(
                Instant::now() < deadline,
                "{store}: no estimated tokens counted"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let base = gw.url("");
        assert_eq!(metric(&base, &tokens("input", false)).await, Some(20.0));
        assert_eq!(metric(&base, &tokens("output", false)).await, Some(40.0));
        // The estimate is priced as the metric counts it.
        let micros = 1_500 + 3_000 + input * 30 + output * 60;
        let metrics = common::get(&gw.url("/metrics")).await.text();
        let want = format!("{cost} {}", micros as f64 / 1e6);
        assert!(metrics.lines().any(|l| l == want), "{store}: want {want}");
        // And the usage kept holds the same tokens and cost.
        let deadline = Instant::now() + Duration::from_secs(10);
        let row = loop {
            let row = get(&usage, "admin-key").await.json()["data"][0].clone();
            if row["requests"] == 3 {
                break row;
            }
            assert!(
                Instant::now() < deadline,
                "{store}: the stream's usage never landed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            (
                row["input_tokens"].as_u64(),
                row["output_tokens"].as_u64(),
                row["estimated_requests"].as_u64()
            ),
            (Some(20 + input), Some(40 + output), Some(1)),
            "{store}: {row}"
        );
        assert_eq!(
            row["cost_usd"].to_string(),
            format!("{}", micros as f64 / 1e6)
        );
    }
}

/// Every model call of an answer is charged to its key: an answer that ran a
/// gateway tool took two rounds, and the usage kept for that one request is
/// the tokens both rounds reported (what `toolgate_tokens_total` counted).
#[tokio::test]
async fn gateway_tool_rounds_are_charged_to_the_key() {
    keys();
    let gw = TestConfig::new()
        .server(AUTH)
        .demo(
            "chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let r = post(
        &gw.url("/v1/chat/completions"),
        "tokens-budget-key",
        &json!({"model": "demo", "messages": [{"role": "user", "content": "Ask the calculator: what is `(2 + 3) * 7`?"}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("35"), "the tool ran: {}", r.text());
    let counted = |kind: &str| {
        let base = gw.url("");
        let kind = kind.to_owned();
        async move {
            let text = common::get(&format!("{base}/metrics")).await.text();
            text.lines()
                .filter(|l| {
                    // The recorder is the test binary's: other tests' tokens
                    // of this tenant went to provider `up`.
                    l.starts_with("toolgate_tokens_total{")
                        && l.contains("provider=\"demo\"")
                        && l.contains("tenant=\"tokens-budget\"")
                        && l.contains(&format!("kind=\"{kind}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as i64
        }
    };
    let (input, output) = (counted("input").await, counted("output").await);
    assert!(input > 0 && output > 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let usage = get(&gw.url("/toolgate/api/usage?group_by=tenant"), "admin-key")
            .await
            .json();
        if let Some(row) = usage["data"].as_array().and_then(|d| d.first()).cloned() {
            break row;
        }
        assert!(Instant::now() < deadline, "no usage kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row["requests"], 1, "{row}");
    assert_eq!(
        (row["input_tokens"].as_i64(), row["output_tokens"].as_i64()),
        (Some(input), Some(output)),
        "{row}"
    );
}

#[tokio::test]
async fn a_reload_changes_limits_and_keeps_the_windows_they_count_in() {
    keys();
    // Tenants of this test's own (the refusal metrics are process-wide):
    // `kept` keeps its limit, `changed` goes from one request at a time
    // to one request a minute.
    let auth = |changed: &str| {
        format!(
            "[server.auth]\n\
             [[server.auth.keys]]\nname = \"kept\"\nkey_env = \"LIMITS_TEST_RPM\"\n\
             [server.auth.keys.limits]\nrequests_per_minute = 3\n\
             [[server.auth.keys]]\nname = \"changed\"\nkey_env = \"LIMITS_TEST_CONC\"\n\
             [server.auth.keys.limits]\n{changed}\n"
        )
    };
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(&auth("max_concurrent_requests = 1"))
        .up(&mock.url(), "")
        .start()
        .await;
    let url = gw.url("/v1/chat/completions");
    for _ in 0..3 {
        assert_eq!(post(&url, "rpm-key", &chat("m")).await.status, 200);
    }
    assert_eq!(post(&url, "rpm-key", &chat("m")).await.status, 429);
    for _ in 0..2 {
        assert_eq!(post(&url, "conc-key", &chat("m")).await.status, 200);
    }

    let toml = TestConfig::new()
        .server(&auth("requests_per_minute = 1"))
        .up(&mock.url(), "")
        .toml();
    gw.gateway
        .reload(toolgate::config::Config::from_toml(&toml).unwrap())
        .unwrap();
    let r = post(&url, "rpm-key", &chat("m")).await;
    assert_eq!(r.status, 429, "the reload did not refill kept's minute");
    assert_eq!(post(&url, "conc-key", &chat("m")).await.status, 200);
    let r = post(&url, "conc-key", &chat("m")).await;
    assert_eq!(
        r.status,
        429,
        "changed's new limit is in force: {}",
        r.text()
    );
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "1");
}

/// A fallback model's repair is charged to the key like the answer it
/// repaired: its tokens count against the tenant's tokens per minute, and
/// the usage kept is both upstreams' tokens, each priced by its provider.
#[tokio::test]
async fn fallback_repairs_are_charged_to_the_key() {
    keys();
    let model = Mock::start(|_| {
        Reply::json(&common::upstream_completion(
            "<GetWeather>\n{\"location\": \"Paris\",}\n</GetWeather>",
        ))
    })
    .await;
    let fallback = Mock::start(|_| {
        Reply::json(&common::fallback_weather_call(
            "{\"location\": \"Paris\"}",
            7,
            3,
        ))
    })
    .await;
    let gw = TestConfig::new()
        .server(AUTH)
        .up(
            &model.url(),
            &format!("{PRICING}[providers.tools]\nmode = \"natural\"\non_invalid = \"fallback\"\nfallback = \"fb/small\"\n"),
        )
        .provider(
            "fb",
            &fallback.url(),
            "[]",
            &format!("{PRICING}[providers.tools]\nmode = \"passthrough\"\n"),
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let mut body = chat("cheap-1");
    body["tools"] = json!([{"type": "function", "function": {"name": "GetWeather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]);
    let url = gw.url("/v1/chat/completions");
    let r = post(&url, "tpm-key", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\"location\":\"Paris\"}",
        "the repair answered"
    );
    // 30 tokens for the answer and 10 for its repair: the 40 a minute are spent.
    let r = post(&url, "tpm-key", &body).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(header(&r, "x-ratelimit-remaining-tokens"), "0");

    let deadline = Instant::now() + Duration::from_secs(10);
    let rows = loop {
        let usage = get(
            &gw.url("/toolgate/api/usage?group_by=provider"),
            "admin-key",
        )
        .await
        .json();
        let rows = usage["data"].as_array().cloned().unwrap_or_default();
        if rows.len() == 2 {
            break rows;
        }
        assert!(Instant::now() < deadline, "usage never landed: {usage}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let row = |provider: &str| {
        rows.iter()
            .find(|r| r["provider"] == provider)
            .unwrap_or_else(|| panic!("no {provider} row: {rows:?}"))
            .clone()
    };
    let (up, fb) = (row("up"), row("fb"));
    assert_eq!(
        (&up["input_tokens"], &up["output_tokens"]),
        (&json!(10), &json!(20)),
        "{up}"
    );
    assert_eq!(
        (&fb["input_tokens"], &fb["output_tokens"]),
        (&json!(7), &json!(3)),
        "{fb}"
    );
    // cheap*: $10,000 and $20,000 a million input and output tokens.
    assert!(
        (up["cost_usd"].as_f64().unwrap() - 0.5).abs() < 1e-9,
        "{up}"
    );
    assert!(
        (fb["cost_usd"].as_f64().unwrap() - 0.13).abs() < 1e-9,
        "{fb}"
    );
}

/// A tenant with a budget, for the tests of usage asked on its streams (its
/// own, so its rows and metrics are no other test's).
const STREAMS_AUTH: &str = "[server.auth]\nadmin_keys_env = \"LIMITS_TEST_ADMIN\"\n\
    [[server.auth.keys]]\nname = \"streams\"\nkey_env = \"LIMITS_TEST_STREAMS\"\n\
    [server.auth.keys.budget]\nusd = 1000\nperiod = \"1d\"\n";

fn streams_key() -> &'static str {
    keys();
    // SAFETY: as in `keys`: this module's own variable, always this value.
    unsafe { std::env::set_var("LIMITS_TEST_STREAMS", "streams-key") };
    "streams-key"
}

/// `"stream_options": null` asks for nothing, and `include_usage: false`
/// asks for no usage; neither is the client's to decide for a tenant whose
/// budget counts what the upstream reports. Each path a streamed chat
/// request can take (passthrough, natural, to_natural, the gateway-tools
/// answer path) asks the upstream for usage, charges what it reported (no
/// estimate) and keeps the usage chunk from the client that did not ask.
#[tokio::test]
async fn a_client_cannot_turn_off_the_usage_its_budget_is_charged() {
    let key = streams_key();
    let mock = upstream().await;
    let mode = |mode: &str| format!("{PRICING}[providers.tools]\nmode = \"{mode}\"\n");
    let gw = TestConfig::new()
        .server(STREAMS_AUTH)
        .provider("pass", &mock.url(), r#"["cheap-pass"]"#, &mode("passthrough"))
        .provider("nat", &mock.url(), r#"["cheap-nat"]"#, &mode("natural"))
        .provider("tonat", &mock.url(), r#"["cheap-tonat"]"#, &mode("to_natural"))
        .demo(
            "chunk_delay_ms = 0\n[providers.tools]\nmode = \"natural\"\ngateway_tools = [\"builtin:calculator\"]",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let url = gw.url("/v1/chat/completions");
    let tools = json!([{"type": "function", "function": {"name": "GetWeather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]);
    // What the client sent, and what the upstream must get.
    let shapes = [
        (json!(null), json!({"include_usage": true})),
        (
            json!({"include_usage": false, "x": 1}),
            json!({"include_usage": true, "x": 1}),
        ),
        (json!({}), json!({"include_usage": true})),
    ];
    let models = ["cheap-pass", "cheap-nat", "cheap-tonat", "demo"];
    let mut sent = Vec::new();
    for model in models {
        for (options, upstream_options) in &shapes {
            let mut body = chat(model);
            body["stream"] = json!(true);
            body["stream_options"] = options.clone();
            if model != "demo" {
                body["tools"] = tools.clone();
            }
            let seen = mock.count();
            let r = post(&url, key, &body).await;
            let text = r.text();
            assert_eq!(r.status, 200, "{model} {options}: {text}");
            assert!(
                text.contains("data: [DONE]") && !text.contains("\"prompt_tokens\""),
                "{model} {options}: the usage chunk the client did not ask for is dropped: {text}"
            );
            if model != "demo" {
                assert_eq!(mock.count(), seen + 1);
                let got = mock.last().json()["stream_options"].clone();
                sent.push((model, options, upstream_options, got));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let rows = loop {
        let usage = get(
            &gw.url("/toolgate/api/usage?group_by=provider"),
            "admin-key",
        )
        .await
        .json();
        let rows = usage["data"].as_array().cloned().unwrap_or_default();
        let requests: i64 = rows.iter().filter_map(|r| r["requests"].as_i64()).sum();
        if requests == (models.len() * shapes.len()) as i64 {
            break rows;
        }
        assert!(Instant::now() < deadline, "usage never landed: {usage}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for row in &rows {
        assert_eq!(row["estimated_requests"], 0, "charged an estimate: {row}");
        if row["provider"] == "demo" {
            continue;
        }
        // The mock's 10 and 20 tokens a stream, at cheap*'s $0.50.
        assert_eq!(
            (
                &row["requests"],
                &row["input_tokens"],
                &row["output_tokens"]
            ),
            (&json!(3), &json!(30), &json!(60)),
            "{row}"
        );
        assert!(
            (row["cost_usd"].as_f64().unwrap() - 1.5).abs() < 1e-9,
            "{row}"
        );
    }
    assert_eq!(rows.len(), models.len(), "{rows:?}");
    for (model, options, expected, got) in sent {
        assert_eq!(
            &got, expected,
            "{model} {options}: the upstream's stream_options"
        );
    }
}

/// The legacy Completions API streams usage only when asked, as chat does:
/// its streams are asked too, and charged what the upstream reported.
#[tokio::test]
async fn a_legacy_completions_stream_is_charged_its_real_usage() {
    let key = streams_key();
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(STREAMS_AUTH)
        .up(&mock.url(), PRICING)
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let body = json!({"model": "cheap-1", "prompt": "hi", "stream": true, "stream_options": null});
    let r = post(&gw.url("/v1/completions"), key, &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("\"prompt_tokens\""), "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let usage = get(&gw.url("/toolgate/api/usage?group_by=tenant"), "admin-key")
            .await
            .json();
        if let Some(row) = usage["data"].as_array().and_then(|d| d.first()).cloned() {
            break row;
        }
        assert!(Instant::now() < deadline, "no usage kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (
            &row["input_tokens"],
            &row["output_tokens"],
            &row["estimated_requests"]
        ),
        (&json!(10), &json!(20), &json!(0)),
        "{row}"
    );
    assert_eq!(
        mock.last().json()["stream_options"],
        json!({"include_usage": true})
    );
}

/// A body sent as it is written (a repeated key survives).
async fn post_raw(url: &str, key: &str, body: &str) -> Collected {
    common::send(
        Request::post(url)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap(),
    )
    .await
}

/// `"stream": 1` is a stream to a lax upstream and was none to toolgate,
/// which then asked no usage for it. A `stream` that is not a boolean, a
/// `stream_options` that is not an object, or either given twice is a `400`
/// naming it at every door, before anything goes upstream.
#[tokio::test]
async fn a_stream_that_is_not_a_boolean_is_refused_at_every_door() {
    let key = streams_key();
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(STREAMS_AUTH)
        .up(&mock.url(), PRICING)
        .start()
        .await;
    let chat_url = gw.url("/v1/chat/completions");
    let messages = r#""messages":[{"role":"user","content":"hi"}]"#;
    let cases = [
        (
            format!(r#"{{"model":"m",{messages},"stream":1}}"#),
            "stream",
        ),
        (
            format!(r#"{{"model":"m",{messages},"stream":"true"}}"#),
            "stream",
        ),
        (
            format!(r#"{{"model":"m",{messages},"stream":true,"stream_options":"include_usage"}}"#),
            "stream_options",
        ),
        (
            format!(
                r#"{{"model":"m",{messages},"stream":true,"stream_options":{{"include_usage":1}}}}"#
            ),
            "stream_options.include_usage",
        ),
        (
            format!(r#"{{"model":"m",{messages},"stream":false,"stream":true}}"#),
            "stream",
        ),
    ];
    for (body, param) in &cases {
        let r = post_raw(&chat_url, key, body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert_eq!(error["param"], *param, "{body}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{param}`")),
            "{error}"
        );
    }
    // The Responses and Messages doors read `stream` the same way.
    let r = post_raw(
        &gw.url("/v1/responses"),
        key,
        r#"{"model":"m","input":"hi","stream":1}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "stream");
    let r = post_raw(
        &gw.url("/v1/messages"),
        key,
        &format!(r#"{{"model":"m","max_tokens":9,{messages},"stream":1}}"#),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let error = r.json();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`stream`"),
        "{error}"
    );
    assert_eq!(mock.count(), 0, "nothing went upstream");
    // A boolean streams as before.
    let r = post_raw(
        &chat_url,
        key,
        &format!(r#"{{"model":"m",{messages},"stream":true,"stream_options":null}}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An upstream that answers as [`answer`] does, each answer held while the
/// gate is closed.
async fn gated_upstream() -> (tokio::sync::watch::Sender<bool>, Mock) {
    let (open, gate) = tokio::sync::watch::channel(true);
    let mock = Mock::start(move |r| Reply::Gated(gate.clone(), Box::new(answer(r)))).await;
    (open, mock)
}

/// Sends `n` copies of `body` of `key` at once, spread over `urls` in
/// turn, while the upstream holds every answer: the worst burst, every
/// admitted request in flight when the last one is checked. Once each was
/// refused or reached the upstream, the answers go. How many were
/// answered; every other request must be refused with a `429`.
async fn burst(
    urls: &[String],
    key: &str,
    body: &Value,
    (open, mock): (&tokio::sync::watch::Sender<bool>, &Mock),
    n: usize,
) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    open.send_replace(false);
    let before = mock.count();
    let refused = Arc::new(AtomicUsize::new(0));
    let requests: Vec<_> = (0..n)
        .map(|i| {
            let (url, key, body) = (urls[i % urls.len()].clone(), key.to_owned(), body.clone());
            let refused = refused.clone();
            tokio::spawn(async move {
                let r = post(&url, &key, &body).await;
                if r.status == 429 {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                r
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.count() - before + refused.load(Ordering::SeqCst) < n {
        assert!(
            Instant::now() < deadline,
            "the burst was never decided: {} upstream, {} refused",
            mock.count() - before,
            refused.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    open.send_replace(true);
    let mut answered = 0;
    for request in requests {
        let r = request.await.unwrap();
        match r.status.as_u16() {
            200 => answered += 1,
            429 => {}
            other => panic!("{other}: {}", r.text()),
        }
    }
    answered
}

/// What one request of `body` reserves: its bytes / 4 of prompt and its
/// output limit (`max_tokens`, else the provider's `default_max_tokens`).
fn reservation(body: &Value) -> usize {
    let out = body["max_tokens"].as_u64().unwrap_or(30) as usize;
    body.to_string().len().div_ceil(4) + out
}

/// Each answer is 30 tokens; a burst of 20 at 100 tokens a minute (the
/// client sets no `max_tokens`: the provider's `default_max_tokens`
/// stands for it), and at a budget of 100 tokens (`max_tokens` set),
/// spends at most one reservation past the limit. Afterwards the budget is
/// still spent to its end, then refused.
async fn bursts_end_within_one_reservation(
    urls: &[String],
    upstream: (&tokio::sync::watch::Sender<bool>, &Mock),
) {
    let uncapped = chat("m");
    let mut capped = chat("m");
    capped["max_tokens"] = json!(30);
    let minute = burst(urls, "burst-tpm-key", &uncapped, upstream, 20).await;
    let mut answered = burst(urls, "burst-budget-key", &capped, upstream, 20).await;
    let (minute_bound, bound) = (100 + reservation(&uncapped), 100 + reservation(&capped));
    assert!(
        minute >= 1 && answered >= 1,
        "a limit at rest admits a request"
    );
    assert!(
        minute * 30 <= minute_bound && answered * 30 <= bound,
        "answers of 30 tokens: {minute} in a burst at 100 tokens a minute (at most {minute_bound} \
         allowed), {answered} at a budget of 100 tokens (at most {bound})"
    );
    // One after another until the budget refuses: what is left of it is
    // still served (a settle may land a moment after its answer).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(&urls[answered % urls.len()], "burst-budget-key", &capped).await;
        match r.status.as_u16() {
            200 => answered += 1,
            429 if r.json()["error"]["code"] == "insufficient_quota" => break,
            429 => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("{other}: {}", r.text()),
        }
        assert!(Instant::now() < deadline, "the budget never refused");
    }
    assert!(
        (100..=bound).contains(&(answered * 30)),
        "the budget of 100 tokens served {answered} answers of 30"
    );
}

#[tokio::test]
async fn a_burst_ends_within_one_reservation_of_a_limit_in_memory() {
    keys();
    let (open, mock) = gated_upstream().await;
    let gw = TestConfig::new()
        .server(AUTH)
        .up(&mock.url(), DEFAULT_MAX_TOKENS)
        .start()
        .await;
    bursts_end_within_one_reservation(&[gw.url("/v1/chat/completions")], (&open, &mock)).await;
}

#[tokio::test]
async fn a_burst_ends_within_one_reservation_of_a_limit_across_two_replicas() {
    let redis = Redis::start();
    let (open, mock) = gated_upstream().await;
    let [a, b] = replicas(&mock, &redis, ["allow", "allow"]);
    let urls = [a.url("/v1/chat/completions"), b.url("/v1/chat/completions")];
    bursts_end_within_one_reservation(&urls, (&open, &mock)).await;
}

/// A Redis stalled mid-traffic (SIGSTOP) runs what waited when it wakes
/// (SIGCONT), admissions whose calls timed out on the replica's side
/// included. None of them may keep a slot: once Redis answers again, the
/// tenant's `max_concurrent_requests` are all admitted at once.
#[tokio::test]
async fn a_stalled_redis_leaves_no_concurrency_slot_taken() {
    let redis = Redis::start();
    let (open, mock) = gated_upstream().await;
    let replica = Binary::start(&replica_config(&mock, &redis.url(), "allow"), &KEYS);
    let url = replica.url("/v1/chat/completions");
    assert_eq!(post(&url, "conc4-key", &chat("m")).await.status, 200);

    redis.signal(libc::SIGSTOP);
    let stalled: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { post(&url, "conc4-key", &chat("m")).await.status })
        })
        .collect();
    for status in stalled {
        // `allow`: served uncounted once the check timed out.
        assert_eq!(status.await.unwrap(), 200);
    }
    redis.signal(libc::SIGCONT);

    // Four held at the upstream at once, until all four are admitted.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let admitted = burst(
            std::slice::from_ref(&url),
            "conc4-key",
            &chat("m"),
            (&open, &mock),
            4,
        )
        .await;
        if admitted == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slots taken during the stall are still held: {admitted} of 4 admitted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Redis holds a cache of the spend: emptied (a restart without
/// persistence), the budget is read back from the store's usage rows and
/// still refuses.
#[tokio::test]
async fn a_budget_outlives_an_emptied_redis_through_the_stores_usage_rows() {
    keys();
    let redis = Redis::start();
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(&format!(
            "{AUTH}[server.limits]\nredis_url = \"{}\"\nredis_timeout_ms = 1000\n",
            redis.url()
        ))
        .up(&mock.url(), "")
        .raw("[store]\nurl = \"sqlite::memory:\"\nrecord = \"none\"\n")
        .start()
        .await;
    let url = gw.url("/v1/chat/completions");
    // 50 tokens, 30 an answer.
    for _ in 0..2 {
        assert_eq!(
            post(&url, "tokens-budget-key", &chat("m")).await.status,
            200
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let usage = get(
            &gw.url("/toolgate/api/usage?group_by=tenant&tenant=tokens-budget"),
            "admin-key",
        )
        .await
        .json();
        if usage["data"][0]["requests"] == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "usage never landed: {usage}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spent = post(&url, "tokens-budget-key", &chat("m")).await;
    assert_eq!(spent.json()["error"]["code"], "insufficient_quota");

    redis.flush_all().await;
    let r = post(&url, "tokens-budget-key", &chat("m")).await;
    assert_eq!(
        r.status,
        429,
        "the emptied Redis forgot the spend: {}",
        r.text()
    );
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");
    // Counted in Redis again from there: a tenant with spend left is served.
    assert_eq!(post(&url, "budget-key", &chat("m")).await.status, 200);
}

/// A `x-ratelimit-reset-*` duration (`12s`, `2.7s`, `1m2s`, `20ms`) in
/// microseconds.
fn reset_us(text: &str) -> u64 {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse::<u64>().unwrap() * 1_000;
    }
    let (minutes, seconds) = match text.split_once('m') {
        Some((m, s)) => (m.parse::<u64>().unwrap(), s),
        None => (0, text),
    };
    let seconds: f64 = seconds.strip_suffix('s').unwrap().parse().unwrap();
    minutes * 60_000_000 + (seconds * 1e6).round() as u64
}

const RATE_HEADERS: [&str; 6] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];

/// A key with 5 requests and 1,000 tokens a minute gets OpenAI's
/// `x-ratelimit-*` headers on every answer, whole and streamed, saying
/// what is left once the request was admitted (its reservation taken from
/// the minute); a key without limits gets none. `urls` take turns.
async fn every_answer_says_what_the_limits_have_left(urls: &[String]) {
    let whole = chat("m");
    let r = post(&urls[0], "headers-key", &whole).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // From rest: one request of 5 taken (one more each 12 s), and the
    // reservation's tokens (a minute holds 1,000: 60 ms each).
    let reserved = reservation(&whole) as u64;
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "5");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "4");
    assert_eq!(header(&r, "x-ratelimit-reset-requests"), "12s");
    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), "1000");
    assert_eq!(
        header(&r, "x-ratelimit-remaining-tokens"),
        (1000 - reserved).to_string()
    );
    assert_eq!(
        reset_us(header(&r, "x-ratelimit-reset-tokens")),
        reserved * 60_000
    );

    let mut streamed = chat("m");
    streamed["stream"] = json!(true);
    let r = post(&urls[1 % urls.len()], "headers-key", &streamed).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("[DONE]"), "{}", r.text());
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "5");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "3");
    let reset = reset_us(header(&r, "x-ratelimit-reset-requests"));
    assert!((23_000_000..=24_000_000).contains(&reset), "{reset}");
    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), "1000");
    // The first request's tokens (its reservation, or the 30 it used once
    // settled) and this one's reservation are gone from the minute.
    let remaining: u64 = header(&r, "x-ratelimit-remaining-tokens").parse().unwrap();
    let second = reservation(&streamed) as u64;
    assert!(
        (1000 - reserved - second..=1000 - 30 - second + 1).contains(&remaining),
        "{remaining}"
    );
    let reset = reset_us(header(&r, "x-ratelimit-reset-tokens"));
    assert!(
        (1000 - remaining - 1) * 60_000 <= reset && reset <= (1000 - remaining) * 60_000,
        "{reset}"
    );

    for body in [&whole, &streamed] {
        let r = post(&urls[0], "free-key", body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        for name in RATE_HEADERS {
            assert!(
                r.headers.get(name).is_none(),
                "{name} for a key without limits"
            );
        }
    }
    // A key with other limits only (requests in flight) has none either.
    let r = post(&urls[0], "conc-key", &whole).await;
    assert_eq!(r.status, 200);
    assert!(r.headers.get("x-ratelimit-limit-requests").is_none());
}

#[tokio::test]
async fn every_answer_says_what_the_limits_have_left_in_memory() {
    keys();
    let mock = upstream().await;
    let gw = gateway(&mock, DEFAULT_MAX_TOKENS).await;
    every_answer_says_what_the_limits_have_left(&[gw.url("/v1/chat/completions")]).await;
}

#[tokio::test]
async fn every_answer_says_what_the_limits_have_left_across_two_replicas() {
    let redis = Redis::start();
    let mock = upstream().await;
    let [a, b] = replicas(&mock, &redis, ["deny", "deny"]);
    every_answer_says_what_the_limits_have_left(&[
        a.url("/v1/chat/completions"),
        b.url("/v1/chat/completions"),
    ])
    .await;
}

/// Managed keys beside tenant `headers` (5 requests and 1,000 tokens a
/// minute), with `limits` (`[server.limits]` lines) and a store for the keys.
async fn managed_gateway(mock: &Mock, limits: &str) -> common::TestGateway {
    TestConfig::new()
        .server(&format!(
            "[server.auth]\nadmin_keys_env = \"LIMITS_TEST_ADMIN\"\nmanaged_keys = true\n\
             [[server.auth.keys]]\nname = \"headers\"\nkey_env = \"LIMITS_TEST_HEADERS\"\n\
             [server.auth.keys.limits]\nrequests_per_minute = 5\ntokens_per_minute = 1000\n{limits}"
        ))
        .up(&mock.url(), DEFAULT_MAX_TOKENS)
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await
}

/// A managed key's own limit of 2 requests a minute, tighter than its
/// tenant's 5, is what its headers show; the tokens, which only the
/// tenant limits, are the tenant's.
async fn a_keys_tighter_share_is_what_its_headers_show(gw: &common::TestGateway) {
    let made = common::send(
        Request::post(gw.url("/toolgate/api/keys"))
            .header("authorization", "Bearer admin-key")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                json!({"tenant": "headers", "name": "share",
                       "limits": {"requests_per_minute": 2}})
                .to_string(),
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_owned();
    let body = chat("m");
    let r = post(&gw.url("/v1/chat/completions"), &key, &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(header(&r, "x-ratelimit-limit-requests"), "2");
    assert_eq!(header(&r, "x-ratelimit-remaining-requests"), "1");
    assert_eq!(header(&r, "x-ratelimit-reset-requests"), "30s");
    assert_eq!(header(&r, "x-ratelimit-limit-tokens"), "1000");
    assert_eq!(
        header(&r, "x-ratelimit-remaining-tokens"),
        (1000 - reservation(&body)).to_string()
    );
}

#[tokio::test]
async fn a_keys_tighter_share_is_what_its_headers_show_in_memory_and_in_redis() {
    keys();
    let mock = upstream().await;
    let gw = managed_gateway(&mock, "").await;
    a_keys_tighter_share_is_what_its_headers_show(&gw).await;
    let redis = Redis::start();
    let gw = managed_gateway(
        &mock,
        &format!(
            "[server.limits]\nredis_url = \"{}\"\nredis_timeout_ms = 1000\n",
            redis.url()
        ),
    )
    .await;
    a_keys_tighter_share_is_what_its_headers_show(&gw).await;
}

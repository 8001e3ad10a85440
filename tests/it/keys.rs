//! Keys an admin makes at run time (`managed_keys = true`): made, used at
//! once, listed without secrets (a tenant's own key sees its tenant's only),
//! changed and revoked; a key's own limits on top of its tenant's; a key of
//! a configured tenant gets the config's policy; on PostgreSQL a key made on
//! one replica works on the other within a second, and one revoked there is
//! refused here within a second. Static keys from a `key_file` are read
//! again on reload.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::binary::Binary;
use common::postgres::Postgres;
use common::{Mock, Reply, TestConfig};
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{Value, json};

const KEYS: [(&str, &str); 2] = [
    ("MANAGED_TEST_ADMIN", "admin-key"),
    ("MANAGED_TEST_TEAM_A", "static-a"),
];

fn keys() {
    for (var, key) in KEYS {
        // SAFETY: this module's own variables, set to the same values before
        // its gateways read them.
        unsafe { std::env::set_var(var, key) };
    }
}

/// Managed keys beside one configured tenant, `team-a`, limited to `demo*`.
const AUTH: &str = "[server.auth]\nadmin_keys_env = \"MANAGED_TEST_ADMIN\"\nmanaged_keys = true\n\
    [[server.auth.keys]]\nname = \"team-a\"\nkey_env = \"MANAGED_TEST_TEAM_A\"\nmodels = [\"demo*\"]\n";

async fn chat(base: &str, key: &str, model: &str) -> u16 {
    common::call(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        key,
        Some(json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})),
    )
    .await
    .status
    .as_u16()
}

async fn upstream() -> Mock {
    Mock::start(|_| Reply::json(&common::upstream_completion("hello"))).await
}

#[tokio::test]
async fn an_admin_makes_lists_changes_and_revokes_keys_that_work_at_once() {
    keys();
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(AUTH)
        .up(&mock.url(), "")
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let base = gw.url("");
    let api = gw.url("/toolgate/api/keys");

    let made = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(
            json!({"tenant": "team-x", "name": "ci-bot", "models": ["m*"],
                    "limits": {"requests_per_minute": 2}}),
        ),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let made = made.json();
    let secret = made["key"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("tg-") && secret.len() == 46, "{secret}");
    assert_eq!(made["tenant"], "team-x");
    assert_eq!(made["prefix"], &secret[..9]);
    let id = made["id"].as_str().unwrap().to_owned();

    // Used at once; its policy and its own limit hold.
    assert_eq!(chat(&base, &secret, "m1").await, 200);
    assert_eq!(chat(&base, &secret, "other").await, 403);
    assert_eq!(chat(&base, &secret, "m2").await, 200);
    assert_eq!(chat(&base, &secret, "m3").await, 429, "2 a minute");

    // Listed without the secret; a key sees its own tenant's keys only, and
    // makes none.
    let listed = common::call(Method::GET, &api, "admin-key", None).await;
    assert_eq!(listed.status, 200);
    assert!(!listed.text().contains(&secret[3..]), "{}", listed.text());
    assert_eq!(listed.json()["data"][0]["id"], id.as_str());
    assert!(listed.json()["data"][0]["last_used_at"].is_string());
    let own = common::call(Method::GET, &api, &secret, None).await.json();
    assert_eq!(own["data"].as_array().unwrap().len(), 1);
    let other = common::call(Method::GET, &api, "static-a", None)
        .await
        .json();
    assert_eq!(
        other["data"],
        json!([]),
        "team-a sees none of team-x's keys"
    );
    let forged = common::call(
        Method::POST,
        &api,
        &secret,
        Some(json!({"tenant": "team-x", "name": "mine"})),
    )
    .await;
    assert_eq!(forged.status, 403);
    assert_eq!(
        common::call(Method::DELETE, &format!("{api}/{id}"), &secret, None)
            .await
            .status,
        403
    );

    // Changed: a wider model policy applies to the next request.
    let changed = common::call(
        Method::PATCH,
        &format!("{api}/{id}"),
        "admin-key",
        Some(json!({"models": ["other"], "limits": null})),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.text());
    assert_eq!(changed.json()["models"], json!(["other"]));
    assert_eq!(chat(&base, &secret, "other").await, 200);

    // Revoked: refused at once.
    let revoked = common::call(Method::DELETE, &format!("{api}/{id}"), "admin-key", None).await;
    assert_eq!(revoked.status, 200);
    assert_eq!(chat(&base, &secret, "other").await, 401);
    assert_eq!(
        common::call(Method::GET, &api, &secret, None).await.status,
        401
    );

    // A key of a configured tenant has the config's policy.
    let team = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(json!({"tenant": "team-a", "name": "second", "models": ["*"]})),
    )
    .await
    .json();
    let second = team["key"].as_str().unwrap();
    assert_eq!(chat(&base, second, "demo-1").await, 200);
    assert_eq!(
        chat(&base, second, "m1").await,
        403,
        "team-a's models come from the config"
    );
    let listed = common::call(Method::GET, &api, "static-a", None)
        .await
        .json();
    assert_eq!(listed["data"][0]["name"], "second");

    // An expired key is refused.
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let brief = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(json!({"tenant": "team-x", "name": "brief", "expires_at": soon})),
    )
    .await
    .json();
    let brief = brief["key"].as_str().unwrap().to_owned();
    assert_eq!(chat(&base, &brief, "anything").await, 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(chat(&base, &brief, "anything").await, 401);

    // Bad requests name what is wrong.
    for (body, field) in [
        (
            json!({"tenant": "team-x", "name": "n", "colour": 1}),
            "colour",
        ),
        (json!({"tenant": "a b", "name": "n"}), "tenant"),
        (json!({"tenant": "anonymous", "name": "n"}), "reserved"),
        (
            json!({"tenant": "t", "name": "n", "gateway_tools": ["nope"]}),
            "gateway_tools",
        ),
        (
            json!({"tenant": "t", "name": "n", "expires_at": "2020-01-01T00:00:00Z"}),
            "past",
        ),
        (
            json!({"tenant": "t", "name": "n", "limits": {"requests_per_minute": 0}}),
            "requests_per_minute",
        ),
        (json!({"tenant": "t"}), "name"),
    ] {
        let r = common::call(Method::POST, &api, "admin-key", Some(body.clone())).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(field), "{body}: {}", r.text());
    }
}

/// The config of a replica sharing keys through PostgreSQL at `url`.
fn replica_config(mock: &Mock, url: &str) -> String {
    TestConfig::new()
        .server(AUTH)
        .up(&mock.url(), "")
        .raw(&format!("[store]\nurl = \"{url}\"\n"))
        .toml()
}

/// Waits until both replicas have read the (empty) keys table.
async fn both_read_the_keys(base1: &str, base2: &str) {
    for base in [base1, base2] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while common::call(
            Method::GET,
            &format!("{base}/toolgate/api/keys"),
            "admin-key",
            None,
        )
        .await
        .status
            != 200
        {
            assert!(Instant::now() < deadline, "the store never opened");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn a_key_made_on_one_replica_works_on_the_other_and_a_revoked_one_stops_within_a_second() {
    let pg = Postgres::start();
    let mock = upstream().await;
    let config = replica_config(&mock, &pg.url());
    let one = Binary::start(&config, &KEYS);
    let two = Binary::start(&config, &KEYS);
    let (base1, base2) = (one.url(""), two.url(""));
    both_read_the_keys(&base1, &base2).await;
    let made = common::call(
        Method::POST,
        &format!("{base1}/toolgate/api/keys"),
        "admin-key",
        Some(json!({"tenant": "team-x", "name": "shared"})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let made = made.json();
    let secret = made["key"].as_str().unwrap();
    let id = made["id"].as_str().unwrap();
    let started = Instant::now();
    while chat(&base2, secret, "m").await != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "replica 2 did not take the key within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = started.elapsed();
    assert_eq!(
        common::call(
            Method::DELETE,
            &format!("{base2}/toolgate/api/keys/{id}"),
            "admin-key",
            None
        )
        .await
        .status,
        200
    );
    let started = Instant::now();
    while chat(&base1, secret, "m").await != 401 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "replica 1 still took the revoked key after a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "made on 1, served by 2 after {seen:?}; revoked on 2, refused by 1 after {:?}",
        started.elapsed()
    );
}

/// Opens `url` as a stream with `key` (an MCP change stream, a live view):
/// its status, and the body to read on.
async fn open_stream(url: &str, key: &str) -> (u16, hyper::body::Incoming) {
    let request = Request::get(url)
        .header("authorization", format!("Bearer {key}"))
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    (response.status().as_u16(), response.into_body())
}

/// Whether `body` ends within `wait`.
async fn ends_within(body: &mut hyper::body::Incoming, wait: Duration) -> bool {
    use http_body_util::BodyExt;
    tokio::time::timeout(wait, async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    })
    .await
    .is_ok()
}

/// Revocation reaches every replica's streams: a key revoked on one ends
/// its MCP change stream and its live view on the other (told by
/// PostgreSQL `NOTIFY`), and a key that expires ends its stream there at
/// `expires_at` by the replica's own timer.
#[tokio::test]
async fn a_key_revoked_or_expired_ends_its_streams_on_every_replica() {
    let pg = Postgres::start();
    let mock = upstream().await;
    let config = format!(
        "{}[[http_tools]]\nname = \"Echo\"\ndescription = \"Echoes\"\nurl = \"http://127.0.0.1:9/echo\"\n\
         parameters = {{ type = \"object\" }}\n[mcp_gateway]\n",
        replica_config(&mock, &pg.url())
    );
    let one = Binary::start(&config, &KEYS);
    let two = Binary::start(&config, &KEYS);
    let (base1, base2) = (one.url(""), two.url(""));
    both_read_the_keys(&base1, &base2).await;
    let make = async |body: Value| {
        let made = common::call(
            Method::POST,
            &format!("{base1}/toolgate/api/keys"),
            "admin-key",
            Some(body),
        )
        .await;
        assert_eq!(made.status, 201, "{}", made.text());
        let made = made.json();
        let secret = made["key"].as_str().unwrap().to_owned();
        // Replica two has it once it serves it.
        let started = Instant::now();
        while chat(&base2, &secret, "m").await != 200 {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "replica 2 never took the key"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (made["id"].as_str().unwrap().to_owned(), secret)
    };

    let (id, secret) = make(json!({"tenant": "team-x", "name": "revoked"})).await;
    let (status, mut stream) = open_stream(&format!("{base2}/mcp"), &secret).await;
    assert_eq!(status, 200);
    let (status, mut view) = open_stream(
        &format!("{base2}/toolgate/api/chats/chat-r/events"),
        &secret,
    )
    .await;
    assert_eq!(status, 200);
    assert!(!ends_within(&mut stream, Duration::from_millis(200)).await);
    let revoked = common::call(
        Method::DELETE,
        &format!("{base1}/toolgate/api/keys/{id}"),
        "admin-key",
        None,
    )
    .await;
    assert_eq!(revoked.status, 200);
    assert!(
        ends_within(&mut stream, Duration::from_secs(1)).await,
        "revoked on replica 1, its change stream on replica 2 ends within a second"
    );
    assert!(ends_within(&mut view, Duration::from_millis(500)).await);

    let ahead = Duration::from_millis(2500);
    let expires = Instant::now() + ahead;
    let at = (chrono::Utc::now() + ahead).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let (_, secret) = make(json!({"tenant": "team-x", "name": "expiring", "expires_at": at})).await;
    let (status, mut stream) = open_stream(&format!("{base2}/mcp"), &secret).await;
    assert_eq!(status, 200);
    let before = expires
        .saturating_duration_since(Instant::now())
        .saturating_sub(Duration::from_millis(300));
    assert!(
        !ends_within(&mut stream, before).await,
        "ended before expires_at"
    );
    assert!(
        ends_within(&mut stream, Duration::from_millis(1300)).await,
        "the expired key's change stream on replica 2 ends at expires_at"
    );
}

#[tokio::test]
async fn keys_in_a_key_file_are_read_again_on_reload() {
    let mock = upstream().await;
    let dir = std::env::temp_dir().join(format!("toolgate-keyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.txt");
    std::fs::write(&file, "# team-f's keys\nfile-key-1\n").unwrap();
    let config = TestConfig::new()
        .server(&format!(
            "[server.auth]\n[[server.auth.keys]]\nname = \"team-f\"\nkey_file = \"{}\"\n",
            file.display()
        ))
        .up(&mock.url(), "")
        .toml();
    let gw = Binary::start(&config, &[]);
    let base = gw.url("");
    assert_eq!(chat(&base, "file-key-1", "m").await, 200);
    assert_eq!(chat(&base, "file-key-2", "m").await, 401);
    std::fs::write(&file, "file-key-2, file-key-3\n").unwrap();
    gw.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while chat(&base, "file-key-2", "m").await != 200 {
        assert!(
            Instant::now() < deadline,
            "the reload did not read the file again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        chat(&base, "file-key-1", "m").await,
        401,
        "a removed key is refused"
    );
    assert_eq!(chat(&base, "file-key-3", "m").await, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gateway with [`AUTH`] in front of `mock`, whose answers cost $0.50
/// (10 input and 20 output tokens), keys kept in SQLite.
async fn priced_gateway(mock: &Mock) -> common::TestGateway {
    TestConfig::new()
        .server(AUTH)
        .up(
            &mock.url(),
            "[providers.pricing]\n\"*\" = { input = 10000, output = 20000 }\n",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await
}

/// The lines of `/metrics` naming `tenant`.
async fn series_of(base: &str, tenant: &str) -> Vec<String> {
    let label = format!("tenant=\"{tenant}\"");
    common::get(&format!("{base}/metrics"))
        .await
        .text()
        .lines()
        .filter(|l| l.starts_with("toolgate_") && l.contains(&label))
        .map(str::to_owned)
        .collect()
}

/// A managed key's tenant reads the same in every series with a `tenant`
/// label: its requests, tokens, cost and refusals, whether the config
/// names the tenant or not (a dashboard's tenant variable comes from
/// `toolgate_requests_total`).
#[tokio::test]
async fn a_managed_keys_tenant_has_one_label_in_every_series() {
    keys();
    let mock = upstream().await;
    let gw = priced_gateway(&mock).await;
    let (base, api) = (gw.url(""), gw.url("/toolgate/api/keys"));
    let made = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(json!({"tenant": "labels-x", "name": "one", "limits": {"requests_per_minute": 1}})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let secret = made.json()["key"].as_str().unwrap().to_owned();
    assert_eq!(chat(&base, &secret, "m").await, 200);
    assert_eq!(chat(&base, &secret, "m").await, 429);

    let series = series_of(&base, "labels-x").await;
    let has = |prefix: &str, value: &str| {
        assert!(
            series
                .iter()
                .any(|l| l.starts_with(prefix) && l.ends_with(&format!(" {value}"))),
            "no {prefix} … {value} in {series:#?}"
        );
    };
    has(
        r#"toolgate_requests_total{provider="up",route="chat_completions",status="200",tenant="labels-x"}"#,
        "1",
    );
    has(
        r#"toolgate_requests_total{provider="none",route="chat_completions",status="429",tenant="labels-x"}"#,
        "1",
    );
    has(
        r#"toolgate_tokens_total{provider="up",tenant="labels-x",kind="input",estimated="false"}"#,
        "10",
    );
    has(
        r#"toolgate_cost_usd_total{provider="up",tenant="labels-x"}"#,
        "0.5",
    );
    has(
        r#"toolgate_rate_limited_total{tenant="labels-x",limit="requests"}"#,
        "1",
    );
    // Nothing of it went to `other`.
    let metrics = common::get(&format!("{base}/metrics")).await.text();
    assert!(
        !metrics.contains(r#"tenant="other""#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("other"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A key's refusal says why to whoever holds the key: an admin key is not
/// a client key (on `/v1` and on the MCP door), a revoked key was revoked,
/// an expired one expired at its `expires_at`; a key toolgate never made,
/// or none, is told nothing more than "missing or invalid". Every one is a
/// `401` in OpenAI's shape (`authentication_error`, `invalid_api_key`), or
/// Anthropic's on `/v1/messages`.
#[tokio::test]
async fn a_refused_key_is_told_why_and_an_unknown_one_nothing() {
    keys();
    let mock = upstream().await;
    let gw = TestConfig::new()
        .server(AUTH)
        .up(&mock.url(), "")
        .raw(
            "[store]\nurl = \"sqlite::memory:\"\n[[http_tools]]\nname = \"Echo\"\ndescription = \"Echoes\"\n\
             url = \"http://127.0.0.1:9/echo\"\nparameters = { type = \"object\" }\n[mcp_gateway]\n",
        )
        .start()
        .await;
    let (base, api) = (gw.url(""), gw.url("/toolgate/api/keys"));
    let chat_url = format!("{base}/v1/chat/completions");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let refused = async |url: &str, key: &str, body: Value| {
        let r = common::call(Method::POST, url, key, Some(body)).await;
        assert_eq!(r.status, 401, "{url} {key}: {}", r.text());
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        r.json()
    };
    let openai = |v: &Value| -> String {
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
        v["error"]["message"].as_str().unwrap().to_owned()
    };
    const UNKNOWN: &str = "Missing or invalid API key: send `Authorization: Bearer <key>`";

    // An admin key, on every door.
    let said = openai(&refused(&chat_url, "admin-key", body.clone()).await);
    assert!(said.contains("admin key, not a client key"), "{said}");
    let messages = refused(
        &format!("{base}/v1/messages"),
        "admin-key",
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(messages["error"]["type"], "authentication_error");
    assert!(
        messages["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin key, not a client key"),
        "{messages}"
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let said = openai(&refused(&format!("{base}/mcp"), "admin-key", initialize.clone()).await);
    assert!(said.contains("admin key, not a client key"), "{said}");

    // Keys toolgate never made, and no key: nothing confirmed.
    for key in [
        "tg-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "not a key",
        "",
    ] {
        assert_eq!(
            openai(&refused(&chat_url, key, body.clone()).await),
            UNKNOWN
        );
        assert_eq!(
            openai(&refused(&format!("{base}/mcp"), key, initialize.clone()).await),
            UNKNOWN
        );
    }

    // A revoked key, on /v1, the MCP door and the API.
    let made = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(json!({"tenant": "refusals", "name": "gone"})),
    )
    .await
    .json();
    let (secret, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    assert_eq!(chat(&base, secret, "m").await, 200);
    let revoked = common::call(Method::DELETE, &format!("{api}/{id}"), "admin-key", None).await;
    assert_eq!(revoked.status, 200);
    let said = openai(&refused(&chat_url, secret, body.clone()).await);
    assert!(said.starts_with("This API key was revoked at 20"), "{said}");
    let said = openai(&refused(&format!("{base}/mcp"), secret, initialize.clone()).await);
    assert!(said.contains("revoked"), "{said}");
    let listed = common::call(Method::GET, &api, secret, None).await;
    assert_eq!(listed.status, 401);
    assert!(listed.text().contains("revoked at"), "{}", listed.text());

    // An expired key, with its `expires_at` as the API shows it.
    let at = (chrono::Utc::now() + chrono::Duration::milliseconds(1500)).to_rfc3339();
    let made = common::call(
        Method::POST,
        &api,
        "admin-key",
        Some(json!({"tenant": "refusals", "name": "brief", "expires_at": at})),
    )
    .await
    .json();
    let secret = made["key"].as_str().unwrap();
    let expires_at = made["expires_at"].as_str().unwrap();
    assert_eq!(chat(&base, secret, "m").await, 200);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let said = openai(&refused(&chat_url, secret, body.clone()).await);
    assert_eq!(
        said,
        format!("This API key expired at {expires_at}; ask an admin for a new one")
    );
}

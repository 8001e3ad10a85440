//! Streams opened with a key: live views (`/toolgate/api/chats/{id}/events`)
//! and the MCP door's change streams (`GET /mcp`). Each lasts only while its
//! key still names who opened it: a reload that removes a static key, a
//! managed key's revocation and its expiry (at `expires_at`, not at the
//! next read of the keys) close it. Both are bounded per key and in all
//! (`429` beyond), their places given back however they end.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::TestGateway;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use toolgate::config::Config;

fn auth(keys: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[server.auth]\nadmin_keys_env = \"LIVE_VIEWS_ADMIN\"\n\
         [[server.auth.keys]]\nname = \"team-a\"\nkey_env = \"{keys}\"\n\
         [[server.auth.keys]]\nname = \"team-b\"\nkey_env = \"LIVE_VIEWS_B\"\n\
         [store]\nurl = \"sqlite::memory:\"\nmax_live_views = 3\nmax_live_views_per_key = 2\n\
         [[http_tools]]\nname = \"Echo\"\ndescription = \"Echoes\"\nurl = \"http://127.0.0.1:9/echo\"\n\
         parameters = {{ type = \"object\" }}\n[mcp_gateway]\n\
         [[providers]]\nname = \"demo\"\nmodels = [\"demo\"]\n[providers.demo]\nchunk_delay_ms = 0\n"
    )
}

fn set_keys() {
    // SAFETY: these variables are this module's own, set before its
    // gateways read them, to the same values every time.
    unsafe {
        std::env::set_var("LIVE_VIEWS_A", "va-1,va-2");
        std::env::set_var("LIVE_VIEWS_A_SHORT", "va-1");
        std::env::set_var("LIVE_VIEWS_B", "vb-1");
        std::env::set_var("LIVE_VIEWS_ADMIN", "v-admin");
    }
}

/// Opens a live view with `key`: its status, and the body to read on.
async fn open(gw: &TestGateway, key: &str, chat: &str) -> (u16, Incoming) {
    let request = Request::get(gw.url(&format!("/toolgate/api/chats/{chat}/events")))
        .header("authorization", format!("Bearer {key}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let status = response.status().as_u16();
    (status, response.into_body())
}

/// Opens the MCP door's change stream with `key`: its status, and the
/// body to read on.
async fn changes(gw: &TestGateway, key: &str) -> (u16, Incoming) {
    let request = Request::get(gw.url("/mcp"))
        .header("authorization", format!("Bearer {key}"))
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = common::client().request(request).await.unwrap();
    let status = response.status().as_u16();
    (status, response.into_body())
}

/// A gateway with managed keys (the admin key `v-admin` makes them).
async fn managed() -> TestGateway {
    set_keys();
    let config =
        auth("LIVE_VIEWS_A").replace("[server.auth]\n", "[server.auth]\nmanaged_keys = true\n");
    TestGateway::start(&config).await
}

/// `v-admin`'s request to the keys API.
async fn admin(
    gw: &TestGateway,
    method: http::Method,
    path: &str,
    body: &str,
) -> common::Collected {
    common::send(
        Request::builder()
            .method(method)
            .uri(gw.url(path))
            .header("authorization", "Bearer v-admin")
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .unwrap(),
    )
    .await
}

/// Whether the view's stream ends within `wait` (frames before the end
/// are read and dropped).
async fn ends_within(body: &mut Incoming, wait: Duration) -> bool {
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

#[tokio::test]
async fn a_reload_that_removes_a_key_closes_its_views() {
    set_keys();
    let gw = TestGateway::start(&auth("LIVE_VIEWS_A")).await;
    let (status, mut removed) = open(&gw, "va-2", "chat-x").await;
    assert_eq!(status, 200);
    let (status, mut kept) = open(&gw, "va-1", "chat-y").await;
    assert_eq!(status, 200);
    let (status, mut admin) = open(&gw, "v-admin", "chat-z").await;
    assert_eq!(status, 200);
    // Nothing ends them before the reload.
    assert!(!ends_within(&mut removed, Duration::from_millis(200)).await);
    // `va-2` leaves team-a's keys.
    let config = Config::from_toml(&auth("LIVE_VIEWS_A_SHORT")).unwrap();
    gw.gateway.reload(config).unwrap();
    assert!(
        ends_within(&mut removed, Duration::from_secs(5)).await,
        "the removed key's view is closed"
    );
    assert!(
        !ends_within(&mut kept, Duration::from_millis(300)).await,
        "a kept key's view stays"
    );
    assert!(!ends_within(&mut admin, Duration::from_millis(100)).await);
    let (status, _) = open(&gw, "va-2", "chat-x").await;
    assert_eq!(status, 401, "and the key opens no other");
}

#[tokio::test]
async fn views_are_bounded_per_key_and_in_all_and_their_places_come_back() {
    set_keys();
    let gw = TestGateway::start(&auth("LIVE_VIEWS_A")).await;
    let (s1, v1) = open(&gw, "va-1", "made-up-1").await;
    let (s2, _v2) = open(&gw, "va-1", "made-up-2").await;
    assert_eq!((s1, s2), (200, 200));
    let (status, body) = open(&gw, "va-1", "made-up-3").await;
    let text = String::from_utf8_lossy(&body.collect().await.unwrap().to_bytes()).into_owned();
    assert_eq!(status, 429, "a third view with one key: {text}");
    assert!(text.contains("max_live_views_per_key"), "{text}");
    // Another key of the same tenant counts apart; three in all.
    let (s3, _v3) = open(&gw, "va-2", "made-up-3").await;
    assert_eq!(s3, 200);
    let (status, _) = open(&gw, "vb-1", "made-up-4").await;
    assert_eq!(status, 429, "the gateway's bound");
    // A client that leaves gives its place back.
    drop(v1);
    let mut opened = None;
    for _ in 0..50 {
        let (s, body) = open(&gw, "vb-1", "made-up-4").await;
        if s == 200 {
            opened = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        opened.is_some(),
        "the place of a view whose client left is free again"
    );
}

#[tokio::test]
async fn revoking_a_managed_key_closes_its_views() {
    let gw = managed().await;
    let made = admin(
        &gw,
        http::Method::POST,
        "/toolgate/api/keys",
        r#"{"tenant": "team-m", "name": "viewer"}"#,
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let made = made.json();
    let (status, mut view) = open(&gw, made["key"].as_str().unwrap(), "chat-m").await;
    assert_eq!(status, 200);
    let (status, mut other) = open(&gw, "va-1", "chat-a").await;
    assert_eq!(status, 200);
    assert!(!ends_within(&mut view, Duration::from_millis(200)).await);
    let id = made["id"].as_str().unwrap();
    let revoked = admin(
        &gw,
        http::Method::DELETE,
        &format!("/toolgate/api/keys/{id}"),
        "",
    )
    .await;
    assert_eq!(revoked.status, 200);
    assert!(
        ends_within(&mut view, Duration::from_secs(5)).await,
        "the revoked key's view is closed"
    );
    assert!(!ends_within(&mut other, Duration::from_millis(200)).await);
}

#[tokio::test]
async fn a_reload_that_removes_a_key_ends_its_change_streams() {
    set_keys();
    let gw = TestGateway::start(&auth("LIVE_VIEWS_A")).await;
    let (status, mut removed) = changes(&gw, "va-2").await;
    assert_eq!(status, 200);
    let (status, mut kept) = changes(&gw, "va-1").await;
    assert_eq!(status, 200);
    assert!(!ends_within(&mut removed, Duration::from_millis(200)).await);
    // `va-2` leaves team-a's keys.
    let config = Config::from_toml(&auth("LIVE_VIEWS_A_SHORT")).unwrap();
    gw.gateway.reload(config).unwrap();
    assert!(
        ends_within(&mut removed, Duration::from_secs(2)).await,
        "the removed key's change stream ends"
    );
    assert!(
        !ends_within(&mut kept, Duration::from_millis(300)).await,
        "a kept key's stream stays"
    );
    let (status, _) = changes(&gw, "va-2").await;
    assert_eq!(status, 401, "and the key opens no other");
}

#[tokio::test]
async fn revoking_a_managed_key_ends_its_change_streams() {
    let gw = managed().await;
    let made = admin(
        &gw,
        http::Method::POST,
        "/toolgate/api/keys",
        r#"{"tenant": "team-m", "name": "agent"}"#,
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let made = made.json();
    let (status, mut stream) = changes(&gw, made["key"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    let (status, mut other) = changes(&gw, "va-1").await;
    assert_eq!(status, 200);
    assert!(!ends_within(&mut stream, Duration::from_millis(200)).await);
    let id = made["id"].as_str().unwrap();
    let revoked = admin(
        &gw,
        http::Method::DELETE,
        &format!("/toolgate/api/keys/{id}"),
        "",
    )
    .await;
    assert_eq!(revoked.status, 200);
    assert!(
        ends_within(&mut stream, Duration::from_secs(1)).await,
        "the revoked key's change stream ends at once"
    );
    assert!(!ends_within(&mut other, Duration::from_millis(200)).await);
}

/// A key that expires closes its streams at `expires_at`, by a timer: no
/// change of the keys and no reload comes to tell the gateway.
#[tokio::test]
async fn an_expiring_keys_view_and_change_stream_end_at_its_expiry() {
    let gw = managed().await;
    let ahead = Duration::from_millis(2500);
    let expires_at = chrono::Utc::now() + ahead;
    let expires = Instant::now() + ahead;
    let made = admin(
        &gw,
        http::Method::POST,
        "/toolgate/api/keys",
        &serde_json::json!({
            "tenant": "team-m",
            "name": "short-lived",
            "expires_at": expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        })
        .to_string(),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_owned();
    let (status, mut view) = open(&gw, &key, "chat-e").await;
    assert_eq!(status, 200);
    let (status, mut stream) = changes(&gw, &key).await;
    assert_eq!(status, 200);
    let (status, mut other) = changes(&gw, "va-1").await;
    assert_eq!(status, 200);
    // Open until shortly before the key expires…
    let before = expires
        .saturating_duration_since(Instant::now())
        .saturating_sub(Duration::from_millis(300));
    assert!(
        !ends_within(&mut view, before).await,
        "the view ended early"
    );
    assert!(!ends_within(&mut stream, Duration::ZERO).await);
    // …and ended shortly after.
    assert!(
        ends_within(&mut view, Duration::from_millis(1300)).await,
        "the expired key's view ends at expires_at"
    );
    assert!(
        ends_within(&mut stream, Duration::from_millis(300)).await,
        "the expired key's change stream ends at expires_at"
    );
    let late = Instant::now().saturating_duration_since(expires);
    assert!(late < Duration::from_secs(1), "{late:?} after expires_at");
    assert!(!ends_within(&mut other, Duration::from_millis(100)).await);
    let (status, _) = changes(&gw, &key).await;
    assert_eq!(status, 401, "and the key opens no other");
}

#[tokio::test]
async fn change_streams_are_bounded_per_key_and_another_key_still_opens_one() {
    set_keys();
    let gw = TestGateway::start(&auth("LIVE_VIEWS_A")).await;
    // One key opens streams until it is refused: at 16 (README), well
    // before the 1,024 every key shares.
    let mut held = Vec::new();
    let refused = loop {
        let request = Request::get(gw.url("/mcp"))
            .header("authorization", "Bearer va-1")
            .header("accept", "text/event-stream")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = common::client().request(request).await.unwrap();
        if response.status() == 200 {
            held.push(response.into_body());
            assert!(held.len() < 64, "one key opened 64 streams unrefused");
        } else {
            let (head, body) = response.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            break common::Collected {
                status: head.status,
                headers: head.headers,
                body,
            };
        }
    };
    assert_eq!(held.len(), 16, "one key's streams at once");
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(
        refused.json()["error"]["code"],
        "too_many_change_streams",
        "{}",
        refused.text()
    );
    // Other keys, of the same tenant or another, still open theirs.
    let (status, _same_tenant) = changes(&gw, "va-2").await;
    assert_eq!(status, 200);
    let (status, _other_tenant) = changes(&gw, "vb-1").await;
    assert_eq!(status, 200);
    // A client that leaves gives its key's place back.
    held.pop();
    let mut reopened = None;
    for _ in 0..50 {
        let (status, body) = changes(&gw, "va-1").await;
        if status == 200 {
            reopened = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        reopened.is_some(),
        "the place of a stream that ended is free again"
    );
}

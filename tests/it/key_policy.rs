//! A key's policy holds on every way in: `/v1/models` lists only what the
//! key may use, and a request cannot name two models (the policy checks
//! one, the server behind runs the other).

use crate::common;

use bytes::Bytes;
use common::{Mock, Recorded, Reply, TestConfig};
use http::Request;
use http_body_util::Full;
use serde_json::Value;

fn keys() {
    // SAFETY: this module's own variables, set to the same values before
    // its gateways read them.
    unsafe {
        std::env::set_var("KEY_POLICY_LIMITED", "limited-1");
        std::env::set_var("KEY_POLICY_OPEN", "open-1");
    }
}

const AUTH: &str = "[server.auth]\n\
    [[server.auth.keys]]\nname = \"limited\"\nkey_env = \"KEY_POLICY_LIMITED\"\nmodels = [\"demo\", \"plain-cheap\", \"gpt-4o-mini*\"]\n\
    [[server.auth.keys]]\nname = \"open\"\nkey_env = \"KEY_POLICY_OPEN\"\n";

async fn listed(url: &str, key: &str) -> Vec<String> {
    let r = common::send(
        Request::get(url)
            .header("authorization", format!("Bearer {key}"))
            .body(Full::new(Bytes::new()))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn models_lists_what_the_key_may_use() {
    keys();
    let gw = TestConfig::new()
        .raw(AUTH)
        .provider(
            "local",
            "http://127.0.0.1:9/v1",
            "[\"plain-cheap\", \"plain-EXPENSIVE\"]",
            "",
        )
        .provider("openai", "http://127.0.0.1:9/v1", "[\"gpt-*\"]", "")
        .demo("chunk_delay_ms = 0")
        .start()
        .await;
    let url = gw.url("/v1/models");
    let open = listed(&url, "open-1").await;
    for id in ["plain-cheap", "plain-EXPENSIVE", "openai/*", "demo"] {
        assert!(open.contains(&id.to_owned()), "{id}: {open:?}");
    }
    let mut limited = listed(&url, "limited-1").await;
    limited.sort();
    assert_eq!(limited, ["demo", "gpt-4o-mini*", "plain-cheap"]);
}

#[tokio::test]
async fn a_repeated_model_field_is_refused() {
    keys();
    let upstream = Mock::start(|_: &Recorded| Reply::json(r#"{"text": "hi"}"#)).await;
    let gw = TestConfig::new()
        .raw(AUTH)
        .provider("local", &upstream.url(), "[\"plain-*\"]", "")
        .start()
        .await;
    let form = |second: &str| {
        format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n\
             --XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nplain-cheap\r\n\
             --XyZ\r\nContent-Disposition: {second}\r\n\r\nplain-EXPENSIVE\r\n--XyZ--\r\n"
        )
    };
    for second in ["form-data; name=\"model\"", "form-data; name=model"] {
        let r = common::send(
            Request::post(gw.url("/v1/audio/transcriptions"))
                .header("authorization", "Bearer limited-1")
                .header("content-type", "multipart/form-data; boundary=XyZ")
                .body(Full::new(Bytes::from(form(second))))
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, 400, "{second}: {}", r.text());
        let error: Value = r.json();
        assert_eq!(error["error"]["param"], "model");
    }
    assert_eq!(upstream.count(), 0, "nothing reached the upstream");
    let json = r#"{"model": "plain-cheap", "model": "plain-EXPENSIVE", "messages": []}"#;
    let r = common::send(
        Request::post(gw.url("/v1/chat/completions"))
            .header("authorization", "Bearer limited-1")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(json)))
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(upstream.count(), 0);
}

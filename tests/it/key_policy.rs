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

/// Tenants the config names, beside managed keys: `wide` limited to
/// `m*`, `tight` to the clock.
const MANAGED: &str = "[server.auth]\nadmin_keys_env = \"KEY_POLICY_ADMIN\"\nmanaged_keys = true\n\
    [[server.auth.keys]]\nname = \"wide\"\nkey_env = \"KEY_POLICY_WIDE\"\nmodels = [\"m*\"]\n\
    [[server.auth.keys]]\nname = \"tight\"\nkey_env = \"KEY_POLICY_TIGHT\"\ngateway_tools = [\"builtin:clock\"]\n";

async fn keys_api(method: http::Method, url: &str, body: Option<Value>) -> common::Collected {
    common::send(
        Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", "Bearer policy-admin")
            .header("content-type", "application/json")
            .body(Full::new(
                body.map(|b| Bytes::from(b.to_string())).unwrap_or_default(),
            ))
            .unwrap(),
    )
    .await
}

async fn chat_status(url: &str, key: &str, model: &str) -> u16 {
    common::send(
        Request::post(url)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            )))
            .unwrap(),
    )
    .await
    .status
    .as_u16()
}

/// The names of the tools a request declared upstream.
fn declared(r: &Recorded) -> Vec<String> {
    r.json()["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A managed key of a tenant the config names keeps its own `models` and
/// `gateway_tools`, and both apply: the key's narrow the tenant's (a
/// request needs both), the answer shows the tenant's and says so, and an
/// entry that could never apply is refused, naming it, on make and change.
#[tokio::test]
async fn a_managed_keys_own_policy_narrows_its_configured_tenants() {
    // SAFETY: this module's own variables, set to the same values before
    // its gateways read them.
    unsafe {
        std::env::set_var("KEY_POLICY_ADMIN", "policy-admin");
        std::env::set_var("KEY_POLICY_WIDE", "wide-1");
        std::env::set_var("KEY_POLICY_TIGHT", "tight-1");
    }
    let upstream =
        Mock::start(|_: &Recorded| Reply::json(&common::upstream_completion("hello"))).await;
    let gw = TestConfig::new()
        .raw(MANAGED)
        .up(
            &upstream.url(),
            "[providers.tools]\ngateway_tools = [\"builtin:clock\", \"builtin:calculator\"]",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let (api, chat) = (gw.url("/toolgate/api/keys"), gw.url("/v1/chat/completions"));

    let made = keys_api(
        http::Method::POST,
        &api,
        Some(
            serde_json::json!({"tenant": "wide", "name": "narrow", "models": ["m1"],
                                "gateway_tools": ["builtin:clock"]}),
        ),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let made = made.json();
    assert_eq!(made["models"], serde_json::json!(["m1"]));
    assert_eq!(made["tenant_policy"]["models"], serde_json::json!(["m*"]));
    assert_eq!(made["tenant_policy"]["gateway_tools"], Value::Null);
    let applies = made["tenant_policy"]["applies"].as_str().unwrap();
    assert!(applies.starts_with("both"), "{applies}");
    let (key, id) = (
        made["key"].as_str().unwrap().to_owned(),
        made["id"].as_str().unwrap().to_owned(),
    );

    // The key's models within the tenant's; only the key's tool upstream.
    assert_eq!(chat_status(&chat, &key, "m1").await, 200);
    assert_eq!(declared(&upstream.last()), ["clock"]);
    assert_eq!(
        chat_status(&chat, &key, "m2").await,
        403,
        "the key's models"
    );
    assert_eq!(
        chat_status(&chat, &key, "x").await,
        403,
        "the tenant's models"
    );
    assert_eq!(chat_status(&chat, "wide-1", "m2").await, 200);
    assert_eq!(declared(&upstream.last()), ["clock", "calculator"]);
    let mut models = listed(&gw.url("/v1/models"), &key).await;
    models.sort();
    assert_eq!(models, ["m1"]);

    // Entries outside the tenant's are refused, naming them.
    for (tenant, field, value, named) in [
        ("wide", "models", serde_json::json!(["gpt-4o"]), "models[0]"),
        (
            "tight",
            "gateway_tools",
            serde_json::json!(["builtin:calculator"]),
            "gateway_tools[0]",
        ),
    ] {
        let mut body = serde_json::json!({"tenant": tenant, "name": "outside"});
        body[field] = value;
        let r = keys_api(http::Method::POST, &api, Some(body)).await;
        assert_eq!(r.status, 400, "{}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["param"], field, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{error}"
        );
    }
    let r = keys_api(
        http::Method::PATCH,
        &format!("{api}/{id}"),
        Some(serde_json::json!({"models": ["m1", "gpt-4o"]})),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("models[1]"), "{}", r.text());
    assert_eq!(chat_status(&chat, &key, "m2").await, 403, "unchanged");

    // Without its own models, the tenant's apply.
    let r = keys_api(
        http::Method::PATCH,
        &format!("{api}/{id}"),
        Some(serde_json::json!({"models": null})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_status(&chat, &key, "m2").await, 200);
}

//! `/v1/models` names the models as the upstreams serve them: a provider
//! with globs is asked for its list (once, then from the cache), which its
//! globs and the key's policy filter; a name another provider takes bare is
//! listed with the prefix the router accepts; an upstream without the
//! endpoint keeps the provider's literal names and its `provider/*`.

use crate::common;

use common::{Mock, Recorded, Reply, TestConfig};
use http::Method;
use serde_json::json;

fn keys() {
    // SAFETY: this module's own variables, set to the same values before
    // its gateways read them.
    unsafe {
        std::env::set_var("UPSTREAM_MODELS_ADMIN", "models-admin");
        std::env::set_var("UPSTREAM_MODELS_OPEN", "models-open");
    }
}

/// An upstream that serves three models and answers chats.
async fn serving() -> Mock {
    Mock::start(|r: &Recorded| {
        if r.uri.ends_with("/models") {
            common::models_list(&["qwen2.5-7b-instruct", "llama-3.1-8b", "embed-small"])
        } else {
            Reply::json(&common::upstream_completion("hello"))
        }
    })
    .await
}

fn models_asked(mock: &Mock) -> usize {
    mock.requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == Method::GET && r.uri.ends_with("/v1/models"))
        .count()
}

async fn listed(base: &str, key: &str) -> Vec<String> {
    let r = common::call(Method::GET, &format!("{base}/v1/models"), key, None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn models_are_listed_as_the_upstreams_serve_them() {
    keys();
    let vllm = serving().await;
    let ollama = Mock::start(common::no_models_list).await;
    let cloud = Mock::start(common::no_models_list).await;
    let gw = TestConfig::new()
        .server(
            "[server.auth]\nadmin_keys_env = \"UPSTREAM_MODELS_ADMIN\"\nmanaged_keys = true\n\
             [[server.auth.keys]]\nname = \"open\"\nkey_env = \"UPSTREAM_MODELS_OPEN\"\n",
        )
        // `cloud` comes first and takes bare `llama*` names.
        .provider("cloud", &cloud.url(), "[\"llama*\"]", "")
        .provider("vllm", &vllm.url(), "[\"qwen*\", \"llama*\"]", "")
        .provider(
            "ollama",
            &ollama.url(),
            "[\"mistral*\", \"fixed-name\"]",
            "",
        )
        .raw("[store]\nurl = \"sqlite::memory:\"\n")
        .start()
        .await;
    let base = gw.url("");
    let all = listed(&base, "models-open").await;
    assert_eq!(
        all,
        [
            // No list upstream: the prefix route.
            "cloud/*",
            // Served and matched by vllm's globs (`embed-small` is not);
            // bare `llama-3.1-8b` would go to `cloud`.
            "qwen2.5-7b-instruct",
            "vllm/llama-3.1-8b",
            // A 404: the literal name, and the prefix route.
            "fixed-name",
            "ollama/*",
        ]
    );
    // Each listed name routes to the upstream that serves it, as served.
    for (id, upstream_name) in [
        ("qwen2.5-7b-instruct", "qwen2.5-7b-instruct"),
        ("vllm/llama-3.1-8b", "llama-3.1-8b"),
    ] {
        let r = common::call(
            Method::POST,
            &format!("{base}/v1/chat/completions"),
            "models-open",
            Some(json!({"model": id, "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(vllm.last().json()["model"], upstream_name, "{id}");
    }

    // A managed key limited to `qwen*` and `mistral*` sees the served names
    // its policy allows, and uses them.
    let made = common::call(
        Method::POST,
        &format!("{base}/toolgate/api/keys"),
        "models-admin",
        Some(json!({"tenant": "ide", "name": "picker", "models": ["qwen*", "mistral*"]})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let key = made.json()["key"].as_str().unwrap().to_owned();
    assert_eq!(
        listed(&base, &key).await,
        ["qwen2.5-7b-instruct", "mistral*"]
    );
    let r = common::call(
        Method::POST,
        &format!("{base}/v1/chat/completions"),
        &key,
        Some(json!({"model": "qwen2.5-7b-instruct", "messages": [{"role": "user", "content": "hi"}]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = vllm.last();
    assert!(sent.uri.ends_with("/chat/completions"));
    assert_eq!(sent.json()["model"], "qwen2.5-7b-instruct");

    // Each upstream was asked once: later listings come from the cache.
    assert_eq!(models_asked(&vllm), 1);
    assert_eq!(models_asked(&ollama), 1);
    assert_eq!(models_asked(&cloud), 1);
}

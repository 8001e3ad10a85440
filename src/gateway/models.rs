//! `GET /v1/models`: the models the config routes that the key may use.

use http::{HeaderValue, Response, header};
use serde_json::{Value, json};

use crate::body::{self, Body};
use crate::config::{Config, Tenant};
use crate::router;

/// Literal patterns are models; globs are not listable, so they are
/// listed as `provider/*` to show the prefix route exists. A key limited
/// to some models sees only those: the literal models it may use, and its
/// own `models` entries that route somewhere (a glob listed as written).
pub(super) fn list_models(config: &Config, tenant: &Tenant) -> Response<Body> {
    let mut data: Vec<Value> = Vec::new();
    let entry = |id: &str, owner: &str| json!({"id": id, "object": "model", "created": 0, "owned_by": owner});
    for p in &config.providers {
        let mut any_glob = false;
        for pattern in &p.model_patterns {
            if is_glob(pattern) {
                any_glob = true;
            } else if tenant.allows_model(pattern) {
                data.push(entry(pattern, &p.name));
            }
        }
        if tenant.model_patterns().is_none() && (any_glob || p.model_patterns.is_empty()) {
            data.push(entry(&format!("{}/*", p.name), &p.name));
        }
    }
    for pattern in tenant.model_patterns().unwrap_or_default() {
        let listed = data.iter().any(|d| d["id"] == pattern);
        if !listed && let Some(route) = router::route(&config.providers, pattern) {
            data.push(entry(pattern, &route.provider.name));
        }
    }
    let mut r = Response::new(body::json(&json!({"object": "list", "data": data})));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '{'])
}

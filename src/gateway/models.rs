//! `GET /v1/models`: the models the config routes.

use http::{HeaderValue, Response, header};
use serde_json::json;

use crate::body::{self, Body};
use crate::config::Config;

/// Literal patterns are models; globs are not listable, so they are
/// listed as `provider/*` to show the prefix route exists.
pub(super) fn list_models(config: &Config) -> Response<Body> {
    let mut data = Vec::new();
    for p in &config.providers {
        let mut any_glob = false;
        for pattern in &p.model_patterns {
            if pattern.contains(['*', '?', '[', '{']) {
                any_glob = true;
            } else {
                data.push(
                    json!({"id": pattern, "object": "model", "created": 0, "owned_by": p.name}),
                );
            }
        }
        if any_glob || p.model_patterns.is_empty() {
            data.push(json!({"id": format!("{}/*", p.name), "object": "model", "created": 0, "owned_by": p.name}));
        }
    }
    let mut r = Response::new(body::json(&json!({"object": "list", "data": data})));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

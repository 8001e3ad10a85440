//! `GET /v1/models`: the models the config routes that the key may use,
//! named as the upstreams serve them.
//!
//! A provider's literal `models` are listed as written. A provider with
//! globs (or none) is asked what it serves (`upstream::catalog`: cached,
//! refreshed in the background; the first listing waits for it at most
//! [`FIRST_WAIT`]), and each served name its globs match is listed by the
//! name the router sends to it: as served, or as `provider/name` when a
//! provider before it takes the bare name. A provider whose upstream serves
//! no list keeps `provider/*`, which says the prefix route exists. A key
//! limited to some models sees only the names its `models` allow, and its
//! own entries that route somewhere when no listed name matches them.

use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Response, header};
use serde_json::{Value, json};

use crate::body::{self, Body};
use crate::config::{Config, Provider, Tenant};
use crate::router;
use crate::runtime::Runtime;
use crate::upstream::catalog::{self, Served};

/// The longest a listing waits for upstreams never asked before; those
/// that have not answered by then are listed as if they served no list.
pub const FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub(super) async fn list_models(runtime: &Arc<Runtime>, tenant: &Tenant) -> Response<Body> {
    let served = served(runtime).await;
    let data = listing(&runtime.config, tenant, &served);
    let mut r = Response::new(body::json(&json!({"object": "list", "data": data})));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// What each provider's upstream serves, in `config.providers` order
/// (`None` for a provider with only literal names, or no list).
async fn served(runtime: &Arc<Runtime>) -> Vec<Served> {
    let providers = &runtime.config.providers;
    let mut out: Vec<Served> = vec![None; providers.len()];
    let mut waiting = Vec::new();
    let now = Instant::now();
    for (i, provider) in providers.iter().enumerate() {
        if !has_globs(provider) || !catalog::askable(provider) {
            continue;
        }
        let lookup = runtime.catalog.lookup(&provider.name, now);
        if lookup.refresh {
            let (runtime, provider) = (runtime.clone(), provider.clone());
            let fetch = tokio::spawn(async move {
                let served = catalog::fetch(&runtime.upstreams, &provider).await;
                runtime
                    .catalog
                    .store(&provider.name, served.clone(), Instant::now());
                served
            });
            if lookup.cached.is_none() {
                waiting.push((i, fetch));
            }
        }
        out[i] = lookup.cached.flatten();
    }
    let deadline = tokio::time::Instant::now() + FIRST_WAIT;
    for (i, fetch) in waiting {
        if let Ok(Ok(served)) = tokio::time::timeout_at(deadline, fetch).await {
            out[i] = served;
        }
    }
    out
}

/// The list's entries: `served[i]` is what `config.providers[i]` serves.
fn listing(config: &Config, tenant: &Tenant, served: &[Served]) -> Vec<Value> {
    let mut data: Vec<Value> = Vec::new();
    let push = |data: &mut Vec<Value>, id: &str, owner: &str| {
        if !data.iter().any(|d| d["id"] == id) {
            data.push(json!({"id": id, "object": "model", "created": 0, "owned_by": owner}));
        }
    };
    for (i, p) in config.providers.iter().enumerate() {
        for pattern in &p.model_patterns {
            if !is_glob(pattern) && tenant.allows_model(pattern) {
                push(&mut data, pattern, &p.name);
            }
        }
        if !has_globs(p) {
            continue;
        }
        match served.get(i).and_then(Option::as_ref) {
            Some(names) => {
                for name in names.iter() {
                    let matched = p.model_patterns.is_empty() || p.models.is_match(name);
                    if let Some(id) = matched.then(|| routed_name(config, p, name)).flatten()
                        && tenant.allows_model(&id)
                    {
                        push(&mut data, &id, &p.name);
                    }
                }
            }
            None if tenant.model_patterns().is_none() => {
                push(&mut data, &format!("{}/*", p.name), &p.name);
            }
            None => {}
        }
    }
    for pattern in tenant.model_patterns().unwrap_or_default() {
        let glob = globset::Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .ok();
        let listed = data.iter().any(|d| {
            d["id"].as_str().is_some_and(|id| {
                id == pattern
                    || glob
                        .as_ref()
                        .is_some_and(|g| is_glob(pattern) && g.is_match(id))
            })
        });
        if !listed && let Some(route) = router::route(&config.providers, pattern) {
            push(&mut data, pattern, &route.provider.name);
        }
    }
    data
}

/// The name a client writes for `provider` to get `name` upstream: `name`
/// itself when the router sends it there unchanged, else `provider/name`
/// when that does; `None` when neither reaches it.
fn routed_name(config: &Config, provider: &Arc<Provider>, name: &str) -> Option<String> {
    let prefixed = format!("{}/{name}", provider.name);
    [name.to_owned(), prefixed].into_iter().find(|id| {
        router::route(&config.providers, id)
            .is_some_and(|r| Arc::ptr_eq(r.provider, provider) && r.model == name)
    })
}

/// Whether a provider routes more than its literal names.
fn has_globs(provider: &Provider) -> bool {
    provider.model_patterns.is_empty() || provider.model_patterns.iter().any(|p| is_glob(p))
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '{'])
}

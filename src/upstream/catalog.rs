//! What each provider's upstream serves: `GET /models` on its base (an
//! OpenAI-shaped list, `{"data": [{"id": …}, …]}`), read within bounds
//! and cached per config. The gateway's `/v1/models` lists those names
//! (`gateway::models`), refreshing an entry in the background once it is
//! older than [`FRESH`]; an upstream that has no such endpoint, answers
//! something else or fails is remembered as serving no list, and its
//! provider keeps its literal names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};

use super::Upstreams;
use crate::config::{Provider, Target};

/// How long a listing is served before it is asked for again.
pub const FRESH: Duration = Duration::from_secs(60);
/// The most one fetch may take, head and body.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The biggest list read.
const MAX_BYTES: usize = 4 << 20;
/// The most names kept of one upstream.
const MAX_NAMES: usize = 10_000;

/// The names a provider's upstream serves, or `None`: it serves no list.
pub type Served = Option<Arc<[String]>>;

/// The listings of one config's providers, by provider name.
#[derive(Default)]
pub struct Catalog {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    /// When it was last fetched (`None`: never yet).
    at: Option<Instant>,
    served: Served,
    /// A fetch is under way.
    refreshing: bool,
}

/// What [`Catalog::lookup`] found.
pub struct Lookup {
    /// The names last fetched; `None` when never fetched yet.
    pub cached: Option<Served>,
    /// The caller is to fetch them (and [`Catalog::store`] the result):
    /// none was under way and the entry is missing or older than [`FRESH`].
    pub refresh: bool,
}

impl Catalog {
    /// What is kept for `provider`, claiming its refresh when one is due.
    pub fn lookup(&self, provider: &str, now: Instant) -> Lookup {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.entry(provider.to_owned()).or_default();
        let due = entry
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= FRESH);
        let refresh = due && !entry.refreshing;
        entry.refreshing |= refresh;
        Lookup {
            cached: entry.at.map(|_| entry.served.clone()),
            refresh,
        }
    }

    /// Keeps what a fetch for `provider` found.
    pub fn store(&self, provider: &str, served: Served, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.entry(provider.to_owned()).or_default();
        *entry = Entry {
            at: Some(now),
            served,
            refreshing: false,
        };
    }
}

/// Whether `provider`'s upstream can be asked (a demo target cannot).
pub fn askable(provider: &Provider) -> bool {
    provider
        .targets
        .iter()
        .any(|t| matches!(t.endpoint, Target::Http(_)))
}

/// Asks `provider`'s upstream for its models, within [`FETCH_TIMEOUT`].
pub async fn fetch(upstreams: &Upstreams, provider: &Provider) -> Served {
    let ask = async {
        let mut req = Request::new(Full::new(Bytes::new()));
        *req.method_mut() = Method::GET;
        *req.uri_mut() = http::Uri::from_static("/v1/models");
        req.headers_mut().insert(
            header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        let response = upstreams.send(provider, req).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let mut body = response.into_body();
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.ok()?.into_data() {
                if read.len() + data.len() > MAX_BYTES {
                    return None;
                }
                read.extend_from_slice(&data);
            }
        }
        parse(&read)
    };
    let served = tokio::time::timeout(FETCH_TIMEOUT, ask)
        .await
        .ok()
        .flatten();
    if served.is_none() {
        tracing::debug!(provider = %provider.name, "the upstream serves no model list; its literal names are listed");
    }
    served.map(Arc::from)
}

/// The ids of an OpenAI-shaped model list, in its order, each once; `None`
/// for anything else.
pub fn parse(body: &[u8]) -> Option<Vec<String>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = value.get("data")?.as_array()?;
    let mut names: Vec<String> = Vec::new();
    for item in data {
        let id = item.get("id")?.as_str()?;
        if id.is_empty() || names.iter().any(|n| n == id) {
            continue;
        }
        if names.len() == MAX_NAMES {
            break;
        }
        names.push(id.to_owned());
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_openai_list_is_read_and_anything_else_is_none() {
        let list = br#"{"object":"list","data":[{"id":"qwen2.5-7b","object":"model"},{"id":"llama-3.1-8b"},{"id":"qwen2.5-7b"}]}"#;
        assert_eq!(parse(list).unwrap(), ["qwen2.5-7b", "llama-3.1-8b"]);
        assert_eq!(parse(br#"{"data":[]}"#).unwrap(), Vec::<String>::new());
        for other in [
            &b"{}"[..],
            b"not json",
            br#"{"data":{}}"#,
            br#"{"data":[{"name":"x"}]}"#,
        ] {
            assert_eq!(parse(other), None, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn one_refresh_at_a_time_and_again_once_stale() {
        let catalog = Catalog::default();
        let t0 = Instant::now();
        let first = catalog.lookup("p", t0);
        assert!(first.cached.is_none() && first.refresh);
        // Under way: nobody else fetches.
        assert!(!catalog.lookup("p", t0).refresh);
        catalog.store("p", Some(Arc::from(vec!["m".to_owned()])), t0);
        let fresh = catalog.lookup("p", t0 + Duration::from_secs(1));
        assert!(!fresh.refresh);
        assert_eq!(fresh.cached.unwrap().unwrap()[0], "m");
        let stale = catalog.lookup("p", t0 + FRESH);
        assert!(stale.refresh && stale.cached.is_some());
        assert!(!catalog.lookup("p", t0 + FRESH).refresh);
        // A failed fetch is kept as no list, and asked again once stale.
        catalog.store("p", None, t0 + FRESH);
        let failed = catalog.lookup("p", t0 + FRESH);
        assert!(matches!(failed.cached, Some(None)) && !failed.refresh);
    }
}

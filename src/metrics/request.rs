//! The per-request metrics, as handles registered once.
//!
//! A `metrics::counter!(name, labels)` call builds its labels, hashes them
//! and looks them up in the registry under a lock. A request records half a
//! dozen metrics, so each config registers its providers' handles up front
//! ([`ProviderMetrics`]), and a request only increments them.

use std::sync::{Arc, OnceLock};

use metrics::{Counter, Gauge, Histogram};

use super::tenant::ByTenant;
use crate::config::Tenant;

use super::{
    ACTIVE_REQUESTS, ACTIVE_STREAMS, BYTES_IN, BYTES_OUT, REQUEST_DURATION, REQUESTS,
    TIME_TO_FIRST_TOKEN,
};

/// The `route` label values of `/v1/*` paths; anything else is `other`.
pub const ROUTES: [&str; 12] = [
    "chat_completions",
    "completions",
    "embeddings",
    "responses",
    "messages",
    "audio",
    "images",
    "moderations",
    "models",
    "files",
    "batches",
    "other",
];

/// The bounded `route` label of a `/v1/*` path, as an index into [`ROUTES`].
pub fn route_of(path: &str) -> usize {
    let rest = path.strip_prefix("/v1/").unwrap_or(path);
    let first = rest.split('/').next().unwrap_or("");
    let label = if first == "chat" {
        "chat_completions"
    } else {
        first
    };
    // Unknown segments (and a literal `other`) land on the last label, `other`.
    ROUTES
        .iter()
        .position(|r| *r == label)
        .unwrap_or(ROUTES.len() - 1)
}

/// One provider's handles. Requests that never reached a provider (bad
/// input, unknown model) are counted under `provider="none"`. Requests are
/// labelled with their tenant by [`super::tenant`]'s rule, the one every
/// series with a `tenant` label follows.
pub struct ProviderMetrics {
    pub name: Arc<str>,
    bytes_in: Counter,
    bytes_out: Counter,
    /// Time to the first token of a streamed answer.
    ttft: Histogram,
    tenants: ByTenant<Arc<TenantRoutes>>,
}

/// A tenant's routes, each registered on its first request.
#[derive(Default)]
struct TenantRoutes([OnceLock<RouteMetrics>; ROUTES.len()]);

impl std::fmt::Debug for ProviderMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderMetrics")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Registered on a route's first request: most providers see one or two routes.
struct RouteMetrics {
    duration: Histogram,
    ok: Counter,
}

impl ProviderMetrics {
    /// The handles of provider `name`, for the config's tenants' `labels`.
    pub fn new(name: &str, labels: &[Arc<str>]) -> Self {
        let label = name.to_owned();
        ProviderMetrics {
            name: Arc::from(name),
            bytes_in: metrics::counter!(BYTES_IN, "provider" => label.clone()),
            bytes_out: metrics::counter!(BYTES_OUT, "provider" => label.clone()),
            ttft: metrics::histogram!(TIME_TO_FIRST_TOKEN, "provider" => label),
            tenants: ByTenant::new(labels, |_| Arc::default()),
        }
    }

    /// Records one finished request.
    pub fn record(&self, done: &Finished<'_>) {
        let label = super::tenant::label(done.tenant);
        let routes = self.tenants.get(label, |_| Arc::default());
        let handles = routes.0[done.route].get_or_init(|| {
            let (provider, route, tenant) = (self.name.to_string(), ROUTES[done.route], label.to_owned());
            RouteMetrics {
                duration: metrics::histogram!(REQUEST_DURATION, "provider" => provider.clone(), "route" => route, "tenant" => tenant.clone()),
                ok: metrics::counter!(REQUESTS, "provider" => provider, "route" => route, "status" => "200", "tenant" => tenant),
            }
        });
        if done.status == 200 {
            handles.ok.increment(1);
        } else {
            metrics::counter!(REQUESTS, "provider" => self.name.to_string(), "route" => ROUTES[done.route], "status" => done.status.to_string(), "tenant" => label.to_owned())
                .increment(1);
        }
        handles.duration.record(done.seconds);
        if done.bytes_in > 0 {
            self.bytes_in.increment(done.bytes_in);
        }
        self.bytes_out.increment(done.bytes_out);
    }

    /// A streamed answer's first token came `seconds` after its request.
    pub fn first_token(&self, seconds: f64) {
        self.ttft.record(seconds);
    }
}

/// A finished request, as its metrics record it.
pub struct Finished<'a> {
    pub route: usize,
    /// `None`: no key was accepted.
    pub tenant: Option<&'a Tenant>,
    pub status: u16,
    pub seconds: f64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The gauges of requests and streams in flight.
pub fn active_requests() -> &'static Gauge {
    static G: OnceLock<Gauge> = OnceLock::new();
    G.get_or_init(|| metrics::gauge!(ACTIVE_REQUESTS))
}

pub fn active_streams() -> &'static Gauge {
    static G: OnceLock<Gauge> = OnceLock::new();
    G.get_or_init(|| metrics::gauge!(ACTIVE_STREAMS))
}

/// The handles of requests that reached no provider, when no config's
/// are at hand (a request ended before its runtime was known).
pub fn no_provider() -> &'static Arc<ProviderMetrics> {
    static NONE: OnceLock<Arc<ProviderMetrics>> = OnceLock::new();
    NONE.get_or_init(|| Arc::new(ProviderMetrics::new("none", &[])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_bounded_labels() {
        assert_eq!(ROUTES[route_of("/v1/chat/completions")], "chat_completions");
        assert_eq!(ROUTES[route_of("/v1/embeddings")], "embeddings");
        assert_eq!(ROUTES[route_of("/v1/models")], "models");
        assert_eq!(ROUTES[route_of("/v1/messages")], "messages");
        assert_eq!(ROUTES[route_of("/v1/responses")], "responses");
        assert_eq!(ROUTES[route_of("/v1/other")], "other");
        assert_eq!(ROUTES[route_of("/v1/chat")], "chat_completions");
        assert_eq!(ROUTES[route_of("/v1/whatever/x")], "other");
    }
}

//! Sending a request to a provider: over HTTP(S) with a pooled client, or to
//! the in-process demo model. Both return the same `Response<Body>`, so every
//! layer above (transparency, transforms, metrics) runs the same way for both.
//!
//! Plain `http` upstreams (a model server beside the gateway, the common
//! sidecar case) go through [`pool`], whose connections are driven by the
//! request's own task. `https` upstreams go through hyper's pooled client,
//! which negotiates HTTP/2 by ALPN.

mod answered;
pub mod balance;
pub mod catalog;
pub mod chat_decode;
pub mod from_responses;
pub mod plain;
pub mod pool;
pub mod reply;
pub mod retry;
pub mod stencil;
pub mod to_responses;
pub mod usage;
pub mod usage_asked;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{HeaderValue, Request, Response, Uri, Version, header};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::coalesce::Coalesce;
use crate::body::idle_timeout::IdleTimeout;
use crate::body::{self, Body};
use crate::config::{Config, HttpTarget, Provider, ServerConfig, Target, UpstreamTarget};
use crate::error::GatewayError;
use crate::headers::strip_hop_by_hop;
use crate::metrics as m;
use crate::metrics::tenant::ByTenant;
use balance::{Balancer, Change, Clock, Health};
use retry::Outcome;

/// The pooled client shared by all providers.
#[derive(Clone)]
pub struct Upstreams {
    pool: pool::Pool,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    first_byte_timeout: Duration,
    stream_idle_timeout: Duration,
    /// Each configured provider's turn order, targets and metric handles,
    /// built once (a labelled metric lookup per request hashes its labels
    /// under a lock).
    providers: Arc<[Routed]>,
    workers: usize,
}

/// What sending to one provider needs beyond its config.
pub struct Routed {
    /// The provider's address: which config entry this is.
    key: usize,
    /// Keeps that address the provider's while this lives.
    _held: Option<Arc<Provider>>,
    ttfb: metrics::Histogram,
    balancer: Balancer,
    targets: Box<[TargetState]>,
    /// `toolgate_tokens_total` (input, output; reported and estimated) by
    /// `tenant` label.
    tokens: ByTenant<answered::TokenCounters>,
}

/// One target's health and metric handles.
struct TargetState {
    health: Arc<Health>,
    up: metrics::Gauge,
    ok: metrics::Counter,
}

impl AsRef<Health> for TargetState {
    fn as_ref(&self) -> &Health {
        &self.health
    }
}

impl Routed {
    fn new(provider: &Provider, book: &HealthBook, workers: usize, tenants: &[Arc<str>]) -> Self {
        let name = provider.name.clone();
        let tokens = ByTenant::new(tenants, |t| token_counters(&name, t));
        let targets = provider
            .targets
            .iter()
            .map(|t| {
                let labels = [("provider", name.clone()), ("target", t.label.to_string())];
                let health = book.get(&name, &t.identity);
                let up = metrics::gauge!(m::UPSTREAM_TARGET_UP, &labels);
                up.set(if health.is_up() { 1.0 } else { 0.0 });
                TargetState {
                    health,
                    up,
                    ok: metrics::counter!(
                        m::UPSTREAM_ATTEMPTS,
                        &[
                            ("provider", name.clone()),
                            ("target", t.label.to_string()),
                            ("outcome", "ok".to_owned()),
                        ]
                    ),
                }
            })
            .collect();
        Routed {
            ttfb: metrics::histogram!(m::UPSTREAM_TTFB, "provider" => name),
            balancer: Balancer::new(&provider.targets, &provider.health, workers),
            targets,
            tokens,
            key: std::ptr::from_ref(provider) as usize,
            _held: None,
        }
    }
}

/// The `toolgate_tokens_total` counters of a provider and tenant, registered at 0.
fn token_counters(provider: &str, tenant: &str) -> answered::TokenCounters {
    let counters = |estimated: &'static str| {
        ["input", "output"].map(|kind| {
            let c = metrics::counter!(m::TOKENS,
                "provider" => provider.to_owned(),
                "tenant" => tenant.to_owned(),
                "kind" => kind,
                "estimated" => estimated);
            c.increment(0);
            c
        })
    };
    answered::TokenCounters {
        reported: counters("false"),
        estimated: counters("true"),
    }
}

/// Every target's health, by provider name and target identity: kept across
/// reloads for targets that did not change.
#[derive(Default)]
pub struct HealthBook(Mutex<HashMap<(String, String), Arc<Health>>>);

impl HealthBook {
    fn get(&self, provider: &str, identity: &str) -> Arc<Health> {
        let mut book = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.entry((provider.to_owned(), identity.to_owned()))
            .or_default()
            .clone()
    }

    /// Forgets targets the config no longer has.
    pub fn keep_only(&self, config: &Config) {
        let mut book = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.retain(|(provider, identity), _| {
            config
                .provider(provider)
                .is_some_and(|p| p.targets.iter().any(|t| &t.identity == identity))
        });
    }
}

/// Marks a response whose status `retry.on` names, returned because the
/// attempts ran out: a provider's `failover` may take the request instead.
#[derive(Debug, Clone, Copy)]
pub struct Exhausted;

pub use crate::body::observed::Attempted;

tokio::task_local! {
    static ATTEMPTED: RefCell<Attempted>;
}

/// Runs `f` noting what its upstream sends did (see [`Attempted`]).
pub async fn noting_attempts<F: Future>(f: F) -> (F::Output, Attempted) {
    ATTEMPTED
        .scope(RefCell::new(Attempted::default()), async {
            let out = f.await;
            (out, ATTEMPTED.with(std::cell::RefCell::take))
        })
        .await
}

fn note_attempt(target: &Arc<str>) {
    let _ = ATTEMPTED.try_with(|a| {
        let mut a = a.borrow_mut();
        if !a.settled {
            a.target = Some(target.clone());
            a.attempts += 1;
        }
    });
}

/// A provider's first send returned: what follows is not counted.
fn settle_attempts() {
    let _ = ATTEMPTED.try_with(|a| a.borrow_mut().settled = true);
}

/// A request fails over to another provider: its attempts are counted
/// anew (the log line names the provider that answered, or failed last).
pub fn count_attempts_anew() {
    let _ = ATTEMPTED.try_with(|a| *a.borrow_mut() = Attempted::default());
}

impl Upstreams {
    pub fn new(config: &Config, book: &HealthBook) -> Self {
        let server = &config.server;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(server.connect_timeout));
        http.set_nodelay(true);
        let builder =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_client_config(server));
        // HTTP/2 is negotiated by ALPN on https; plain http stays HTTP/1.1.
        let connector = builder
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            // Without a timer the pool's idle timeout silently does nothing.
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        let workers = server.workers.get();
        book.keep_only(config);
        let tenants = config.tenant_labels();
        Upstreams {
            pool: pool::Pool::new(server.connect_timeout, workers),
            client,
            first_byte_timeout: server.first_byte_timeout,
            stream_idle_timeout: server.stream_idle_timeout,
            providers: config
                .providers
                .iter()
                .map(|p| Routed {
                    _held: Some(p.clone()),
                    ..Routed::new(p, book, workers, &tenants)
                })
                .collect(),
            workers,
        }
    }

    /// A configured provider's [`Routed`]; `None` for one built on the fly
    /// (`toolgate probe` changes a copy's mode).
    fn configured(&self, provider: &Provider) -> Option<&Routed> {
        let key = std::ptr::from_ref(provider) as usize;
        self.providers.iter().find(|r| r.key == key)
    }

    /// Sends a request whose answer toolgate reads and rewrites, so it asks
    /// for it uncompressed.
    pub async fn send_to_read(
        &self,
        provider: &Provider,
        mut parts: http::request::Parts,
        body: Bytes,
    ) -> Result<Response<Body>, GatewayError> {
        parts.headers.remove(header::ACCEPT_ENCODING);
        self.send(provider, Request::from_parts(parts, Full::new(body)))
            .await
    }

    /// Sends `req` (whose URI holds only the path and query after `/v1`'s
    /// base) to one of `provider`'s targets, and again (to another target
    /// when there is one) while an attempt fails in a way `retry.on` names
    /// and attempts remain. Only response heads are waited for, so a retry
    /// never follows a byte of an answer. The response body is guarded by
    /// the idle timeout.
    pub async fn send(
        &self,
        provider: &Provider,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Body>, GatewayError> {
        let result = self.send_attempts(provider, req).await;
        settle_attempts();
        result
    }

    async fn send_attempts(
        &self,
        provider: &Provider,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Body>, GatewayError> {
        let built;
        let routed = match self.configured(provider) {
            Some(routed) => routed,
            None => {
                built = Routed::new(provider, &HealthBook::default(), self.workers, &[]);
                &built
            }
        };
        let policy = &provider.retry;
        let worker = crate::workers::current();
        if policy.attempts == 1 {
            let i = routed
                .balancer
                .pick(&routed.targets, 0, worker, Clock::now());
            let (outcome, result) = self.attempt(provider, routed, i, req, 1).await;
            self.account(provider, routed, i, outcome);
            return exhausted(result, outcome, policy);
        }
        let (parts, body) = req.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map(http_body_util::Collected::to_bytes)
            .unwrap_or_default();
        let mut tried = 0u64;
        let mut attempt = 0u32;
        let mut last: Option<(usize, Outcome, Result<Response<Body>, GatewayError>)> = None;
        loop {
            attempt += 1;
            let i = routed
                .balancer
                .pick(&routed.targets, tried, worker, Clock::now());
            if let Some((failed, outcome, result)) = last.take() {
                let after = match &result {
                    Ok(response) => retry::retry_after(response.headers(), now_secs()),
                    Err(_) => None,
                };
                let to = if failed == i {
                    retry::To::Same
                } else if tried & (1 << i) == 0 {
                    retry::To::Untried
                } else {
                    retry::To::Tried
                };
                match retry::next(policy, attempt - 1, after, to, rand::random::<f64>()) {
                    retry::Next::Stop => return exhausted(result, outcome, policy),
                    retry::Next::Retry(delay) => {
                        tracing::debug!(provider = %provider.name, target = %provider.targets[failed].label, attempt = attempt - 1, outcome = %outcome.label(policy), "upstream attempt failed; retrying");
                        // Its connection closes rather than wait for a body nobody reads.
                        drop(result);
                        tokio::time::sleep(delay).await;
                    }
                }
            }
            tried |= 1 << i;
            let mut req = Request::new(Full::new(body.clone()));
            *req.method_mut() = parts.method.clone();
            *req.uri_mut() = parts.uri.clone();
            *req.version_mut() = parts.version;
            *req.headers_mut() = parts.headers.clone();
            let (outcome, result) = self.attempt(provider, routed, i, req, attempt).await;
            self.account(provider, routed, i, outcome);
            if !outcome.is_failure(policy) || attempt >= policy.attempts {
                return exhausted(result, outcome, policy);
            }
            last = Some((i, outcome, result));
        }
    }

    /// Metrics and health after one attempt.
    fn account(&self, provider: &Provider, routed: &Routed, i: usize, outcome: Outcome) {
        let target = &provider.targets[i];
        let state = &routed.targets[i];
        note_attempt(&target.label);
        let policy = &provider.retry;
        let change = if outcome.is_failure(policy) {
            metrics::counter!(m::UPSTREAM_ATTEMPTS,
                "provider" => provider.name.clone(),
                "target" => target.label.to_string(),
                "outcome" => outcome.label(policy))
            .increment(1);
            state.health.failed(&provider.health, Clock::now())
        } else {
            match outcome {
                Outcome::Answered(_) => state.ok.increment(1),
                other => metrics::counter!(m::UPSTREAM_ATTEMPTS,
                    "provider" => provider.name.clone(),
                    "target" => target.label.to_string(),
                    "outcome" => other.label(policy))
                .increment(1),
            }
            if matches!(outcome, Outcome::Answered(_)) {
                state.health.succeeded()
            } else {
                Change::None
            }
        };
        match change {
            Change::None => {}
            Change::Ejected => {
                state.up.set(0.0);
                tracing::warn!(provider = %provider.name, target = %target.label, eject_secs = provider.health.eject_for.as_secs_f64(), "upstream target ejected after consecutive failures");
            }
            Change::Restored => {
                state.up.set(1.0);
                tracing::info!(provider = %provider.name, target = %target.label, "upstream target answered again and is back");
            }
        }
    }

    /// One request to target `i`, observed: its span (when traces are on)
    /// and the tokens its answer reports.
    async fn attempt(
        &self,
        provider: &Provider,
        routed: &Routed,
        i: usize,
        req: Request<Full<Bytes>>,
        n: u32,
    ) -> (Outcome, Result<Response<Body>, GatewayError>) {
        let scope = crate::telemetry::scope::current();
        let (req, span) = match scope.as_ref().and_then(|s| s.trace.as_ref()) {
            None => (req, None),
            Some(_) => {
                let (parts, body) = req.into_parts();
                // One frame, ready at once.
                let bytes = http_body_util::BodyExt::collect(body)
                    .await
                    .map(http_body_util::Collected::to_bytes)
                    .unwrap_or_default();
                let mut req = Request::from_parts(parts, Full::new(bytes.clone()));
                let span = answered::start(provider, &provider.targets[i], n, &mut req, &bytes);
                (req, span)
            }
        };
        let charge = scope.as_ref().and_then(|s| {
            let meter = s.meter.clone()?;
            Some(answered::Charge {
                price: provider.pricing.price(meter.model()),
                meter,
                provider: provider.name.clone(),
                request_bytes: http_body::Body::size_hint(req.body()).exact().unwrap_or(0) as usize,
            })
        });
        let (outcome, result) = self.reach(provider, routed, i, req).await;
        let tokens = scope.map(|s| {
            let label = crate::metrics::tenant::label(Some(&s.tenant));
            routed
                .tokens
                .get(label, |t| token_counters(&provider.name, t))
        });
        match result {
            Ok(response) => (
                outcome,
                Ok(answered::observe(response, span, tokens, charge)),
            ),
            Err(e) => {
                let kind = match outcome {
                    Outcome::Timeout => "timeout",
                    Outcome::Connect => "connect",
                    Outcome::Protocol => "protocol",
                    Outcome::Answered(_) => "request",
                };
                answered::failed(span, kind, &e.to_string());
                (outcome, Err(e))
            }
        }
    }

    /// One request to target `i`, up to its response head.
    async fn reach(
        &self,
        provider: &Provider,
        routed: &Routed,
        i: usize,
        mut req: Request<Full<Bytes>>,
    ) -> (Outcome, Result<Response<Body>, GatewayError>) {
        let upstream = &provider.targets[i];
        let target = match &upstream.endpoint {
            Target::Demo(demo) => {
                let response = crate::demo::respond(demo, req).await;
                return (Outcome::Answered(response.status().as_u16()), Ok(response));
            }
            Target::Http(target) => target,
        };
        prepare_headers(provider, upstream, &mut req);
        let started = tokio::time::Instant::now();
        let sent = tokio::time::timeout(self.first_byte_timeout, async {
            if target.scheme == Scheme::HTTP {
                *req.uri_mut() = origin_form(target, req.uri())?;
                let host = HeaderValue::from_str(target.authority.as_str())
                    .expect("an authority is a valid header value");
                req.headers_mut().insert(header::HOST, host);
                match self.pool.send(&target.authority, req).await {
                    Ok(response) => Ok(response.map(body::boxed)),
                    Err(e) => Err(Failure::from_pool(e)),
                }
            } else {
                *req.uri_mut() = absolute_form(target, req.uri())?;
                match self.client.request(req).await {
                    Ok(response) => Ok(response.map(body::boxed)),
                    Err(e) => Err(Failure::from_client(&e)),
                }
            }
        });
        let response = match sent.await {
            Err(_) => {
                count_error(&provider.name, "timeout");
                return (
                    Outcome::Timeout,
                    Err(GatewayError::UpstreamTimeout {
                        provider: provider.name.clone(),
                        secs: self.first_byte_timeout.as_secs_f64(),
                    }),
                );
            }
            // Nothing was sent: not the target's failure.
            Ok(Err(Failure::Request(e))) => return (Outcome::Answered(400), Err(e)),
            Ok(Err(Failure::Upstream { kind, reason })) => {
                count_error(&provider.name, kind);
                // The details (addresses, OS errors) are the operator's, not the client's.
                tracing::warn!(provider = %provider.name, target = %upstream.label, kind, error = %reason, "upstream request failed");
                let outcome = if kind == "connect" {
                    Outcome::Connect
                } else {
                    Outcome::Protocol
                };
                return (
                    outcome,
                    Err(GatewayError::UpstreamUnreachable {
                        provider: provider.name.clone(),
                        reason: match kind {
                            "connect" => "cannot connect".to_owned(),
                            _ => "the connection failed or broke the HTTP protocol".to_owned(),
                        },
                    }),
                );
            }
            Ok(Ok(response)) => response,
        };
        routed.ttfb.record(started.elapsed().as_secs_f64());
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // Frames already waiting go out in one write (see `coalesce`).
        let body = body::boxed(IdleTimeout::new(
            Coalesce::new(body),
            self.stream_idle_timeout,
        ));
        (
            Outcome::Answered(parts.status.as_u16()),
            Ok(Response::from_parts(parts, body)),
        )
    }
}

/// The last attempt's result; a status `retry.on` names is marked [`Exhausted`].
fn exhausted(
    result: Result<Response<Body>, GatewayError>,
    outcome: Outcome,
    policy: &crate::config::RetryPolicy,
) -> Result<Response<Body>, GatewayError> {
    result.map(|mut response| {
        if outcome.is_failure(policy) {
            response.extensions_mut().insert(Exhausted);
        }
        response
    })
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Why an upstream request got no response head.
enum Failure {
    /// The request cannot be sent at all (e.g. its URL cannot be built).
    Request(GatewayError),
    /// The upstream could not be reached or broke the protocol.
    Upstream { kind: &'static str, reason: String },
}

impl From<GatewayError> for Failure {
    fn from(e: GatewayError) -> Self {
        Failure::Request(e)
    }
}

impl Failure {
    fn from_pool(e: pool::SendError) -> Self {
        let kind = match e {
            pool::SendError::Connect { .. } => "connect",
            pool::SendError::Http(_) => "protocol",
        };
        Failure::Upstream {
            kind,
            reason: error_chain(&e),
        }
    }

    fn from_client(e: &hyper_util::client::legacy::Error) -> Self {
        Failure::Upstream {
            kind: if e.is_connect() {
                "connect"
            } else {
                "protocol"
            },
            reason: error_chain(e),
        }
    }
}

/// System roots plus `upstream_ca_bundle`, for verifying https upstreams.
fn tls_client_config(server: &ServerConfig) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "could not load some system CA certificates");
    }
    let (_, skipped) = roots.add_parsable_certificates(native.certs);
    if skipped > 0 {
        tracing::debug!(skipped, "system CA certificates rustls cannot use");
    }
    for cert in &server.upstream_ca {
        if let Err(e) = roots.add(cert.clone()) {
            tracing::warn!(error = %e, "a certificate of upstream_ca_bundle was rejected");
        }
    }
    if roots.is_empty() {
        tracing::warn!("no CA certificates available; https upstreams will fail to verify");
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

pub fn count_error(provider: &str, kind: &'static str) {
    metrics::counter!(m::UPSTREAM_ERRORS, "provider" => provider.to_owned(), "kind" => kind)
        .increment(1);
}

/// `/v1` + `/chat/completions?x=1` (the client's path after `/v1`).
fn origin_form(target: &HttpTarget, client_uri: &Uri) -> Result<Uri, GatewayError> {
    Uri::try_from(upstream_path(target, client_uri))
        .map_err(|e| GatewayError::bad_request(format!("cannot build upstream URL: {e}"), None))
}

/// `https://host/v1` + `/chat/completions?x=1`.
fn absolute_form(target: &HttpTarget, client_uri: &Uri) -> Result<Uri, GatewayError> {
    Uri::builder()
        .scheme(target.scheme.clone())
        .authority(target.authority.clone())
        .path_and_query(upstream_path(target, client_uri))
        .build()
        .map_err(|e| GatewayError::bad_request(format!("cannot build upstream URL: {e}"), None))
}

fn upstream_path(target: &HttpTarget, client_uri: &Uri) -> String {
    let path_and_query = client_uri.path_and_query().map_or("/", |pq| pq.as_str());
    let rest = path_and_query.strip_prefix("/v1").unwrap_or(path_and_query);
    let mut pq = String::with_capacity(target.base_path.len() + rest.len());
    pq.push_str(&target.base_path);
    pq.push_str(rest);
    if pq.is_empty() {
        pq.push('/');
    }
    pq
}

fn prepare_headers(provider: &Provider, target: &UpstreamTarget, req: &mut Request<Full<Bytes>>) {
    // hyper's legacy client refuses an HTTP/2 request on a pooled HTTP/1
    // connection; it picks the wire version itself from ALPN.
    *req.version_mut() = Version::HTTP_11;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    // The client's Host names us; the upstream's is set per connection kind.
    headers.remove(header::HOST);
    // The body may have been rewritten; hyper sets the length from the body.
    headers.remove(header::CONTENT_LENGTH);
    if let Some(auth) = &target.authorization {
        if provider.api == crate::config::Api::Anthropic {
            headers.insert("x-api-key", auth.clone());
        } else {
            headers.insert(header::AUTHORIZATION, auth.clone());
        }
    }
    for (name, value) in &target.headers {
        headers.insert(name.clone(), value.clone());
    }
}

/// hyper's errors say "client error (Connect)"; the cause says what happened.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(urls: &[&str]) -> Config {
        let targets: Vec<String> = urls
            .iter()
            .map(|u| format!("{{ base_url = \"{u}\" }}"))
            .collect();
        Config::from_toml(&format!(
            "[[providers]]\nname = \"p\"\ntargets = [{}]\n",
            targets.join(", ")
        ))
        .unwrap()
    }

    #[test]
    fn a_reload_keeps_the_health_of_unchanged_targets_only() {
        let book = HealthBook::default();
        let before = config(&["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"]);
        let ids: Vec<&str> = before.providers[0]
            .targets
            .iter()
            .map(|t| t.identity.as_str())
            .collect();
        let (kept, moved) = (book.get("p", ids[0]), book.get("p", ids[1]));
        let policy = before.providers[0].health;
        for _ in 0..3 {
            kept.failed(&policy, 1);
        }
        assert!(!kept.is_up());
        // Target 1 moves to another URL: its record starts afresh.
        let after = config(&["http://127.0.0.1:1/v1", "http://127.0.0.1:3/v1"]);
        book.keep_only(&after);
        let again = &after.providers[0].targets;
        assert!(Arc::ptr_eq(&kept, &book.get("p", &again[0].identity)));
        assert!(!book.get("p", &again[0].identity).is_up());
        assert!(!Arc::ptr_eq(&moved, &book.get("p", &again[1].identity)));
        assert_eq!(book.0.lock().unwrap().len(), 2);
    }
}

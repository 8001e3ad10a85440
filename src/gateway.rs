//! The request handler: operational endpoints, routing, and forwarding.
//!
//! One [`Gateway`] serves every connection. For each `/v1/*` request it checks
//! the inbound key and the concurrency limit, reads the body (bounded), finds
//! the model, picks the provider, applies the provider's tool transform when
//! one is configured for chat completions, and streams the upstream's answer
//! back. Every error it makes itself goes through [`GatewayError::into_response`].
//!
//! Everything derived from the config lives in a [`Runtime`] behind an
//! `ArcSwap`: a reload swaps it atomically, and each request keeps the
//! runtime it started with until its response body ends.

mod auth;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as HttpBody;
use http_body_util::Full;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use tokio::sync::{Semaphore, watch};

use crate::body::drain::DrainGuard;
use crate::body::observed::{Guard, Observed, RequestLog};
use crate::body::stall::StallGuard;
use crate::body::{self, Body, BoxError};
use crate::config::{Api, Config, Mode, Provider, ServerConfig, Tenant};
use crate::error::GatewayError;
use crate::inbound;
use crate::metrics::request::route_of;
use crate::router;
use crate::runtime::Runtime;
use crate::store::Store;
use crate::tools::Tools;
use crate::tools::steps::StepStore;
use crate::upstream::HealthBook;

/// Bounds of the gateway's steps kept for clients' follow-ups.
const STEPS_MAX_ENTRIES: usize = 10_000;
const STEPS_MAX_BYTES: usize = 64 * 1024 * 1024;

pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    /// Gateway-side tools: MCP connections and clients, kept across reloads.
    tools: Arc<Tools>,
    /// The gateway's own steps awaiting a client's follow-up.
    steps: Arc<StepStore>,
    /// Transcripts, when `[store]` is configured (kept across reloads).
    store: Option<Arc<Store>>,
    /// Upstream targets' health, kept across reloads for unchanged targets.
    health: HealthBook,
    metrics: PrometheusHandle,
    /// The limits shared by every request, kept across reloads.
    limits: Limits,
    draining: AtomicBool,
    /// Turns true when the shutdown grace period is over: open streams end.
    grace_over: watch::Sender<bool>,
}

/// A reload that would change what only a restart may change; names the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} changes need a restart")]
pub struct ReloadRefused(pub &'static str);

/// Listening elsewhere, or turning TLS or inbound auth on or off, would
/// silently weaken (or break) a running deployment: those need a restart.
fn refuse_reload(old: &Config, new: &Config) -> Option<ReloadRefused> {
    if old.server.listen != new.server.listen {
        return Some(ReloadRefused("server.listen"));
    }
    if old.server.tls.is_some() != new.server.tls.is_some() {
        return Some(ReloadRefused("server.tls"));
    }
    // Keys and their policies change on reload; turning auth on or off does not.
    if old.server.auth.is_some() != new.server.auth.is_some() {
        return Some(ReloadRefused("server.auth"));
    }
    let admin = |c: &Config| c.server.auth.as_ref().is_some_and(|a| a.has_admin_keys());
    if admin(old) != admin(new) {
        return Some(ReloadRefused("server.auth.admin_keys_env"));
    }
    if old.raw.telemetry != new.raw.telemetry {
        // The exporter is started once, at boot.
        return Some(ReloadRefused("telemetry"));
    }
    if old.raw.store != new.raw.store {
        // The store's connection and writer are started once, at boot.
        return Some(ReloadRefused("store"));
    }
    None
}

/// Process-wide bounds: a reload adjusts them, never replaces them, so
/// requests in flight stay counted.
pub(crate) struct Limits {
    /// `max_concurrent_requests`: permits taken once the body is read.
    concurrency: Arc<Semaphore>,
    /// The permits `concurrency` was sized with (`Semaphore::MAX_PERMITS`: no limit).
    concurrency_size: AtomicUsize,
    /// `max_buffered_request_bytes`.
    buffered: Arc<inbound::BufferBudget>,
}

impl Limits {
    fn new(server: &ServerConfig) -> Self {
        let size = concurrency_size(server);
        Limits {
            concurrency: Arc::new(Semaphore::new(size)),
            concurrency_size: AtomicUsize::new(size),
            buffered: Arc::new(inbound::BufferBudget::new(
                server.max_buffered_request_bytes,
            )),
        }
    }

    /// Resizes in place: permits held by requests in flight stay held.
    fn resize(&self, server: &ServerConfig) {
        let new = concurrency_size(server);
        let old = self.concurrency_size.swap(new, Ordering::SeqCst);
        if new > old {
            self.concurrency.add_permits(new - old);
        } else if old > new {
            // Permits in use come back later and are then above the new
            // size: forget them as they become available.
            let mut owed = old - new;
            owed -= self.concurrency.forget_permits(owed);
            if owed > 0 {
                let semaphore = self.concurrency.clone();
                tokio::spawn(async move {
                    while owed > 0 {
                        let Ok(permit) = semaphore.acquire().await else {
                            return;
                        };
                        permit.forget();
                        owed -= 1;
                    }
                });
            }
        }
        self.buffered.set_max(server.max_buffered_request_bytes);
    }
}

fn concurrency_size(server: &ServerConfig) -> usize {
    server
        .max_concurrent_requests
        .unwrap_or(Semaphore::MAX_PERMITS)
        .min(Semaphore::MAX_PERMITS)
}

impl Gateway {
    pub fn new(config: Arc<Config>) -> Self {
        // First: metric handles registered before the recorder exists do nothing.
        let metrics = crate::metrics::install();
        let tools = Arc::new(Tools::start(&config));
        let steps = Arc::new(StepStore::new(
            STEPS_MAX_ENTRIES,
            STEPS_MAX_BYTES,
            crate::tools::steps::KEPT_FOR,
        ));
        let store = config.store.clone().and_then(|c| match Store::start(c) {
            Ok(store) => Some(Arc::new(store)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the transcript store; transcripts are off");
                None
            }
        });
        let health = HealthBook::default();
        Gateway {
            limits: Limits::new(&config.server),
            runtime: ArcSwap::from_pointee(Runtime::new(
                config,
                tools.clone(),
                steps.clone(),
                store.clone(),
                &health,
            )),
            health,
            tools,
            steps,
            store,
            metrics,
            draining: AtomicBool::new(false),
            grace_over: watch::Sender::new(false),
        }
    }

    /// The config in force now.
    pub fn config(&self) -> Arc<Config> {
        self.runtime.load().config.clone()
    }

    /// Swaps in a new, already validated config. Requests in flight finish
    /// on the old one; the concurrency and buffer limits are resized in
    /// place, so requests in flight stay counted. A config that changes
    /// `server.listen`, or adds or removes `[server.tls]` or `[server.auth]`,
    /// is refused (a restart is needed) and the old config keeps serving.
    pub fn reload(&self, config: Config) -> Result<(), ReloadRefused> {
        let old = self.config();
        if let Some(refused) = refuse_reload(&old, &config) {
            metrics::counter!(crate::metrics::CONFIG_RELOADS, "outcome" => "refused").increment(1);
            tracing::error!(
                key = refused.0,
                "config reload refused: {} changes need a restart; the previous config keeps serving",
                refused.0
            );
            return Err(refused);
        }
        self.tools.reload(&config);
        self.limits.resize(&config.server);
        self.runtime.store(Arc::new(Runtime::new(
            Arc::new(config),
            self.tools.clone(),
            self.steps.clone(),
            self.store.clone(),
            &self.health,
        )));
        metrics::counter!(crate::metrics::CONFIG_RELOADS, "outcome" => "success").increment(1);
        tracing::info!("config reloaded");
        Ok(())
    }

    /// Marks the gateway as draining: `/readyz` answers 503 from now on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// The grace period is over: every open stream ends with an error event
    /// and `[DONE]` at its next event boundary.
    pub fn expire_streams(&self) {
        self.grace_over.send_replace(true);
    }

    pub fn metrics(&self) -> &PrometheusHandle {
        &self.metrics
    }

    /// The transcript store, when configured.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// Writes what the store has queued and closes it (blocking; at most
    /// `deadline`). Call after the server has drained.
    pub fn close_store(&self, deadline: std::time::Duration) {
        if let Some(store) = &self.store {
            store.close(deadline);
        }
    }

    /// The gateway-side tool runtime.
    pub fn tools(&self) -> &Arc<Tools> {
        &self.tools
    }

    /// `/readyz`: 503 while draining, or while a tool server that a provider
    /// offers is not connected; one line per tool server says where it stands.
    fn readiness(&self) -> Response<Body> {
        if self.draining.load(Ordering::SeqCst) {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        let config = self.config();
        let mut ready = true;
        let mut detail = String::new();
        for (name, state) in self.tools.servers(&config) {
            let offered = config.providers.iter().any(|p| {
                p.tools.gateway.as_ref().is_some_and(|g| {
                    g.sources
                        .iter()
                        .any(|s| matches!(s, crate::config::ToolSource::Mcp(m) if m.name == name))
                })
            });
            let line = match &*state {
                crate::tools::mcp::State::Up { tools, .. } => format!("up, {} tools", tools.len()),
                crate::tools::mcp::State::Starting => "starting".to_owned(),
                crate::tools::mcp::State::Down { error } => format!("down: {error}"),
            };
            // By default a tool server that is down takes out only the
            // providers that offer it (they answer 503 on their own).
            if config.server.readiness == crate::config::Readiness::Strict {
                ready &= !offered || state.is_up();
            }
            detail.push_str(&format!("tool server {name}: {line}\n"));
        }
        if let Some(store) = &self.store {
            match store.health() {
                None => detail.push_str("store: up\n"),
                // Traffic does not need the store: it is reported, not waited for.
                Some(error) => detail.push_str(&format!("store: down: {error}\n")),
            }
        }
        let (status, head) = if ready {
            (StatusCode::OK, "ready\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        };
        let mut r = plain(status, "");
        *r.body_mut() = body::full(format!("{head}{detail}"));
        r
    }

    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: HttpBody<Data = Bytes> + Send,
        B::Error: Into<BoxError>,
    {
        self.serve(req, None).await
    }

    /// [`Gateway::handle`] for a request on a connection: `busy` is held
    /// until the response body is done.
    pub(crate) async fn serve<B>(&self, req: Request<B>, busy: Option<Guard>) -> Response<Body>
    where
        B: HttpBody<Data = Bytes> + Send,
        B::Error: Into<BoxError>,
    {
        let path = req.uri().path();
        if !path.starts_with("/v1/") {
            let response = self.operational(req).await;
            return match busy {
                None => response,
                // Rare and small, but the transcript event stream is long.
                Some(busy) => response.map(|b| {
                    body::boxed(http_body_util::BodyExt::map_frame(b, move |frame| {
                        let _busy = &busy;
                        frame
                    }))
                }),
            };
        }
        let runtime = self.runtime.load_full();
        let mut log = RequestLog::start(route_of(path));
        log.busy = busy;
        log.trace = crate::telemetry::server_span::start(req.headers(), req.method(), path);
        let h2_stall = (req.version() == http::Version::HTTP_2)
            .then_some(runtime.config.server.write_stall_timeout);
        // The Messages door answers errors in Anthropic's shape.
        let shape: fn(GatewayError) -> Response<Body> =
            if crate::api::messages::is_messages_path(path) {
                crate::api::messages::error_response
            } else {
                GatewayError::into_response
            };
        let response = match auth::tenant(&runtime.config, &req) {
            Err(e) => shape(e),
            Ok(_) if req.method() == Method::GET && trim_slash(path) == "/v1/models" => {
                list_models(&runtime.config)
            }
            Ok(tenant) if path.starts_with("/v1/responses/") && req.method() != Method::POST => {
                log.tenant = Some(tenant.name.clone());
                let id = &path["/v1/responses/".len()..];
                let store = self.store.as_ref();
                match crate::api::responses::stored(store, &tenant, req.method(), id).await {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            }
            Ok(tenant) => {
                log.tenant = Some(tenant.name.clone());
                let scope = crate::telemetry::scope::Scope {
                    tenant: tenant.name.clone(),
                    trace: log.trace.clone(),
                };
                // Boxed once: the wrappers below then move a pointer, not
                // the whole request future (kilobytes, copied per layer).
                let proxied = Box::pin(proxy(&runtime, &self.limits, req, &tenant, &mut log));
                let (result, attempted) = crate::upstream::noting_attempts(
                    crate::telemetry::scope::within(scope, proxied),
                )
                .await;
                log.attempted = attempted;
                match result {
                    Ok(r) => r,
                    Err(e) => shape(e),
                }
            }
        };
        log.status = response.status().as_u16();
        if is_event_stream(&response) {
            log.set_streaming();
            let drain = DrainGuard::new(self.grace_over.subscribe());
            log.drained = Some(drain.ended());
            let observed = response.map(|b| body::boxed(Observed::new(drain.wrap(b), log)));
            // HTTP/1 stalls show on the socket (`conn::Io`); an HTTP/2
            // stream can stall alone.
            return match h2_stall {
                Some(timeout) => observed.map(|b| body::boxed(StallGuard::wrap(b, timeout))),
                None => observed,
            };
        }
        response.map(|b| body::boxed(Observed::new(b, log)))
    }

    /// Everything outside `/v1`: health, readiness, metrics, transcripts.
    async fn operational<B>(&self, req: Request<B>) -> Response<Body> {
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n"),
            (&Method::GET, "/readyz") => self.readiness(),
            (&Method::GET, "/metrics") => {
                let mut r = plain(StatusCode::OK, "");
                *r.body_mut() = body::full(self.metrics.render());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            (&Method::GET, path) if path.starts_with("/toolgate/ui") => {
                crate::api::transcripts::page(path).unwrap_or_else(|| {
                    GatewayError::UnknownRoute {
                        method: "GET".into(),
                        path: path.to_owned(),
                    }
                    .into_response()
                })
            }
            (_, path) if path.starts_with("/toolgate/api/") => {
                let runtime = self.runtime.load_full();
                let viewer = match auth::viewer(&runtime.config, &req) {
                    Ok(viewer) => viewer,
                    Err(e) => return crate::api::transcripts::private(e.into_response()),
                };
                let query = req.uri().query();
                crate::api::transcripts::private(
                    match crate::api::transcripts::handle(
                        self.store.as_ref(),
                        &viewer,
                        req.method(),
                        path,
                        query,
                    )
                    .await
                    {
                        Ok(r) => r,
                        Err(e) => e.into_response(),
                    },
                )
            }
            (method, path) => GatewayError::UnknownRoute {
                method: method.to_string(),
                path: path.to_owned(),
            }
            .into_response(),
        }
    }
}

async fn proxy<B>(
    runtime: &Arc<Runtime>,
    limits: &Limits,
    req: Request<B>,
    tenant: &Arc<Tenant>,
    log: &mut RequestLog,
) -> Result<Response<Body>, GatewayError>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let (mut parts, incoming) = req.into_parts();
    if runtime.config.server.auth.is_some() {
        // The client's key is toolgate's own; it never goes upstream.
        parts.headers.remove(header::AUTHORIZATION);
        parts.headers.remove("x-api-key");
    }
    let server = &runtime.config.server;
    let mut held = inbound::Reservation::new(limits.buffered.clone());
    let bytes = inbound::read_body(
        &parts.headers,
        incoming,
        server.max_body_bytes,
        server.body_read_timeout,
        &mut held,
    )
    .await?;
    log.held = Some(Guard::new(held));
    log.bytes_in = bytes.len() as u64;
    // Taken only now: a client slow to send its body holds no permit meanwhile.
    let permit = limits
        .concurrency
        .clone()
        .try_acquire_owned()
        .map_err(|_| GatewayError::Overloaded)?;
    log.permit = Some(permit);
    let field = inbound::find_model(&parts.headers, &bytes)?.ok_or_else(|| {
        GatewayError::bad_request(
            "toolgate routes /v1 requests by their `model`, and this request has none",
            Some("model"),
        )
    })?;
    // The key's policy, before anything is sent anywhere.
    if !tenant.allows_model(&field.name) {
        return Err(GatewayError::ModelNotAllowed(field.name.clone()));
    }
    let route = router::route(&runtime.config.providers, &field.name)
        .ok_or_else(|| GatewayError::UnknownModel(field.name.clone()))?;
    // Owned: a borrowed route held across an await trips hyper's `Send`
    // bounds. Without failover providers nothing is collected.
    let owned = |r: &router::Route<'_>| (r.provider.clone(), r.model.clone().into_owned());
    let primary = owned(&route);
    let failovers: Vec<(Arc<Provider>, String)> =
        router::failovers(&runtime.config.providers, &route)
            .iter()
            .map(owned)
            .collect();
    drop(route);
    let mut kept = Some((parts, bytes));
    let mut chain = std::iter::once(primary).chain(failovers).peekable();
    while let Some((provider, model)) = chain.next() {
        let next = chain.peek().map(|(p, _)| p.name.clone());
        // Every provider but the last gets a copy: the request stays whole
        // until one of them answers.
        let (parts, bytes) = match next {
            None => kept.take().expect("kept until the last provider"),
            Some(_) => {
                let (parts, bytes) = kept.as_ref().expect("kept until the last provider");
                (copy_parts(parts), bytes.clone())
            }
        };
        let bytes = if *model != *field.name {
            inbound::replace_model(&bytes, &field, &model)
        } else {
            bytes
        };
        log.model = model;
        let result = dispatch(runtime, tenant, parts, bytes, &provider, log).await;
        let Some(to) = next else {
            return result;
        };
        if !failed_before_answering(&result) {
            return result;
        }
        let from = provider.name.clone();
        tracing::warn!(from = %from, to = %to, "every attempt failed before an answer; failing over");
        metrics::counter!(crate::metrics::FAILOVERS, "from" => from, "to" => to).increment(1);
    }
    unreachable!("the last provider's result is returned")
}

/// Whether a provider failed before any byte of an answer: its targets
/// could not be reached, did not answer in time, or answered with a status
/// `retry.on` names once its attempts ran out.
fn failed_before_answering(result: &Result<Response<Body>, GatewayError>) -> bool {
    match result {
        Err(GatewayError::UpstreamUnreachable { .. } | GatewayError::UpstreamTimeout { .. }) => {
            true
        }
        Err(_) => false,
        Ok(response) => response
            .extensions()
            .get::<crate::upstream::Exhausted>()
            .is_some(),
    }
}

fn copy_parts(parts: &http::request::Parts) -> http::request::Parts {
    let mut copy = Request::new(()).into_parts().0;
    copy.method = parts.method.clone();
    copy.uri = parts.uri.clone();
    copy.version = parts.version;
    copy.headers = parts.headers.clone();
    copy
}

/// Sends a routed request through its door and its provider's tool mode.
async fn dispatch(
    runtime: &Arc<Runtime>,
    tenant: &Arc<Tenant>,
    parts: http::request::Parts,
    bytes: Bytes,
    provider: &Arc<Provider>,
    log: &mut RequestLog,
) -> Result<Response<Body>, GatewayError> {
    if let Some(handles) = runtime.metrics_of(provider) {
        log.provider = Some(handles.clone());
    }
    // Tool transforms apply to chat completions only; every other path is transparent.
    let chat =
        parts.method == Method::POST && trim_slash(parts.uri.path()) == "/v1/chat/completions";
    let responses = parts.method == Method::POST && trim_slash(parts.uri.path()) == "/v1/responses";
    // A Responses request goes through the answer path unless the provider
    // speaks Responses itself and nothing changes on the way.
    let translated = provider.api == Api::Chat
        || provider.tools.gateway.is_some()
        || provider.tools.mode != Mode::Passthrough;
    // Every path that parses the body (a door's translation, a tool mode,
    // the demo model, the recorder) takes it only within the container
    // limit; a body passed on untouched is never scanned.
    let untouched = provider.tools.mode == Mode::Passthrough
        && provider.tools.gateway.is_none()
        && !provider.tools.reads_text_calls()
        && runtime.store.is_none()
        && provider.all_http()
        && match provider.api {
            Api::Chat => !(responses || crate::api::messages::is_messages_path(parts.uri.path())),
            Api::Responses => !chat,
            Api::Anthropic => true,
        };
    if !untouched {
        crate::api::bounded(&bytes)?;
    }
    if responses && translated {
        return Box::pin(crate::api::responses::handle(
            runtime.clone(),
            provider.clone(),
            tenant.clone(),
            parts,
            bytes,
        ))
        .await;
    }
    let messages =
        parts.method == Method::POST && crate::api::messages::is_messages_path(parts.uri.path());
    if provider.api == Api::Anthropic && !messages {
        return Err(GatewayError::bad_request(
            format!(
                "provider `{}` speaks Anthropic's Messages API only (`api = \"anthropic\"`): send POST /v1/messages",
                provider.name
            ),
            Some("model"),
        ));
    }
    // An `api = "anthropic"` provider gets /v1/messages untouched (below).
    if messages && provider.api != Api::Anthropic {
        if provider.api != Api::Chat {
            return Err(GatewayError::bad_request(
                format!(
                    "toolgate translates /v1/messages only for providers with `api = \"chat\"`, and `{}` has another",
                    provider.name
                ),
                Some("model"),
            ));
        }
        return Box::pin(crate::api::messages::handle(
            runtime.clone(),
            provider.clone(),
            tenant.clone(),
            parts,
            bytes,
        ))
        .await;
    }
    if chat && (provider.tools.gateway.is_some() || provider.api == Api::Responses) {
        return Box::pin(crate::api::chat::handle(
            runtime.clone(),
            provider.clone(),
            tenant.clone(),
            parts,
            bytes,
        ))
        .await;
    }
    // With a store, a chat exchange may be recorded: its answer is read on
    // the way to the client (and passed on unchanged).
    let recorder = match &runtime.store {
        Some(_) if chat => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(request)) => {
                Box::pin(crate::answer::recorder(
                    runtime,
                    provider,
                    tenant,
                    &request,
                    &parts.headers,
                ))
                .await
            }
            _ => None,
        },
        _ => None,
    };
    let response = match provider.tools.mode {
        // Boxed: the transforms' futures are large, and hyper keeps the
        // handler's future allocation for the life of each connection.
        _ if chat && provider.tools.reads_text_calls() => {
            Box::pin(runtime.natural.handle(
                &runtime.upstreams,
                &runtime.config,
                provider,
                parts,
                bytes,
                false,
            ))
            .await
        }
        Mode::ToNatural if chat => {
            Box::pin(crate::to_natural::handle(
                &runtime.upstreams,
                provider,
                parts,
                bytes,
            ))
            .await
        }
        _ => {
            let request = Request::from_parts(parts, Full::new(bytes));
            runtime.upstreams.send(provider, request).await
        }
    }?;
    Ok(match recorder {
        Some(recorder) if response.status().is_success() => {
            let chat = recorder.chat_id().to_owned();
            let streamed = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            let (parts, body) = response.into_parts();
            let tapped = crate::api::chat_tap::Tap::new(body, recorder, streamed);
            let mut response = Response::from_parts(parts, crate::body::boxed(tapped));
            crate::answer::tag_chat(&mut response, Some(&chat));
            response
        }
        _ => response,
    })
}

/// `/v1/chat/completions/` is `/v1/chat/completions`: clients that append a
/// slash get the same handling (tool transforms included), not a passthrough.
fn trim_slash(path: &str) -> &str {
    path.strip_suffix('/').unwrap_or(path)
}

fn list_models(config: &Config) -> Response<Body> {
    // Literal patterns are models; globs are not listable, so they are
    // listed as `provider/*` to show the prefix route exists.
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

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(body::full(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;
    use tokio::sync::mpsc;

    const CONFIG: &str = r#"
[server]
max_concurrent_requests = 1
body_read_timeout_secs = 5
max_buffered_request_bytes = 1000

[[providers]]
name = "demo"
models = ["*"]
[providers.demo]
"#;

    /// A request body that arrives only as the test sends it.
    struct Trickle(mpsc::Receiver<Bytes>);

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
            self.0
                .poll_recv(cx)
                .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    fn slow_post() -> (Request<Trickle>, mpsc::Sender<Bytes>) {
        let (tx, rx) = mpsc::channel(4);
        let req = Request::post("/v1/chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Trickle(rx))
            .unwrap();
        (req, tx)
    }

    fn post(json: &str) -> Request<Full<Bytes>> {
        Request::post("/v1/chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json.to_owned())))
            .unwrap()
    }

    const HELLO: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

    fn gateway(text: &str) -> Arc<Gateway> {
        Arc::new(Gateway::new(Arc::new(Config::from_toml(text).unwrap())))
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_gets_408_and_holds_no_permit_meanwhile() {
        let gw = gateway(CONFIG);
        let (slow, tx) = slow_post();
        tx.send(Bytes::from_static(b"{\"model\"")).await.unwrap();
        let slow = gw.handle(slow);
        tokio::pin!(slow);
        // The slow upload is under way; the one permit is still free.
        assert!(
            tokio::time::timeout(Duration::from_secs(1), &mut slow)
                .await
                .is_err()
        );
        let other = gw.handle(post(HELLO)).await;
        assert_eq!(other.status(), StatusCode::OK);
        other.into_body().collect().await.unwrap();
        let slow = slow.await;
        assert_eq!(slow.status(), StatusCode::REQUEST_TIMEOUT);
        drop(tx);
    }

    #[tokio::test]
    async fn bodies_beyond_the_process_buffer_bound_get_503_and_the_bytes_come_back() {
        let gw = gateway(CONFIG);
        let (first, tx) = slow_post();
        tx.send(Bytes::from(vec![b' '; 900])).await.unwrap();
        let first = tokio::spawn({
            let gw = gw.clone();
            async move { gw.handle(first).await.status() }
        });
        while gw.limits.buffered.used() < 900 {
            tokio::task::yield_now().await;
        }
        let r = gw
            .handle(post(&format!("{HELLO}{}", " ".repeat(200))))
            .await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("buffer_full"));
        assert_eq!(gw.limits.buffered.used(), 900);
        drop(tx);
        // Whitespace only: no model, 400; its bytes are given back.
        assert_eq!(first.await.unwrap(), StatusCode::BAD_REQUEST);
        assert_eq!(gw.limits.buffered.used(), 0);
        let r = gw.handle(post(HELLO)).await;
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn reload_refuses_listen_tls_and_auth_changes_and_keeps_the_semaphore() {
        let gw = gateway(CONFIG);
        let moved = CONFIG.replace("[server]", "[server]\nlisten = \"127.0.0.1:1\"");
        assert_eq!(
            gw.reload(Config::from_toml(&moved).unwrap()),
            Err(ReloadRefused("server.listen"))
        );
        // `PATH` is set wherever tests run; its value only needs to be non-empty.
        let auth = CONFIG.replace(
            "[[providers]]",
            "[server.auth]\napi_keys_env = \"PATH\"\n\n[[providers]]",
        );
        assert_eq!(
            gw.reload(Config::from_toml(&auth).unwrap()),
            Err(ReloadRefused("server.auth"))
        );
        assert!(gw.config().server.auth.is_none());
        // A request in flight holds the one permit across a reload.
        let permit = gw.limits.concurrency.clone().try_acquire_owned().unwrap();
        let same = CONFIG.replace("body_read_timeout_secs = 5", "body_read_timeout_secs = 6");
        gw.reload(Config::from_toml(&same).unwrap()).unwrap();
        assert_eq!(gw.config().server.body_read_timeout, Duration::from_secs(6));
        let r = gw.handle(post(HELLO)).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(permit);
        // A larger limit on reload adds permits to the same semaphore.
        let two = same.replace("max_concurrent_requests = 1", "max_concurrent_requests = 2");
        gw.reload(Config::from_toml(&two).unwrap()).unwrap();
        assert_eq!(gw.limits.concurrency.available_permits(), 2);
    }
}

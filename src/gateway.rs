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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as HttpBody;
use http_body_util::Full;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use tokio::sync::{Semaphore, watch};

use crate::body::drain::DrainGuard;
use crate::body::observed::{Observed, RequestLog};
use crate::body::{self, Body, BoxError};
use crate::config::{Api, Config, Mode, Provider};
use crate::error::GatewayError;
use crate::inbound;
use crate::metrics::request::{ProviderMetrics, route_of};
use crate::natural;
use crate::router;
use crate::store::Store;
use crate::tools::Tools;
use crate::tools::steps::StepStore;
use crate::upstream::Upstreams;

/// Bounds of the gateway's steps kept for clients' follow-ups.
const STEPS_MAX_ENTRIES: usize = 10_000;
const STEPS_MAX_BYTES: usize = 64 * 1024 * 1024;
const STEPS_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    /// Gateway-side tools: MCP connections and clients, kept across reloads.
    tools: Arc<Tools>,
    /// The gateway's own steps awaiting a client's follow-up.
    steps: Arc<StepStore>,
    /// Transcripts, when `[store]` is configured (kept across reloads).
    store: Option<Arc<Store>>,
    metrics: PrometheusHandle,
    draining: AtomicBool,
    /// Turns true when the shutdown grace period is over: open streams end.
    grace_over: watch::Sender<bool>,
}

/// Everything built from one config; replaced whole on reload.
pub struct Runtime {
    pub config: Arc<Config>,
    pub(crate) upstreams: Upstreams,
    pub(crate) natural: natural::Engine,
    pub(crate) tools: Arc<Tools>,
    pub(crate) steps: Arc<StepStore>,
    pub(crate) store: Option<Arc<Store>>,
    limit: Option<Arc<Semaphore>>,
    /// Per provider, in `config.providers` order.
    provider_metrics: Vec<Arc<ProviderMetrics>>,
}

impl Runtime {
    fn new(
        config: Arc<Config>,
        tools: Arc<Tools>,
        steps: Arc<StepStore>,
        store: Option<Arc<Store>>,
    ) -> Self {
        Runtime {
            upstreams: Upstreams::new(&config.server),
            natural: natural::Engine::new(&config),
            tools,
            steps,
            store,
            limit: config
                .server
                .max_concurrent_requests
                .map(|n| Arc::new(Semaphore::new(n))),
            provider_metrics: config
                .providers
                .iter()
                .map(|p| Arc::new(ProviderMetrics::new(&p.name)))
                .collect(),
            config,
        }
    }

    fn metrics_of(&self, provider: &Arc<Provider>) -> Option<&Arc<ProviderMetrics>> {
        let i = self
            .config
            .providers
            .iter()
            .position(|p| Arc::ptr_eq(p, provider))?;
        self.provider_metrics.get(i)
    }
}

impl Gateway {
    pub fn new(config: Arc<Config>) -> Self {
        // First: metric handles registered before the recorder exists do nothing.
        let metrics = crate::metrics::install();
        let tools = Arc::new(Tools::start(&config));
        let steps = Arc::new(StepStore::new(
            STEPS_MAX_ENTRIES,
            STEPS_MAX_BYTES,
            STEPS_TTL,
        ));
        let store = config.store.clone().and_then(|c| match Store::start(c) {
            Ok(store) => Some(Arc::new(store)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the transcript store; transcripts are off");
                None
            }
        });
        Gateway {
            runtime: ArcSwap::from_pointee(Runtime::new(
                config,
                tools.clone(),
                steps.clone(),
                store.clone(),
            )),
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
    /// on the old one. The listen address cannot change without a restart.
    pub fn reload(&self, config: Config) {
        let old = self.config();
        if old.server.listen != config.server.listen {
            tracing::warn!(
                old = %old.server.listen,
                new = %config.server.listen,
                "server.listen changes need a restart; still listening on the old address"
            );
        }
        if old.raw.store != config.raw.store {
            tracing::warn!("[store] changes need a restart; the store keeps its old settings");
        }
        self.tools.reload(&config);
        self.runtime.store(Arc::new(Runtime::new(
            Arc::new(config),
            self.tools.clone(),
            self.steps.clone(),
            self.store.clone(),
        )));
        metrics::counter!(crate::metrics::CONFIG_RELOADS, "outcome" => "success").increment(1);
        tracing::info!("config reloaded");
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
            ready &= !offered || state.is_up();
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
            (&Method::GET, "/toolgate/ui" | "/toolgate/ui/") => {
                match crate::api::transcripts::handle(None, req.method(), req.uri().path(), None)
                    .await
                {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            }
            (_, path) if path.starts_with("/toolgate/api/") => {
                let runtime = self.runtime.load_full();
                if let Err(e) = authorize(&runtime, &req) {
                    return e.into_response();
                }
                let query = req.uri().query();
                match crate::api::transcripts::handle(
                    self.store.as_ref(),
                    req.method(),
                    path,
                    query,
                )
                .await
                {
                    Ok(r) => r,
                    Err(e) => e.into_response(),
                }
            }
            (_, path) if path.starts_with("/v1/") => {
                let runtime = self.runtime.load_full();
                let mut log = RequestLog::start(route_of(path));
                let response = match admit(&runtime, &req, &mut log) {
                    Err(e) => e.into_response(),
                    Ok(()) if req.method() == Method::GET && path == "/v1/models" => {
                        list_models(&runtime.config)
                    }
                    Ok(())
                        if path.starts_with("/v1/responses/") && req.method() != Method::POST =>
                    {
                        let id = &path["/v1/responses/".len()..];
                        match crate::api::responses::stored(self.store.as_ref(), req.method(), id)
                            .await
                        {
                            Ok(r) => r,
                            Err(e) => e.into_response(),
                        }
                    }
                    Ok(()) => match proxy(&runtime, req, &mut log).await {
                        Ok(r) => r,
                        Err(e) => e.into_response(),
                    },
                };
                log.status = response.status().as_u16();
                if is_event_stream(&response) {
                    log.set_streaming();
                    let drain = DrainGuard::new(self.grace_over.subscribe());
                    return response.map(|b| body::boxed(Observed::new(drain.wrap(b), log)));
                }
                response.map(|b| body::boxed(Observed::new(b, log)))
            }
            (method, path) => GatewayError::UnknownRoute {
                method: method.to_string(),
                path: path.to_owned(),
            }
            .into_response(),
        }
    }
}

/// The inbound key (`[server.auth]`) and the concurrency limit.
fn admit<B>(runtime: &Runtime, req: &Request<B>, log: &mut RequestLog) -> Result<(), GatewayError> {
    authorize(runtime, req)?;
    if let Some(limit) = &runtime.limit {
        let permit = limit
            .clone()
            .try_acquire_owned()
            .map_err(|_| GatewayError::Overloaded)?;
        log.permit = Some(permit);
    }
    Ok(())
}

/// The inbound key, when `[server.auth]` is on.
fn authorize<B>(runtime: &Runtime, req: &Request<B>) -> Result<(), GatewayError> {
    if let Some(keys) = &runtime.config.server.auth {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .map(<[u8]>::trim_ascii);
        if !presented.is_some_and(|k| keys.accepts(k)) {
            return Err(GatewayError::Unauthorized);
        }
    }
    Ok(())
}

async fn proxy<B>(
    runtime: &Arc<Runtime>,
    req: Request<B>,
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
    }
    let limit = runtime.config.server.max_body_bytes;
    let bytes = inbound::read_body(&parts.headers, incoming, limit).await?;
    log.bytes_in = bytes.len() as u64;
    let field = inbound::find_model(&parts.headers, &bytes)?.ok_or_else(|| {
        GatewayError::bad_request(
            "toolgate routes /v1 requests by their `model`, and this request has none",
            Some("model"),
        )
    })?;
    let route = router::route(&runtime.config.providers, &field.name)
        .ok_or_else(|| GatewayError::UnknownModel(field.name.clone()))?;
    let provider = route.provider;
    if let Some(handles) = runtime.metrics_of(provider) {
        log.provider = Some(handles.clone());
    }
    log.model = route.model.to_string();
    let bytes = if route.changes_model(&field.name) {
        inbound::replace_model(&bytes, &field, &route.model)
    } else {
        bytes
    };
    // Tool transforms apply to chat completions only; every other path is transparent.
    let chat = parts.method == Method::POST && parts.uri.path() == "/v1/chat/completions";
    let responses = parts.method == Method::POST && parts.uri.path() == "/v1/responses";
    // A Responses request goes through the answer path unless the provider
    // speaks Responses itself and nothing changes on the way.
    let translated = provider.api == Api::Chat
        || provider.tools.gateway.is_some()
        || provider.tools.mode != Mode::Passthrough;
    if responses && translated {
        return Box::pin(crate::api::responses::handle(
            runtime.clone(),
            provider.clone(),
            parts,
            bytes,
        ))
        .await;
    }
    if chat && (provider.tools.gateway.is_some() || provider.api == Api::Responses) {
        return Box::pin(crate::api::chat::handle(
            runtime.clone(),
            provider.clone(),
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
        Mode::Natural if chat => {
            Box::pin(runtime.natural.handle(
                &runtime.upstreams,
                &runtime.config,
                provider,
                parts,
                bytes,
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

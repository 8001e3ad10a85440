//! The request handler. One [`Gateway`] serves every connection: it holds
//! what outlives a reload and hands each request to its part.
//!
//! - `auth`: who a request comes from (its key's tenant, or a viewer).
//! - `ops`: everything outside `/v1` (health, readiness, metrics, transcripts).
//! - `models`: `GET /v1/models`.
//! - `proxy`: a `/v1` request read within the [`limits`], routed, failed
//!   over, and sent the way [`plan`] decides.
//! - `reload`: what a reload may not change.
//!
//! Everything derived from the config lives in a [`Runtime`] behind an
//! `ArcSwap`: a reload swaps it atomically, and each request keeps the
//! runtime it started with until its response body ends. Every error the
//! gateway makes itself goes through [`GatewayError::into_response`] (or the
//! Messages door's shape of it).

mod auth;
mod limits;
mod models;
mod ops;
pub mod plan;
mod proxy;
mod reload;
mod request_id;

pub use reload::ReloadRefused;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Method, Request, Response, header};
use http_body::Body as HttpBody;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use crate::api::key_streams::KeyStreams;
use crate::api::transcripts::{LIVE_VIEWS, Transcripts};
use crate::body::drain::DrainGuard;
use crate::body::observed::{Guard, Observed, RequestLog};
use crate::body::stall::StallGuard;
use crate::body::{self, Body, BoxError};
use crate::config::Config;
use crate::error::GatewayError;
use crate::keys::ManagedKeys;
use crate::limiter::Limiter;
use crate::metrics::request::route_of;
use crate::runtime::Runtime;
use crate::store::Store;
use crate::tools::Tools;
use crate::tools::steps::StepStore;
use crate::upstream::HealthBook;
use limits::Limits;

/// Bounds of the gateway's steps kept for clients' follow-ups.
const STEPS_MAX_ENTRIES: usize = 10_000;
const STEPS_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The request handler every connection shares.
pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    /// Gateway-side tools: MCP connections and clients, kept across reloads.
    tools: Arc<Tools>,
    /// The gateway's own steps awaiting a client's follow-up.
    steps: Arc<StepStore>,
    /// Transcripts, when `[store]` is configured (kept across reloads).
    store: Option<Arc<Store>>,
    /// The transcript API's store and its open live views.
    transcripts: Option<Transcripts>,
    /// Upstream targets' health, kept across reloads for unchanged targets.
    health: HealthBook,
    metrics: PrometheusHandle,
    /// The limits shared by every request, kept across reloads.
    limits: Limits,
    /// The tenants' limits and budgets: their counts are kept across
    /// reloads, which change only the limits.
    limiter: Arc<Limiter>,
    /// `[mcp_gateway]`: its path, service and change streams.
    mcp: Option<McpGateway>,
    /// Keys made through the API (`managed_keys = true`).
    keys: Option<Arc<ManagedKeys>>,
    /// Every kind of stream opened with a key (live views, MCP change
    /// streams): each closes when its key stops naming who opened it.
    key_streams: Vec<Arc<KeyStreams>>,
    draining: AtomicBool,
    /// Turns true when the shutdown grace period is over: open streams end.
    grace_over: watch::Sender<bool>,
}

impl Gateway {
    /// Builds everything `config` needs and starts the tool servers and
    /// the store (their failures are logged; the gateway still serves).
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
        let transcripts = store
            .clone()
            .zip(config.store.as_ref())
            .map(|(store, c)| Transcripts {
                store,
                views: KeyStreams::new(&LIVE_VIEWS, c.live_views.total, c.live_views.per_key),
            });
        let limiter = Limiter::new(&config.server.limiter, config.server.workers.get())
            .unwrap_or_else(|e| {
                // The URL was checked when the config was read.
                tracing::error!(error = %e, "cannot use server.limits.redis_url; limits are counted in memory");
                Limiter::new(&Default::default(), 1).expect("memory counters need nothing")
            });
        let managed = config.server.auth.as_ref().is_some_and(|a| a.managed);
        let keys = store
            .clone()
            .filter(|_| managed)
            .map(|store| ManagedKeys::start(store, config.clone()));
        let mcp = config.mcp_gateway.as_ref().map(|m| McpGateway {
            path: m.path.clone(),
            service: crate::api::mcp::service(),
            streams: crate::api::mcp::change_streams(),
            found: Arc::default(),
        });
        let key_streams: Vec<Arc<KeyStreams>> = transcripts
            .iter()
            .map(|t| t.views.clone())
            .chain(mcp.iter().map(|m| m.streams.clone()))
            .collect();
        if let Some(keys) = &keys {
            // A stream lasts only while its key is one in force: told when
            // a key is made, changed, revoked or removed (here or on
            // another replica) and when one expires.
            let streams = key_streams.clone();
            keys.on_change(move |keys| recheck(&streams, &keys.config(), Some(keys)));
        }
        Gateway {
            transcripts,
            limiter: Arc::new(limiter),
            mcp,
            keys,
            key_streams,
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
        if let Some(refused) = reload::refuse_reload(&old, &config) {
            metrics::counter!(crate::metrics::CONFIG_RELOADS, "outcome" => "refused").increment(1);
            tracing::error!(
                setting = refused.0,
                "config reload refused: {} changes need a restart; the previous config keeps serving",
                refused.0
            );
            return Err(refused);
        }
        self.tools.reload(&config);
        self.limits.resize(&config.server);
        let config = Arc::new(config);
        match &self.keys {
            // The managed keys are built again, and tell `on_change`,
            // which rechecks the streams against the new config.
            Some(keys) => keys.reconfigure(config.clone()),
            // A stream lasts only while its key still names who opened it.
            None => recheck(&self.key_streams, &config, None),
        }
        self.runtime.store(Arc::new(Runtime::new(
            config.clone(),
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

    /// The Prometheus registry `/metrics` renders.
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
    /// The gateway-side tools.
    pub fn tools(&self) -> &Arc<Tools> {
        &self.tools
    }

    /// Answers one request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.serve(req, None).await
    }

    /// [`Gateway::handle`] for a request on a connection: `busy` is held
    /// until the response body is done.
    pub(crate) async fn serve<B>(&self, req: Request<B>, busy: Option<Guard>) -> Response<Body>
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let path = req.uri().path();
        let id = request_id::of(req.headers());
        if let Some(mcp) = &self.mcp
            && path == mcp.path
        {
            let runtime = self.runtime.load_full();
            let trace = crate::telemetry::server_span::start(
                req.headers(),
                req.method(),
                path,
                Some(&mcp.path),
                id.to_str().ok(),
            );
            let caller = auth::tenant(&runtime.config, self.keys.as_deref(), &req).map(|who| {
                let key = auth::stream_key(&runtime.config, &req);
                crate::api::mcp::McpCaller {
                    finder: crate::api::mcp::Finder::new(&who.tenant.name, &key),
                    tenant: who.tenant,
                    share: who.share,
                    limiter: self.limiter.clone(),
                    trace: trace.clone(),
                    found: mcp.found.clone(),
                }
            });
            let tenant = caller.as_ref().ok().map(|c| c.tenant.name.clone());
            let mut response = Box::pin(mcp_door(mcp, caller, runtime, req)).await;
            if let Some(cx) = &trace {
                // The door answers JSON (or opens a stream of its own): its
                // span ends with the answer's head.
                crate::telemetry::server_span::end(
                    cx,
                    crate::telemetry::server_span::Ended {
                        status: response.status().as_u16(),
                        provider: "mcp",
                        tenant: tenant.as_deref(),
                        model: "",
                        error: None,
                    },
                );
            }
            request_id::tag(&mut response, id);
            return holding(response, busy);
        }
        if !path.starts_with("/v1/") {
            let mut response = self.operational(req).await;
            request_id::tag(&mut response, id);
            // Rare and small, but the transcript event stream is long.
            return holding(response, busy);
        }
        let runtime = self.runtime.load_full();
        let mut log = RequestLog::start(route_of(path));
        log.busy = busy;
        // Until it is routed, a request counts under `provider="none"`.
        log.provider = Some(runtime.unrouted.clone());
        log.trace = crate::telemetry::server_span::start(
            req.headers(),
            req.method(),
            path,
            None,
            id.to_str().ok(),
        );
        log.request_id = Some(id.clone());
        let h2_stall = (req.version() == http::Version::HTTP_2)
            .then_some(runtime.config.server.write_stall_timeout);
        // The Messages door answers errors in Anthropic's shape.
        let shape: fn(GatewayError) -> Response<Body> =
            if crate::api::messages::is_messages_path(path) {
                crate::api::messages::error_response
            } else {
                GatewayError::into_response
            };
        // An error answer's code goes on the request's log line.
        let refuse = |e: GatewayError, log: &mut RequestLog| {
            log.code = Some(e.code());
            shape(e)
        };
        let mut response = match auth::tenant(&runtime.config, self.keys.as_deref(), &req) {
            Err(e) => refuse(e, &mut log),
            Ok(who) if req.method() == Method::GET && trim_slash(path) == "/v1/models" => {
                log.tenant = Some(who.tenant.clone());
                models::list_models(&runtime, &who.tenant).await
            }
            Ok(who) if path.starts_with("/v1/responses/") && req.method() != Method::POST => {
                log.tenant = Some(who.tenant.clone());
                let id = &path["/v1/responses/".len()..];
                let store = self.store.as_ref();
                match crate::api::responses::stored(store, &who.tenant, req.method(), id).await {
                    Ok(r) => r,
                    Err(e) => refuse(e, &mut log),
                }
            }
            Ok(who) => {
                let tenant = who.tenant.clone();
                log.tenant = Some(tenant.clone());
                let scope = crate::telemetry::scope::Scope {
                    tenant: tenant.clone(),
                    request_id: Some(id.clone()),
                    trace: log.trace.clone(),
                    meter: None,
                };
                let mut rate_headers = Vec::new();
                // Boxed once: the wrappers below then move a pointer, not
                // the whole request future (kilobytes, copied per layer).
                let proxied = Box::pin(proxy::proxy(
                    &runtime,
                    &self.limits,
                    &self.limiter,
                    self.store.as_ref(),
                    req,
                    &who,
                    &mut log,
                    &mut rate_headers,
                ));
                let (result, attempted) = crate::upstream::noting_attempts(
                    crate::telemetry::scope::within(scope, proxied),
                )
                .await;
                log.attempted = attempted;
                let mut response = match result {
                    Ok(r) => r,
                    Err(e) => refuse(e, &mut log),
                };
                for (name, value) in rate_headers {
                    response.headers_mut().insert(name, value);
                }
                response
            }
        };
        request_id::tag(&mut response, id);
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
}

/// `response` keeping its connection busy (`busy`) until its body ends.
fn holding(response: Response<Body>, busy: Option<Guard>) -> Response<Body> {
    match busy {
        None => response,
        Some(busy) => response.map(|b| {
            body::boxed(http_body_util::BodyExt::map_frame(b, move |frame| {
                let _busy = &busy;
                frame
            }))
        }),
    }
}

/// The MCP door's service.
type McpService = rmcp::transport::streamable_http_server::StreamableHttpService<
    crate::api::mcp::McpDoor,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
>;

/// `[mcp_gateway]`, kept from start-up (its path cannot change on reload).
struct McpGateway {
    path: String,
    service: McpService,
    /// The open `GET` change streams.
    streams: Arc<KeyStreams>,
    /// What each key found with `tool_search`.
    found: Arc<crate::api::mcp::Found>,
}

/// Closes every stream in `streams` whose key no longer names who opened
/// it under `config` and the managed `keys`.
fn recheck(streams: &[Arc<KeyStreams>], config: &Config, keys: Option<&ManagedKeys>) {
    for kind in streams {
        kind.recheck(|key| auth::viewer_of(config, keys, key));
    }
}

/// `[mcp_gateway]`'s path: the caller, identified as on `/v1`, and the
/// request's runtime handed with the request to the MCP service; a `GET`
/// for the change stream takes a place among `mcp`'s streams.
async fn mcp_door<B>(
    mcp: &McpGateway,
    caller: Result<crate::api::mcp::McpCaller, GatewayError>,
    runtime: Arc<Runtime>,
    req: Request<B>,
) -> Response<Body>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    let streams = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    if req.method() == http::Method::GET && streams {
        let key = auth::stream_key(&runtime.config, &req);
        let who = crate::api::viewer::Viewer::Tenant(caller.tenant.name.clone());
        return match mcp.streams.open(&key, &who) {
            Ok(ticket) => crate::api::mcp::list_changes(runtime, caller, ticket),
            Err(e) => e.into_response(),
        };
    }
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(caller);
    parts.extensions.insert(runtime);
    let body = http_body_util::BodyExt::map_err(body, |e| -> BoxError { e.into() });
    let request = Request::from_parts(parts, body);
    match tower::ServiceExt::oneshot(mcp.service.clone(), request).await {
        Ok(response) => response.map(body::boxed),
        Err(never) => match never {},
    }
}

/// `/v1/models/` is `/v1/models`.
fn trim_slash(path: &str) -> &str {
    path.strip_suffix('/').unwrap_or(path)
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
    use http::StatusCode;
    use http_body_util::{BodyExt, Full};
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

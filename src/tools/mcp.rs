//! MCP servers, through the official SDK (`rmcp`, client side): stdio child
//! processes and streamable HTTP.
//!
//! The servers live on one thread of their own (`toolgate-tools`, a
//! single-threaded runtime) so the request workers never host their tasks. Each
//! server has a supervisor that connects, lists the tools, re-lists them on
//! `notifications/tools/list_changed`, and reconnects with backoff when the
//! child exits or the connection breaks. Workers call tools through the
//! server's `Peer`, a channel handle that works from any runtime.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    PaginatedRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RoleClient, ServiceError};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::gateway_tools::CHILD_ENV_ALLOWLIST;
use crate::config::{McpServerConfig, McpTransport};
use crate::metrics as m;
use crate::tools::GatewayTool;

mod listing;
mod traced;
use listing::Listing;

/// How long connecting and the first `tools/list` may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Reconnection backoff: doubles from the first value up to the second.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(30));
/// Calls timed out in a row after which the session is renewed (a server
/// restarted while toolgate was idle forgets the session, and its answers to
/// it never reach the call). The call that timed out is not run again.
const TIMEOUTS_TO_RECONNECT: usize = 2;
/// A connection up this long resets the reconnection backoff; one that
/// fails sooner (e.g. it lists too many tools) keeps it growing.
const STABLE: Duration = Duration::from_secs(60);
/// Calls in flight at once to one streamable HTTP server (more wait their turn).
const MAX_HTTP_CALLS: usize = 64;
/// Longest stderr line of a child that is logged (the rest is cut).
const MAX_LOG_LINE: usize = 2048;

/// Where a server stands.
#[derive(Debug, Clone)]
pub enum State {
    /// Not connected yet, or reconnecting after [`State::Down`].
    Starting,
    Up {
        peer: Peer<RoleClient>,
        tools: Arc<[Arc<GatewayTool>]>,
    },
    Down {
        error: String,
        /// When the next attempt to connect starts (none: no more).
        retry_in: Option<Duration>,
    },
}

impl State {
    pub fn is_up(&self) -> bool {
        matches!(self, State::Up { .. })
    }

    /// Why a server is down and when it is tried again, as the gateway
    /// reports it (`/readyz`, a `503`).
    pub fn down_reason(error: &str, retry_in: Option<Duration>) -> String {
        match retry_in {
            Some(after) => format!("{error} (retrying in {:.1}s)", after.as_secs_f64()),
            None => error.to_owned(),
        }
    }
}

/// Why a call got no result from the server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("MCP server `{0}` is not connected")]
    NotConnected(String),
    #[error("timed out after {0:.1}s")]
    Timeout(f64),
    #[error("{0}")]
    Failed(String),
}

/// One supervised server.
struct Server {
    config: Arc<McpServerConfig>,
    state: watch::Sender<Arc<State>>,
    /// The host's count of state changes, bumped with every new state.
    changes: Arc<watch::Sender<u64>>,
    /// A call found the connection broken: reconnect now.
    broken: Notify,
    /// Calls timed out in a row on this connection (a session the server
    /// forgot answers nothing): at [`TIMEOUTS_TO_RECONNECT`] it is renewed.
    timeouts: AtomicUsize,
    /// Calls in flight on this connection; a server retired by a reload
    /// is stopped once they are done.
    calls: AtomicUsize,
    /// Woken when `calls` drops to 0.
    idle: Notify,
    stop: CancellationToken,
    /// The names of the tools it offered when last up: a model that calls
    /// one while it is down is told so, and the call never goes to the
    /// client.
    known: Mutex<Arc<[String]>>,
}

impl Server {
    /// The server's new state, announced to whoever watches the host.
    fn set(&self, state: State) {
        self.state.send_replace(Arc::new(state));
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// A call in flight on a server, counted until dropped.
struct InFlightCall(Arc<Server>);

impl InFlightCall {
    fn start(server: Arc<Server>) -> Self {
        server.calls.fetch_add(1, Ordering::AcqRel);
        InFlightCall(server)
    }
}

impl Drop for InFlightCall {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Stops a server a reload replaced or removed once the calls that started
/// on it are done (they finish on the config they started with), or after
/// its call timeout.
async fn retire(server: Arc<Server>) {
    let drained = async {
        loop {
            let idle = server.idle.notified();
            if server.calls.load(Ordering::Acquire) == 0 {
                break;
            }
            idle.await;
        }
    };
    let _ = tokio::time::timeout(server.config.timeout + Duration::from_secs(1), drained).await;
    server.stop.cancel();
}

/// Every configured MCP server, connected and supervised on the tools thread.
pub struct McpHost {
    servers: Mutex<HashMap<String, Arc<Server>>>,
    /// Bumped whenever a server's state (and so its tools) changes.
    changes: Arc<watch::Sender<u64>>,
    /// The tools thread's runtime, and the supervisors running on it.
    runtime: Option<(tokio::runtime::Handle, TaskTracker)>,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl McpHost {
    /// Starts the tools thread and a supervisor per server. With no servers,
    /// nothing is started.
    pub fn start(configs: &[Arc<McpServerConfig>]) -> McpHost {
        let shutdown = CancellationToken::new();
        let mut host = McpHost {
            servers: Mutex::new(HashMap::new()),
            changes: Arc::new(watch::Sender::new(0)),
            runtime: None,
            shutdown: shutdown.clone(),
            thread: None,
        };
        if configs.is_empty() {
            return host;
        }
        // reqwest (streamable HTTP) takes rustls' process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        match start_thread(shutdown) {
            Ok((thread, runtime, tracker)) => {
                host.thread = Some(thread);
                host.runtime = Some((runtime, tracker));
                host.reconcile(configs);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the MCP tools thread");
                let mut servers = host
                    .servers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for config in configs {
                    let state = State::Down {
                        error: format!("the tools thread did not start: {e}"),
                        retry_in: None,
                    };
                    servers.insert(
                        config.name.clone(),
                        Arc::new(Server {
                            config: config.clone(),
                            state: watch::Sender::new(Arc::new(state)),
                            changes: host.changes.clone(),
                            broken: Notify::new(),
                            timeouts: AtomicUsize::new(0),
                            calls: AtomicUsize::new(0),
                            idle: Notify::new(),
                            stop: CancellationToken::new(),
                            known: Mutex::default(),
                        }),
                    );
                }
            }
        }
        host
    }

    /// Brings the running servers in line with `configs` (on reload): servers
    /// whose config is unchanged keep running; others stop or start.
    pub fn reconcile(&self, configs: &[Arc<McpServerConfig>]) {
        let Some((runtime, tracker)) = &self.runtime else {
            if !configs.is_empty() {
                tracing::warn!(
                    "MCP servers added by a reload need a restart (none were configured at start)"
                );
            }
            return;
        };
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.retain(|name, server| {
            let keep = configs
                .iter()
                .any(|c| &c.name == name && **c == *server.config);
            if !keep {
                if !configs.iter().any(|c| &c.name == name) {
                    metrics::gauge!(m::MCP_SERVER_UP, "server" => name.clone()).set(0.0);
                }
                tracker.spawn_on(retire(server.clone()), runtime);
            }
            keep
        });
        for config in configs {
            if servers.contains_key(&config.name) {
                continue;
            }
            let server = Arc::new(Server {
                config: config.clone(),
                state: watch::Sender::new(Arc::new(State::Starting)),
                changes: self.changes.clone(),
                broken: Notify::new(),
                timeouts: AtomicUsize::new(0),
                calls: AtomicUsize::new(0),
                idle: Notify::new(),
                stop: self.shutdown.child_token(),
                known: Mutex::default(),
            });
            metrics::gauge!(m::MCP_SERVER_UP, "server" => config.name.clone()).set(0.0);
            tracker.spawn_on(supervise(server.clone()), runtime);
            servers.insert(config.name.clone(), server);
        }
    }

    fn server(&self, name: &str) -> Option<Arc<Server>> {
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Changes whenever a server's state, and so the tools it offers,
    /// changes (it connected, relisted after `list_changed`, went down).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The server's state now (`Down` for a name that is not configured).
    pub fn state(&self, name: &str) -> Arc<State> {
        match self.server(name) {
            Some(s) => s.state.borrow().clone(),
            None => Arc::new(State::Down {
                error: "not configured".into(),
                retry_in: None,
            }),
        }
    }

    /// The names of the tools `name` offered when it was last up (none if
    /// it never was).
    pub fn known(&self, name: &str) -> Arc<[String]> {
        self.server(name)
            .map(|s| {
                s.known
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            })
            .unwrap_or_default()
    }

    /// Waits until every server has connected or failed once, or `deadline`.
    pub async fn settled(&self, deadline: Duration) {
        let servers: Vec<Arc<Server>> = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let wait = async {
            for server in servers {
                let mut rx = server.state.subscribe();
                let _ = rx.wait_for(|s| !matches!(**s, State::Starting)).await;
            }
        };
        let _ = tokio::time::timeout(deadline, wait).await;
    }

    /// Calls `tool` (its name on the server) on `server`.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, CallError> {
        let Some(handle) = self.server(server) else {
            return Err(CallError::NotConnected(server.to_owned()));
        };
        let State::Up { peer, .. } = &*handle.state.borrow().clone() else {
            return Err(CallError::NotConnected(server.to_owned()));
        };
        let _in_flight = InFlightCall::start(handle.clone());
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // The call's span is the parent of the server's (MCP's `_meta.traceparent`;
        // a streamable-HTTP server gets the header too).
        if let Some(traceparent) = crate::telemetry::scope::trace()
            .as_ref()
            .and_then(crate::telemetry::propagate::traceparent)
        {
            params
                .meta
                .get_or_insert_with(Default::default)
                .set_traceparent(traceparent);
        }
        // Dropping the call (timeout, client gone) sends the server a cancellation.
        match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => {
                if handle.timeouts.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_TO_RECONNECT {
                    handle.timeouts.store(0, Ordering::Relaxed);
                    handle.broken.notify_one();
                }
                Err(CallError::Timeout(timeout.as_secs_f64()))
            }
            Ok(Ok(result)) => {
                handle.timeouts.store(0, Ordering::Relaxed);
                Ok(result)
            }
            Ok(Err(e)) => {
                if matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) {
                    handle.broken.notify_one();
                }
                Err(CallError::Failed(describe(&e)))
            }
        }
    }
}

/// A call's failure as a sentence the model and an operator can read
/// (rmcp's own messages name Rust types: `Transport [rmcp::…<…>] error`).
fn describe(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) => format!("the server answered with an error: {}", e.message),
        ServiceError::TransportSend(e) => format!(
            "the request could not be sent to the server: {}",
            crate::config::redact::in_text(&e.error.to_string())
        ),
        ServiceError::TransportClosed => "the connection to the server closed".into(),
        ServiceError::UnexpectedResponse => "the server sent an answer of the wrong kind".into(),
        ServiceError::Cancelled { .. } => "the call was cancelled".into(),
        ServiceError::Timeout { .. } => "the server did not answer in time".into(),
        other => other.to_string(),
    }
}

type Started = (
    std::thread::JoinHandle<()>,
    tokio::runtime::Handle,
    TaskTracker,
);

/// The `toolgate-tools` thread and its runtime, which runs until `stop`.
fn start_thread(stop: CancellationToken) -> std::io::Result<Started> {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let tracker = TaskTracker::new();
    let thread = std::thread::Builder::new()
        .name("toolgate-tools".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = handle_tx.send(Err(e));
                    return;
                }
            };
            let _ = handle_tx.send(Ok((runtime.handle().clone(), tracker.clone())));
            runtime.block_on(async {
                stop.cancelled().await;
                // Let each supervisor close its session and its child.
                tracker.close();
                let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
    let (runtime, tracker) = handle_rx
        .recv()
        .map_err(|_| std::io::Error::other("the tools thread did not start"))??;
    Ok((thread, runtime, tracker))
}

impl Drop for McpHost {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Re-lists tools when the server says its list changed.
struct Handler {
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Connects, serves, and reconnects with backoff until stopped. The
/// backoff doubles on every failure and resets only after a connection
/// stayed up for [`STABLE`]; while it waits, the server is down with the
/// reason and when it is tried again.
async fn supervise(server: Arc<Server>) {
    let name = server.config.name.clone();
    let mut backoff = BACKOFF.0;
    let mut last_error = String::new();
    loop {
        let changed = Arc::new(Notify::new());
        let connected = tokio::select! {
            () = server.stop.cancelled() => break,
            c = tokio::time::timeout(START_TIMEOUT, connect(&server.config, changed.clone())) => c,
        };
        let running = match connected {
            Err(_) => Err(format!("did not start within {}s", START_TIMEOUT.as_secs())),
            Ok(result) => result,
        };
        let why = match running {
            Err(error) => error,
            Ok(running) => {
                let peer = running.peer().clone();
                let cancel = running.cancellation_token();
                let mut waiting = std::pin::pin!(running.waiting());
                let mut up_since = None;
                let mut listed = list(&server, &peer).await;
                let why = loop {
                    match &listed {
                        Ok(()) => {
                            up_since.get_or_insert_with(Instant::now);
                        }
                        Err(error) => {
                            cancel.cancel();
                            let _ = (&mut waiting).await;
                            break error.clone();
                        }
                    }
                    tokio::select! {
                        quit = &mut waiting => {
                            break match quit {
                                Ok(reason) => format!("the connection ended ({reason:?})"),
                                Err(e) => format!("the connection failed: {e}"),
                            };
                        }
                        () = changed.notified() => listed = list(&server, &peer).await,
                        () = server.broken.notified() => {
                            listed = Err("calls found the session broken or unanswered; renewing it".into());
                        }
                        () = server.stop.cancelled() => {
                            cancel.cancel();
                            let _ = (&mut waiting).await;
                            break String::new();
                        }
                    }
                };
                if up_since.is_some_and(|t: Instant| t.elapsed() >= STABLE) {
                    backoff = BACKOFF.0;
                }
                why
            }
        };
        if server.stop.is_cancelled() {
            break;
        }
        // Logged when the reason changes, not on every attempt.
        if why != last_error {
            tracing::warn!(server = ?name, error = ?why, retry_in_ms = backoff.as_millis() as u64, "MCP server is down");
            last_error.clone_from(&why);
        } else {
            tracing::debug!(server = ?name, error = ?why, retry_in_ms = backoff.as_millis() as u64, "MCP server is still down");
        }
        set_down(&server, why.clone(), Some(backoff));
        tokio::select! {
            () = server.stop.cancelled() => break,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF.1);
        server.set(State::Starting);
    }
    // The gauge is left to the server that replaced this one, if any
    // (`reconcile` zeroes it for a server a reload removed).
}

fn set_down(server: &Server, error: String, retry_in: Option<Duration>) {
    metrics::gauge!(m::MCP_SERVER_UP, "server" => server.config.name.clone()).set(0.0);
    server.set(State::Down { error, retry_in });
}

type Running = rmcp::service::RunningService<RoleClient, Handler>;

async fn connect(config: &McpServerConfig, changed: Arc<Notify>) -> Result<Running, String> {
    let handler = Handler { changed };
    match &config.transport {
        McpTransport::Stdio { program, args, env } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args).env_clear().kill_on_drop(true);
            for var in CHILD_ENV_ALLOWLIST {
                if let Some(value) = std::env::var_os(var) {
                    command.env(var, value);
                }
            }
            command.envs(env);
            let (transport, stderr) = TokioChildProcess::builder(command)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {program:?}: {e}"))?;
            let tail = Arc::new(std::sync::Mutex::new(StderrTail::default()));
            let reader = stderr
                .map(|stderr| tokio::spawn(log_stderr(config.name.clone(), stderr, tail.clone())));
            match handler.serve(transport).await {
                Ok(running) => Ok(running),
                Err(e) => {
                    // The child's last words say why; give its stderr a moment to end.
                    if let Some(reader) = reader {
                        let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                    }
                    let tail = tail
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .joined();
                    Err(if tail.is_empty() {
                        format!("initialization failed: {}", init_cause(&e))
                    } else {
                        format!("initialization failed; its stderr ends: {tail}")
                    })
                }
            }
        }
        McpTransport::Http { url, headers } => {
            let mut transport = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .max_concurrent_requests(MAX_HTTP_CALLS);
            transport.custom_headers = headers.iter().cloned().collect();
            // A response stream that breaks is resumed a few times, then the
            // call fails: a server that died must not hold its calls until
            // their timeouts (the default policy retries forever).
            let mut resume = ExponentialBackoff::default();
            resume.max_times = Some(3);
            resume.base_duration = Duration::from_millis(250);
            resume.max_delay = Some(Duration::from_secs(2));
            transport.retry_config = Arc::new(resume);
            let client = traced::Traced::new()?;
            handler
                .serve(StreamableHttpClientTransport::with_client(
                    client, transport,
                ))
                .await
                .map_err(|e| format!("initialization failed: {}", init_cause(&e)))
        }
    }
}

/// Lists the server's tools and publishes them.
async fn list(server: &Server, peer: &Peer<RoleClient>) -> Result<(), String> {
    let listed = tokio::time::timeout(START_TIMEOUT, list_pages(peer))
        .await
        .map_err(|_| {
            format!(
                "tools/list did not answer within {}s",
                START_TIMEOUT.as_secs()
            )
        })??;
    let config = &server.config;
    let tools = listing::offered(config, listed)?;
    tracing::info!(server = ?config.name, tools = tools.len(), "MCP server ready");
    tracing::debug!(server = ?config.name, peer_info = ?peer.peer_info(), "MCP server's initialize result");
    metrics::gauge!(m::MCP_SERVER_UP, "server" => config.name.clone()).set(1.0);
    *server
        .known
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        tools.iter().map(|t| t.name.clone()).collect();
    server.set(State::Up {
        peer: peer.clone(),
        tools: tools.into(),
    });
    Ok(())
}

/// Every page of `tools/list`, within the bounds [`Listing`] keeps.
async fn list_pages(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, String> {
    let mut listing = Listing::default();
    let mut cursor = None;
    loop {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        match listing.page(page.tools, page.next_cursor)? {
            Some(next) => cursor = Some(next),
            None => return Ok(listing.into_tools()),
        }
    }
}

/// The last lines a child wrote to stderr, for the reason it is down.
#[derive(Debug, Default)]
struct StderrTail {
    lines: std::collections::VecDeque<String>,
}

impl StderrTail {
    /// Lines kept, and the longest kept of each.
    const LINES: usize = 3;
    const LINE_CHARS: usize = 300;

    fn push(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if self.lines.len() == Self::LINES {
            self.lines.pop_front();
        }
        self.lines
            .push_back(line.chars().take(Self::LINE_CHARS).collect());
    }

    fn joined(&self) -> String {
        self.lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

/// Why `initialize` failed. A transport error keeps its cause in a field
/// the error chain does not follow: followed here.
fn init_cause(error: &rmcp::service::ClientInitializeError) -> String {
    match error {
        rmcp::service::ClientInitializeError::TransportError { error, context } => {
            format!("{} ({context})", cause(error))
        }
        other => cause(other),
    }
}

/// An rmcp error as one readable line: the messages of its source chain
/// (through the HTTP client's error, which rmcp does not expose as a
/// source), each once, with the Rust type names some carry removed.
fn cause(error: &(dyn std::error::Error + 'static)) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = without_type_names(&e.to_string());
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        next = match e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(inner)) => Some(inner),
            _ => e.source(),
        };
    }
    if line.is_empty() {
        "the connection failed".to_owned()
    } else {
        // The HTTP client's errors quote the URL, query token and all.
        crate::config::redact::in_text(&line).into_owned()
    }
}

/// `Transport [rmcp::…<…>] error: x` → `Transport error: x`.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').map(|c| open + c);
        match close {
            Some(close) if rest[open..close].contains("::") => {
                out.push_str(rest[..open].trim_end());
                rest = &rest[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = &rest[open + 1..];
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// A child's stderr, line by line, as log lines of its server; the last
/// few are kept in `tail`. A line longer than [`MAX_LOG_LINE`] is cut, so a
/// child cannot make toolgate buffer without bound.
async fn log_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<std::sync::Mutex<StderrTail>>,
) {
    let mut line: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut cut = false;
    let ended = |line: &[u8], cut: bool| {
        log_line(&server, line, cut);
        tail.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(&String::from_utf8_lossy(line));
    };
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                ended(&line, cut);
                line.clear();
                cut = false;
            } else if line.len() < MAX_LOG_LINE {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        ended(&line, cut);
    }
}

fn log_line(server: &str, line: &[u8], cut: bool) {
    let line = String::from_utf8_lossy(line);
    tracing::info!(target: "toolgate::mcp", server = ?server, line = ?line, cut, "MCP server stderr");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_leave_error_text_and_other_brackets_stay() {
        assert_eq!(
            without_type_names(
                "Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] error: Client error: boom"
            ),
            "Transport error: Client error: boom"
        );
        assert_eq!(
            without_type_names("list [a, b] is [short"),
            "list [a, b] is [short"
        );
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_lines_short() {
        let mut tail = StderrTail::default();
        for line in ["one", "", "two", "three", &"x".repeat(1000)] {
            tail.push(line);
        }
        let joined = tail.joined();
        assert!(joined.starts_with("two | three | xxx"), "{joined}");
        assert_eq!(
            joined.len(),
            "two | three | ".len() + StderrTail::LINE_CHARS
        );
    }
}

//! Configuration: loaded once, validated once, then immutable.
//!
//! The file (or the embedded default) is merged with `TOOLGATE_*` env
//! overrides by figment into a [`raw::RawConfig`], then [`Config::from_raw`]
//! turns it into types that cannot be invalid: parsed socket addresses and
//! URIs, `Duration`s, compiled globs, resolved API keys. Every error names
//! the key path it is about.

pub mod auth;
pub mod cors;
mod env;
pub mod gateway_tools;
pub mod limits;
pub mod raw;
pub mod redact;
pub mod store;
pub mod telemetry;
pub mod upstream;
mod userinfo;
pub mod vocabulary;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use globset::{Glob, GlobSet, GlobSetBuilder};
use http::header::{HeaderMap, HeaderValue};
use http::uri::{Authority, Scheme};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use auth::{Auth, Caller, Tenant};
pub use gateway_tools::{
    GatewaySettings, HttpToolConfig, McpServerConfig, McpTransport, ToolSource,
};
pub use raw::{Api, Mode, OnInvalid, OnUngrounded, RawConfig, Readiness, Record, ShowGatewayTools};
pub use store::StoreConfig;
pub use telemetry::TelemetryConfig;
pub use upstream::{HealthPolicy, RetryPolicy, UpstreamTarget};
pub use vocabulary::{
    Builtin, Constrain, DEFAULT_MAX_REPAIRS, DEFAULT_MAX_TOOL_RESULT_CHARS, ResultRole,
    SEARCH_TOOL, Syntax, UNLISTED_FIELD,
};

/// The config compiled into the binary, served when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../config/toolgate.toml");

/// A config problem, with the key path it concerns (`providers[1].base_url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Where the config text comes from.
#[derive(Debug, Clone)]
pub enum Source<'a> {
    /// A file that must exist: figment would silently read a missing file as empty.
    File(&'a Path),
    Embedded,
}

#[derive(Debug)]
pub struct Config {
    pub server: ServerConfig,
    pub providers: Vec<Arc<Provider>>,
    /// `[[mcp_servers]]`, in file order.
    pub mcp_servers: Vec<Arc<McpServerConfig>>,
    /// `[[http_tools]]`, in file order.
    pub http_tools: Vec<Arc<HttpToolConfig>>,
    /// `[store]`, when configured.
    pub store: Option<StoreConfig>,
    /// `[telemetry]`, when configured: traces are exported.
    pub telemetry: Option<TelemetryConfig>,
    /// `[mcp_gateway]`, when configured: the gateway tools served over MCP.
    pub mcp_gateway: Option<gateway_tools::McpGatewayConfig>,
    /// What was loaded, kept for `toolgate check` (printed with secrets redacted).
    pub raw: RawConfig,
    /// What is valid but likely not meant, one sentence each (`check`
    /// prints them, serving logs them).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub shutdown_grace: Duration,
    pub max_concurrent_requests: Option<usize>,
    pub request_head_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub h2_keepalive: Duration,
    pub write_stall_timeout: Duration,
    /// `None`: no bound.
    pub max_buffered_request_bytes: Option<usize>,
    /// Worker threads (`workers`, or one per available core when 0).
    pub workers: NonZeroUsize,
    /// Extra roots for https upstreams, from `upstream_ca_bundle`.
    pub upstream_ca: Vec<CertificateDer<'static>>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `[server.auth]`: inbound keys and their tenants; `None`: one
    /// anonymous tenant.
    pub auth: Option<Arc<Auth>>,
    pub readiness: Readiness,
    /// `[server.cors]`; `None`: browsers may not call across origins.
    pub cors: Option<cors::Cors>,
    /// `[server.limits]`: where the keys' limits and budgets are counted.
    pub limiter: limits::LimiterConfig,
}

#[derive(Debug)]
pub struct Provider {
    pub name: String,
    /// Where its requests go: one or more, each with its key and headers.
    pub targets: Vec<UpstreamTarget>,
    /// Providers tried in order when every target failed before answering.
    pub failover: Vec<String>,
    pub retry: RetryPolicy,
    pub health: HealthPolicy,
    pub model_patterns: Vec<String>,
    pub models: GlobSet,
    pub model_rewrite: HashMap<String, String>,
    pub api: Api,
    pub tools: ToolsConfig,
    /// `[providers.pricing]`: what its tokens cost.
    pub pricing: limits::Pricing,
    /// The output tokens a request without `max_tokens` reserves against its
    /// tenant's tokens per minute and budget.
    pub default_max_tokens: u64,
}

impl Provider {
    /// Whether every target is an HTTP upstream (none is the in-process demo).
    pub fn all_http(&self) -> bool {
        self.targets
            .iter()
            .all(|t| matches!(t.endpoint, Target::Http(_)))
    }
}

/// Where a target's requests go.
#[derive(Debug, Clone)]
pub enum Target {
    Http(HttpTarget),
    /// The built-in scripted model, answered in process.
    Demo(DemoConfig),
}

#[derive(Debug, Clone)]
pub struct HttpTarget {
    pub scheme: Scheme,
    pub authority: Authority,
    /// Path prefix without a trailing slash, e.g. `/v1` or `` (empty).
    pub base_path: String,
}

#[derive(Debug, Clone, Copy)]
pub struct DemoConfig {
    pub chunk_chars: usize,
    pub chunk_delay: Duration,
}

#[derive(Debug, Clone)]
pub struct ToolsConfig {
    pub mode: Mode,
    pub syntax: Syntax,
    pub on_invalid: OnInvalid,
    /// Natural mode: a call with a value the conversation does not hold is
    /// asked about once (`ask`), or not (`off`).
    pub on_ungrounded: OnUngrounded,
    /// Natural mode: how calls are held to their schemas as they are written.
    pub constrain: Constrain,
    pub fallback: Option<FallbackConfig>,
    pub instructions: Option<String>,
    pub max_tool_result_chars: usize,
    pub result_role: ResultRole,
    pub skip_think: bool,
    pub max_block_bytes: usize,
    /// Passthrough: calls the model wrote as text become native calls.
    pub rescue_text_calls: bool,
    pub pretty: bool,
    pub separator: String,
    /// Tools toolgate runs itself for this provider; `None` when it has none.
    pub gateway: Option<GatewaySettings>,
    /// `tool_search`: large tool lists are searched, not declared.
    pub search: Option<ToolSearch>,
}

/// `tool_search = true`: when a request may call more tools than
/// `threshold`, the model is offered `search_tools` instead of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSearch {
    pub threshold: usize,
    /// Model calls per client request (`max_rounds`): each search is one.
    pub max_rounds: u32,
}

#[derive(Debug, Clone)]
pub struct FallbackConfig {
    pub provider: String,
    pub model: String,
    pub attempts: u32,
    pub timeout: Duration,
    /// Repairs one response may ask for, all choices together; `0` asks for none.
    pub max_calls: usize,
}

impl ToolsConfig {
    /// Whether answers are read for calls written as text: natural mode,
    /// or a passthrough provider with `rescue_text_calls`.
    pub fn reads_text_calls(&self) -> bool {
        self.mode == Mode::Natural || self.rescue_text_calls
    }

    /// Whether chat requests go through the gateway's tool loop: it runs
    /// gateway tools, or searches tools.
    pub fn runs_loop(&self) -> bool {
        self.gateway.is_some() || self.search.is_some()
    }
}

impl Config {
    /// Loads from a file or the embedded default, then applies `TOOLGATE_*` env overrides.
    pub fn load(source: Source<'_>) -> Result<Config, ConfigError> {
        let text = match source {
            Source::File(path) => std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new(
                    "",
                    format!("cannot read config file {}: {e}", path.display()),
                )
            })?,
            Source::Embedded => EMBEDDED_DEFAULT.to_owned(),
        };
        // Provider overrides name their provider, which figment's env
        // provider cannot (providers are a list): applied to the document.
        let mut applied = Vec::new();
        let text = match text.parse::<toml::Table>() {
            Ok(mut doc) => {
                let vars = std::env::vars_os()
                    .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
                applied = env::apply_provider_overrides(&mut doc, vars)?;
                if applied.is_empty() {
                    text
                } else {
                    toml::to_string(&doc).map_err(|e| {
                        ConfigError::new("", format!("cannot apply the provider overrides: {e}"))
                    })?
                }
            }
            // figment reports the syntax error below, with its place.
            Err(_) => text,
        };
        // The `server` and `telemetry` keys set from the environment, so
        // that an error on one names the variable to fix.
        applied.extend(std::env::vars_os().filter_map(|(k, _)| {
            let var = k.into_string().ok()?;
            let key = var.strip_prefix("TOOLGATE_")?;
            let path = key.to_ascii_lowercase().replace("__", ".");
            (path.starts_with("server.") || path.starts_with("telemetry."))
                .then_some(env::Applied { var, path })
        }));
        let figment = Figment::new().merge(Toml::string(&text)).merge(
            Env::prefixed("TOOLGATE_")
                .split("__")
                // Only `server` and `telemetry` keys come from figment's env
                // provider; other TOOLGATE_* variables (TOOLGATE_CONFIG,
                // TOOLGATE_LOG, ...) are not config keys. figment hands the
                // filter the key before lowercasing it.
                .filter(|key| {
                    let key = key.as_str().to_ascii_lowercase().replace("__", ".");
                    key.starts_with("server.") || key.starts_with("telemetry.")
                }),
        );
        Self::from_figment(figment, &text).map_err(|e| env::blame(e, &applied))
    }

    /// Parses config text alone, without env overrides (for tests and tools).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::from_figment(Figment::new().merge(Toml::string(text)), text)
    }

    fn from_figment(figment: Figment, text: &str) -> Result<Config, ConfigError> {
        let mut raw: RawConfig = figment.extract().map_err(figment_error)?;
        raw.order_pricing(text);
        Self::from_raw(raw)
    }

    pub fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let mut server = server(&raw.server)?;
        let mcp_servers = gateway_tools::mcp_servers(&raw.mcp_servers)?;
        let http_tools = gateway_tools::http_tools(&raw.http_tools, &mcp_servers)?;
        if let Some(raw_auth) = &raw.server.auth {
            let entries: std::collections::HashSet<String> = mcp_servers
                .iter()
                .map(|s| s.name.clone())
                .chain(http_tools.iter().map(|t| t.name.clone()))
                .chain(Builtin::ALL.iter().map(|b| format!("builtin:{}", b.name())))
                .collect();
            server.auth = Some(Arc::new(auth::auth(raw_auth, &entries)?));
        }
        if raw.providers.is_empty() {
            // An empty or truncated file would otherwise serve 404 for every model.
            return Err(ConfigError::new(
                "providers",
                "at least one [[providers]] entry is required",
            ));
        }
        let store = raw.store.as_ref().map(store::store).transpose()?;
        let telemetry = raw
            .telemetry
            .as_ref()
            .map(telemetry::telemetry)
            .transpose()?;
        let mcp_gateway = raw
            .mcp_gateway
            .as_ref()
            .map(|m| gateway_tools::mcp_gateway(m, &mcp_servers, &http_tools))
            .transpose()?;
        let keeps_state = store.is_some()
            || !mcp_servers.is_empty()
            || !http_tools.is_empty()
            || mcp_gateway.is_some();
        if keeps_state
            && server.auth.is_none()
            && !server.listen.ip().is_loopback()
            && !raw.server.allow_open_store
        {
            // Transcripts, stored responses and tool servers are open to
            // anyone who can reach the port.
            return Err(ConfigError::new(
                "server.listen",
                format!(
                    "{} is not a loopback address, and [store] or gateway tool servers are configured without [server.auth]: add [server.auth], or set server.allow_open_store = true to serve them open knowingly",
                    server.listen
                ),
            ));
        }
        if server.auth.as_ref().is_some_and(|a| a.managed) && store.is_none() {
            return Err(ConfigError::new(
                "server.auth.managed_keys",
                "keeps the keys in the transcript store: configure a [store] (SQLite, or PostgreSQL for several replicas)",
            ));
        }
        upstream::check_failover(&raw.providers)?;
        let mut providers = Vec::with_capacity(raw.providers.len());
        for (i, p) in raw.providers.iter().enumerate() {
            let path = format!("providers[{i}]");
            if raw.providers[..i].iter().any(|q| q.name == p.name) {
                return Err(ConfigError::new(
                    format!("{path}.name"),
                    format!("duplicate provider name {:?}", p.name),
                ));
            }
            if let Some(q) = raw.providers[..i]
                .iter()
                .find(|q| q.name.eq_ignore_ascii_case(&p.name))
            {
                return Err(ConfigError::new(
                    format!("{path}.name"),
                    format!(
                        "{:?} differs from provider {:?} only in case: a TOOLGATE_PROVIDERS__{}__… override could not tell them apart",
                        p.name,
                        q.name,
                        p.name.to_ascii_uppercase()
                    ),
                ));
            }
            let mut provider = provider(&path, p)?;
            provider.tools.gateway = gateway_tools::settings(
                &format!("{path}.tools"),
                &p.tools,
                &mcp_servers,
                &http_tools,
            )?;
            if provider.api == Api::Anthropic && provider.tools.runs_loop() {
                return Err(ConfigError::new(
                    format!("{path}.api"),
                    "a provider with `api = \"anthropic\"` passes /v1/messages through untouched, so it cannot run gateway tools or tool search",
                ));
            }
            providers.push(Arc::new(provider));
        }
        for (i, p) in providers.iter().enumerate() {
            if let Some(fb) = &p.tools.fallback
                && !providers.iter().any(|q| q.name == fb.provider)
            {
                return Err(ConfigError::new(
                    format!("providers[{i}].tools.fallback"),
                    format!("names no configured provider: {:?}", fb.provider),
                ));
            }
        }
        let mut warnings = warnings(&providers);
        if let Some(auth) = &server.auth {
            warnings.extend(limits::budget_warnings(auth, &providers));
        }
        Ok(Config {
            server,
            providers,
            mcp_servers,
            http_tools,
            store,
            telemetry,
            mcp_gateway,
            raw,
            warnings,
        })
    }

    /// The effective config as TOML, with every credential redacted.
    pub fn to_redacted_toml(&self) -> String {
        redact::redacted_toml(&self.raw)
    }

    /// The tenants' names, sorted: `tenant` label values (a bounded set).
    pub fn tenant_labels(&self) -> Vec<Arc<str>> {
        match &self.server.auth {
            Some(auth) => {
                let mut names: Vec<Arc<str>> = auth.tenants().map(Arc::from).collect();
                names.sort();
                names.dedup();
                names
            }
            None => vec![Arc::from(auth::ANONYMOUS)],
        }
    }

    pub fn provider(&self, name: &str) -> Option<&Arc<Provider>> {
        self.providers.iter().find(|p| p.name == name)
    }
}

/// Turns figment's error into one line naming the key path.
fn figment_error(err: figment::Error) -> ConfigError {
    let mut path = join_path(&err.path);
    let message = match &err.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            if err.path.last() != Some(field) {
                push_key(&mut path, field);
            }
            if expected.is_empty() {
                "unknown key".to_owned()
            } else {
                format!("unknown key; expected one of: {}", expected.join(", "))
            }
        }
        figment::error::Kind::MissingField(field) => {
            if err.path.last().map(String::as_str) != Some(field.as_ref()) {
                push_key(&mut path, field);
            }
            "missing required key".to_owned()
        }
        figment::error::Kind::UnknownVariant(found, expected) => {
            format!(
                "unknown value {found:?}; expected one of: {}",
                expected.join(", ")
            )
        }
        figment::error::Kind::Message(text) => one_line(text),
        other => other.to_string(),
    };
    ConfigError::new(path, message)
}

/// A TOML parser's report (a header, the line with a caret under the
/// place, then the reason, over several lines) as one line:
/// `line 3, column 14: number too large to fit in target type: `backoff_ms = 1…``.
fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let Some(place) = lines
        .first()
        .and_then(|l| l.strip_prefix("TOML parse error at "))
    else {
        return lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(": ");
    };
    let quoted = lines
        .iter()
        .filter_map(|l| l.split_once(" | ").map(|(_, code)| code.trim()))
        .find(|code| !code.is_empty() && !code.chars().all(|c| c == '^' || c == ' '));
    let reason: Vec<&str> = lines[1..]
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('|') && !l.contains(" | "))
        .map(|l| l.trim())
        .collect();
    let mut out = format!("{place}: {}", reason.join(" "));
    if reason.iter().any(|r| r.contains("too large")) {
        out.push_str(" (at most 9223372036854775807)");
    }
    if let Some(code) = quoted {
        let code: String = code.chars().take(80).collect();
        out.push_str(&format!(": `{code}`"));
    }
    out
}

/// What a valid config likely did not mean.
fn warnings(providers: &[Arc<Provider>]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in providers.iter().enumerate() {
        for t in &p.targets {
            if let Target::Http(h) = &t.endpoint
                && !h.base_path.ends_with("/v1")
            {
                out.push(format!(
                    "`providers[{i}]` ({}): the base URL's path {:?} does not end in /v1, so chat requests go to {}/chat/completions; most servers want …/v1",
                    p.name,
                    h.base_path,
                    h.base_path
                ));
            }
        }
    }
    out
}

/// figment paths are `["providers", "0", "name"]`; we print `providers[0].name`.
fn join_path(parts: &[String]) -> String {
    let mut out = String::new();
    for part in parts {
        push_key(&mut out, part);
    }
    out
}

fn push_key(out: &mut String, key: &str) {
    if key.bytes().all(|b| b.is_ascii_digit()) && !key.is_empty() {
        out.push('[');
        out.push_str(key);
        out.push(']');
    } else {
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(key);
    }
}

pub(crate) fn secs(path: &str, value: f64) -> Result<Duration, ConfigError> {
    if value.is_finite() && value > 0.0 && value < 1e9 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(ConfigError::new(
            path,
            "must be a positive number of seconds",
        ))
    }
}

/// Most worker threads accepted: far beyond any core count, low enough that
/// a typo cannot start a million threads.
const MAX_WORKERS: usize = 1024;

fn workers(configured: usize) -> Result<NonZeroUsize, ConfigError> {
    if configured > MAX_WORKERS {
        return Err(ConfigError::new(
            "server.workers",
            format!("must be at most {MAX_WORKERS} (0: one per available core)"),
        ));
    }
    Ok(NonZeroUsize::new(configured)
        .unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)))
}

fn server(raw: &raw::RawServer) -> Result<ServerConfig, ConfigError> {
    let listen = raw.listen.parse().map_err(|_| {
        ConfigError::new(
            "server.listen",
            format!("not an IP:port address: {:?}", raw.listen),
        )
    })?;
    let max_body_bytes = usize::try_from(raw.max_body_bytes)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| ConfigError::new("server.max_body_bytes", "must be a positive size"))?;
    Ok(ServerConfig {
        listen,
        max_body_bytes,
        connect_timeout: secs("server.connect_timeout_secs", raw.connect_timeout_secs)?,
        first_byte_timeout: secs(
            "server.first_byte_timeout_secs",
            raw.first_byte_timeout_secs,
        )?,
        stream_idle_timeout: secs(
            "server.stream_idle_timeout_secs",
            raw.stream_idle_timeout_secs,
        )?,
        shutdown_grace: secs("server.shutdown_grace_secs", raw.shutdown_grace_secs)?,
        max_concurrent_requests: (raw.max_concurrent_requests > 0)
            .then_some(raw.max_concurrent_requests),
        request_head_timeout: secs(
            "server.request_head_timeout_secs",
            raw.request_head_timeout_secs,
        )?,
        body_read_timeout: secs("server.body_read_timeout_secs", raw.body_read_timeout_secs)?,
        idle_timeout: secs("server.idle_timeout_secs", raw.idle_timeout_secs)?,
        h2_keepalive: secs("server.h2_keepalive_secs", raw.h2_keepalive_secs)?,
        write_stall_timeout: secs(
            "server.write_stall_timeout_secs",
            raw.write_stall_timeout_secs,
        )?,
        max_buffered_request_bytes: usize::try_from(raw.max_buffered_request_bytes)
            .ok()
            .filter(|&n| n > 0),
        workers: workers(raw.workers)?,
        upstream_ca: match &raw.upstream_ca_bundle {
            Some(path) => certs("server.upstream_ca_bundle", path)?,
            None => Vec::new(),
        },
        tls: raw.tls.as_ref().map(tls).transpose()?,
        cors: raw.cors.as_ref().map(cors::cors).transpose()?,
        limiter: limits::limiter(raw.limits.as_ref())?,
        // Read once the tools are known (`keys[].gateway_tools` names them).
        auth: None,
        readiness: raw.readiness,
    })
}

fn certs(path: &str, file: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(file)
        .and_then(std::iter::Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| {
            ConfigError::new(
                path,
                format!("cannot read PEM certificates from {file}: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            path,
            format!("{file} holds no PEM certificate"),
        ));
    }
    Ok(certs)
}

fn tls(raw: &raw::RawTls) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let chain = certs("server.tls.cert", &raw.cert)?;
    let key = PrivateKeyDer::from_pem_file(&raw.key).map_err(|e| {
        ConfigError::new(
            "server.tls.key",
            format!("cannot read a PEM private key from {}: {e}", raw.key),
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
    .map_err(|e| {
        ConfigError::new(
            "server.tls",
            format!("certificate and key do not form a usable pair: {e}"),
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Comma-separated bearer keys from the environment variable `var`.
fn provider(path: &str, raw: &raw::RawProvider) -> Result<Provider, ConfigError> {
    let name = &raw.name;
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err(ConfigError::new(
            format!("{path}.name"),
            "must be non-empty, without '/' or whitespace (it is the routing prefix `name/model`)",
        ));
    }
    if name.contains("__") {
        return Err(ConfigError::new(
            format!("{path}.name"),
            format!(
                "{name:?} contains \"__\", which separates the parts of a TOOLGATE_PROVIDERS__<name>__<KEY> override: no override could name it"
            ),
        ));
    }
    let mut globs = GlobSetBuilder::new();
    for (j, pattern) in raw.models.iter().enumerate() {
        let glob = Glob::new(pattern).map_err(|e| {
            ConfigError::new(format!("{path}.models[{j}]"), format!("bad glob: {e}"))
        })?;
        globs.add(glob);
    }
    let models = globs
        .build()
        .map_err(|e| ConfigError::new(format!("{path}.models"), e.to_string()))?;
    let authorization = raw
        .api_key_env
        .as_deref()
        .map(|var| upstream::key(&format!("{path}.api_key_env"), var, raw.api))
        .transpose()?;
    let mut headers = HeaderMap::new();
    upstream::add_headers(path, &raw.headers, &mut headers)?;
    let targets = upstream::targets(path, raw, authorization.as_ref(), &headers)?;
    let has_demo = targets
        .iter()
        .any(|t| matches!(t.endpoint, Target::Demo(_)));
    let tools = tools(&format!("{path}.tools"), &raw.tools)?;
    if raw.api == Api::Responses && has_demo {
        return Err(ConfigError::new(
            format!("{path}.api"),
            "the built-in demo model speaks Chat Completions only",
        ));
    }
    if raw.api == Api::Anthropic && (has_demo || tools.mode != Mode::Passthrough) {
        return Err(ConfigError::new(
            format!("{path}.api"),
            "a provider with `api = \"anthropic\"` is a passthrough for /v1/messages only: it takes no demo model, no tool mode but passthrough and no gateway tools",
        ));
    }
    if raw.api == Api::Responses && tools.mode == Mode::Natural {
        return Err(ConfigError::new(
            format!("{path}.api"),
            "natural mode needs a provider that speaks Chat Completions (`api = \"chat\"`)",
        ));
    }
    if raw.api != Api::Chat && tools.rescue_text_calls {
        return Err(ConfigError::new(
            format!("{path}.tools.rescue_text_calls"),
            "reads Chat Completions answers: it needs `api = \"chat\"`",
        ));
    }
    Ok(Provider {
        name: name.clone(),
        retry: upstream::retry(&format!("{path}.retry"), &raw.retry, targets.len())?,
        health: upstream::health(&format!("{path}.health"), &raw.health)?,
        failover: raw.failover.clone(),
        targets,
        model_patterns: raw.models.clone(),
        models,
        model_rewrite: raw.model_rewrite.clone().into_iter().collect(),
        api: raw.api,
        tools,
        pricing: limits::pricing(path, &ordered_pricing(raw))?,
        default_max_tokens: limits::default_max_tokens(path, raw.default_max_tokens)?,
    })
}

/// A provider's `pricing` entries in the file's order (entries the order
/// does not know, e.g. from a test's raw config, follow in table order).
fn ordered_pricing(raw: &raw::RawProvider) -> Vec<(String, raw::limits::RawPrice)> {
    let mut entries: Vec<(String, raw::limits::RawPrice)> = raw
        .pricing_order
        .iter()
        .filter_map(|glob| Some((glob.clone(), *raw.pricing.get(glob)?)))
        .collect();
    for (glob, price) in &raw.pricing {
        if !raw.pricing_order.contains(glob) {
            entries.push((glob.clone(), *price));
        }
    }
    entries
}

/// A provider's URL, and the `Authorization` its userinfo stood for.
pub(crate) fn http_target(
    path: &str,
    url: &str,
) -> Result<(HttpTarget, Option<HeaderValue>), ConfigError> {
    let (url, basic) = userinfo::split(path, url)?;
    let uri: http::Uri = url
        .parse()
        .map_err(|_| ConfigError::new(path, format!("not a URL: {:?}", redact::url(&url))))?;
    let scheme = uri
        .scheme()
        .cloned()
        .filter(|s| *s == Scheme::HTTP || *s == Scheme::HTTPS);
    let (Some(scheme), Some(authority)) = (scheme, uri.authority().cloned()) else {
        return Err(ConfigError::new(
            path,
            format!(
                "must be an absolute http:// or https:// URL: {:?}",
                redact::url(&url)
            ),
        ));
    };
    if uri.query().is_some() {
        return Err(ConfigError::new(path, "must not carry a query string"));
    }
    let target = HttpTarget {
        scheme,
        authority,
        base_path: uri.path().trim_end_matches('/').to_owned(),
    };
    Ok((target, basic))
}

fn tools(path: &str, raw: &raw::RawTools) -> Result<ToolsConfig, ConfigError> {
    let syntax = raw.syntax.unwrap_or(match raw.mode {
        Mode::ToNatural => Syntax::ToolCall,
        _ => Syntax::Tag,
    });
    if raw.mode == Mode::ToNatural && syntax == Syntax::Python {
        // to_natural streams a call's JSON arguments into the text as they
        // arrive; the python syntax would need them rewritten as keyword
        // arguments, which that stream does not do.
        return Err(ConfigError::new(
            format!("{path}.syntax"),
            "\"python\" is a natural-mode syntax; to_natural writes tag, tool_call or bracket",
        ));
    }
    let fallback = match &raw.fallback {
        None => None,
        Some(spec) => {
            let (provider, model) = spec
                .split_once('/')
                .filter(|(p, m)| !p.is_empty() && !m.is_empty())
                .ok_or_else(|| {
                    ConfigError::new(
                        format!("{path}.fallback"),
                        format!("must be \"provider/model\", got {spec:?}"),
                    )
                })?;
            if raw.fallback_attempts == 0 {
                return Err(ConfigError::new(
                    format!("{path}.fallback_attempts"),
                    "must be at least 1",
                ));
            }
            Some(FallbackConfig {
                provider: provider.to_owned(),
                model: model.to_owned(),
                attempts: raw.fallback_attempts,
                timeout: secs(
                    &format!("{path}.fallback_timeout_secs"),
                    raw.fallback_timeout_secs,
                )?,
                max_calls: raw.fallback_max_calls,
            })
        }
    };
    if raw.on_invalid == OnInvalid::Fallback && fallback.is_none() {
        return Err(ConfigError::new(
            format!("{path}.fallback"),
            "on_invalid = \"fallback\" needs `fallback = \"provider/model\"`",
        ));
    }
    if let Some(template) = &raw.instructions
        && !template.contains("{contracts}")
    {
        return Err(ConfigError::new(
            format!("{path}.instructions"),
            "must contain the placeholder {contracts}",
        ));
    }
    if raw.separator.contains('\n') {
        return Err(ConfigError::new(
            format!("{path}.separator"),
            "must be a single line",
        ));
    }
    if raw.on_invalid != OnInvalid::Error && raw.mode == Mode::ToNatural {
        return Err(ConfigError::new(
            format!("{path}.on_invalid"),
            "applies to natural mode only; to_natural never parses calls out of model text",
        ));
    }
    if raw.max_block_bytes == 0 {
        return Err(ConfigError::new(
            format!("{path}.max_block_bytes"),
            "must be positive",
        ));
    }
    if raw.rescue_text_calls && raw.mode != Mode::Passthrough {
        return Err(ConfigError::new(
            format!("{path}.rescue_text_calls"),
            "applies to mode = \"passthrough\" only (natural mode already reads calls written as text)",
        ));
    }
    if raw.on_ungrounded != OnUngrounded::Off && raw.mode != Mode::Natural {
        return Err(ConfigError::new(
            format!("{path}.on_ungrounded"),
            "applies to mode = \"natural\" only: it asks the model about the calls natural mode reads from its text",
        ));
    }
    if raw.constrain != Constrain::Off && raw.mode != Mode::Natural {
        return Err(ConfigError::new(
            format!("{path}.constrain"),
            "applies to mode = \"natural\" only: llama.cpp refuses a grammar next to native `tools`, vLLM and SGLang constrain native calls themselves, and to_natural's upstream calls natively",
        ));
    }
    Ok(ToolsConfig {
        mode: raw.mode,
        syntax,
        on_invalid: raw.on_invalid,
        on_ungrounded: raw.on_ungrounded,
        constrain: raw.constrain,
        fallback,
        instructions: raw.instructions.clone(),
        max_tool_result_chars: raw.max_tool_result_chars,
        result_role: raw.result_role,
        skip_think: raw.skip_think,
        max_block_bytes: raw.max_block_bytes,
        rescue_text_calls: raw.rescue_text_calls,
        pretty: raw.pretty,
        separator: raw.separator.clone(),
        gateway: None,
        search: tool_search(path, raw)?,
    })
}

/// `tool_search` and `tool_search_threshold`, checked.
fn tool_search(path: &str, raw: &raw::RawTools) -> Result<Option<ToolSearch>, ConfigError> {
    if !raw.tool_search {
        return Ok(None);
    }
    if raw.tool_search_threshold > 10_000 {
        return Err(ConfigError::new(
            format!("{path}.tool_search_threshold"),
            "must be at most 10000",
        ));
    }
    if raw.max_rounds == 0 || raw.max_rounds > gateway_tools::MAX_ROUNDS_LIMIT {
        return Err(ConfigError::new(
            format!("{path}.max_rounds"),
            format!("must be between 1 and {}", gateway_tools::MAX_ROUNDS_LIMIT),
        ));
    }
    Ok(Some(ToolSearch {
        threshold: raw.tool_search_threshold,
        max_rounds: raw.max_rounds,
    }))
}

#[cfg(test)]
mod tests;

//! The config file as written: plain serde structs, every table with
//! `deny_unknown_fields` so a misspelled key is an error, never ignored.
//!
//! Nothing here is trusted. [`super::validate`] turns a [`RawConfig`] into a
//! [`super::Config`] whose fields cannot be invalid.

mod gateway;
pub mod limits;
pub mod mcp_gateway;
mod store;
mod telemetry;
mod upstream;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use gateway::{RawHttpTool, RawMcpServer, ShowGatewayTools};
pub use store::{RawStore, Record};
pub use telemetry::RawTelemetry;
pub use upstream::{RawHealth, RawRetry, RawTarget};

pub use crate::config::vocabulary::{Constrain, ResultRole, Syntax};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub providers: Vec<RawProvider>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<RawMcpServer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_tools: Vec<RawHttpTool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<RawStore>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<RawTelemetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_gateway: Option<mcp_gateway::RawMcpGateway>,
}

impl RawConfig {
    /// Notes each provider's `pricing` globs in the order `text` (the
    /// document this config was read from) writes them: the first match
    /// wins, and the table read through figment has lost that order.
    pub fn order_pricing(&mut self, text: &str) {
        let Ok(doc) = text.parse::<toml::Table>() else {
            return;
        };
        let Some(toml::Value::Array(providers)) = doc.get("providers") else {
            return;
        };
        for (raw, written) in self.providers.iter_mut().zip(providers) {
            if let Some(toml::Value::Table(pricing)) = written.get("pricing") {
                raw.pricing_order = pricing.keys().cloned().collect();
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    pub listen: String,
    /// Largest request body accepted, in bytes (413 beyond it).
    pub max_body_bytes: u64,
    pub connect_timeout_secs: f64,
    /// How long the upstream may take to send its response head.
    pub first_byte_timeout_secs: f64,
    /// How long a response body may stay silent between two frames.
    pub stream_idle_timeout_secs: f64,
    /// How long SIGTERM waits for in-flight requests before closing them.
    pub shutdown_grace_secs: f64,
    /// Requests in flight beyond this get 503 with Retry-After (0: no limit).
    pub max_concurrent_requests: usize,
    /// How long a new connection may take to send its first request head
    /// (TLS handshake and protocol detection included); then it is closed.
    pub request_head_timeout_secs: f64,
    /// How long a client may take to send a whole request body (408 beyond it).
    pub body_read_timeout_secs: f64,
    /// How long a connection with no request in flight stays open (HTTP/1.1 and HTTP/2).
    pub idle_timeout_secs: f64,
    /// Interval of HTTP/2 keep-alive pings; a peer that does not answer one
    /// within the same time is disconnected.
    pub h2_keepalive_secs: f64,
    /// How long a write to a client may stay blocked (the client stopped
    /// reading) before the connection is dropped.
    pub write_stall_timeout_secs: f64,
    /// Request body bytes buffered across all requests at once (503 beyond it; 0: no bound).
    pub max_buffered_request_bytes: u64,
    /// Worker threads, each with its own runtime (0: one per available core).
    pub workers: usize,
    /// PEM file of extra CA certificates trusted for https upstreams (internal providers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_ca_bundle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<RawAuth>,
    /// Accept a store or gateway tools on a non-loopback `listen` without
    /// `[server.auth]` (refused otherwise).
    pub allow_open_store: bool,
    /// What `/readyz` waits for: `"serving"` (the gateway can serve; tool
    /// servers that are down are named) or `"strict"` (every offered tool
    /// server up too).
    pub readiness: Readiness,
    /// Browsers' cross-origin calls; off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cors: Option<super::cors::RawCors>,
    /// Where the keys' limits and budgets are counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<limits::RawServerLimits>,
}

/// `server.readiness`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// `200` while the gateway can serve; a tool server that is down takes
    /// its tools out of its providers' offers, and a provider left with
    /// none answers `503 tool_server_unavailable` on its own.
    #[default]
    Serving,
    /// `503` while any tool server a provider offers is not up.
    Strict,
}

/// `[server.tls]`: serve HTTPS (HTTP/1.1 and HTTP/2 by ALPN).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
}

/// `[server.auth]`: require a bearer key from clients.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// Name of an env var holding comma-separated keys, each its own tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_keys_env: Option<String>,
    /// Name of an env var holding the keys that read every tenant's
    /// transcripts (`/toolgate/…`); client keys read their own tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_keys_env: Option<String>,
    /// Named tenants (`[[server.auth.keys]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<RawKey>,
    /// Keys made through `/toolgate/api/keys`, kept in `[store]`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub managed_keys: bool,
}

/// `[[server.auth.keys]]`: a named tenant, its keys and its policy.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    /// The tenant: owns what its requests store, names it in logs and the API.
    pub name: String,
    /// Env var holding one or more comma-separated keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// A file holding the tenant's keys (comma- or line-separated), read
    /// again on every reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// Globs over the requested `model`; anything else is `403 model_not_allowed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// The gateway tools this key may be offered (as `gateway_tools` names them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_tools: Option<Vec<String>>,
    /// What the tenant may use per minute and at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<limits::RawLimits>,
    /// What the tenant may spend per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<limits::RawBudget>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8080".into(),
            max_body_bytes: 32 * 1024 * 1024,
            connect_timeout_secs: 10.0,
            first_byte_timeout_secs: 300.0,
            stream_idle_timeout_secs: 120.0,
            shutdown_grace_secs: 30.0,
            max_concurrent_requests: 4096,
            request_head_timeout_secs: 30.0,
            body_read_timeout_secs: 60.0,
            idle_timeout_secs: 300.0,
            h2_keepalive_secs: 30.0,
            write_stall_timeout_secs: 60.0,
            max_buffered_request_bytes: 1024 * 1024 * 1024,
            workers: 0,
            upstream_ca_bundle: None,
            tls: None,
            auth: None,
            allow_open_store: false,
            readiness: Readiness::Serving,
            cors: None,
            limits: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub name: String,
    /// `http://` or `https://` URL the `/v1` paths are appended to. Absent for the built-in demo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Several upstreams instead of `base_url`, chosen by weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<RawTarget>,
    /// Providers tried in order when every target failed before answering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover: Vec<String>,
    #[serde(default)]
    pub retry: RawRetry,
    #[serde(default)]
    pub health: RawHealth,
    /// Glob patterns matched against the request's `model`.
    #[serde(default)]
    pub models: Vec<String>,
    /// Name of an env var whose value is sent upstream as the bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Extra headers added to every upstream request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Requested model name (after any `provider/` prefix is stripped) to the name sent upstream.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_rewrite: BTreeMap<String, String>,
    /// Present for the built-in scripted demo model instead of `base_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demo: Option<RawDemo>,
    /// The API the upstream speaks.
    #[serde(default)]
    pub api: Api,
    #[serde(default)]
    pub tools: RawTools,
    /// USD per million tokens, by glob over the model the client asked for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pricing: BTreeMap<String, limits::RawPrice>,
    /// The output tokens a limited tenant's request reserves when its client
    /// sets no `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_max_tokens: Option<u64>,
    /// `pricing`'s globs in the file's order (the table above is sorted):
    /// set by [`RawConfig::order_pricing`].
    #[serde(skip)]
    pub pricing_order: Vec<String>,
}

/// The API a provider's upstream speaks: `/v1/responses` requests to a
/// `chat` provider are translated to Chat Completions and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    #[default]
    Chat,
    Responses,
    /// Anthropic's Messages API: only `/v1/messages` reaches it, untouched.
    Anthropic,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDemo {
    /// Characters per streamed content delta.
    pub chunk_chars: usize,
    /// Pause between two streamed deltas.
    pub chunk_delay_ms: u64,
}

impl Default for RawDemo {
    fn default() -> Self {
        RawDemo {
            chunk_chars: 16,
            chunk_delay_ms: 10,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Passthrough,
    Natural,
    ToNatural,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInvalid {
    Fallback,
    #[default]
    Error,
    Text,
}

/// Natural mode: what a call whose string values the conversation does not
/// hold leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUngrounded {
    /// The call goes to the client as the model wrote it.
    #[default]
    Off,
    /// The model is asked once, in the same request, whether a tool fits
    /// and what value the user gave; its second answer is the answer.
    Ask,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTools {
    pub mode: Mode,
    /// Defaults to `tag` in natural mode and `tool_call` in to_natural mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syntax: Option<Syntax>,
    pub on_invalid: OnInvalid,
    /// Natural mode: `ask` asks the model again about a call with a string
    /// value found nowhere in the conversation.
    pub on_ungrounded: OnUngrounded,
    /// Natural mode: `gbnf` sends llama.cpp a grammar that keeps every call
    /// the model starts valid.
    pub constrain: Constrain,
    /// `provider/model` that repairs invalid calls when `on_invalid = "fallback"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    pub fallback_attempts: u32,
    pub fallback_timeout_secs: f64,
    /// Repairs (fallback calls, each up to `fallback_attempts` requests) one response may ask for, shared by its choices.
    pub fallback_max_calls: usize,
    /// Instruction template; `{contracts}` marks where the tool contracts go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Tool results longer than this many characters are truncated with a marker.
    pub max_tool_result_chars: usize,
    /// Role of the message that carries tool results to a natural-mode model.
    pub result_role: ResultRole,
    /// Never parse calls inside `<think>...</think>`.
    pub skip_think: bool,
    /// A tool block larger than this is invalid.
    pub max_block_bytes: usize,
    /// Passthrough: a call the model wrote as text (a JSON object, a
    /// `<tool_call>` block, any natural syntax) becomes a native call.
    pub rescue_text_calls: bool,
    /// to_natural: pretty-print the arguments of calls written as text.
    pub pretty: bool,
    /// to_natural: the line written between two calls.
    pub separator: String,
    /// Tools toolgate runs itself: `[[mcp_servers]]` or `[[http_tools]]` names, or `builtin:NAME`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateway_tools: Vec<String>,
    /// Model calls per client request when gateway tools run.
    pub max_rounds: u32,
    /// Gateway tool executions at once per request.
    pub max_parallel_tools: usize,
    pub show_gateway_tools: ShowGatewayTools,
    /// Offer `search_tools` instead of every tool when there are more
    /// than `tool_search_threshold`.
    pub tool_search: bool,
    pub tool_search_threshold: usize,
}

impl Default for RawTools {
    fn default() -> Self {
        RawTools {
            mode: Mode::Passthrough,
            syntax: None,
            on_invalid: OnInvalid::Error,
            on_ungrounded: OnUngrounded::Off,
            constrain: Constrain::Off,
            fallback: None,
            fallback_attempts: 1,
            fallback_timeout_secs: 30.0,
            fallback_max_calls: crate::config::DEFAULT_MAX_REPAIRS,
            instructions: None,
            max_tool_result_chars: crate::config::DEFAULT_MAX_TOOL_RESULT_CHARS,
            result_role: ResultRole::User,
            skip_think: true,
            max_block_bytes: 256 * 1024,
            rescue_text_calls: false,
            pretty: true,
            separator: "---".into(),
            gateway_tools: Vec::new(),
            max_rounds: 8,
            max_parallel_tools: 8,
            show_gateway_tools: ShowGatewayTools::Fields,
            tool_search: false,
            tool_search_threshold: 20,
        }
    }
}

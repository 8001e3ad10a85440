//! Metric names, descriptions and the Prometheus recorder.
//!
//! Every metric toolgate exports is named here, once, with the `toolgate_`
//! prefix. The recorder is process-global (the `metrics` facade allows one),
//! so [`install`] is idempotent: tests that start several gateways in one
//! process share it.

pub mod cost;
pub mod request;
pub mod tenant;

use std::collections::HashSet;
use std::sync::{OnceLock, RwLock};

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS: &str = "toolgate_requests_total";
pub const REQUEST_DURATION: &str = "toolgate_request_duration_seconds";
pub const UPSTREAM_TTFB: &str = "toolgate_upstream_ttfb_seconds";
pub const TIME_TO_FIRST_TOKEN: &str = "toolgate_time_to_first_token_seconds";
pub const ACTIVE_REQUESTS: &str = "toolgate_active_requests";
pub const ACTIVE_STREAMS: &str = "toolgate_active_streams";
pub const BYTES_IN: &str = "toolgate_request_bytes_total";
pub const BYTES_OUT: &str = "toolgate_response_bytes_total";
pub const UPSTREAM_ERRORS: &str = "toolgate_upstream_errors_total";
pub const UPSTREAM_ATTEMPTS: &str = "toolgate_upstream_attempts_total";
pub const UPSTREAM_TARGET_UP: &str = "toolgate_upstream_target_up";
pub const FAILOVERS: &str = "toolgate_failovers_total";
pub const TOOL_CALLS: &str = "toolgate_tool_calls_total";
pub const INVALID_BLOCKS: &str = "toolgate_invalid_tool_blocks_total";
pub const HELD_BYTES: &str = "toolgate_held_back_bytes";
pub const HOLD_DURATION: &str = "toolgate_hold_seconds";
pub const REPAIR_ATTEMPTS: &str = "toolgate_repair_attempts_total";
pub const REPAIRS: &str = "toolgate_repairs_total";
pub const REPAIR_DURATION: &str = "toolgate_repair_duration_seconds";
pub const CONFIG_RELOADS: &str = "toolgate_config_reloads_total";
pub const BUILD_INFO: &str = "toolgate_build_info";
pub const STREAMS_EXPIRED: &str = "toolgate_streams_expired_total";
pub const STREAMS_STALLED: &str = "toolgate_streams_stalled_total";
pub const GATEWAY_TOOL_CALLS: &str = "toolgate_gateway_tool_calls_total";
pub const GATEWAY_TOOL_DURATION: &str = "toolgate_gateway_tool_duration_seconds";
pub const GATEWAY_TOOLS_IN_FLIGHT: &str = "toolgate_gateway_tools_in_flight";
pub const GATEWAY_ROUNDS: &str = "toolgate_gateway_rounds";
pub const MCP_SERVER_UP: &str = "toolgate_mcp_server_up";
pub const STORE_DROPPED: &str = "toolgate_store_dropped_total";
pub const STORE_QUEUE_DEPTH: &str = "toolgate_store_queue_depth";
pub const STORE_WRITE_SECONDS: &str = "toolgate_store_write_seconds";
pub const STORE_UP: &str = "toolgate_store_up";
pub const STORE_LINK_WAITS: &str = "toolgate_store_link_waits_total";
pub const LIVE_VIEWS: &str = "toolgate_live_views";
pub const MCP_CHANGE_STREAMS: &str = "toolgate_mcp_change_streams";
pub const TOKENS: &str = "toolgate_tokens_total";
pub const TRACE_SPANS: &str = "toolgate_trace_spans_total";
pub const COST_USD: &str = "toolgate_cost_usd_total";
pub const RATE_LIMITED: &str = "toolgate_rate_limited_total";
pub const LIMITER_ERRORS: &str = "toolgate_limiter_errors_total";

/// Latency buckets from 1 ms to 5 minutes: model calls are slow, the gateway is not.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];
const HOLD_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];
const BYTE_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0,
];

const ROUND_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the global recorder on first call and returns its handle.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(UPSTREAM_TTFB.into()), LATENCY_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(TIME_TO_FIRST_TOKEN.into()),
                        LATENCY_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(HOLD_DURATION.into()), HOLD_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(REPAIR_DURATION.into()), LATENCY_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(STORE_WRITE_SECONDS.into()),
                        LATENCY_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(HELD_BYTES.into()), BYTE_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(GATEWAY_TOOL_DURATION.into()),
                        LATENCY_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(GATEWAY_ROUNDS.into()), ROUND_BUCKETS)
                })
                .expect("bucket lists are non-empty constants");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first (e.g. by an
            // embedding application); the handle then renders our own registry.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

fn describe() {
    describe_counter!(
        REQUESTS,
        "Requests answered, by provider, route, status and tenant (each tenant by name; none: no key accepted; other: managed keys' tenants past the first 1,000)."
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from request to end of response body, by provider, route and tenant."
    );
    describe_histogram!(
        TIME_TO_FIRST_TOKEN,
        Unit::Seconds,
        "Time from request to the first token of a streamed answer (text, reasoning or a call), by provider."
    );
    describe_histogram!(
        UPSTREAM_TTFB,
        Unit::Seconds,
        "Time until the upstream sent its response head."
    );
    describe_gauge!(ACTIVE_REQUESTS, "Requests in flight.");
    describe_counter!(
        TOKENS,
        "Tokens the upstreams' answers used, by provider, tenant, kind (input, output) and estimated (\"true\": the answer reported none, and they were guessed from its size; these are priced too)."
    );
    describe_gauge!(
        COST_USD,
        "USD the upstreams' answers cost at the provider's `pricing` (the tokens of toolgate_tokens_total, estimated ones included), by provider and tenant: a total of whole micro-dollars, each answer's cost rounded to the nearest; it only grows (a gauge because the amounts are fractions: read it with increase())."
    );
    describe_counter!(
        RATE_LIMITED,
        "Requests refused by a tenant's limits, by tenant and limit (requests, tokens, concurrency, budget)."
    );
    describe_counter!(
        LIMITER_ERRORS,
        "Limit checks Redis could not answer in time; `on_redis_error` decided them."
    );
    describe_counter!(
        TRACE_SPANS,
        "Trace spans by outcome: exported, failed (the collector refused or was unreachable), dropped (the export queue was full)."
    );
    describe_gauge!(ACTIVE_STREAMS, "Streaming responses in flight.");
    describe_counter!(
        BYTES_IN,
        Unit::Bytes,
        "Request body bytes received from clients."
    );
    describe_counter!(
        BYTES_OUT,
        Unit::Bytes,
        "Response body bytes sent to clients."
    );
    describe_counter!(
        UPSTREAM_ATTEMPTS,
        "Requests sent to each upstream target, by outcome (ok, connect, timeout, protocol, or a status retry.on names)."
    );
    describe_gauge!(
        UPSTREAM_TARGET_UP,
        "1 while a provider's target takes traffic, 0 while it is ejected after consecutive failures."
    );
    describe_counter!(
        FAILOVERS,
        "Requests a provider passed to one of its failover providers after every attempt failed."
    );
    describe_counter!(
        UPSTREAM_ERRORS,
        "Upstream failures by kind (connect, timeout, idle, protocol)."
    );
    describe_counter!(
        TOOL_CALLS,
        "Native tool calls emitted from natural text, by provider and tool."
    );
    describe_counter!(
        INVALID_BLOCKS,
        "Natural-text tool blocks that were invalid, by reason."
    );
    describe_histogram!(
        HELD_BYTES,
        Unit::Bytes,
        "Bytes of text held back while undecided, per hold."
    );
    describe_histogram!(
        HOLD_DURATION,
        Unit::Seconds,
        "How long undecided text was held back."
    );
    describe_gauge!(BUILD_INFO, "Always 1; `version` is the running toolgate's.");
    describe_counter!(
        CONFIG_RELOADS,
        "SIGHUP reloads by outcome (success, invalid)."
    );
    describe_counter!(
        STREAMS_EXPIRED,
        "Streams ended with an error event because the shutdown grace period ran out."
    );
    describe_counter!(
        STREAMS_STALLED,
        "HTTP/2 streams released because their client granted them no window for write_stall_timeout_secs."
    );
    describe_counter!(
        REPAIR_ATTEMPTS,
        "Requests made to a fallback model to repair a call."
    );
    describe_counter!(
        REPAIRS,
        "Repairs by outcome (success, failure), by provider."
    );
    describe_histogram!(
        REPAIR_DURATION,
        Unit::Seconds,
        "Time to repair one call, all attempts included."
    );
    describe_counter!(
        GATEWAY_TOOL_CALLS,
        "Gateway tool executions, by tool, server and outcome (completed, failed)."
    );
    describe_histogram!(
        GATEWAY_TOOL_DURATION,
        Unit::Seconds,
        "Time to execute one gateway tool call, by server."
    );
    describe_gauge!(
        GATEWAY_TOOLS_IN_FLIGHT,
        "Gateway tool executions running now."
    );
    describe_histogram!(
        GATEWAY_ROUNDS,
        "Model rounds per client request on providers with gateway tools."
    );
    describe_gauge!(
        MCP_SERVER_UP,
        "1 while the MCP server is connected and its tools listed, else 0."
    );
    describe_counter!(
        STORE_DROPPED,
        "Transcript rows dropped: the write queue was full or the database failed."
    );
    describe_gauge!(STORE_QUEUE_DEPTH, "Transcript rows waiting for the writer.");
    describe_histogram!(
        STORE_WRITE_SECONDS,
        Unit::Seconds,
        "Time to write one batch of transcript rows."
    );
    describe_counter!(
        STORE_LINK_WAITS,
        "Requests that waited link_wait_ms for another replica's record of their last answer in vain."
    );
    describe_gauge!(
        STORE_UP,
        "1 while the transcript store takes writes, else 0."
    );
    describe_gauge!(
        LIVE_VIEWS,
        "Transcript live views (/toolgate/api/chats/{id}/events) open now."
    );
    describe_gauge!(
        MCP_CHANGE_STREAMS,
        "MCP change streams (GET on [mcp_gateway] path) open now."
    );
}

/// Tool names that may appear as a `tool` label: the ones the config
/// declares (`[[http_tools]]` by name, MCP servers by their prefix). Tool
/// names chosen by clients or models are `other`, so no request can add a
/// series, and `/metrics` never shows one tenant's tool names to another.
#[derive(Debug, Default)]
struct ToolLabels {
    names: HashSet<String>,
    /// Non-empty MCP prefixes, each labelled `<prefix>*`.
    prefixes: Vec<String>,
}

static TOOL_LABELS: RwLock<Option<ToolLabels>> = RwLock::new(None);

impl ToolLabels {
    fn of(config: &crate::config::Config) -> Self {
        ToolLabels {
            // HTTP tools and the builtins some provider offers, by name.
            names: config
                .http_tools
                .iter()
                .map(|t| t.name.clone())
                .chain(config.providers.iter().flat_map(|p| {
                    p.tools.gateway.iter().flat_map(|g| {
                        g.sources.iter().filter_map(|s| match s {
                            crate::config::ToolSource::Builtin(b) => Some(b.name().to_owned()),
                            _ => None,
                        })
                    })
                }))
                .collect(),
            prefixes: config
                .mcp_servers
                .iter()
                .map(|s| s.prefix.clone())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }

    fn label(&self, name: &str) -> String {
        if self.names.contains(name) {
            return name.to_owned();
        }
        match self.prefixes.iter().find(|p| name.starts_with(p.as_str())) {
            Some(prefix) => format!("{prefix}*"),
            None => "other".to_owned(),
        }
    }
}

/// Sets the declared tool names from a config (at start and on reload),
/// and registers the counters a config can name at 0, so a dashboard's
/// `rate()` has a series before the first event.
pub fn declare_tools(config: &crate::config::Config) {
    *TOOL_LABELS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ToolLabels::of(config));
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for outcome in ["success", "invalid", "refused"] {
        metrics::counter!(CONFIG_RELOADS, "outcome" => outcome).increment(0);
    }
    for name in [STREAMS_EXPIRED, STREAMS_STALLED] {
        metrics::counter!(name).increment(0);
    }
    if config.store.is_some() {
        metrics::counter!(STORE_DROPPED).increment(0);
        metrics::counter!(STORE_LINK_WAITS).increment(0);
    }
    if config.telemetry.is_some() {
        for outcome in ["exported", "failed", "dropped"] {
            metrics::counter!(TRACE_SPANS, "outcome" => outcome).increment(0);
        }
    }
    for p in &config.providers {
        for kind in ["connect", "timeout", "protocol"] {
            metrics::counter!(UPSTREAM_ERRORS, "provider" => p.name.clone(), "kind" => kind)
                .increment(0);
        }
        for to in &p.failover {
            metrics::counter!(FAILOVERS, "from" => p.name.clone(), "to" => to.clone()).increment(0);
        }
    }
}

/// The bounded `tool` label of a called tool's name.
pub fn tool_label(name: &str) -> String {
    let labels = TOOL_LABELS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    labels
        .as_ref()
        .map_or_else(|| "other".to_owned(), |l| l.label(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_labels_are_declared_names_or_other_and_series_stay_bounded() {
        let handle = install();
        let config = crate::config::Config::from_toml(
            r#"
[[http_tools]]
name = "weather"
url = "http://127.0.0.1:9/weather"

[[mcp_servers]]
name = "files"
url = "http://127.0.0.1:9/mcp"
prefix = "fs_"

[[providers]]
name = "bounded-labels"
models = ["*"]
[providers.demo]
"#,
        )
        .unwrap();
        // The process-wide set is shared with other tests: use this config's own.
        let labels = ToolLabels::of(&config);
        let tool_label = |name: &str| labels.label(name);
        assert_eq!(tool_label("weather"), "weather");
        assert_eq!(tool_label("fs_read"), "fs_*");
        assert_eq!(tool_label("secret_tenant_tool"), "other");
        // Many distinct client tool names: the series count does not grow with them.
        for i in 0..5000 {
            metrics::counter!(TOOL_CALLS, "provider" => "bounded-labels", "tool" => tool_label(&format!("t{i}")))
                .increment(1);
        }
        metrics::counter!(TOOL_CALLS, "provider" => "bounded-labels", "tool" => tool_label("weather"))
            .increment(1);
        let rendered = handle.render();
        let series = rendered
            .lines()
            .filter(|l| l.starts_with(TOOL_CALLS) && l.contains("bounded-labels"))
            .count();
        assert_eq!(series, 2, "{rendered}");
        assert!(!rendered.contains("t4999"));
    }
}

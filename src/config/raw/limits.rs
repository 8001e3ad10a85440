//! `[server.limits]`, a key's `limits` and `budget`, and a provider's
//! `pricing`, as written.

use serde::{Deserialize, Serialize};

/// `[server.auth.keys.limits]`: what one tenant may use.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Input plus output tokens, as the upstream reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u64>,
}

/// `[server.auth.keys.budget]`: what one tenant may spend in a period.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// `"1d"`, `"7d"`, `"30d"`: periods aligned to UTC midnight.
    pub period: String,
}

/// `[server.limits]`: where the counters live.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerLimits {
    /// Shared by every replica; without it each replica counts alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// `"allow"` or `"deny"`: what a request gets when Redis cannot answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_redis_error: Option<String>,
    /// How long a check may wait for Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_timeout_ms: Option<u64>,
}

/// One `[providers.pricing]` entry: USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub input: f64,
    pub output: f64,
}

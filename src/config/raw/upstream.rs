//! A provider's upstream targets, retries and health checks as written.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RawDemo;

/// One entry of `targets = [...]`: an upstream that serves the provider's models.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    /// Names the target in metrics and logs (default: its index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The built-in scripted model as a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demo: Option<RawDemo>,
    #[serde(default = "one")]
    pub weight: u32,
    /// Env var holding this target's key (default: the provider's `api_key_env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Headers added after the provider's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

/// `[providers.retry]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRetry {
    /// Attempts in total for one request (default: one per target, at most 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    pub backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub max_retry_after_secs: f64,
    /// `connect`, `timeout`, `protocol` or an HTTP status from 400 to 599.
    pub on: Vec<String>,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            attempts: None,
            backoff_ms: 50,
            max_backoff_ms: 2000,
            max_retry_after_secs: 10.0,
            on: [
                "connect", "timeout", "protocol", "429", "500", "502", "503", "504",
            ]
            .map(str::to_owned)
            .to_vec(),
        }
    }
}

/// `[providers.health]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawHealth {
    /// Consecutive failures that eject a target (0: never eject).
    pub failures_to_eject: u32,
    pub eject_secs: f64,
}

impl Default for RawHealth {
    fn default() -> Self {
        RawHealth {
            failures_to_eject: 3,
            eject_secs: 30.0,
        }
    }
}

//! `[store]` as written.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `sqlite://FILE`, `sqlite::memory:` or `postgres://user@host/db`.
    pub url: String,
    /// Env var holding the PostgreSQL password (kept out of the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    #[serde(default)]
    pub record: Record,
    #[serde(default = "default_retention")]
    pub retention_days: u32,
    /// How long the hourly usage rows are kept.
    #[serde(default = "default_usage_retention")]
    pub usage_retention_days: u32,
    /// How long linking a request to the chat it continues may wait for
    /// the database (another replica's record of the answer may be landing).
    #[serde(default = "default_link_wait")]
    pub link_wait_ms: u32,
    /// JSON paths into the conversation stored as `"[redacted]"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// Live views (`/toolgate/api/chats/{id}/events`) open at once, in all.
    #[serde(default = "default_live_views")]
    pub max_live_views: usize,
    /// Live views open at once with one key.
    #[serde(default = "default_live_views_per_key")]
    pub max_live_views_per_key: usize,
}

fn default_live_views() -> usize {
    1000
}

fn default_live_views_per_key() -> usize {
    16
}

fn default_usage_retention() -> u32 {
    400
}

fn default_retention() -> u32 {
    30
}

fn default_link_wait() -> u32 {
    100
}

/// Which exchanges are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// Exchanges that declared, offered or called tools.
    #[default]
    Tools,
    All,
    None,
}

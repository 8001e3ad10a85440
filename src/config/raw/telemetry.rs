//! `[telemetry]` as written.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTelemetry {
    /// The OTLP/HTTP collector's base URL (`/v1/traces` is appended).
    pub otlp_endpoint: String,
    pub service_name: String,
    /// The share of new traces kept (a continued trace follows its parent).
    pub sample_ratio: f64,
    /// Adds the GenAI input and output message attributes to chat spans.
    pub capture_content: bool,
    /// Ended spans waiting for export; more are dropped (and counted).
    pub max_queue_spans: usize,
}

impl Default for RawTelemetry {
    fn default() -> Self {
        RawTelemetry {
            otlp_endpoint: String::new(),
            service_name: "toolgate".into(),
            sample_ratio: 1.0,
            capture_content: false,
            max_queue_spans: 4096,
        }
    }
}

//! `[telemetry]` validated: where OpenTelemetry traces go.

use http::{HeaderValue, Uri};

use super::ConfigError;
use super::raw::RawTelemetry;

/// The most spans `max_queue_spans` may hold (each is about a kilobyte).
const MAX_QUEUE_SPANS: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// `{otlp_endpoint}/v1/traces`, without userinfo.
    pub traces_url: String,
    /// The `Authorization` the endpoint's userinfo stood for.
    pub authorization: Option<HeaderValue>,
    pub service_name: String,
    /// In `0.0..=1.0`.
    pub sample_ratio: f64,
    pub capture_content: bool,
    pub max_queue_spans: usize,
}

pub fn telemetry(raw: &RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    let (base, authorization) = super::userinfo::split(
        "telemetry.otlp_endpoint",
        raw.otlp_endpoint.trim_end_matches('/'),
    )?;
    let base = base.as_str();
    if base.is_empty() {
        return Err(ConfigError::new(
            "telemetry.otlp_endpoint",
            "is required: the URL of an OTLP/HTTP receiver, like \"http://otel-collector:4318\"",
        ));
    }
    let uri: Uri = base.parse().map_err(|e| {
        ConfigError::new(
            "telemetry.otlp_endpoint",
            format!("not a URL ({e}): {:?}", super::redact::url(base)),
        )
    })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(ConfigError::new(
            "telemetry.otlp_endpoint",
            format!(
                "must be an http:// or https:// URL of an OTLP/HTTP receiver, like \"http://otel-collector:4318\"; got {:?}",
                super::redact::url(base)
            ),
        ));
    }
    if !(0.0..=1.0).contains(&raw.sample_ratio) {
        return Err(ConfigError::new(
            "telemetry.sample_ratio",
            format!("must be between 0.0 and 1.0, got {}", raw.sample_ratio),
        ));
    }
    if raw.service_name.trim().is_empty() {
        return Err(ConfigError::new(
            "telemetry.service_name",
            "must not be empty",
        ));
    }
    if !(1..=MAX_QUEUE_SPANS).contains(&raw.max_queue_spans) {
        return Err(ConfigError::new(
            "telemetry.max_queue_spans",
            format!("must be between 1 and {MAX_QUEUE_SPANS}"),
        ));
    }
    Ok(TelemetryConfig {
        traces_url: format!("{base}/v1/traces"),
        authorization,
        service_name: raw.service_name.clone(),
        sample_ratio: raw.sample_ratio,
        capture_content: raw.capture_content,
        max_queue_spans: raw.max_queue_spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(endpoint: &str) -> RawTelemetry {
        RawTelemetry {
            otlp_endpoint: endpoint.into(),
            ..RawTelemetry::default()
        }
    }

    #[test]
    fn the_traces_path_is_appended_to_the_endpoint() {
        let t = telemetry(&raw("http://otel-collector:4318/")).unwrap();
        assert_eq!(t.traces_url, "http://otel-collector:4318/v1/traces");
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (endpoint, ratio, key) in [
            ("otel-collector:4318", 1.0, "telemetry.otlp_endpoint"),
            ("", 1.0, "telemetry.otlp_endpoint"),
            ("grpc://c:4317", 1.0, "telemetry.otlp_endpoint"),
            ("http://c:4318", 1.5, "telemetry.sample_ratio"),
            ("http://c:4318", -0.1, "telemetry.sample_ratio"),
        ] {
            let e = telemetry(&RawTelemetry {
                sample_ratio: ratio,
                ..raw(endpoint)
            })
            .unwrap_err();
            assert_eq!(e.path, key, "{endpoint} {ratio}");
        }
    }
}

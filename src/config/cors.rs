//! `[server.cors]`: which web pages may call the gateway from a browser.
//! Off unless configured; an origin is `*` or `scheme://host[:port]`.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[server.cors]` as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCors {
    /// Origins allowed to call, or `["*"]` for any.
    pub allowed_origins: Vec<String>,
    #[serde(default = "default_methods")]
    pub allowed_methods: Vec<String>,
    #[serde(default = "default_headers")]
    pub allowed_headers: Vec<String>,
    /// How long a browser may keep a preflight's answer.
    #[serde(default = "default_max_age")]
    pub max_age_secs: u64,
}

fn default_methods() -> Vec<String> {
    ["GET", "POST", "DELETE", "OPTIONS"]
        .map(String::from)
        .to_vec()
}

fn default_headers() -> Vec<String> {
    [
        "authorization",
        "content-type",
        "x-api-key",
        "anthropic-version",
        "anthropic-beta",
        "openai-beta",
        "x-request-id",
        "x-toolgate-chat-id",
    ]
    .map(String::from)
    .to_vec()
}

fn default_max_age() -> u64 {
    600
}

/// Origins a page may call from.
#[derive(Debug, Clone)]
pub enum Origins {
    Any,
    List(Vec<HeaderValue>),
}

/// `[server.cors]` validated.
#[derive(Debug, Clone)]
pub struct Cors {
    pub origins: Origins,
    pub methods: Vec<Method>,
    pub headers: Vec<HeaderName>,
    pub max_age: Duration,
}

pub fn cors(raw: &RawCors) -> Result<Cors, ConfigError> {
    let path = "server.cors";
    if raw.allowed_origins.is_empty() {
        return Err(ConfigError::new(
            format!("{path}.allowed_origins"),
            "lists no origin: name the pages' origins (\"https://app.example\") or \"*\"",
        ));
    }
    let origins = if raw.allowed_origins.iter().any(|o| o == "*") {
        if raw.allowed_origins.len() > 1 {
            return Err(ConfigError::new(
                format!("{path}.allowed_origins"),
                "\"*\" allows every origin: list it alone",
            ));
        }
        Origins::Any
    } else {
        let mut list = Vec::with_capacity(raw.allowed_origins.len());
        for (i, origin) in raw.allowed_origins.iter().enumerate() {
            let key = format!("{path}.allowed_origins[{i}]");
            let uri: http::Uri = origin
                .parse()
                .map_err(|_| ConfigError::new(&key, format!("not an origin: {origin:?}")))?;
            let plain = matches!(uri.scheme_str(), Some("http" | "https"))
                && uri.authority().is_some()
                && uri.path_and_query().is_none_or(|p| p.as_str() == "/")
                && !origin.ends_with('/');
            if !plain {
                return Err(ConfigError::new(
                    &key,
                    format!("must be scheme://host[:port], without a path: {origin:?}"),
                ));
            }
            list.push(
                HeaderValue::from_str(origin)
                    .map_err(|_| ConfigError::new(&key, "not a valid header value"))?,
            );
        }
        Origins::List(list)
    };
    let methods = raw
        .allowed_methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
                ConfigError::new(format!("{path}.allowed_methods[{i}]"), "not an HTTP method")
            })
        })
        .collect::<Result<_, _>>()?;
    let headers = raw
        .allowed_headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).map_err(|_| {
                ConfigError::new(format!("{path}.allowed_headers[{i}]"), "not a header name")
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Cors {
        origins,
        methods,
        headers,
        max_age: Duration::from_secs(raw.max_age_secs),
    })
}

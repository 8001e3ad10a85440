//! The one error type at the HTTP boundary.
//!
//! Everything the gateway itself refuses or fails at becomes a [`GatewayError`],
//! classified by who is at fault, and [`GatewayError::into_response`] is the
//! only place that turns one into a status and an OpenAI-shaped body
//! (`{"error": {"message", "type", "param", "code"}}`). Upstream error
//! responses are never wrapped: they pass through unchanged.

use http::{Response, StatusCode, header};
use serde_json::json;

use crate::body::{self, Body};

/// The most of a model's invalid call an error carries.
pub const RAW_SHOWN: usize = 4096;

/// Something the gateway refused or failed at, by who is at fault.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The client sent something we cannot act on.
    #[error("{message}")]
    BadRequest {
        /// What is wrong, for the client to read.
        message: String,
        /// The request field at fault, if one is.
        param: Option<String>,
    },
    /// No provider serves the model.
    #[error("The model `{0}` does not exist or is not served by this gateway")]
    UnknownModel(String),
    /// No such endpoint.
    #[error("Unknown route: {method} {path}{hint}")]
    UnknownRoute {
        /// The request's method.
        method: String,
        /// The request's path.
        path: String,
        /// What would serve it, when the path is one toolgate serves with
        /// other config (`""` otherwise).
        hint: &'static str,
    },
    /// The body is over `max_body_bytes` (or a container limit).
    #[error("Request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// No target of the provider could be reached.
    #[error("Upstream {provider} is unreachable: {reason}")]
    UpstreamUnreachable {
        /// The provider's name.
        provider: String,
        /// Why, from the last attempt.
        reason: String,
    },
    /// The upstream did not answer in time.
    #[error("Upstream {provider} did not answer within {secs:.1}s")]
    UpstreamTimeout {
        /// The provider's name.
        provider: String,
        /// The timeout that ran out.
        secs: f64,
    },
    /// The upstream answered, but with something toolgate could not use.
    #[error("{message}")]
    UpstreamInvalid {
        /// What was wrong with it.
        message: String,
        /// The error's `code`.
        code: &'static str,
    },
    /// A model's tool call that could not be turned into a valid call.
    #[error("{message}")]
    InvalidToolCall {
        /// What was wrong with the call.
        message: String,
        /// What the model wrote, when a block of text was read: the client
        /// and the transcript see it (its first [`RAW_SHOWN`] bytes).
        raw: Option<String>,
        /// The text the model wrote besides the block, in a whole answer:
        /// its client gets the error instead, and the transcript records
        /// the text before the error, as a streamed answer's shows it.
        /// `None` when the text went out as content (a stream).
        text: Option<String>,
    },
    /// No key accepted, and why as far as its holder may be told.
    #[error("{0}")]
    Unauthorized(KeyRefused),
    /// The key's policy (`[[server.auth.keys]] models`) does not allow the model.
    #[error("This API key may not use the model `{0}`")]
    ModelNotAllowed(String),
    /// The key may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// `max_concurrent_requests` requests are being served.
    #[error("The gateway is at its limit of concurrent requests; retry shortly")]
    Overloaded,
    /// A stored thing (a chat, a response) that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The transcript store cannot answer.
    #[error("{0}")]
    StoreUnavailable(String),
    /// The body did not arrive within `body_read_timeout_secs`.
    #[error("The request body was not received within {secs:.0}s")]
    BodyTimeout {
        /// The timeout that ran out.
        secs: f64,
    },
    /// `max_buffered_request_bytes` are held by requests being read.
    #[error("The gateway is holding too many request bytes at once; retry shortly")]
    BufferFull,
    /// The caller has as many of something open (live views) as it may.
    #[error("{message}")]
    TooManyRequests {
        /// What is at its limit, and which key sets it.
        message: String,
        /// The error's `code`.
        code: &'static str,
    },
    /// A tenant's limit or budget refuses the request.
    #[error("{}", .0.message)]
    Limited(Box<Limited>),
    /// Redis could not check the tenant's limits and `on_redis_error = "deny"`.
    #[error("The gateway cannot check this key's limits right now; retry shortly")]
    LimiterUnavailable,
    /// This provider's gateway tools cannot be offered together (two of
    /// one name, or a name the gateway keeps for itself).
    #[error(
        "The tool server `{server}` {reason}; this provider's requests are refused until that changes"
    )]
    ToolServerUnavailable {
        /// The tool server's name.
        server: String,
        /// What is wrong, as a clause (`offers a tool named …`).
        reason: String,
    },
    /// Every gateway tool this provider could offer the key comes from tool
    /// servers that are down or starting: the model is not called without
    /// any of them. Why they are down is logged, not sent.
    #[error(
        "None of this provider's gateway tools can be offered now: {servers}. Its requests are refused until one is back; the cause is in the gateway's log"
    )]
    ToolServersDown {
        /// Each server and where it stands (`tool server `x` is down`).
        servers: String,
        /// When the first of them is tried again, when known.
        retry_in: Option<std::time::Duration>,
    },
}

/// Why a presented key is not accepted. Only a caller who holds a key
/// toolgate made or was given learns more than [`KeyRefused::Unknown`]
/// says: nothing confirms anything to one who holds no valid key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRefused {
    /// No key, or one the gateway does not know.
    Unknown,
    /// An admin key (`admin_keys_env`) where a client key is needed.
    AdminKey,
    /// A managed key revoked at this time (RFC 3339).
    Revoked(String),
    /// A managed key that expired at this time (RFC 3339).
    Expired(String),
}

impl std::fmt::Display for KeyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyRefused::Unknown => {
                f.write_str("Missing or invalid API key: send `Authorization: Bearer <key>`")
            }
            KeyRefused::AdminKey => f.write_str(
                "This is an admin key, not a client key: it makes keys and reads every tenant's transcripts and usage, but does not call models or tools; send a client key",
            ),
            KeyRefused::Revoked(at) => write!(
                f,
                "This API key was revoked at {at}; ask an admin for a new one"
            ),
            KeyRefused::Expired(at) => write!(
                f,
                "This API key expired at {at}; ask an admin for a new one"
            ),
        }
    }
}

/// What a tenant's limits said when they refused a request.
#[derive(Debug)]
pub struct Limited {
    /// What is spent or at its limit, and when it frees.
    pub message: String,
    /// A spent budget (`insufficient_quota`), not a rate.
    pub budget: bool,
    /// How long until a request would be admitted.
    pub retry_after: std::time::Duration,
    /// The `x-ratelimit-*` headers of the tenant's limits.
    pub headers: Vec<(header::HeaderName, header::HeaderValue)>,
}

impl Limited {
    fn code(&self) -> &'static str {
        if self.budget {
            "insufficient_quota"
        } else {
            "rate_limit_exceeded"
        }
    }
}

/// A request the tool transforms cannot read (malformed `tools`, invalid
/// JSON, ...) is the client's error: 400, naming the offending parameter.
impl GatewayError {
    /// A [`GatewayError::BadRequest`].
    pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> Self {
        GatewayError::BadRequest {
            message: message.into(),
            param: param.map(str::to_owned),
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            GatewayError::UnknownModel(_)
            | GatewayError::UnknownRoute { .. }
            | GatewayError::NotFound(_) => StatusCode::NOT_FOUND,
            GatewayError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::UpstreamUnreachable { .. }
            | GatewayError::UpstreamInvalid { .. }
            | GatewayError::InvalidToolCall { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            GatewayError::Overloaded
            | GatewayError::BufferFull
            | GatewayError::StoreUnavailable(_)
            | GatewayError::ToolServerUnavailable { .. }
            | GatewayError::ToolServersDown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            GatewayError::ModelNotAllowed(_) | GatewayError::Forbidden(_) => StatusCode::FORBIDDEN,
            GatewayError::TooManyRequests { .. } | GatewayError::Limited(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            GatewayError::LimiterUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// OpenAI's `error.type`: who should act on it.
    fn kind(&self) -> &'static str {
        match self {
            GatewayError::BadRequest { .. }
            | GatewayError::UnknownModel(_)
            | GatewayError::UnknownRoute { .. }
            | GatewayError::NotFound(_)
            | GatewayError::PayloadTooLarge { .. }
            | GatewayError::BodyTimeout { .. } => "invalid_request_error",
            GatewayError::Unauthorized(_) => "authentication_error",
            GatewayError::ModelNotAllowed(_) | GatewayError::Forbidden(_) => "permission_error",
            GatewayError::Overloaded
            | GatewayError::BufferFull
            | GatewayError::TooManyRequests { .. } => "rate_limit_error",
            GatewayError::ToolServerUnavailable { .. }
            | GatewayError::ToolServersDown { .. }
            | GatewayError::StoreUnavailable(_)
            | GatewayError::LimiterUnavailable => "server_error",
            GatewayError::Limited(limited) => limited.code(),
            _ => "upstream_error",
        }
    }

    /// The error body's `code`.
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::BadRequest { .. } => "invalid_request",
            GatewayError::UnknownModel(_) => "model_not_found",
            GatewayError::UnknownRoute { .. } => "unknown_route",
            GatewayError::PayloadTooLarge { .. } => "request_too_large",
            GatewayError::UpstreamUnreachable { .. } => "upstream_unreachable",
            GatewayError::UpstreamTimeout { .. } => "upstream_timeout",
            GatewayError::UpstreamInvalid { code, .. }
            | GatewayError::TooManyRequests { code, .. } => code,
            GatewayError::InvalidToolCall { .. } => "invalid_tool_call",
            GatewayError::Unauthorized(_) => "invalid_api_key",
            GatewayError::ModelNotAllowed(_) => "model_not_allowed",
            GatewayError::Forbidden(_) => "forbidden",
            GatewayError::Overloaded => "overloaded",
            GatewayError::BodyTimeout { .. } => "request_timeout",
            GatewayError::BufferFull => "buffer_full",
            GatewayError::ToolServerUnavailable { .. } | GatewayError::ToolServersDown { .. } => {
                "tool_server_unavailable"
            }
            GatewayError::NotFound(_) => "not_found",
            GatewayError::StoreUnavailable(_) => "store_unavailable",
            GatewayError::Limited(limited) => limited.code(),
            GatewayError::LimiterUnavailable => "limiter_unavailable",
        }
    }

    fn param(&self) -> Option<&str> {
        match self {
            GatewayError::BadRequest { param, .. } => param.as_deref(),
            GatewayError::UnknownModel(_) | GatewayError::ModelNotAllowed(_) => Some("model"),
            _ => None,
        }
    }

    /// The `{"error": {...}}` object, also used for in-stream error events.
    pub fn to_json(&self) -> serde_json::Value {
        let mut error = json!({
            "message": self.to_string(),
            "type": self.kind(),
            "param": self.param(),
            "code": self.code(),
        });
        if let Some(raw) = self.raw() {
            error["raw"] = json!(raw);
        }
        // A whole answer's text besides the call: the client gets the error
        // instead of the answer, and nothing the model wrote is lost.
        if let Some(text) = self.unsent_text() {
            error["text"] = json!(text);
        }
        json!({ "error": error })
    }

    /// The text of a whole answer that failed on an invalid call, which
    /// its client did not get.
    pub fn unsent_text(&self) -> Option<&str> {
        match self {
            GatewayError::InvalidToolCall {
                text: Some(text), ..
            } if !text.is_empty() => Some(text),
            _ => None,
        }
    }

    /// An invalid call's error, holding `text` as what the client of a
    /// whole answer did not get (when it holds none yet).
    pub fn with_unsent_text(self, unsent: String) -> Self {
        match self {
            GatewayError::InvalidToolCall {
                message,
                raw,
                text: None,
            } if !unsent.is_empty() => GatewayError::InvalidToolCall {
                message,
                raw,
                text: Some(unsent),
            },
            other => other,
        }
    }

    /// What the model wrote that made the error, cut at [`RAW_SHOWN`] bytes.
    pub fn raw(&self) -> Option<&str> {
        match self {
            GatewayError::InvalidToolCall { raw: Some(raw), .. } => {
                let mut end = raw.len().min(RAW_SHOWN);
                while !raw.is_char_boundary(end) {
                    end -= 1;
                }
                Some(&raw[..end])
            }
            _ => None,
        }
    }

    /// The answer: status, headers and the OpenAI-shaped body.
    pub fn into_response(self) -> Response<Body> {
        let status = self.status();
        let mut response = Response::new(body::json(&self.to_json()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        if matches!(
            self,
            GatewayError::Overloaded
                | GatewayError::BufferFull
                | GatewayError::TooManyRequests { .. }
                // Redis is tried again a second after a failed connection.
                | GatewayError::LimiterUnavailable
        ) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        if let GatewayError::ToolServersDown { retry_in, .. } = &self {
            // The next attempt to connect, else a second (one starting).
            let secs = retry_in.map_or(1, |d| d.as_millis().div_ceil(1000).max(1) as u64);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        if let GatewayError::Limited(limited) = &self {
            let headers = response.headers_mut();
            let wait = limited.retry_after;
            // Whole seconds, rounded up; `retry-after-ms` for clients that
            // read it (OpenAI's SDKs do, before `retry-after`).
            let secs = wait.as_micros().div_ceil(1_000_000).max(1);
            headers.insert(header::RETRY_AFTER, header::HeaderValue::from(secs as u64));
            let ms = wait.as_micros().div_ceil(1_000).max(1);
            headers.insert("retry-after-ms", header::HeaderValue::from(ms as u64));
            for (name, value) in &limited.headers {
                headers.insert(name.clone(), value.clone());
            }
        }
        if matches!(self, GatewayError::Unauthorized(_)) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal of a key keeps OpenAI's shape, status and code; only
    /// the message says which.
    #[test]
    fn refused_keys_say_why_in_one_shape() {
        for (why, says) in [
            (KeyRefused::Unknown, "Missing or invalid API key"),
            (KeyRefused::AdminKey, "admin key, not a client key"),
            (
                KeyRefused::Revoked("2026-11-29T07:00:00Z".into()),
                "revoked at 2026-11-29T07:00:00Z",
            ),
            (
                KeyRefused::Expired("2026-11-29T07:00:00Z".into()),
                "expired at 2026-11-29T07:00:00Z",
            ),
        ] {
            let e = GatewayError::Unauthorized(why);
            assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
            let v = e.to_json();
            assert!(
                v["error"]["message"].as_str().unwrap().contains(says),
                "{v}"
            );
            assert_eq!(v["error"]["type"], "authentication_error");
            assert_eq!(v["error"]["code"], "invalid_api_key");
            let r = e.into_response();
            assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
        }
    }

    #[test]
    fn unknown_model_is_404_and_names_the_model() {
        let e = GatewayError::UnknownModel("gpt-9".into());
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let v = e.to_json();
        assert!(v["error"]["message"].as_str().unwrap().contains("gpt-9"));
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}

//! `[[http_tools]]`: a call is a POST of its arguments (a JSON object) to the
//! tool's URL; a 2xx response body is the result, anything else an error
//! the model sees.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::HttpToolConfig;

/// Most of an error body quoted back to the model.
const ERROR_BODY_CHARS: usize = 500;

/// The client every HTTP tool call goes through (pooled, http and https).
#[derive(Clone)]
pub struct HttpTools {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for HttpTools {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpTools {
    pub fn new() -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match builder
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "no system CA certificates; https tools will fail to verify");
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                    rustls::ClientConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default protocol versions")
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
                )
            }
        };
        let connector = builder.https_or_http().enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build(connector);
        HttpTools { client }
    }

    /// POSTs `arguments` (JSON object text) to the tool. `max_bytes` bounds
    /// what is read of the answer; a longer answer is cut there.
    pub async fn call(
        &self,
        tool: &HttpToolConfig,
        arguments: &str,
        max_bytes: usize,
    ) -> Result<Answer, String> {
        let mut request = Request::post(tool.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/plain, */*")
            .body(Full::new(Bytes::copy_from_slice(arguments.as_bytes())))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        for (name, value) in &tool.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(cx) = crate::telemetry::scope::trace() {
            crate::telemetry::propagate::inject(&cx, request.headers_mut());
        }
        let response = self.client.request(request).await.map_err(|e| {
            // The details (addresses, OS errors) go to the log, not to the model or client.
            tracing::warn!(tool = ?tool.name, error = ?error_chain(&e), "HTTP tool unreachable");
            if e.is_connect() {
                "cannot connect to the tool's server".to_owned()
            } else {
                "the tool's server broke the connection".to_owned()
            }
        })?;
        let status = response.status();
        let body = read_bounded(response.into_body(), max_bytes).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(status_error(status, &body.text))
        }
    }
}

/// A tool's answer body, cut at the read bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub truncated: bool,
}

async fn read_bounded(mut body: hyper::body::Incoming, max_bytes: usize) -> Result<Answer, String> {
    let mut bytes = Vec::new();
    let mut truncated = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the answer failed: {e}"))?;
        if let Ok(data) = frame.into_data() {
            let room = max_bytes.saturating_sub(bytes.len());
            if data.len() > room {
                bytes.extend_from_slice(&data[..room]);
                truncated = true;
                break;
            }
            bytes.extend_from_slice(&data);
        }
    }
    // A cut may split a character; lossy decoding keeps the rest.
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(Answer { text, truncated })
}

fn status_error(status: StatusCode, body: &str) -> String {
    let quoted: String = body.trim().chars().take(ERROR_BODY_CHARS).collect();
    if quoted.is_empty() {
        format!("the tool answered HTTP {}", status.as_u16())
    } else {
        format!("the tool answered HTTP {}: {quoted}", status.as_u16())
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

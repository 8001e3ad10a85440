//! `toolgate render`: the body the upstream receives for a request, found
//! by sending the request through the gateway itself. The provider's
//! targets are pointed at a listener on loopback that keeps the first
//! request it gets and refuses it; everything else (the tool mode's
//! rewrite, the gateway tools declared, `stream` and `stream_options` the
//! answer path adds, the model's routing and rewrite) is the code that
//! serves. Nothing reaches the real upstream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::config::{Config, Target};
use crate::gateway::Gateway;
use crate::inbound;

/// What to render.
pub struct Render<'a> {
    pub provider: &'a str,
    /// The door the request is sent to (`/v1/chat/completions` …).
    pub path: &'a str,
    /// The request body.
    pub request: &'a [u8],
    /// How long to wait for the provider's MCP servers to list their tools.
    pub wait: Duration,
}

/// What the upstream got: the path it was sent to and the body.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub path: String,
    pub body: Bytes,
}

impl Rendered {
    /// The body pretty-printed (as it is when it is not JSON).
    pub fn pretty(&self) -> String {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
            Err(_) => String::from_utf8_lossy(&self.body).into_owned(),
        }
    }
}

/// Sends `what.request` through a gateway built from `config`, with
/// `what.provider`'s targets replaced by a loopback listener; what the
/// listener received. `Err`: why nothing went upstream (the gateway's own
/// answer, a bad request say).
pub fn render(config: &Config, what: &Render<'_>) -> Result<Rendered, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(render_on(config, what))
}

async fn render_on(config: &Config, what: &Render<'_>) -> Result<Rendered, String> {
    let provider = config
        .provider(what.provider)
        .ok_or_else(|| format!("no provider named {:?} in the config", what.provider))?;
    let base_path = match provider.targets.first().map(|t| &t.endpoint) {
        Some(Target::Http(h)) => h.base_path.clone(),
        _ => "/v1".to_owned(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let captured: Arc<Mutex<Option<Rendered>>> = Arc::default();
    let capture = tokio::spawn(capture(listener, captured.clone()));
    let gateway = Gateway::new(Arc::new(pointed_at(
        config,
        what.provider,
        &addr,
        &base_path,
    )?));
    gateway.tools().mcp().settled(what.wait).await;
    let request = routed_to(config, what.provider, what.request)?;
    let response = gateway
        .handle(
            Request::post(what.path)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Full::new(request))
                .map_err(|e| format!("cannot build the request: {e}"))?,
        )
        .await;
    let status = response.status();
    let answer = response
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    capture.abort();
    let rendered = captured
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    rendered.ok_or_else(|| {
        format!(
            "nothing would go upstream: the gateway answers {} {}",
            status.as_u16(),
            String::from_utf8_lossy(&answer)
        )
    })
}

/// `config` with `provider` sending to `addr` once (no retry, no failover)
/// and without what render must not touch: inbound keys, the transcript
/// store, trace export.
fn pointed_at(
    config: &Config,
    provider: &str,
    addr: &std::net::SocketAddr,
    base_path: &str,
) -> Result<Config, String> {
    let mut raw = config.raw.clone();
    raw.server.listen = "127.0.0.1:0".into();
    raw.server.auth = None;
    raw.store = None;
    raw.telemetry = None;
    let Some(p) = raw.providers.iter_mut().find(|p| p.name == provider) else {
        return Err(format!("no provider named {provider:?} in the config"));
    };
    p.base_url = Some(format!("http://{addr}{base_path}"));
    p.targets.clear();
    p.demo = None;
    p.failover.clear();
    p.retry.attempts = Some(1);
    Config::from_raw(raw).map_err(|e| e.to_string())
}

/// The request's body, its `model` prefixed with the provider's name when
/// it would be routed elsewhere (only that string changes).
fn routed_to(config: &Config, provider: &str, request: &[u8]) -> Result<Bytes, String> {
    let headers = http::HeaderMap::from_iter([(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    )]);
    let field = inbound::find_model(&headers, request)
        .map_err(|e| e.to_string())?
        .ok_or("the request has no `model`")?;
    let routed = crate::router::route(&config.providers, &field.name)
        .is_some_and(|r| r.provider.name == provider);
    Ok(if routed {
        Bytes::copy_from_slice(request)
    } else {
        inbound::replace_model(request, &field, &format!("{provider}/{}", field.name))
    })
}

/// Keeps the first request and answers every request `503`.
async fn capture(listener: tokio::net::TcpListener, captured: Arc<Mutex<Option<Rendered>>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let captured = captured.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let captured = captured.clone();
                async move {
                    let path = req.uri().path().to_owned();
                    let body = req.into_body().collect().await?.to_bytes();
                    captured
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(Rendered { path, body });
                    let mut refused = Response::new(Full::new(Bytes::from_static(
                        br#"{"error":{"message":"toolgate render: not sent upstream","type":"render","code":null}}"#,
                    )));
                    *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    Ok::<_, hyper::Error>(refused)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

//! Everything outside `/v1`: health, readiness, metrics, the transcript
//! API and its page.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};

use super::{Gateway, auth};
use crate::body::{self, Body};
use crate::error::GatewayError;

/// The largest body `/toolgate/api/keys` reads.
const KEY_REQUEST_BYTES: usize = 64 * 1024;

impl Gateway {
    /// Everything outside `/v1`: health, readiness, metrics, transcripts.
    pub(super) async fn operational<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<crate::body::BoxError>,
    {
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/healthz") => plain(StatusCode::OK, "ok\n"),
            (&Method::GET, "/readyz") => self.readiness(),
            (&Method::GET, "/metrics") => {
                let mut r = plain(StatusCode::OK, "");
                *r.body_mut() = body::full(self.metrics.render());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            (&Method::GET, path) if path.starts_with("/toolgate/ui") => {
                crate::api::transcripts::page(path).unwrap_or_else(|| {
                    GatewayError::UnknownRoute {
                        method: "GET".into(),
                        path: path.to_owned(),
                        hint: "",
                    }
                    .into_response()
                })
            }
            (_, path)
                if path == "/toolgate/api/keys" || path.starts_with("/toolgate/api/keys/") =>
            {
                self.keys_api(req).await
            }
            (_, path) if path.starts_with("/toolgate/api/") => {
                // Lists and chats are JSON that compresses well; the
                // events stream (SSE) is left as it is.
                let (parts, _) = req.into_parts();
                let api = tower::service_fn(|req: Request<()>| async move {
                    Ok::<_, std::convert::Infallible>(self.transcript_api(&req).await)
                });
                let compressed = tower::ServiceBuilder::new()
                    .layer(tower_http::compression::CompressionLayer::new().gzip(true))
                    .service(api);
                match tower::ServiceExt::oneshot(compressed, Request::from_parts(parts, ())).await {
                    Ok(response) => response.map(body::boxed),
                    Err(never) => match never {},
                }
            }
            (method, path) => GatewayError::UnknownRoute {
                method: method.to_string(),
                path: path.to_owned(),
                // The MCP door's default path, on a config without the door.
                hint: if path == "/mcp" && self.mcp.is_none() {
                    "; MCP is served only with [mcp_gateway] in the config"
                } else {
                    ""
                },
            }
            .into_response(),
        }
    }

    /// `/toolgate/api/keys…`, answered `no-store`.
    async fn keys_api<B>(&self, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<crate::body::BoxError>,
    {
        let runtime = self.runtime.load_full();
        let answer = async {
            let reader = auth::reader(&runtime.config, self.keys.as_deref(), &req)?;
            let (parts, body) = req.into_parts();
            let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
                body,
                KEY_REQUEST_BYTES,
            ))
            .await
            .map_err(|_| GatewayError::PayloadTooLarge {
                limit: KEY_REQUEST_BYTES,
            })?
            .to_bytes();
            crate::api::keys::handle(
                self.keys.as_deref(),
                &reader.viewer,
                &parts.method,
                parts.uri.path(),
                &body,
            )
            .await
        }
        .await;
        crate::api::transcripts::private(answer.unwrap_or_else(GatewayError::into_response))
    }

    /// The transcript API (`/toolgate/api/…`), answered `no-store`.
    async fn transcript_api(&self, req: &Request<()>) -> Response<Body> {
        let runtime = self.runtime.load_full();
        let reader = match auth::reader(&runtime.config, self.keys.as_deref(), req) {
            Ok(reader) => reader,
            Err(e) => return crate::api::transcripts::private(e.into_response()),
        };
        let answer = crate::api::transcripts::handle(
            self.transcripts.as_ref(),
            &reader,
            req.method(),
            req.uri().path(),
            req.uri().query(),
        )
        .await;
        crate::api::transcripts::private(answer.unwrap_or_else(GatewayError::into_response))
    }

    /// `/readyz`: 503 while draining, or while a tool server that a provider
    /// offers is not connected; one line per tool server says where it stands.
    fn readiness(&self) -> Response<Body> {
        if self.draining.load(Ordering::SeqCst) {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        let config = self.config();
        let mut ready = true;
        let mut detail = String::new();
        for (name, state) in self.tools.servers(&config) {
            let offered = config.providers.iter().any(|p| {
                p.tools.gateway.as_ref().is_some_and(|g| {
                    g.sources
                        .iter()
                        .any(|s| matches!(s, crate::config::ToolSource::Mcp(m) if m.name == name))
                })
            });
            let line = match &*state {
                crate::tools::mcp::State::Up { tools, .. } => format!("up, {} tools", tools.len()),
                crate::tools::mcp::State::Starting => "starting".to_owned(),
                crate::tools::mcp::State::Down { error, retry_in } => {
                    format!(
                        "down: {}",
                        crate::tools::mcp::State::down_reason(error, *retry_in)
                    )
                }
            };
            // By default a tool server that is down takes out only the
            // providers that offer it (they answer 503 on their own).
            if config.server.readiness == crate::config::Readiness::Strict {
                ready &= !offered || state.is_up();
            }
            detail.push_str(&format!("tool server {name}: {line}\n"));
        }
        if let Some(store) = &self.store {
            match store.health() {
                None => detail.push_str("store: up\n"),
                // Traffic does not need the store: it is reported, not waited for.
                Some(error) => detail.push_str(&format!("store: down: {error}\n")),
            }
        }
        let (status, head) = if ready {
            (StatusCode::OK, "ready\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        };
        let mut r = plain(status, "");
        *r.body_mut() = body::full(format!("{head}{detail}"));
        r
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(body::full(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

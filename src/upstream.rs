//! Sending a request to a provider: over HTTP(S) with a pooled client, or to
//! the in-process demo model. Both return the same `Response<Body>`, so every
//! layer above (transparency, transforms, metrics) runs the same way for both.
//!
//! Plain `http` upstreams (a model server beside the gateway, the common
//! sidecar case) go through [`pool`], whose connections are driven by the
//! request's own task. `https` upstreams go through hyper's pooled client,
//! which negotiates HTTP/2 by ALPN.

pub mod pool;
pub mod reply;

use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{HeaderValue, Request, Response, Uri, Version, header};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::coalesce::Coalesce;
use crate::body::idle_timeout::IdleTimeout;
use crate::body::{self, Body};
use crate::config::{Config, HttpTarget, Provider, ServerConfig, Target};
use crate::error::GatewayError;
use crate::headers::strip_hop_by_hop;
use crate::metrics as m;

/// The pooled client shared by all providers.
#[derive(Clone)]
pub struct Upstreams {
    pool: pool::Pool,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    first_byte_timeout: Duration,
    stream_idle_timeout: Duration,
    /// Each configured provider's time-to-first-byte histogram, registered
    /// once (a labelled lookup per request hashes its labels under a lock).
    ttfb: std::sync::Arc<[(std::sync::Arc<Provider>, metrics::Histogram)]>,
}

impl Upstreams {
    pub fn new(config: &Config) -> Self {
        let server = &config.server;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(server.connect_timeout));
        http.set_nodelay(true);
        let builder =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_client_config(server));
        // HTTP/2 is negotiated by ALPN on https; plain http stays HTTP/1.1.
        let connector = builder
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            // Without a timer the pool's idle timeout silently does nothing.
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Upstreams {
            pool: pool::Pool::new(server.connect_timeout, server.workers.get()),
            client,
            first_byte_timeout: server.first_byte_timeout,
            stream_idle_timeout: server.stream_idle_timeout,
            ttfb: config
                .providers
                .iter()
                .map(|p| {
                    let name = p.name.clone();
                    (
                        p.clone(),
                        metrics::histogram!(m::UPSTREAM_TTFB, "provider" => name),
                    )
                })
                .collect(),
        }
    }

    fn record_ttfb(&self, provider: &Provider, seconds: f64) {
        match self.ttfb.iter().find(|(p, _)| std::ptr::eq(&**p, provider)) {
            Some((_, histogram)) => histogram.record(seconds),
            // A provider built on the fly (`toolgate probe` changes a copy's mode).
            None => metrics::histogram!(m::UPSTREAM_TTFB, "provider" => provider.name.clone())
                .record(seconds),
        }
    }

    /// Sends a request whose answer toolgate reads and rewrites, so it asks
    /// for it uncompressed.
    pub async fn send_to_read(
        &self,
        provider: &Provider,
        mut parts: http::request::Parts,
        body: Bytes,
    ) -> Result<Response<Body>, GatewayError> {
        parts.headers.remove(header::ACCEPT_ENCODING);
        self.send(provider, Request::from_parts(parts, Full::new(body)))
            .await
    }

    /// Sends `req` (whose URI holds only the path and query after `/v1`'s
    /// base) to `provider`. The response body is guarded by the idle timeout.
    pub async fn send(
        &self,
        provider: &Provider,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<Body>, GatewayError> {
        match &provider.target {
            Target::Demo(demo) => Ok(crate::demo::respond(demo, req).await),
            Target::Http(target) => {
                prepare_headers(provider, &mut req);
                let started = tokio::time::Instant::now();
                let sent = tokio::time::timeout(self.first_byte_timeout, async {
                    if target.scheme == Scheme::HTTP {
                        *req.uri_mut() = origin_form(target, req.uri())?;
                        let host = HeaderValue::from_str(target.authority.as_str())
                            .expect("an authority is a valid header value");
                        req.headers_mut().insert(header::HOST, host);
                        match self.pool.send(&target.authority, req).await {
                            Ok(response) => Ok(response.map(body::boxed)),
                            Err(e) => Err(Failure::from_pool(e)),
                        }
                    } else {
                        *req.uri_mut() = absolute_form(target, req.uri())?;
                        match self.client.request(req).await {
                            Ok(response) => Ok(response.map(body::boxed)),
                            Err(e) => Err(Failure::from_client(&e)),
                        }
                    }
                });
                let response = match sent.await {
                    Err(_) => {
                        count_error(&provider.name, "timeout");
                        return Err(GatewayError::UpstreamTimeout {
                            provider: provider.name.clone(),
                            secs: self.first_byte_timeout.as_secs_f64(),
                        });
                    }
                    Ok(Err(Failure::Request(e))) => return Err(e),
                    Ok(Err(Failure::Upstream { kind, reason })) => {
                        count_error(&provider.name, kind);
                        // The details (addresses, OS errors) are the operator's, not the client's.
                        tracing::warn!(provider = %provider.name, kind, error = %reason, "upstream request failed");
                        return Err(GatewayError::UpstreamUnreachable {
                            provider: provider.name.clone(),
                            reason: match kind {
                                "connect" => "cannot connect".to_owned(),
                                _ => "the connection failed or broke the HTTP protocol".to_owned(),
                            },
                        });
                    }
                    Ok(Ok(response)) => response,
                };
                self.record_ttfb(provider, started.elapsed().as_secs_f64());
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                // Frames already waiting go out in one write (see `coalesce`).
                let body = body::boxed(IdleTimeout::new(
                    Coalesce::new(body),
                    self.stream_idle_timeout,
                ));
                Ok(Response::from_parts(parts, body))
            }
        }
    }
}

/// Why an upstream request got no response head.
enum Failure {
    /// The request cannot be sent at all (e.g. its URL cannot be built).
    Request(GatewayError),
    /// The upstream could not be reached or broke the protocol.
    Upstream { kind: &'static str, reason: String },
}

impl From<GatewayError> for Failure {
    fn from(e: GatewayError) -> Self {
        Failure::Request(e)
    }
}

impl Failure {
    fn from_pool(e: pool::SendError) -> Self {
        let kind = match e {
            pool::SendError::Connect { .. } => "connect",
            pool::SendError::Http(_) => "protocol",
        };
        Failure::Upstream {
            kind,
            reason: error_chain(&e),
        }
    }

    fn from_client(e: &hyper_util::client::legacy::Error) -> Self {
        Failure::Upstream {
            kind: if e.is_connect() {
                "connect"
            } else {
                "protocol"
            },
            reason: error_chain(e),
        }
    }
}

/// System roots plus `upstream_ca_bundle`, for verifying https upstreams.
fn tls_client_config(server: &ServerConfig) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "could not load some system CA certificates");
    }
    let (_, skipped) = roots.add_parsable_certificates(native.certs);
    if skipped > 0 {
        tracing::debug!(skipped, "system CA certificates rustls cannot use");
    }
    for cert in &server.upstream_ca {
        if let Err(e) = roots.add(cert.clone()) {
            tracing::warn!(error = %e, "a certificate of upstream_ca_bundle was rejected");
        }
    }
    if roots.is_empty() {
        tracing::warn!("no CA certificates available; https upstreams will fail to verify");
    }
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

pub fn count_error(provider: &str, kind: &'static str) {
    metrics::counter!(m::UPSTREAM_ERRORS, "provider" => provider.to_owned(), "kind" => kind)
        .increment(1);
}

/// `/v1` + `/chat/completions?x=1` (the client's path after `/v1`).
fn origin_form(target: &HttpTarget, client_uri: &Uri) -> Result<Uri, GatewayError> {
    Uri::try_from(upstream_path(target, client_uri))
        .map_err(|e| GatewayError::bad_request(format!("cannot build upstream URL: {e}"), None))
}

/// `https://host/v1` + `/chat/completions?x=1`.
fn absolute_form(target: &HttpTarget, client_uri: &Uri) -> Result<Uri, GatewayError> {
    Uri::builder()
        .scheme(target.scheme.clone())
        .authority(target.authority.clone())
        .path_and_query(upstream_path(target, client_uri))
        .build()
        .map_err(|e| GatewayError::bad_request(format!("cannot build upstream URL: {e}"), None))
}

fn upstream_path(target: &HttpTarget, client_uri: &Uri) -> String {
    let path_and_query = client_uri.path_and_query().map_or("/", |pq| pq.as_str());
    let rest = path_and_query.strip_prefix("/v1").unwrap_or(path_and_query);
    let mut pq = String::with_capacity(target.base_path.len() + rest.len());
    pq.push_str(&target.base_path);
    pq.push_str(rest);
    if pq.is_empty() {
        pq.push('/');
    }
    pq
}

fn prepare_headers(provider: &Provider, req: &mut Request<Full<Bytes>>) {
    // hyper's legacy client refuses an HTTP/2 request on a pooled HTTP/1
    // connection; it picks the wire version itself from ALPN.
    *req.version_mut() = Version::HTTP_11;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    // The client's Host names us; the upstream's is set per connection kind.
    headers.remove(header::HOST);
    // The body may have been rewritten; hyper sets the length from the body.
    headers.remove(header::CONTENT_LENGTH);
    if let Some(auth) = &provider.authorization {
        if provider.api == crate::config::Api::Anthropic {
            headers.insert("x-api-key", auth.clone());
        } else {
            headers.insert(header::AUTHORIZATION, auth.clone());
        }
    }
    for (name, value) in &provider.headers {
        headers.insert(name.clone(), value.clone());
    }
}

/// hyper's errors say "client error (Connect)"; the cause says what happened.
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

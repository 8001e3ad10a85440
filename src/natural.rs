//! Natural mode: tool calling for models without native tools.
//!
//! Upstream direction: the request's tools become Markdown contracts in the
//! system prompt and the tool history becomes text. Client direction: the
//! model's natural-text calls are parsed out of its streamed reply and
//! emitted as native `tool_calls`.

pub mod syntax;

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;

use crate::body::Body;
use crate::config::{Config, Provider};
use crate::error::GatewayError;
use crate::upstream::Upstreams;

/// Per-gateway state of natural mode (caches shared by all requests).
pub struct Engine {}

impl Engine {
    pub fn new(_config: &Config) -> Self {
        Engine {}
    }

    pub async fn handle(
        &self,
        upstreams: &Upstreams,
        _config: &Config,
        provider: &Arc<crate::config::Provider>,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Body>, GatewayError> {
        let _: &Provider = provider;
        upstreams.send(provider, req).await
    }
}

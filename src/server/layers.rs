//! The tower layers around the gateway, composed in one place. Today one:
//! `[server.cors]`'s, which answers a browser's preflight before any key is
//! asked for; without it no layer (and no tower service) stands between
//! hyper and the gateway, so the passthrough path pays nothing for it. None
//! reads or rewrites a body.

use std::convert::Infallible;

use http::{HeaderName, Request, Response};
use tower::{Layer, Service};
use tower_http::cors::{AllowOrigin, Cors as CorsService, CorsLayer};

use crate::body::Body;
use crate::config::ServerConfig;
use crate::config::cors::{Cors, Origins};
use crate::headers::REQUEST_ID;

/// The layers a server's config asks for, built once and cloned per
/// connection.
#[derive(Clone)]
pub struct Layers {
    cors: Option<CorsLayer>,
}

impl Layers {
    /// The layers `server` asks for.
    pub fn new(server: &ServerConfig) -> Layers {
        Layers {
            cors: server.cors.as_ref().map(cors_layer),
        }
    }

    /// `inner` (the gateway) inside the CORS layer, when one is configured.
    pub fn around<S>(&self, inner: S) -> Option<CorsService<S>>
    where
        S: Service<Request<hyper::body::Incoming>, Response = Response<Body>, Error = Infallible>,
    {
        self.cors.as_ref().map(|cors| cors.layer(inner))
    }
}

fn cors_layer(cors: &Cors) -> CorsLayer {
    let origins = match &cors.origins {
        Origins::Any => AllowOrigin::any(),
        Origins::List(list) => AllowOrigin::list(list.iter().cloned()),
    };
    CorsLayer::new()
        .allow_origin(origins)
        .allow_methods(cors.methods.clone())
        .allow_headers(cors.headers.clone())
        .expose_headers([
            REQUEST_ID,
            HeaderName::from_static(crate::store::CHAT_HEADER),
            http::header::RETRY_AFTER,
        ])
        .max_age(cors.max_age)
}

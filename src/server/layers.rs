//! The tower layers every request passes through, composed in one place,
//! outermost first. None of them reads or rewrites a body: the byte-exact
//! passthrough stays byte-exact.

use std::convert::Infallible;

use http::{HeaderName, HeaderValue, Request, Response};
use tower::{Service, ServiceBuilder};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

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

    /// `inner` (the gateway) with every layer around it.
    pub fn around<S>(
        &self,
        inner: S,
    ) -> impl Service<
        Request<hyper::body::Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send,
    > + Clone
    + Send
    + use<S>
    where
        S: Service<Request<hyper::body::Incoming>, Response = Response<Body>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        ServiceBuilder::new()
            // A client's id is kept only when it is short and plain: it is
            // echoed, logged and put on the trace.
            .map_request(drop_unusable_id)
            // Then every request has one (made when the client sent none)…
            .layer(SetRequestIdLayer::new(REQUEST_ID, MakeId))
            // …and its response carries it back, errors and preflights too.
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            // A browser's preflight is answered here, before any key is
            // asked for; off unless `[server.cors]` is set.
            .option_layer(self.cors.clone())
            .service(inner)
    }
}

/// Makes request ids: 128 random bits as 32 hex digits.
#[derive(Clone, Copy, Default)]
struct MakeId;

impl MakeRequestId for MakeId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let id = format!("{:032x}", rand::random::<u128>());
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// The longest request id a client may choose.
const MAX_ID: usize = 128;

fn drop_unusable_id<B>(mut req: Request<B>) -> Request<B> {
    let usable = req.headers().get(&REQUEST_ID).is_none_or(|v| {
        (1..=MAX_ID).contains(&v.len())
            && v.as_bytes()
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=".contains(b))
    });
    if !usable {
        req.headers_mut().remove(&REQUEST_ID);
    }
    req
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_short_ids_are_kept() {
        let with = |id: &str| {
            let req = Request::builder()
                .header("x-request-id", id)
                .body(())
                .unwrap();
            drop_unusable_id(req).headers().get(&REQUEST_ID).cloned()
        };
        assert!(with("req-1:abc/2=").is_some());
        assert!(with(&"a".repeat(MAX_ID)).is_some());
        assert!(with(&"a".repeat(MAX_ID + 1)).is_none());
        assert!(with("a b").is_none());
        assert!(with("a\"b").is_none());
        let made = MakeId.make_request_id(&Request::new(())).unwrap();
        assert_eq!(made.header_value().len(), 32);
    }
}

//! A routed `/v1` request on its way: the body read within the limits, the
//! model found and allowed, the provider (and its failovers) tried in turn,
//! each attempt sent the way its [`plan`] says.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::Body as HttpBody;
use http_body_util::Full;

use super::limits::Limits;
use super::plan::{Door, Route, Shape, plan};
use crate::answer::Transcript;
use crate::body::observed::{Guard, RequestLog};
use crate::body::{Body, BoxError};
use crate::config::{Provider, Tenant};
use crate::error::GatewayError;
use crate::inbound;
use crate::limiter::Limiter;
use crate::router;
use crate::runtime::Runtime;

/// A `/v1` request of `who`, routed and sent; `rate_headers` gets what its
/// admission says of its limits, for its answer whatever it is (an error
/// too: the caller shapes it).
#[allow(clippy::too_many_arguments)]
pub(super) async fn proxy<B>(
    runtime: &Arc<Runtime>,
    limits: &Limits,
    limiter: &Limiter,
    store: Option<&Arc<crate::store::Store>>,
    req: Request<B>,
    who: &super::auth::Identity,
    log: &mut RequestLog,
    rate_headers: &mut Vec<(header::HeaderName, header::HeaderValue)>,
) -> Result<Response<Body>, GatewayError>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let tenant = &who.tenant;
    let (mut parts, incoming) = req.into_parts();
    let key_id = match (store, &who.managed_id) {
        (None, _) => String::new(),
        (Some(_), Some(id)) => id.to_string(),
        (Some(_), None) => super::auth::key_id(&runtime.config, &parts.headers),
    };
    if runtime.config.server.auth.is_some() {
        // The client's key is toolgate's own; it never goes upstream.
        parts.headers.remove(header::AUTHORIZATION);
        parts.headers.remove("x-api-key");
    }
    let server = &runtime.config.server;
    let mut held = inbound::Reservation::new(limits.buffered.clone());
    let bytes = inbound::read_body(
        &parts.headers,
        incoming,
        server.max_body_bytes,
        server.body_read_timeout,
        &mut held,
    )
    .await?;
    log.held = Some(Guard::new(held));
    log.bytes_in = bytes.len() as u64;
    // Taken only now: a client slow to send its body holds no permit meanwhile.
    let permit = limits
        .concurrency
        .clone()
        .try_acquire_owned()
        .map_err(|_| GatewayError::Overloaded)?;
    log.permit = Some(permit);
    let field = inbound::find_model(&parts.headers, &bytes)?.ok_or_else(|| {
        GatewayError::bad_request(
            "toolgate routes /v1 requests by their `model`, and this request has none",
            Some("model"),
        )
    })?;
    // The key's policy, before anything is sent anywhere. A request refused
    // here is logged with the model it asked for.
    if !tenant.allows_model(&field.name) {
        log.model.clone_from(&field.name);
        return Err(GatewayError::ModelNotAllowed(field.name.clone()));
    }
    let Some(route) = router::route(&runtime.config.providers, &field.name) else {
        log.model.clone_from(&field.name);
        return Err(GatewayError::UnknownModel(field.name.clone()));
    };
    // Owned: a borrowed route held across an await trips hyper's `Send`
    // bounds. Without failover providers nothing is collected.
    let owned = |r: &router::Route<'_>| (r.provider.clone(), r.model.clone().into_owned());
    let primary = owned(&route);
    let failovers: Vec<(Arc<Provider>, String)> =
        router::failovers(&runtime.config.providers, &route)
            .iter()
            .map(owned)
            .collect();
    drop(route);
    // The tenant's limits, once the request is known to be routable; the
    // admission is the meter every upstream answer of this request reports
    // to, and it settles when the last of the request's work ends.
    let usage = store.map(|store| (store.clone(), key_id));
    let ask = crate::limiter::Ask {
        body: &bytes,
        provider: &primary.0,
    };
    let admission = match limiter
        .admit(tenant, who.share.as_ref(), &field.name, Some(ask), usage)
        .await
    {
        Ok(admission) => admission,
        Err(refused) => {
            log.model.clone_from(&field.name);
            return Err(refused);
        }
    };
    log.admission = Some(Guard::new(admission.clone()));
    // Its answer, whatever it is, says what its limits have left.
    *rate_headers = admission.rate_headers();
    Box::pin(crate::telemetry::scope::with_meter(
        admission,
        attempt_in_turn(
            runtime, tenant, log, parts, bytes, &field, primary, failovers,
        ),
    ))
    .await
}

/// The routed provider, then its failovers while each fails before
/// answering.
#[allow(clippy::too_many_arguments)]
async fn attempt_in_turn(
    runtime: &Arc<Runtime>,
    tenant: &Arc<Tenant>,
    log: &mut RequestLog,
    parts: http::request::Parts,
    bytes: Bytes,
    field: &inbound::ModelField,
    primary: (Arc<Provider>, String),
    failovers: Vec<(Arc<Provider>, String)>,
) -> Result<Response<Body>, GatewayError> {
    let mut kept = Some((parts, bytes));
    let mut chain = std::iter::once(primary).chain(failovers).peekable();
    let mut transcript = Transcript::default();
    let result = loop {
        let Some((provider, model)) = chain.next() else {
            unreachable!("the last provider's result is returned")
        };
        let next = chain.peek().map(|(p, _)| p.name.clone());
        // Every provider but the last gets a copy: the request stays whole
        // until one of them answers.
        let (parts, bytes) = match next {
            None => kept.take().expect("kept until the last provider"),
            Some(_) => {
                let (parts, bytes) = kept.as_ref().expect("kept until the last provider");
                (copy_parts(parts), bytes.clone())
            }
        };
        let bytes = if *model != *field.name {
            inbound::replace_model(&bytes, field, &model)
        } else {
            bytes
        };
        log.model = model;
        crate::upstream::count_attempts_anew();
        let result = dispatch(
            runtime,
            tenant,
            parts,
            bytes,
            &provider,
            log,
            &mut transcript,
        )
        .await;
        let Some(to) = next else {
            break result;
        };
        if !failed_before_answering(&result) {
            break result;
        }
        let from = provider.name.clone();
        tracing::warn!(from = %from, to = %to, "every attempt failed before an answer; failing over");
        metrics::counter!(crate::metrics::FAILOVERS, "from" => from, "to" => to).increment(1);
    };
    transcript.settle(&result);
    result
}

/// Whether a provider failed before any byte of an answer: its targets
/// could not be reached, did not answer in time, or answered with a status
/// `retry.on` names once its attempts ran out.
fn failed_before_answering(result: &Result<Response<Body>, GatewayError>) -> bool {
    match result {
        Err(GatewayError::UpstreamUnreachable { .. } | GatewayError::UpstreamTimeout { .. }) => {
            true
        }
        Err(_) => false,
        Ok(response) => response
            .extensions()
            .get::<crate::upstream::Exhausted>()
            .is_some(),
    }
}

fn copy_parts(parts: &http::request::Parts) -> http::request::Parts {
    let mut copy = Request::new(()).into_parts().0;
    copy.method = parts.method.clone();
    copy.uri = parts.uri.clone();
    copy.version = parts.version;
    copy.headers = parts.headers.clone();
    copy
}

/// Sends a routed request the way its [`plan`] says.
async fn dispatch(
    runtime: &Arc<Runtime>,
    tenant: &Arc<Tenant>,
    parts: http::request::Parts,
    bytes: Bytes,
    provider: &Arc<Provider>,
    log: &mut RequestLog,
    transcript: &mut Transcript,
) -> Result<Response<Body>, GatewayError> {
    if let Some(handles) = runtime.metrics_of(provider) {
        log.provider = Some(handles.clone());
    }
    let door = Door::of(&parts.method, parts.uri.path());
    let plan = plan(door, &Shape::of(provider), runtime.store.is_some());
    if plan.scan {
        // Every path that parses the body takes it only within the
        // container limits; a body passed on untouched is never scanned.
        crate::api::bounded(&bytes)?;
    }
    // Boxed: the doors' and transforms' futures are large, and hyper keeps
    // the handler's future allocation for the life of each connection.
    let (runtime, provider, tenant) = match plan.route {
        Route::ChatAnswer => {
            let handle = crate::api::chat::handle;
            return answer(handle, runtime, provider, tenant, parts, bytes, transcript).await;
        }
        Route::ResponsesAnswer => {
            let handle = crate::api::responses::handle;
            return answer(handle, runtime, provider, tenant, parts, bytes, transcript).await;
        }
        Route::MessagesAnswer => {
            let handle = crate::api::messages::handle;
            return answer(handle, runtime, provider, tenant, parts, bytes, transcript).await;
        }
        Route::AnthropicOnly => {
            return Err(GatewayError::bad_request(
                format!(
                    "provider `{}` speaks Anthropic's Messages API only (`api = \"anthropic\"`): send POST /v1/messages",
                    provider.name
                ),
                Some("model"),
            ));
        }
        Route::MessagesNeedsChat => {
            return Err(GatewayError::bad_request(
                format!(
                    "toolgate translates /v1/messages only for providers with `api = \"chat\"`, and `{}` has another",
                    provider.name
                ),
                Some("model"),
            ));
        }
        Route::Forward | Route::Natural | Route::ToNatural => (runtime, provider, tenant),
    };
    // A tenant whose limits count tokens gets them on streams too, whatever
    // its client put in `stream_options` (`stream` is a boolean here:
    // `inbound::find_model` refused any other), on both APIs whose streams
    // report usage only when asked.
    let streams_asked = door == Door::Chat
        || crate::upstream::usage_asked::is_legacy_completions(&parts.method, parts.uri.path());
    let asked = (streams_asked
        && crate::telemetry::scope::meter().is_some_and(|m| m.wants_usage()))
    .then(|| crate::upstream::usage_asked::ask(&bytes))
    .flatten();
    let bytes = match &asked {
        Some(with_usage) => with_usage.clone(),
        None => bytes,
    };
    // With a store, a chat exchange may be recorded: its answer is read on
    // the way to the client (and passed on unchanged).
    let tap = plan.tap
        && match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(request)) => {
                Box::pin(transcript.begin(runtime, provider, tenant, &request, &parts.headers))
                    .await
            }
            _ => false,
        };
    let response = match plan.route {
        Route::Natural => {
            Box::pin(runtime.natural.handle(
                &runtime.upstreams,
                &runtime.config,
                provider,
                parts,
                bytes,
                false,
            ))
            .await
        }
        Route::ToNatural => {
            Box::pin(crate::to_natural::handle(
                &runtime.upstreams,
                provider,
                parts,
                bytes,
            ))
            .await
        }
        _ => {
            let request = Request::from_parts(parts, Full::new(bytes));
            runtime.upstreams.send(provider, request).await
        }
    }?;
    // An answer takes the transcript; a refusal leaves it to the request.
    let recorder = (tap && response.status().is_success())
        .then(|| transcript.take())
        .flatten();
    let response = match recorder {
        Some(recorder) => {
            let chat = recorder.chat_id().to_owned();
            let streamed = super::is_event_stream(&response);
            let (parts, body) = response.into_parts();
            let tapped = crate::api::chat_tap::Tap::new(body, recorder, streamed);
            let mut response = Response::from_parts(parts, crate::body::boxed(tapped));
            crate::answer::tag_chat(&mut response, Some(&chat));
            response
        }
        _ => response,
    };
    // The usage the client did not ask for stays out of its answer (the
    // meter and the transcript have read it).
    Ok(
        if asked.is_some() && response.status().is_success() && super::is_event_stream(&response) {
            response.map(|body| {
                crate::body::boxed(crate::sse::transform::TransformBody::new(
                    body,
                    crate::upstream::usage_asked::DropUsage::default(),
                ))
            })
        } else {
            response
        },
    )
}

/// A door's answer path: what `api::{chat, responses, messages}::handle` are.
type DoorHandler<'t, F> = fn(
    Arc<Runtime>,
    Arc<Provider>,
    Arc<Tenant>,
    http::request::Parts,
    Bytes,
    &'t mut Transcript,
) -> F;

/// A request answered by one of the doors' answer paths (`handle` is the
/// door's handler), its future boxed.
async fn answer<'t, F>(
    handle: DoorHandler<'t, F>,
    runtime: &Arc<Runtime>,
    provider: &Arc<Provider>,
    tenant: &Arc<Tenant>,
    parts: http::request::Parts,
    bytes: Bytes,
    transcript: &'t mut Transcript,
) -> Result<Response<Body>, GatewayError>
where
    F: Future<Output = Result<Response<Body>, GatewayError>>,
{
    Box::pin(handle(
        runtime.clone(),
        provider.clone(),
        tenant.clone(),
        parts,
        bytes,
        transcript,
    ))
    .await
}

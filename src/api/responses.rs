//! The Responses API door in front of a Chat Completions provider: the body
//! is translated into a chat request (`responses_request`), answered through
//! [`crate::answer`] like any chat request (every tool mode, the gateway's
//! tools), and the answer's events are written as Responses events or one
//! response object (`responses_events`).

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use serde_json::Value;

use crate::answer::{self, Ask, Started, Transcript};
use crate::api::responses_events::ResponsesEvents;
use crate::api::responses_request;
use crate::body::Body;
use crate::config::{Provider, Tenant};
use crate::error::GatewayError;
use crate::runtime::Runtime;

pub async fn handle(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    tenant: Arc<Tenant>,
    mut parts: http::request::Parts,
    bytes: Bytes,
    transcript: &mut Transcript,
) -> Result<Response<Body>, GatewayError> {
    let mut request = super::json_object(&bytes)?;
    // Parsed: the raw body is not held for the rest of the answer.
    drop(bytes);
    // Before `store` and `previous_response_id` are read.
    super::fields::check(&request, responses_request::FIELDS)?;
    let store = runtime.store.clone();
    let owner = tenant.name.clone();
    // With a store, answers are kept (unless `store: false`) as the
    // conversation they end, which `previous_response_id` continues.
    let keep = store.is_some() && request.get("store").and_then(Value::as_bool) != Some(false);
    let mut conversation = Vec::new();
    let mut previous = None;
    if let Some(store) = &store {
        previous = match request.remove("previous_response_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(_) => {
                return Err(GatewayError::bad_request(
                    "`previous_response_id` must be a string",
                    Some("previous_response_id"),
                ));
            }
        };
        if let Some(id) = &previous {
            // Another tenant's response is not found, exactly like one that
            // does not exist.
            let kept = store
                .response(owner.clone(), id)
                .await
                .map_err(|e| GatewayError::StoreUnavailable(e.to_string()))?
                .ok_or_else(|| {
                    GatewayError::bad_request(
                        format!("Previous response with id `{id}` not found"),
                        Some("previous_response_id"),
                    )
                })?;
            conversation = kept.conversation.as_array().cloned().unwrap_or_default();
            // The exchange continues the chat the response was recorded in
            // (unless the client names one).
            if let Some(chat) = kept.chat.and_then(|c| http::HeaderValue::from_str(&c).ok()) {
                parts
                    .headers
                    .entry(crate::store::CHAT_HEADER)
                    .or_insert(chat);
            }
        }
        match request.get("input") {
            Some(Value::String(text)) => {
                conversation.push(serde_json::json!({"role": "user", "content": text}));
            }
            Some(Value::Array(items)) => conversation.extend(items.iter().cloned()),
            _ => {}
        }
        if previous.is_some() {
            request.insert("input".into(), Value::Array(conversation.clone()));
        }
    }
    let mut translated = responses_request::translate(request)?;
    translated.echo.store = keep;
    if let Some(id) = &previous {
        translated.echo.previous_response_id = Value::String(id.clone());
    }
    let model = translated.request.model.clone().unwrap_or_default();
    // The rounds go to the provider's chat endpoint (the path is all
    // `upstream` reads of the client's URI).
    let uri = http::Uri::from_static("/v1/chat/completions");
    let ask = Ask {
        request: translated.request,
        uri,
        headers: parts.headers,
        tenant,
        transcript,
    };
    let running = match answer::start(runtime, provider, ask).await? {
        Started::Refused(response) => return Ok(response),
        Started::Running(running) => running,
    };
    let mut encoder = ResponsesEvents::new(
        &model,
        &translated.echo,
        running.offer(),
        translated.stream,
        running.show(),
    );
    if let Some(store) = store.filter(|_| keep) {
        let chat = running.chat_id().map(str::to_owned);
        encoder.on_complete(Box::new(move |response: &Value| {
            let mut items = conversation;
            if let Some(output) = response["output"].as_array() {
                items.extend(output.iter().cloned());
            }
            let id = response["id"].as_str().unwrap_or_default().to_owned();
            store.save_response(
                owner,
                id,
                chat.as_deref(),
                Value::Array(items),
                response.clone(),
            );
        }));
    }
    if translated.stream {
        return Ok(super::streamed(running, encoder));
    }
    super::whole(running, encoder, ResponsesEvents::into_response).await
}

/// `GET` and `DELETE /v1/responses/{id}`: `tenant`'s responses kept in
/// the store (another tenant's are not found, like unknown ids).
pub async fn stored(
    store: Option<&Arc<crate::store::Store>>,
    tenant: &Tenant,
    method: &http::Method,
    id: &str,
) -> Result<Response<Body>, GatewayError> {
    let Some(store) = store else {
        return Err(GatewayError::NotFound(format!(
            "No stored response `{id}`: toolgate keeps responses only with a [store] configured"
        )));
    };
    let unavailable = |e: crate::store::StoreError| GatewayError::StoreUnavailable(e.to_string());
    let missing = || GatewayError::NotFound(format!("No stored response `{id}`"));
    let object = match *method {
        http::Method::GET => {
            store
                .response(tenant.name.clone(), id)
                .await
                .map_err(unavailable)?
                .ok_or_else(missing)?
                .response
        }
        http::Method::DELETE => {
            if !store
                .delete_response(tenant.name.clone(), id)
                .await
                .map_err(unavailable)?
            {
                return Err(missing());
            }
            serde_json::json!({"id": id, "object": "response.deleted", "deleted": true})
        }
        _ => {
            return Err(GatewayError::UnknownRoute {
                method: method.to_string(),
                path: format!("/v1/responses/{id}"),
                hint: "",
            });
        }
    };
    Ok(super::json(&object))
}

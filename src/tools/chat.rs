//! A chat completion on a provider with gateway tools: the request is
//! prepared once (the gateway's tools declared beside the client's, the
//! gateway's earlier steps put back into the history), the first round is
//! sent, and [`drive`] runs the rest, streaming or not.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri, header};
use http_body_util::Full;
use serde_json::{Map, Value, json};

use crate::api::chat_events::ChatEvents;
use crate::api::chat_message::ChatMessage;
use crate::body::{self, Body};
use crate::config::{GatewaySettings, Mode, Provider};
use crate::error::GatewayError;
use crate::gateway::Runtime;
use crate::to_natural::{self, RenderOptions};
use crate::tools::Offer;
use crate::tools::drive::{self, Plan, Upstream};
use crate::tools::rounds::Rounds;

/// Sends one round through the provider's tool mode: natural mode rewrites
/// it and turns the model's text calls into native ones; the other modes
/// send it as it is (to_natural's text rendering happens after the loop).
struct Provided {
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    uri: Uri,
    headers: HeaderMap,
}

impl Upstream for Provided {
    async fn send(&self, body: Vec<u8>) -> Result<Response<Body>, GatewayError> {
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        let rt = &self.runtime;
        match self.provider.tools.mode {
            Mode::Natural => {
                let (parts, body) = request.into_parts();
                let bytes = http_body_util::BodyExt::collect(body)
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                Box::pin(
                    rt.natural
                        .handle(&rt.upstreams, &rt.config, &self.provider, parts, bytes),
                )
                .await
            }
            _ => rt.upstreams.send(&self.provider, request).await,
        }
    }
}

pub async fn handle(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    settings: &GatewaySettings,
    parts: http::request::Parts,
    bytes: Bytes,
) -> Result<Response<Body>, GatewayError> {
    let offer = runtime
        .tools
        .offer(settings)
        .map_err(|u| GatewayError::ToolServerUnavailable {
            server: u.server,
            reason: u.reason,
        })?;
    let tools = &provider.tools;
    let bytes = if tools.mode == Mode::ToNatural {
        let history = to_natural::history::HistoryOptions {
            syntax: tools.syntax,
            max_tool_result_chars: tools.max_tool_result_chars,
        };
        match to_natural::history::rewrite(&bytes, &history)? {
            Some(rewritten) => Bytes::from(rewritten),
            None => bytes,
        }
    } else {
        bytes
    };
    let prepared = prepare(&bytes, &offer, &runtime)?;
    let as_text = (tools.mode == Mode::ToNatural).then(|| RenderOptions {
        syntax: tools.syntax,
        pretty: tools.pretty,
        separator: tools.separator.clone(),
    });
    let rounds = Rounds::new(prepared.request, offer, settings.max_rounds, as_text);
    let mut headers = parts.headers;
    // Each round's reply is parsed, so it must arrive uncompressed.
    headers.remove(header::ACCEPT_ENCODING);
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let plan = Plan {
        upstream: Provided {
            runtime: runtime.clone(),
            provider: provider.clone(),
            uri: parts.uri,
            headers,
        },
        tools: runtime.tools.clone(),
        max_parallel: settings.max_parallel_tools,
        max_result_chars: tools.max_tool_result_chars,
    };
    let first = plan.upstream.send(rounds.body()).await?;
    if !first.status().is_success() {
        // The upstream refused the request itself: its answer, unchanged.
        return Ok(first);
    }
    let show = settings.show;
    let steps = runtime.steps.clone();
    if prepared.stream {
        let encoder = ChatEvents::new(prepared.include_usage, show);
        let body = drive::spawn(encoder, move |mut out| {
            Box::pin(async move {
                let mut rounds = drive::drive(&plan, rounds, first, &mut out).await;
                keep_steps(&steps, &mut rounds, &out.encoder);
            })
        });
        let mut response = Response::new(body);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return Ok(response);
    }
    let mut message = ChatMessage::new(show);
    let mut rounds = drive::drive(&plan, rounds, first, &mut message).await;
    let completion = message.into_completion()?;
    if let Some(calls) = completion
        .pointer("/choices/0/message/tool_calls")
        .and_then(Value::as_array)
    {
        let ids = calls
            .iter()
            .filter_map(|c| c.get("id")?.as_str().map(str::to_owned))
            .collect();
        if let Some(kept) = rounds.take_steps() {
            steps.keep(ids, kept);
        }
    }
    let mut response = Response::new(body::json(&completion));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// A streamed answer that ended with the client's calls keeps the gateway's steps.
fn keep_steps(steps: &crate::tools::steps::StepStore, rounds: &mut Rounds, out: &ChatEvents) {
    let ids = out.client_call_ids();
    if !ids.is_empty()
        && let Some(kept) = rounds.take_steps()
    {
        steps.keep(ids, kept);
    }
}

/// The first round's request.
struct Prepared {
    request: Map<String, Value>,
    stream: bool,
    include_usage: bool,
}

fn prepare(bytes: &[u8], offer: &Offer, runtime: &Runtime) -> Result<Prepared, GatewayError> {
    let mut request = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return Err(GatewayError::bad_request(
                "The request body must be a JSON object",
                None,
            ));
        }
        Err(e) => {
            return Err(GatewayError::bad_request(
                format!("The request body is not valid JSON: {e}"),
                None,
            ));
        }
    };
    if request
        .get("n")
        .and_then(Value::as_u64)
        .is_some_and(|n| n > 1)
    {
        return Err(GatewayError::bad_request(
            "`n` greater than 1 is not supported on a provider with gateway tools: each choice would run the tools on its own",
            Some("n"),
        ));
    }
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = request
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        == Some(true);
    legacy_functions(&mut request);
    let mut declared = match request.remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            return Err(GatewayError::bad_request(
                "`tools` must be an array",
                Some("tools"),
            ));
        }
    };
    for (i, tool) in declared.iter().enumerate() {
        let name = tool.pointer("/function/name").and_then(Value::as_str);
        if let Some(name) = name
            && offer.get(name).is_some()
        {
            return Err(GatewayError::bad_request(
                format!(
                    "The tool `{name}` is also one of this provider's gateway tools; rename yours"
                ),
                Some(&format!("tools[{i}].function.name")),
            ));
        }
    }
    declared.extend(offer.tools.iter().map(|t| t.declaration()));
    request.insert("tools".into(), Value::Array(declared));
    match request.get_mut("messages") {
        Some(Value::Array(messages)) => {
            runtime.steps.splice(messages);
        }
        _ => {
            return Err(GatewayError::bad_request(
                "`messages` must be an array",
                Some("messages"),
            ));
        }
    }
    // Rounds always stream upstream, with usage, so it can be summed.
    request.insert("stream".into(), json!(true));
    request.insert("stream_options".into(), json!({"include_usage": true}));
    Ok(Prepared {
        request,
        stream,
        include_usage,
    })
}

/// Legacy `functions` / `function_call` become `tools` / `tool_choice`.
fn legacy_functions(request: &mut Map<String, Value>) {
    if let Some(Value::Array(functions)) = request.remove("functions") {
        let tools: Vec<Value> = functions
            .into_iter()
            .map(|f| json!({"type": "function", "function": f}))
            .collect();
        if !request.contains_key("tools") {
            request.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = request.remove("function_call")
        && !request.contains_key("tool_choice")
    {
        let choice = match choice {
            Value::Object(f) => {
                json!({"type": "function", "function": {"name": f.get("name").cloned().unwrap_or(Value::Null)}})
            }
            other => other,
        };
        request.insert("tool_choice".into(), choice);
    }
}

//! Answering a Chat Completions-shaped request through a provider, for any
//! door: the request is prepared once (to_natural's text history read back
//! into native calls, the gateway's tools declared beside the client's, the
//! gateway's earlier steps put back), the first round is sent, and
//! [`Running::drive`] runs the rest into the door's [`Output`].
//!
//! Doors convert their own wire format into the request `Map` before, and
//! [`Event`](crate::exchange::Event)s into their wire format after (see
//! `api/`); every tool mode and the gateway's tools work the same for all.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request as HttpRequest, Response, Uri, header};
use http_body_util::Full;
use serde_json::{Map, Value};

use crate::body::Body;
use crate::config::{Api, Mode, Provider, ShowGatewayTools, Tenant};
use crate::error::GatewayError;
use crate::exchange::request::{Request, Tool, ToolChoice};
use crate::exchange::{Event, Sink};
use crate::runtime::Runtime;
use crate::sse::transform::TransformBody;
use crate::store::{Begin, CHAT_HEADER, Recorder};
use crate::to_natural::{self, RenderOptions};
use crate::tools::drive::{self, Flushed, Output, Plan, Upstream};
use crate::tools::rounds::Rounds;
use crate::tools::search::{self, Catalog};
use crate::tools::{Absent, Offer, Unavailable};
use crate::upstream::from_responses::FromResponses;
use crate::upstream::reply::{self, Shape};
use crate::upstream::to_responses;

/// Sends one round through the provider's tool mode: natural mode rewrites
/// it and turns the model's text calls into native ones; the other modes
/// send it as it is (to_natural's text rendering happens in the loop).
pub struct Provided {
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    uri: Uri,
    headers: HeaderMap,
}

impl Upstream for Provided {
    fn send<'a>(
        &'a self,
        request: &Request,
    ) -> impl Future<Output = Result<Response<Body>, GatewayError>> + Send + use<'a> {
        // Written out now, in the provider's dialect: the future owns it.
        let body = match self.provider.api {
            Api::Responses => to_responses::translate(request).map(|r| {
                let body = serde_json::to_vec(&r).unwrap_or_default();
                (Uri::from_static("/v1/responses"), body)
            }),
            _ => Ok((self.uri.clone(), request.to_chat_body())),
        };
        async move {
            let (uri, body) = body?;
            let (mut parts, ()) = HttpRequest::new(()).into_parts();
            parts.method = Method::POST;
            parts.uri = uri;
            parts.headers = self.headers.clone();
            let body = Bytes::from(body);
            let rt = &self.runtime;
            if self.provider.api == Api::Responses {
                return self
                    .send_responses(HttpRequest::from_parts(parts, Full::new(body)))
                    .await;
            }
            if !self.provider.tools.reads_text_calls() {
                let request = HttpRequest::from_parts(parts, Full::new(body));
                return rt.upstreams.send(&self.provider, request).await;
            }
            Box::pin(rt.natural.handle(
                &rt.upstreams,
                &rt.config,
                &self.provider,
                parts,
                body,
                // Read by the round loop, not the client: calls as soon
                // as they are ready, so gateway tools start early.
                true,
            ))
            .await
        }
    }
}

impl Provided {
    /// A round to an `api = "responses"` provider (its body already the
    /// Responses request): its Responses stream read back as chat.
    async fn send_responses(
        &self,
        request: HttpRequest<Full<Bytes>>,
    ) -> Result<Response<Body>, GatewayError> {
        let response = self.runtime.upstreams.send(&self.provider, request).await?;
        if !response.status().is_success() {
            return Ok(response);
        }
        let (mut parts, upstream) = response.into_parts();
        if let Shape::Whole = reply::prepare(&mut parts)? {
            return Err(GatewayError::UpstreamInvalid {
                message: "The provider answered a streamed Responses request with a whole body"
                    .into(),
                code: "upstream_not_streamed",
            });
        }
        let body = TransformBody::new(upstream, FromResponses::new());
        Ok(Response::from_parts(parts, crate::body::boxed(body)))
    }
}

/// How the first round went.
pub enum Started {
    /// The upstream refused the request itself: its answer, unchanged.
    Refused(Response<Body>),
    Running(Box<Running>),
}

/// An answer under way: its first round's response is in.
pub struct Running {
    plan: Plan<Provided>,
    rounds: Rounds,
    first: Response<Body>,
    runtime: Arc<Runtime>,
    recorder: Option<Recorder>,
    /// Owns the steps kept for the client's follow-up.
    tenant: Arc<Tenant>,
}

impl Running {
    /// The gateway tools this answer offers the model.
    pub fn offer(&self) -> &Offer {
        self.rounds.offer()
    }

    /// The transcript chat this answer is recorded in (with a store).
    pub fn chat_id(&self) -> Option<&str> {
        self.recorder.as_ref().map(Recorder::chat_id)
    }

    /// How the door shows the gateway's calls (`show_gateway_tools`).
    pub fn show(&self) -> ShowGatewayTools {
        let gateway = self.plan.upstream.provider.tools.gateway.as_ref();
        gateway.map_or(ShowGatewayTools::Fields, |g| g.show)
    }

    /// Drives the answer to its end into `out`; the gateway's steps of an
    /// answer that ends with the client's calls are kept for the follow-up.
    pub async fn drive<O: Output>(self, out: &mut O) {
        let Running {
            plan,
            rounds,
            first,
            runtime,
            recorder,
            tenant,
        } = self;
        let mut rounds = match recorder {
            Some(recorder) => {
                let mut recording = Recording { out, recorder };
                let rounds = drive::drive(&plan, rounds, first, &mut recording).await;
                recording.recorder.finish();
                rounds
            }
            None => drive::drive(&plan, rounds, first, out).await,
        };
        if let Some((ids, steps)) = rounds.take_steps() {
            if let Some(store) = &runtime.store
                && let Ok(json) = serde_json::to_value(&steps)
            {
                store.save_steps(tenant.name.clone(), ids.clone(), json);
            }
            runtime.steps.keep(&tenant.name, ids, steps);
        }
    }
}

/// A door's output that also records every event in a transcript.
struct Recording<'a, O> {
    out: &'a mut O,
    recorder: Recorder,
}

impl<O: Output> Sink for Recording<'_, O> {
    fn event(&mut self, event: Event) {
        self.recorder.event(&event);
        self.out.event(event);
    }
    fn fail(&mut self, error: GatewayError) {
        self.recorder.fail(&error);
        self.out.fail(error);
    }
    fn end(&mut self) {
        // Recorded before the client sees the end, so a follow-up request
        // finds the state it continues.
        self.recorder.close();
        self.out.end();
    }
    fn keep_alive(&mut self) {
        self.out.keep_alive();
    }
}

impl<O: Output> Output for Recording<'_, O> {
    async fn flush(&mut self) -> Flushed {
        self.out.flush().await
    }
}

/// One client request's transcript, whichever providers it takes: begun by
/// the first provider that tries the request, handed on to the next one
/// when that one fails before answering (`failover`), taken by the one
/// that answers. A request is one exchange in one chat, whatever it took
/// to answer; when no provider answers, the request is recorded with why.
#[derive(Default)]
pub struct Transcript {
    recorder: Option<Recorder>,
    /// Whether it was begun: a request `[store] record` leaves out stays out.
    begun: bool,
}

impl Transcript {
    /// Records this request, now tried with `provider` (the chat it
    /// continues linked on the first try only); whether it is recorded.
    pub async fn begin(
        &mut self,
        runtime: &Runtime,
        provider: &Provider,
        tenant: &Tenant,
        request: &Map<String, Value>,
        headers: &HeaderMap,
    ) -> bool {
        let model = request.get("model").and_then(Value::as_str).unwrap_or("");
        if std::mem::replace(&mut self.begun, true) {
            if let Some(recorder) = &mut self.recorder {
                recorder.retarget(&provider.name, model);
            }
        } else if let Some(store) = runtime.store.as_ref() {
            self.recorder = store
                .begin(Begin {
                    tenant: &tenant.name,
                    provider: &provider.name,
                    model,
                    request,
                    chat_header: headers.get(CHAT_HEADER).and_then(|v| v.to_str().ok()),
                    gateway_tools: provider.tools.runs_loop(),
                })
                .await;
        }
        self.recorder.is_some()
    }

    /// The recorder, for the provider that answers.
    pub fn take(&mut self) -> Option<Recorder> {
        self.recorder.take()
    }

    /// The request is over: if no provider took its transcript, it is
    /// recorded as refused, with the error or status the client got.
    pub fn settle(&mut self, result: &Result<Response<Body>, GatewayError>) {
        let Some(mut recorder) = self.recorder.take() else {
            return;
        };
        match result {
            Err(e) => {
                // A whole answer that failed on an invalid call: the text
                // before it, then the error with the call as written, as a
                // streamed answer records them.
                if let Some(text) = e.unsent_text() {
                    recorder.event(&Event::Text(text.to_owned()));
                }
                recorder.fail(e);
            }
            Ok(r) if !r.status().is_success() => recorder.refuse(
                &format!("The upstream answered with HTTP {}", r.status().as_u16()),
                "upstream_status",
            ),
            Ok(_) => {}
        }
    }
}

/// Tells the client which chat its exchange was recorded in.
pub fn tag_chat(response: &mut Response<Body>, chat: Option<&str>) {
    if let Some(value) = chat.and_then(|c| HeaderValue::from_str(c).ok()) {
        response.headers_mut().insert(CHAT_HEADER, value);
    }
}

/// What a door hands over: the request, the client's request head (its
/// path, query and headers), who sent it, and the request's transcript.
pub struct Ask<'t> {
    pub request: Request,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub tenant: Arc<Tenant>,
    pub transcript: &'t mut Transcript,
}

/// The provider's gateway tools for this request (none when it has none),
/// without those the tenant may not be offered, and without those of a
/// tool server that is down: the others are offered. Only when every tool
/// the key could be offered is down is the request refused (`503`): the
/// model is never called with none of its provider's gateway tools.
pub fn offer(
    runtime: &Runtime,
    provider: &Provider,
    tenant: &Tenant,
) -> Result<Offer, GatewayError> {
    let Some(settings) = &provider.tools.gateway else {
        return Ok(Offer::default());
    };
    let offer = runtime
        .tools
        .offer(settings, |entry| tenant.allows_tools(entry))
        .map_err(
            |Unavailable { server, reason }| GatewayError::ToolServerUnavailable { server, reason },
        )?;
    if offer.tools.is_empty() && !offer.unavailable.is_empty() {
        let servers: Vec<String> = offer.unavailable.iter().map(Absent::describe).collect();
        return Err(GatewayError::ToolServersDown {
            servers: servers.join(", "),
            // One that is starting may be up at any moment.
            retry_in: offer
                .unavailable
                .iter()
                .map(|a| a.retry_in.filter(|_| !a.starting))
                .min()
                .flatten(),
        });
    }
    Ok(offer)
}

/// Links the transcript (with a store), prepares the request and sends the
/// first round.
pub async fn start(
    runtime: Arc<Runtime>,
    provider: Arc<Provider>,
    ask: Ask<'_>,
) -> Result<Started, GatewayError> {
    let Ask {
        mut request,
        uri,
        headers,
        tenant,
        transcript,
    } = ask;
    if provider.tools.runs_loop() {
        // Toolgate's own `details` blocks, sent back verbatim: the model and
        // the chat linking see the history as if they were not there.
        crate::tools::show::strip_history(&mut request.messages);
    }
    if runtime.store.is_some()
        // Transcripts keep the request as Chat Completions JSON.
        && let Ok(Value::Object(chat)) = serde_json::to_value(&request)
    {
        transcript
            .begin(&runtime, &provider, &tenant, &chat, &headers)
            .await;
    }
    let offer =
        offer(&runtime, &provider, &tenant)?.beside(request.tools.iter().filter_map(Tool::name));
    let tools = &provider.tools;
    // The gateway's steps (its tools' calls, or searches) go back into a
    // follow-up's history.
    if (!offer.is_empty() || tools.search.is_some()) && tools.mode != Mode::ToNatural {
        recall_steps(&runtime, &tenant, &request).await;
    }
    let (request, catalog) = prepare(request, &offer, &runtime, &provider, &tenant)?;
    let as_text = (tools.mode == Mode::ToNatural).then(|| RenderOptions {
        syntax: tools.syntax,
        pretty: tools.pretty,
        separator: tools.separator.clone(),
    });
    let (max_rounds, max_parallel) = match (&tools.gateway, &tools.search) {
        (Some(g), _) => (g.max_rounds, g.max_parallel_tools),
        // Searches only: they are answered in the loop, nothing runs.
        (None, Some(search)) => (search.max_rounds, 1),
        // Without gateway tools there is one round, and nothing to run.
        (None, None) => (u32::MAX, 1),
    };
    let rounds = Rounds::new(request, offer, max_rounds, as_text).with_search(catalog);
    let mut headers = headers;
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
            uri,
            headers,
        },
        tools: runtime.tools.clone(),
        max_parallel,
        max_result_chars: tools.max_tool_result_chars,
    };
    // Until the first round answers, the transcript stays the request's:
    // a provider that fails here hands it on (or it is recorded refused).
    let first = plan.upstream.send(rounds.request()).await?;
    if !first.status().is_success() {
        return Ok(Started::Refused(first));
    }
    Ok(Started::Running(Box::new(Running {
        plan,
        rounds,
        first,
        runtime,
        recorder: transcript.take(),
        tenant,
    })))
}

/// Steps another replica kept for this history's calls, fetched from the
/// store into memory, where `prepare` splices them like its own.
async fn recall_steps(runtime: &Runtime, tenant: &Tenant, request: &Request) {
    let Some(store) = &runtime.store else {
        return;
    };
    let unknown = runtime
        .steps
        .unknown_ids(&tenant.name, &request.messages, MAX_RECALLED_IDS);
    if unknown.is_empty() {
        return;
    }
    for (ids, steps) in store.steps(tenant.name.clone(), unknown).await {
        if let Ok(steps) = serde_json::from_value(steps) {
            runtime.steps.keep(&tenant.name, ids, steps);
        }
    }
}

/// Call ids of a history looked up in the store at most.
const MAX_RECALLED_IDS: usize = 64;

/// The first round's request: to_natural's text history read back, the
/// gateway's tools declared (or, with `tool_search` and more tools than
/// its threshold, `search_tools` and the catalog it searches), its earlier
/// steps restored, and streaming with usage asked of the upstream.
fn prepare(
    mut request: Request,
    offer: &Offer,
    runtime: &Runtime,
    provider: &Provider,
    tenant: &Tenant,
) -> Result<(Request, Option<Catalog>), GatewayError> {
    if !offer.is_empty() && request.sampling.n.is_some_and(|n| n > 1) {
        return Err(GatewayError::bad_request(
            "`n` greater than 1 is not supported on a provider with gateway tools: each choice would run the tools on its own",
            Some("n"),
        ));
    }
    let tools = &provider.tools;
    if tools.mode == Mode::ToNatural {
        let history = to_natural::history::HistoryOptions {
            syntax: tools.syntax,
            max_tool_result_chars: tools.max_tool_result_chars,
        };
        // The history reader works on chat JSON, as the chat door's direct
        // path hands it over.
        if let Some(rewritten) = to_natural::history::rewrite(&request.to_chat_body(), &history)?
            && let Ok(Value::Object(map)) = serde_json::from_slice(&rewritten)
        {
            request = Request::from_chat(map)?;
        }
    }
    for (i, tool) in request.tools.iter().enumerate() {
        if let Some(name) = tool.name()
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
    if !offer.is_empty() || tools.search.is_some() {
        runtime.steps.splice(&tenant.name, &mut request.messages);
    }
    let gateway = offer
        .tools
        .iter()
        .map(|t| Tool::from_value(t.declaration()));
    let mut catalog = None;
    match &tools.search {
        None => request.tools.extend(gateway),
        Some(settings) => {
            if let Some(tool) = offer.get(search::SEARCH_TOOL) {
                return Err(GatewayError::ToolServerUnavailable {
                    server: tool.server().to_owned(),
                    reason: format!(
                        "offers a tool named {:?}, the name tool_search gives its search",
                        search::SEARCH_TOOL
                    ),
                });
            }
            if let Some(i) = request
                .tools
                .iter()
                .position(|t| t.name() == Some(search::SEARCH_TOOL))
            {
                return Err(GatewayError::bad_request(
                    format!(
                        "The tool `{}` is the name this provider's tool search takes; rename yours",
                        search::SEARCH_TOOL
                    ),
                    Some(&format!("tools[{i}].function.name")),
                ));
            }
            // Tools this conversation used or found, and the one the
            // client names, are declared from the start.
            let mut found = search::catalog::found_in(&request.messages);
            if let Some(ToolChoice::Function(name)) = &request.tool_choice {
                found.insert(name.clone());
            }
            let client = std::mem::take(&mut request.tools);
            let split = search::catalog::split(
                client,
                gateway.collect(),
                settings.threshold,
                &found,
                // Natural mode reads a call to a tool it was not shown.
                tools.mode == Mode::Natural,
                runtime.tools.search_indexes(),
            );
            request.tools = split.declared;
            catalog = split.catalog;
        }
    }
    // Rounds always stream upstream, with usage, so usage can be summed.
    request.stream = true;
    let options = request.stream_options.get_or_insert_default();
    options.insert("include_usage".into(), Value::Bool(true));
    Ok((request, catalog))
}

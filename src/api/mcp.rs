//! `[mcp_gateway]`: toolgate's gateway tools served as one MCP server, over
//! streamable HTTP (rmcp's server, a `tower::Service`), stateless: every
//! request carries what it needs, so any replica answers any of them.
//!
//! The gateway identifies the caller as on `/v1` (`401` without a key) and
//! hands the request its [`McpCaller`] and the `Runtime` it started with.
//! `tools/list` pages through what the caller's key may use of the tools
//! `[mcp_gateway] tools` names; `tools/call` runs a call on the executor the
//! gateway's own tool loop uses (schema check, timeout, result cap,
//! metrics, an `execute_tool` span), under the caller's limits. A tool the
//! key may not use is unknown and never runs. A backing MCP server that is
//! down takes only its own tools out of the list; why it is down is logged,
//! never sent.

use std::sync::Arc;

use http::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    ServerJsonRpcMessage, ServerNotification, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

mod found;
pub use found::{Finder, Found};

use super::key_streams::{KeyStreams, Kind, Ticket};
use crate::body::Body;
use crate::config::Tenant;
use crate::exchange::{Event, GatewayCall, GatewayStatus};
use crate::limiter::{Limiter, Share};
use crate::runtime::Runtime;
use crate::store::{Begin, CHAT_HEADER, Recorder};
use crate::tools::{GatewayTool, Offer, executor, search};

/// Tools in one `tools/list` page.
pub const PAGE: usize = 50;
/// A call's result, in characters, at most (as `max_tool_result_chars`'
/// default).
const MAX_RESULT_CHARS: usize = crate::config::DEFAULT_MAX_TOOL_RESULT_CHARS;

/// Who calls, as the gateway identified them.
#[derive(Clone)]
pub struct McpCaller {
    pub tenant: Arc<Tenant>,
    /// A managed key's own limits.
    pub share: Option<Share>,
    pub limiter: Arc<Limiter>,
    /// The request's server span, when traces are on: calls are
    /// `execute_tool` spans under it.
    pub trace: Option<opentelemetry::Context>,
    /// What keys found with `tool_search`, and which key this is.
    pub found: Arc<Found>,
    pub finder: Finder,
}

/// The MCP door; holds nothing: each request brings its caller and runtime.
#[derive(Clone, Copy, Default)]
pub struct McpDoor;

impl McpDoor {
    /// The caller and runtime the gateway attached to this request.
    fn request(cx: &RequestContext<RoleServer>) -> Result<(Arc<Runtime>, McpCaller), McpError> {
        let parts = cx
            .extensions
            .get::<http::request::Parts>()
            .ok_or_else(|| McpError::internal_error("no HTTP request", None))?;
        let runtime = parts.extensions.get::<Arc<Runtime>>().cloned();
        let caller = parts.extensions.get::<McpCaller>().cloned();
        runtime
            .zip(caller)
            .ok_or_else(|| McpError::internal_error("the request was not identified", None))
    }

    /// What the caller may use now.
    fn offer(runtime: &Runtime, caller: &McpCaller) -> Result<Offer, McpError> {
        let Some(mcp) = &runtime.config.mcp_gateway else {
            return Err(McpError::internal_error("[mcp_gateway] is off", None));
        };
        let settings = crate::config::GatewaySettings {
            sources: mcp.sources.clone(),
            max_rounds: 1,
            max_parallel_tools: 1,
            show: crate::config::ShowGatewayTools::Fields,
        };
        runtime
            .tools
            .offer(&settings, |entry| caller.tenant.allows_tools(entry))
            .map_err(|u| {
                McpError::internal_error(
                    format!("the tool server `{}` {}", u.server, u.reason),
                    None,
                )
            })
    }
}

impl ServerHandler for McpDoor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "The tools toolgate runs for this key: MCP servers, HTTP tools and built-ins.",
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (runtime, caller) = Self::request(&cx)?;
        let offer = Self::offer(&runtime, &caller)?;
        if searching(&runtime) {
            let Value::Object(schema) = search::parameters() else {
                unreachable!("an object schema")
            };
            let mut tools = vec![Tool::new(
                search::SEARCH_TOOL,
                search::DESCRIPTION,
                Arc::new(schema),
            )];
            tools.extend(found_in(&offer, &caller).map(listed));
            return Ok(ListToolsResult::with_all_items(tools));
        }
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= offer.tools.len())
                .ok_or_else(|| {
                    McpError::invalid_params(format!("not a cursor of this list: {cursor:?}"), None)
                })?,
        };
        let end = (start + PAGE).min(offer.tools.len());
        let page = offer.tools[start..end].iter().map(|t| listed(t)).collect();
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = (end < offer.tools.len()).then(|| end.to_string());
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let (runtime, caller) = Self::request(&cx)?;
        let offer = Self::offer(&runtime, &caller)?;
        let name = request.name.as_ref();
        let searching = searching(&runtime);
        if searching && name == search::SEARCH_TOOL && offer.get(name).is_none() {
            let arguments = Value::Object(request.arguments.unwrap_or_default());
            return Ok(match search::over_gateway_tools(
                &offer.tools,
                runtime.tools.search_indexes(),
                &arguments,
            ) {
                Ok(text) => {
                    // Listed from now on, before the client reads the result.
                    let names = search::names_in_result(&text);
                    caller
                        .found
                        .note(caller.finder, names.iter().map(String::as_str));
                    CallToolResult::success(vec![ContentBlock::text(text)])
                }
                Err(why) => CallToolResult::error(vec![ContentBlock::text(why)]),
            }
            .into());
        }
        let Some(tool) = offer.get(name).cloned() else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        };
        if searching {
            // Called by a name known some other way: listed from now on too.
            caller.found.note(caller.finder, [name]);
        }
        // Counted against the key's limits like a model request.
        let admission = caller
            .limiter
            .admit(&caller.tenant, caller.share.as_ref(), "mcp", None, None)
            .await;
        if let Err(refused) = admission {
            return Ok(CallToolResult::error(vec![ContentBlock::text(refused.to_string())]).into());
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if let Err(why) = tool.check(&arguments) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "the arguments do not match {name}'s schema: {why}"
            ))])
            .into());
        }
        let id = format!("mcp_{:016x}", rand::random::<u64>());
        let arguments = arguments.to_string();
        let mut report = GatewayCall {
            index: 0,
            id: id.clone(),
            name: name.to_owned(),
            server: tool.server().to_owned(),
            arguments: arguments.clone(),
            status: GatewayStatus::InProgress,
            output: None,
            error: None,
        };
        let mut recorder = record(&runtime, &caller, &report, &cx).await;
        let scope = crate::telemetry::scope::Scope {
            tenant: caller.tenant.clone(),
            request_id: None,
            trace: caller.trace.clone(),
            meter: None,
        };
        let outcome = crate::telemetry::scope::within(
            scope,
            executor::execute(
                &runtime.tools,
                &tool,
                &id,
                &arguments,
                MAX_RESULT_CHARS,
                executor::Route::Mcp,
            ),
        )
        .await;
        if let Some(recorder) = recorder.as_mut() {
            match &outcome {
                executor::Outcome::Completed(text) => {
                    report.status = GatewayStatus::Completed;
                    report.output = Some(text.clone());
                }
                executor::Outcome::Failed(error) => {
                    report.status = GatewayStatus::Failed;
                    report.error = Some(error.clone());
                }
            }
            recorder.event(&Event::Gateway(report));
            recorder.event(&Event::Finish("stop".into()));
        }
        if let Some(recorder) = recorder {
            recorder.finish();
        }
        Ok(match outcome {
            executor::Outcome::Completed(text) => {
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            executor::Outcome::Failed(error) => {
                CallToolResult::error(vec![ContentBlock::text(error)])
            }
        }
        .into())
    }
}

/// Whether `tools/list` offers `search_tools` instead of the tools.
fn searching(runtime: &Runtime) -> bool {
    runtime
        .config
        .mcp_gateway
        .as_ref()
        .is_some_and(|m| m.tool_search)
}

/// The tools of `offer` the caller found with `search_tools` (or called),
/// oldest found first.
fn found_in<'o>(offer: &'o Offer, caller: &McpCaller) -> impl Iterator<Item = &'o GatewayTool> {
    caller
        .found
        .names(caller.finder)
        .into_iter()
        .filter_map(|name| offer.get(&name).map(|t| &**t))
}

/// A gateway tool as `tools/list` lists it.
fn listed(tool: &GatewayTool) -> Tool {
    let schema = match &tool.parameters {
        Value::Object(schema) => schema.clone(),
        _ => serde_json::Map::new(),
    };
    Tool::new(
        tool.name.clone(),
        tool.description.clone(),
        Arc::new(schema),
    )
}

/// The names `tools/list` gives the caller now (none when it fails).
fn names(runtime: &Runtime, caller: &McpCaller) -> Vec<String> {
    let Ok(offer) = McpDoor::offer(runtime, caller) else {
        return Vec::new();
    };
    if searching(runtime) {
        std::iter::once(search::SEARCH_TOOL.to_owned())
            .chain(found_in(&offer, caller).map(|t| t.name.clone()))
            .collect()
    } else {
        offer.tools.iter().map(|t| t.name.clone()).collect()
    }
}

/// With a `[store]`, a call is one exchange of the caller's tenant, in the
/// chat `x-toolgate-chat-id` names (when it is the tenant's) or a new one:
/// its request says which tool was called with what, its answer is the
/// call (recorded in progress now, and completed or failed by the caller).
async fn record(
    runtime: &Runtime,
    caller: &McpCaller,
    report: &GatewayCall,
    cx: &RequestContext<RoleServer>,
) -> Option<Recorder> {
    let store = runtime.store.as_ref()?;
    let header = cx
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get(CHAT_HEADER))
        .and_then(|v| v.to_str().ok());
    let mut request = serde_json::Map::new();
    request.insert("model".into(), json!("mcp"));
    request.insert(
        "messages".into(),
        json!([{"role": "user", "content": format!("tools/call {} {}", report.name, report.arguments)}]),
    );
    let mut recorder = store
        .begin(Begin {
            tenant: &caller.tenant.name,
            provider: "mcp",
            model: &report.name,
            request: &request,
            chat_header: header,
            gateway_tools: true,
        })
        .await?;
    recorder.event(&Event::Gateway(report.clone()));
    Some(recorder)
}

/// Change streams open at once, every key together.
pub const MAX_CHANGE_STREAMS: usize = 1024;
/// Change streams open at once with one key: a key cannot take the places
/// every other key's clients need.
pub const MAX_CHANGE_STREAMS_PER_KEY: usize = 16;
/// A change stream ends after this long; the client opens another (the
/// official SDKs reconnect the `GET` stream), with its key checked again.
const CHANGE_STREAM_LIFETIME: std::time::Duration = std::time::Duration::from_secs(3600);
/// Between two keep-alive comments on a change stream.
const CHANGE_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// Change streams, as their refusals and gauge name them.
pub const CHANGE_STREAMS: Kind = Kind {
    what: "MCP change streams",
    total_from: "1024 in all",
    per_key_from: "16 per key",
    code: "too_many_change_streams",
    gauge: crate::metrics::MCP_CHANGE_STREAMS,
};

/// The change streams of a gateway with `[mcp_gateway]`.
pub fn change_streams() -> Arc<KeyStreams> {
    KeyStreams::new(
        &CHANGE_STREAMS,
        MAX_CHANGE_STREAMS,
        MAX_CHANGE_STREAMS_PER_KEY,
    )
}

/// `GET` on the door (accepting `text/event-stream`): the stream the server
/// sends without a request first, which carries
/// `notifications/tools/list_changed` whenever the tools this key may use
/// change (an MCP server connected, relisted or went down; with
/// `tool_search`, the key found a tool it had not). It holds no session:
/// any replica serves it, and each sees its own servers change.
///
/// `ticket` holds the stream's place among the open ones (given back
/// however the stream ends, the task aborted included) and closes it when
/// its key stops naming the caller; it ends on its own after
/// [`CHANGE_STREAM_LIFETIME`].
pub fn list_changes(runtime: Arc<Runtime>, caller: McpCaller, ticket: Ticket) -> Response<Body> {
    let body = crate::body::channel::spawn(4, move |tx| async move {
        let lifetime = tokio::time::sleep(CHANGE_STREAM_LIFETIME);
        tokio::pin!(lifetime);
        let mut changes = runtime.tools.mcp().changes();
        let mut found = caller.found.changes();
        let mut listed = names(&runtime, &caller);
        let notification = ServerJsonRpcMessage::notification(
            ServerNotification::ToolListChangedNotification(Default::default()),
        );
        loop {
            let mut out = bytes::BytesMut::new();
            // A backing server changed, or this key found a tool.
            let changed = tokio::select! {
                () = ticket.closed.cancelled() => return,
                () = &mut lifetime => return,
                changed = changes.changed() => changed,
                changed = found.changed() => changed,
                () = tokio::time::sleep(CHANGE_KEEP_ALIVE) => {
                    out.extend_from_slice(crate::sse::encoder::KEEP_ALIVE);
                    Ok(())
                }
            };
            if changed.is_err() {
                return;
            }
            if out.is_empty() {
                let now = names(&runtime, &caller);
                if now == listed {
                    continue;
                }
                listed = now;
                crate::sse::encoder::write_json(&mut out, &notification);
            }
            if tx.send(out.freeze()).await.is_err() {
                return;
            }
        }
    });
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    response
}

/// The streamable-HTTP service over [`McpDoor`]: stateless (no sessions, so
/// any replica answers), JSON answers where nothing streams, any `Host`
/// (the keys guard it, not a loopback check).
pub fn service() -> rmcp::transport::streamable_http_server::StreamableHttpService<
    McpDoor,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    let mut config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
        .disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        || Ok(McpDoor),
        Arc::default(),
        config,
    )
}

//! `toolgate probe`: which natural syntax does my model follow?
//!
//! Sends tool-use prompts through one provider once per arm (each natural
//! syntax, and natively) and counts what came back. Every request goes
//! through [`Gateway::handle`] with the provider's own target, key, headers
//! and settings, only the tool mode and syntax changed per arm: what the
//! probe measures is what the gateway will do in production. Invalid blocks
//! are counted, not repaired (`on_invalid = "error"`, no fallback).

pub mod cases;
mod grammars;
mod report;
pub mod score;
mod structural_tags;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::json;

use crate::config::gateway_tools::{GatewaySettings, ToolSource};
use crate::config::{Api, Config, Mode, OnInvalid, Provider, ShowGatewayTools};
use crate::gateway::Gateway;
use crate::natural::syntax::Syntax;
use crate::natural::validate::SchemaCache;
use crate::tools::builtin::Builtin;
pub use cases::{AgentCase, Case, Cases};
pub use grammars::Grammars;
pub use report::Report;
use score::{AgentOutcome, AgentTally, Outcome, Tally};

/// How the tools travel in one arm of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Natural mode with this syntax.
    Natural(Syntax),
    /// The upstream's own tool calling (passthrough).
    Native,
    /// The upstream's own tool calling, and calls written as text in its
    /// answers made native (`rescue_text_calls`).
    Rescue,
}

impl Arm {
    pub const ALL: [Arm; 6] = [
        Arm::Natural(Syntax::Tag),
        Arm::Natural(Syntax::ToolCall),
        Arm::Natural(Syntax::Bracket),
        Arm::Natural(Syntax::Python),
        Arm::Native,
        Arm::Rescue,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Natural(s) => s.as_str(),
            Arm::Native => "native",
            Arm::Rescue => "rescue",
        }
    }

    /// The lines of a `[providers.tools]` table that select this arm.
    pub fn tools_block(self) -> String {
        match self {
            Arm::Natural(syntax) => {
                format!("mode = \"natural\"\nsyntax = \"{}\"\n", syntax.as_str())
            }
            Arm::Native => "mode = \"passthrough\"\n".to_owned(),
            Arm::Rescue => "mode = \"passthrough\"\nrescue_text_calls = true\n".to_owned(),
        }
    }

    /// `tag,tool_call,bracket,python,native,rescue` (any subset, in any order).
    pub fn parse_list(list: &str) -> Result<Vec<Arm>, String> {
        let mut arms = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let arm = Arm::ALL
                .into_iter()
                .find(|a| a.as_str() == name)
                .ok_or_else(|| {
                    format!(
                        "unknown syntax {name:?}; expected tag, tool_call, bracket, python, native or rescue"
                    )
                })?;
            if !arms.contains(&arm) {
                arms.push(arm);
            }
        }
        if arms.is_empty() {
            return Err("--syntaxes names no syntax".into());
        }
        Ok(arms)
    }
}

/// What to probe and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub provider: String,
    /// The model to ask for; by default the provider's first model pattern
    /// when it is a plain name.
    pub model: Option<String>,
    pub arms: Vec<Arm>,
    pub cases: Cases,
    pub runs: usize,
    pub max_tokens: u32,
    /// Per request, from sending to the whole answer.
    pub timeout: Duration,
}

/// Where the probe is: `done` of `total` requests answered, the last in `arm`.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub arm: Arm,
}

/// Runs every case `runs` times in every arm, interleaved (run, case, arm) so
/// that a model server slowing down or warming up weighs on every arm alike.
/// A loop case whose expected tool was called sends its result back and
/// scores the answer too; agent cases follow the client cases.
pub async fn run(
    mut config: Config,
    options: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, String> {
    let base = config
        .provider(&options.provider)
        .cloned()
        .ok_or_else(|| format!("no provider named {:?} in the config", options.provider))?;
    if base.api != Api::Chat {
        // Natural mode rewrites Chat Completions only (checked at load).
        return Err(format!(
            "provider {:?} does not speak Chat Completions (`api = \"chat\"`), which natural mode needs",
            base.name
        ));
    }
    let model = match &options.model {
        Some(m) => m.clone(),
        None => plain_model(&base)?,
    };
    let agent = &options.cases.agent;
    let mut providers: Vec<Arc<Provider>> = Vec::new();
    for &arm in &options.arms {
        providers.push(variant(&base, arm, None, provider_name(arm, None)));
        for (c, case) in agent.iter().enumerate() {
            let sources = case
                .gateway_tools
                .iter()
                .map(|name| source(&config, name))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("agent case {:?}: {e}", case.name))?;
            providers.push(variant(
                &base,
                arm,
                Some((c, sources)),
                provider_name(arm, Some(c)),
            ));
        }
    }
    // Passthrough, for asking whether the server follows a grammar and a
    // structural tag.
    providers.push(variant(&base, Arm::Native, None, GRAMMAR_PROVIDER.into()));
    config.providers = providers;
    // Only the provider under test: no transcripts, no inbound keys or
    // concurrency limit (the requests never leave this process). Tool
    // servers stay only if an agent case names them.
    let named = |name: &str| {
        agent
            .iter()
            .any(|c| c.gateway_tools.iter().any(|t| t == name))
    };
    config.mcp_servers.retain(|s| named(&s.name));
    config.http_tools.retain(|t| named(&t.name));
    config.store = None;
    config.server.auth = None;
    config.server.max_concurrent_requests = None;
    let gateway = Gateway::new(Arc::new(config));
    if agent
        .iter()
        .any(|c| !c.gateway_tools.iter().all(|t| t.starts_with("builtin:")))
    {
        gateway.tools().mcp().settled(options.timeout).await;
    }

    let grammars = match send(
        &gateway,
        Grammars::request(&format!("{GRAMMAR_PROVIDER}/{model}")),
        options.timeout,
    )
    .await
    {
        Ok((status, body)) => Grammars::read(status, &body),
        Err(why) => Grammars::Refused(why),
    };
    let structural_tags = match send(
        &gateway,
        structural_tags::request(&format!("{GRAMMAR_PROVIDER}/{model}")),
        options.timeout,
    )
    .await
    {
        Ok((status, body)) => structural_tags::read(status, &body),
        Err(why) => Grammars::Refused(why),
    };

    let client = &options.cases.client;
    let schemas = SchemaCache::new();
    let mut tallies = vec![vec![Tally::default(); client.len()]; options.arms.len()];
    let mut agent_tallies = vec![vec![AgentTally::default(); agent.len()]; options.arms.len()];
    let total = options.runs * (client.len() + agent.len()) * options.arms.len();
    let mut done = 0;
    for _ in 0..options.runs {
        for (c, case) in client.iter().enumerate() {
            for (a, &arm) in options.arms.iter().enumerate() {
                let started = Instant::now();
                let messages = case.messages.clone();
                let body = request(&provider_name(arm, None), &model, messages, case, options);
                let (outcome, message) = ask(&gateway, body, options.timeout).await;
                tallies[a][c].add(case, &outcome, started.elapsed(), &schemas);
                if let Some(follow_up) = follow_up(case, &outcome, message) {
                    let body = request(&provider_name(arm, None), &model, follow_up, case, options);
                    let (answer, _) = ask(&gateway, body, options.timeout).await;
                    tallies[a][c].add_loop(case, &answer);
                }
                done += 1;
                progress(Progress { done, total, arm });
            }
        }
        for (c, case) in agent.iter().enumerate() {
            for (a, &arm) in options.arms.iter().enumerate() {
                let started = Instant::now();
                let mut body = json!({
                    "model": format!("{}/{model}", provider_name(arm, Some(c))),
                    "messages": case.messages,
                    "max_tokens": options.max_tokens,
                    "stream": false,
                });
                body["temperature"] = json!(0);
                let outcome = ask_agent(&gateway, body, options.timeout).await;
                agent_tallies[a][c].add(case, &outcome, started.elapsed());
                done += 1;
                progress(Progress { done, total, arm });
            }
        }
    }
    Ok(Report {
        provider: base.name.clone(),
        model,
        runs: options.runs,
        cases: client.iter().map(|c| c.name.clone()).collect(),
        agent_cases: agent.iter().map(|c| c.name.clone()).collect(),
        grammars,
        structural_tags,
        arms: options.arms.iter().copied().zip(tallies).collect(),
        agent: options.arms.iter().copied().zip(agent_tallies).collect(),
    })
}

/// A chat request for a client case (`temperature: 0`, as a probe should be repeatable).
fn request(
    provider: &str,
    model: &str,
    messages: Vec<serde_json::Value>,
    case: &Case,
    options: &Options,
) -> serde_json::Value {
    let mut body = json!({
        "model": format!("{provider}/{model}"),
        "messages": messages,
        "tools": case.tools,
        "max_tokens": options.max_tokens,
        "temperature": 0,
        "stream": false,
    });
    if let Some(choice) = &case.tool_choice {
        body["tool_choice"] = choice.clone();
    }
    body
}

/// The conversation after the expected call, as an SDK sends it back: the
/// assistant message as received, then a `tool` message per call (the case's
/// result for the expected tool, an error for any other).
fn follow_up(
    case: &Case,
    outcome: &Outcome,
    message: Option<serde_json::Value>,
) -> Option<Vec<serde_json::Value>> {
    let (result, expect) = (case.result.as_ref()?, case.expect.as_ref()?);
    let Outcome::Calls(calls) = outcome else {
        return None;
    };
    if !calls.iter().any(|(name, _)| *name == expect.name) {
        return None;
    }
    let message = message?;
    let calls = message.get("tool_calls").cloned().unwrap_or_default();
    let mut messages = case.messages.clone();
    messages.push(json!({
        "role": "assistant",
        "content": message.get("content").cloned().unwrap_or_default(),
        "tool_calls": calls,
    }));
    for call in calls.as_array().into_iter().flatten() {
        let name = call.pointer("/function/name").and_then(|n| n.as_str());
        let content = if name == Some(expect.name.as_str()) {
            result.clone()
        } else {
            json!({"error": "this tool is not available"}).to_string()
        };
        let id = call.get("id").cloned().unwrap_or_default();
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
    }
    Some(messages)
}

async fn send(
    gateway: &Gateway,
    body: serde_json::Value,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    let request = Request::post("/v1/chat/completions")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a static request is valid");
    let answer = async {
        let response = gateway.handle(request).await;
        let status = response.status().as_u16();
        match response.into_body().collect().await {
            Ok(b) => Ok((status, b.to_bytes())),
            Err(e) => Err(format!("{status}: the answer broke off: {e}")),
        }
    };
    match tokio::time::timeout(timeout, answer).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
    }
}

async fn ask(
    gateway: &Gateway,
    body: serde_json::Value,
    timeout: Duration,
) -> (Outcome, Option<serde_json::Value>) {
    match send(gateway, body, timeout).await {
        Ok((status, bytes)) => Outcome::read(status, &bytes),
        Err(why) => (Outcome::Failed(why), None),
    }
}

async fn ask_agent(gateway: &Gateway, body: serde_json::Value, timeout: Duration) -> AgentOutcome {
    match send(gateway, body, timeout).await {
        Ok((status, bytes)) => AgentOutcome::from_response(status, &bytes),
        Err(why) => AgentOutcome {
            text: None,
            calls: Vec::new(),
            failed: Some(why),
        },
    }
}

/// A gateway tool named as in `gateway_tools`.
fn source(config: &Config, name: &str) -> Result<ToolSource, String> {
    if let Some(builtin) = name.strip_prefix("builtin:") {
        return Builtin::from_name(builtin)
            .map(ToolSource::Builtin)
            .ok_or_else(|| format!("no built-in tool {builtin:?}"));
    }
    if let Some(server) = config.mcp_servers.iter().find(|s| s.name == name) {
        return Ok(ToolSource::Mcp(server.clone()));
    }
    if let Some(tool) = config.http_tools.iter().find(|t| t.name == name) {
        return Ok(ToolSource::Http(tool.clone()));
    }
    Err(format!(
        "{name:?} is no [[mcp_servers]] or [[http_tools]] entry of the config"
    ))
}

/// The passthrough provider the grammar and structural tag questions go to.
const GRAMMAR_PROVIDER: &str = "probe-grammar";

/// The provider of an arm (and of an agent case in it).
fn provider_name(arm: Arm, agent_case: Option<usize>) -> String {
    match agent_case {
        None => format!("probe-{}", arm.as_str()),
        Some(c) => format!("probe-{}-agent{c}", arm.as_str()),
    }
}

/// The provider under test as `name`, its tools handled as `arm` says,
/// offering the gateway tools of agent case `agent.0` when given.
fn variant(
    base: &Provider,
    arm: Arm,
    agent: Option<(usize, Vec<ToolSource>)>,
    name: String,
) -> Arc<Provider> {
    let mut tools = base.tools.clone();
    (tools.mode, tools.rescue_text_calls) = match arm {
        Arm::Natural(syntax) => {
            tools.syntax = syntax;
            (Mode::Natural, false)
        }
        Arm::Native => (Mode::Passthrough, false),
        Arm::Rescue => (Mode::Passthrough, true),
    };
    tools.on_invalid = OnInvalid::Error;
    tools.fallback = None;
    tools.gateway = agent.map(|(_, sources)| GatewaySettings {
        sources,
        max_rounds: base.tools.gateway.as_ref().map_or(8, |g| g.max_rounds),
        max_parallel_tools: 8,
        show: ShowGatewayTools::Fields,
    });
    Arc::new(Provider {
        name,
        targets: base.targets.clone(),
        failover: Vec::new(),
        retry: base.retry.clone(),
        health: base.health,
        model_patterns: base.model_patterns.clone(),
        models: base.models.clone(),
        model_rewrite: base.model_rewrite.clone(),
        api: base.api,
        tools,
        pricing: base.pricing.clone(),
        default_max_tokens: base.default_max_tokens,
    })
}

fn plain_model(provider: &Provider) -> Result<String, String> {
    provider
        .model_patterns
        .first()
        .filter(|m| !m.contains(['*', '?', '[', '{']))
        .cloned()
        .ok_or_else(|| {
            format!(
                "provider {:?} matches models by pattern; name the model with --model",
                provider.name
            )
        })
}

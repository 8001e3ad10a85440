//! `toolgate probe`: which natural syntax does my model follow?
//!
//! Sends tool-use prompts through one provider once per arm (each natural
//! syntax, and natively) and counts what came back. Every request goes
//! through [`Gateway::handle`] with the provider's own target, key, headers
//! and settings, only the tool mode and syntax changed per arm: what the
//! probe measures is what the gateway will do in production. Invalid blocks
//! are counted, not repaired (`on_invalid = "error"`, no fallback).

pub mod cases;
mod report;
pub mod score;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::json;

use crate::config::{Api, Config, Mode, OnInvalid, Provider};
use crate::gateway::Gateway;
use crate::natural::syntax::Syntax;
use crate::natural::validate::SchemaCache;
pub use cases::Case;
pub use report::Report;
use score::{Outcome, Tally};

/// How the tools travel in one arm of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Natural mode with this syntax.
    Natural(Syntax),
    /// The upstream's own tool calling (passthrough).
    Native,
}

impl Arm {
    pub const ALL: [Arm; 4] = [
        Arm::Natural(Syntax::Tag),
        Arm::Natural(Syntax::ToolCall),
        Arm::Natural(Syntax::Bracket),
        Arm::Native,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Natural(s) => s.as_str(),
            Arm::Native => "native",
        }
    }

    /// `tag,tool_call,bracket,native` (any subset, in any order).
    pub fn parse_list(list: &str) -> Result<Vec<Arm>, String> {
        let mut arms = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let arm = Arm::ALL
                .into_iter()
                .find(|a| a.as_str() == name)
                .ok_or_else(|| {
                    format!("unknown syntax {name:?}; expected tag, tool_call, bracket or native")
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
    pub cases: Vec<Case>,
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
    config.providers = options
        .arms
        .iter()
        .map(|&arm| variant(&base, arm))
        .collect();
    // Only the provider under test: no gateway tools, no transcripts, no
    // inbound keys or concurrency limit (the requests never leave this process).
    config.mcp_servers.clear();
    config.http_tools.clear();
    config.store = None;
    config.server.auth = None;
    config.server.admin = None;
    config.server.max_concurrent_requests = None;
    let gateway = Gateway::new(Arc::new(config));

    let schemas = SchemaCache::new();
    let mut tallies = vec![vec![Tally::default(); options.cases.len()]; options.arms.len()];
    let total = options.runs * options.cases.len() * options.arms.len();
    let mut done = 0;
    for _ in 0..options.runs {
        for (c, case) in options.cases.iter().enumerate() {
            for (a, &arm) in options.arms.iter().enumerate() {
                let started = Instant::now();
                let outcome = ask(&gateway, arm, &model, case, options).await;
                tallies[a][c].add(case, &outcome, started.elapsed(), &schemas);
                done += 1;
                progress(Progress { done, total, arm });
            }
        }
    }
    Ok(Report {
        provider: base.name.clone(),
        model,
        runs: options.runs,
        cases: options.cases.iter().map(|c| c.name.clone()).collect(),
        arms: options.arms.iter().copied().zip(tallies).collect(),
    })
}

async fn ask(gateway: &Gateway, arm: Arm, model: &str, case: &Case, options: &Options) -> Outcome {
    let mut body = json!({
        "model": format!("{}/{model}", provider_name(arm)),
        "messages": case.messages,
        "tools": case.tools,
        "max_tokens": options.max_tokens,
        "stream": false,
    });
    if let Some(choice) = &case.tool_choice {
        body["tool_choice"] = choice.clone();
    }
    let request = Request::post("/v1/chat/completions")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a static request is valid");
    let answer = async {
        let response = gateway.handle(request).await;
        let status = response.status().as_u16();
        match response.into_body().collect().await {
            Ok(b) => Outcome::from_response(status, &b.to_bytes()),
            Err(e) => Outcome::Failed(format!("{status}: the answer broke off: {e}")),
        }
    };
    match tokio::time::timeout(options.timeout, answer).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("no answer within {} s", options.timeout.as_secs())),
    }
}

fn provider_name(arm: Arm) -> String {
    format!("probe-{}", arm.as_str())
}

/// The provider under test, its tools handled as `arm` says.
fn variant(base: &Provider, arm: Arm) -> Arc<Provider> {
    let mut tools = base.tools.clone();
    match arm {
        Arm::Natural(syntax) => {
            tools.mode = Mode::Natural;
            tools.syntax = syntax;
        }
        Arm::Native => tools.mode = Mode::Passthrough,
    }
    tools.on_invalid = OnInvalid::Error;
    tools.fallback = None;
    tools.gateway = None;
    Arc::new(Provider {
        name: provider_name(arm),
        target: base.target.clone(),
        model_patterns: base.model_patterns.clone(),
        models: base.models.clone(),
        authorization: base.authorization.clone(),
        headers: base.headers.clone(),
        model_rewrite: base.model_rewrite.clone(),
        api: base.api,
        tools,
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

//! Natural mode's request flow: rewrite the request, send it, rewrite the
//! response (streaming or not). Holds the caches shared by all requests.
//!
//! A passthrough provider with `rescue_text_calls` takes the response half
//! only: its request goes upstream as it is, and calls the model wrote as
//! text in its answer (any syntax, or a JSON object) become native calls.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::{BodyExt, Full};

use crate::body::{self, Body};
use crate::config::{Config, Mode, OnInvalid, OnUngrounded, Provider};
use crate::error::GatewayError;
use crate::natural::ask::Ask;
use crate::natural::cache::ContractCache;
use crate::natural::parser::ParserOptions;
use crate::natural::repair::Repairer;
use crate::natural::repairing::Repairing;
use crate::natural::reply::ReplySettings;
use crate::natural::request::{self, NaturalOptions, ResponsePlan, Rewrite};
use crate::natural::stream::StreamRewriter;
use crate::natural::validate::SchemaCache;
use crate::sse::transform::TransformBody;
use crate::upstream::Upstreams;
use crate::upstream::reply::{self, Shape};

/// Per-gateway state of natural mode.
pub struct Engine {
    providers: HashMap<String, ProviderState>,
    schemas: Arc<SchemaCache>,
}

struct ProviderState {
    options: NaturalOptions,
    parser: ParserOptions,
    contracts: Arc<ContractCache>,
}

/// Request bodies larger than this are rewritten on tokio's blocking pool:
/// every step is linear, but a rewrite of megabytes still takes milliseconds
/// that would stall every other connection on a `current_thread` worker.
pub const BLOCKING_REWRITE_BYTES: usize = 256 * 1024;

/// Bodies at least this large are rewritten one at a time: a rewrite holds
/// the body, its parsed tree and the body written anew (about 3.5 times the
/// body at its peak), and three 26 MB rewrites at once took peak RSS to 5.3
/// times the bytes in flight.
const HUGE_REWRITE_BYTES: usize = 8 * 1024 * 1024;
static HUGE_REWRITES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Runs `work` (a rewrite of `len` bytes) inline when small, else on the
/// blocking pool. A panic in it is resumed here, as if it had run inline.
pub(crate) async fn rewrite_off_worker<T: Send + 'static>(
    len: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, GatewayError> {
    if len <= BLOCKING_REWRITE_BYTES {
        return Ok(work());
    }
    let _turn = if len >= HUGE_REWRITE_BYTES {
        // Never closed.
        HUGE_REWRITES.acquire().await.ok()
    } else {
        None
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Ok(done),
        Err(err) => match err.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only when the runtime shuts down.
            Err(_) => Err(GatewayError::Overloaded),
        },
    }
}

impl Engine {
    pub fn new(config: &Config) -> Self {
        let providers = config
            .providers
            .iter()
            .filter(|p| p.tools.mode == Mode::Natural || p.tools.rescue_text_calls)
            .map(|p| {
                let t = &p.tools;
                let state = ProviderState {
                    options: NaturalOptions {
                        syntax: t.syntax,
                        instructions: t.instructions.clone(),
                        max_tool_result_chars: t.max_tool_result_chars,
                        result_role: t.result_role,
                        constrain: t.constrain,
                        ground: t.on_ungrounded == OnUngrounded::Ask,
                    },
                    parser: ParserOptions {
                        syntax: t.syntax,
                        skip_think: t.skip_think,
                        max_block_bytes: t.max_block_bytes,
                        rescue: t.rescue_text_calls,
                    },
                    contracts: Arc::new(ContractCache::default()),
                };
                (p.name.clone(), state)
            })
            .collect();
        Engine {
            providers,
            schemas: Arc::new(SchemaCache::new()),
        }
    }

    /// `early_calls`: the answer is read by toolgate itself (a round of the
    /// answer path), so each call is written as soon as it is ready; a
    /// client gets its calls at the end of the choice.
    pub async fn handle(
        &self,
        upstreams: &Upstreams,
        config: &Config,
        provider: &Arc<Provider>,
        parts: http::request::Parts,
        bytes: Bytes,
        early_calls: bool,
    ) -> Result<Response<Body>, GatewayError> {
        let Some(state) = self.providers.get(&provider.name) else {
            return upstreams
                .send(provider, Request::from_parts(parts, Full::new(bytes)))
                .await;
        };
        if state.parser.rescue {
            return self
                .rescue(upstreams, provider, state, parts, bytes, early_calls)
                .await;
        }
        let rewrite = {
            let (body, options, contracts) = (
                bytes.clone(),
                state.options.clone(),
                state.contracts.clone(),
            );
            rewrite_off_worker(bytes.len(), move || {
                request::rewrite(&body, &options, &contracts)
            })
            .await??
        };
        let (body, plan) = match rewrite {
            Rewrite::Unchanged => (bytes, None),
            Rewrite::Rewritten { body, plan } => {
                // The client's body is not held while the answer runs.
                drop(bytes);
                (Bytes::from(body), plan)
            }
        };
        let Some(plan) = plan else {
            // No tools offered (or tool_choice "none"): nothing to parse on the way back.
            return upstreams
                .send(provider, Request::from_parts(parts, Full::new(body)))
                .await;
        };
        let client_auth = parts.headers.get(header::AUTHORIZATION).cloned();
        if let Some(conversation) = plan.conversation.clone() {
            // on_ungrounded = "ask": both answers are read whole.
            let repairer = self.repairer(upstreams, config, provider, &plan, client_auth);
            let settings = ReplySettings::new(
                &provider.name,
                &plan,
                state.parser.clone(),
                provider.tools.on_invalid,
                repairer.as_ref().map_or(0, |r| r.max_calls),
                self.schemas.clone(),
            );
            let ask = Ask {
                upstreams,
                provider,
                settings: &settings,
                repairer,
                tools: &plan.tools,
                conversation: &conversation,
                include_usage: plan.include_usage,
            };
            return ask.run(parts, &body).await;
        }
        let response = upstreams.send_to_read(provider, parts, body).await?;
        if !response.status().is_success() {
            return Ok(response);
        }
        let repairer = self.repairer(upstreams, config, provider, &plan, client_auth);
        let mut settings = ReplySettings::new(
            &provider.name,
            &plan,
            state.parser.clone(),
            provider.tools.on_invalid,
            repairer.as_ref().map_or(0, |r| r.max_calls),
            self.schemas.clone(),
        );
        settings.early_calls = early_calls;
        let (mut parts, upstream_body) = response.into_parts();
        if let Shape::Stream = reply::prepare(&mut parts)? {
            let rewriter = StreamRewriter::new(settings, plan.include_usage);
            let body = match repairer {
                Some(repairer) => {
                    TransformBody::new(upstream_body, Repairing::new(rewriter, repairer))
                        .boxed_unsync()
                }
                None => TransformBody::new(upstream_body, rewriter).boxed_unsync(),
            };
            return Ok(Response::from_parts(parts, body));
        }
        let collected = reply::read(upstream_body).await?;
        let rewritten = crate::natural::complete::rewrite(&collected, &settings, repairer).await?;
        Ok(Response::from_parts(parts, body::full(rewritten)))
    }
}

impl Engine {
    /// A passthrough provider's request, sent as it is; when it offers
    /// tools, calls written as text in the answer become native calls and
    /// anything else is text (an answer without such a call comes back as
    /// the upstream wrote it).
    async fn rescue(
        &self,
        upstreams: &Upstreams,
        provider: &Arc<Provider>,
        state: &ProviderState,
        parts: http::request::Parts,
        bytes: Bytes,
        early_calls: bool,
    ) -> Result<Response<Body>, GatewayError> {
        let plan = {
            let (body, options, contracts) = (
                bytes.clone(),
                state.options.clone(),
                state.contracts.clone(),
            );
            rewrite_off_worker(bytes.len(), move || {
                request::plan(&body, &options, &contracts)
            })
            .await??
        };
        let Some(plan) = plan else {
            return upstreams
                .send(provider, Request::from_parts(parts, Full::new(bytes)))
                .await;
        };
        let response = upstreams.send_to_read(provider, parts, bytes).await?;
        if !response.status().is_success() {
            return Ok(response);
        }
        let mut settings = ReplySettings::new(
            &provider.name,
            &plan,
            state.parser.clone(),
            OnInvalid::Text,
            0,
            self.schemas.clone(),
        );
        settings.early_calls = early_calls;
        let (mut parts, upstream_body) = response.into_parts();
        if let Shape::Stream = reply::prepare(&mut parts)? {
            let rewriter = StreamRewriter::new(settings, plan.include_usage);
            let body = TransformBody::new(upstream_body, rewriter).boxed_unsync();
            return Ok(Response::from_parts(parts, body));
        }
        let collected = reply::read(upstream_body).await?;
        let body = match crate::natural::complete::rescue(&collected, &settings).await? {
            Some(rewritten) => body::full(rewritten),
            None => body::full(collected),
        };
        Ok(Response::from_parts(parts, body))
    }

    /// The fallback model for this request, when `on_invalid = "fallback"`.
    fn repairer(
        &self,
        upstreams: &Upstreams,
        config: &Config,
        provider: &Provider,
        plan: &ResponsePlan,
        client_auth: Option<HeaderValue>,
    ) -> Option<Arc<Repairer>> {
        if provider.tools.on_invalid != OnInvalid::Fallback {
            return None;
        }
        let fallback = provider.tools.fallback.as_ref()?;
        let target = config.provider(&fallback.provider)?;
        Some(Arc::new(Repairer {
            upstreams: upstreams.clone(),
            provider: target.clone(),
            model: fallback.model.clone(),
            attempts: fallback.attempts,
            timeout: fallback.timeout,
            max_calls: fallback.max_calls,
            tools: plan.tools.clone(),
            schemas: self.schemas.clone(),
            syntax: provider.tools.syntax,
            // The client's credential was meant for `provider`: it goes to the
            // fallback only when that is the same provider.
            authorization: client_auth.filter(|_| std::ptr::eq(target.as_ref(), provider)),
            for_provider: provider.name.as_str().into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn large_rewrites_leave_the_worker_thread() {
        let worker = std::thread::current().id();
        let small = rewrite_off_worker(BLOCKING_REWRITE_BYTES, || std::thread::current().id());
        assert_eq!(small.await.ok(), Some(worker));
        let large = rewrite_off_worker(BLOCKING_REWRITE_BYTES + 1, || std::thread::current().id());
        let ran_on = large.await.ok();
        assert!(ran_on.is_some() && ran_on != Some(worker));
    }
}

//! What a request's work carries wherever it runs: the tenant whose request
//! it is (token counters), its `x-request-id` (on its transcript rows), its trace context (the parent of the spans it
//! starts) and its [`Meter`] (where its answers' usage is charged). Set once per `/v1` request; a task spawned on the request's
//! behalf takes it along with [`carry`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use opentelemetry::Context;

use crate::config::limits::Price;

#[derive(Clone, Debug)]
pub struct Scope {
    /// Whose request it is (its token counters' `tenant` label).
    pub tenant: Arc<crate::config::Tenant>,
    /// The request's `x-request-id`, `None` outside a `/v1` request.
    pub request_id: Option<http::HeaderValue>,
    /// `None` without `[telemetry]`.
    pub trace: Option<Context>,
    /// `None` until the request is admitted by its tenant's limits.
    pub meter: Option<Arc<dyn Meter>>,
}

/// Where the usage of a request's upstream answers is charged: every
/// answered attempt (each gateway-tool round, each repair) reports its
/// tokens here.
pub trait Meter: Send + Sync + fmt::Debug {
    /// Whether usage must be asked for when a client did not ask for it
    /// (a streamed request then gets `stream_options.include_usage`).
    fn wants_usage(&self) -> bool;
    /// The model the client asked for (what `[providers.pricing]` globs
    /// match).
    fn model(&self) -> &str;
    /// One answer of `provider`, priced at `price` when its pricing has
    /// one: its tokens, `estimated` when the answer reported none and they
    /// were guessed from its size.
    fn used(&self, provider: &str, price: Option<Price>, tokens: Tokens);
}

/// An answer's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    /// The answer reported no usage: these were guessed from its size.
    pub estimated: bool,
}

/// The current request's meter, when it has one.
pub fn meter() -> Option<Arc<dyn Meter>> {
    SCOPE.try_with(|s| s.meter.clone()).ok().flatten()
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// The scope of the request this task works for, if any.
pub fn current() -> Option<Scope> {
    SCOPE.try_with(Clone::clone).ok()
}

/// The current request's `x-request-id`, when this is a request's task.
pub fn request_id() -> Option<http::HeaderValue> {
    SCOPE.try_with(|s| s.request_id.clone()).ok().flatten()
}

/// The current trace context, when traces are on and this is a request's task.
pub fn trace() -> Option<Context> {
    SCOPE.try_with(|s| s.trace.clone()).ok().flatten()
}

/// Runs `f` in `scope`.
pub async fn within<F: Future>(scope: Scope, f: F) -> F::Output {
    SCOPE.scope(scope, f).await
}

/// Runs `f` in `scope` when there is one (captured earlier with [`current`]).
pub async fn within_maybe<F: Future>(scope: Option<Scope>, f: F) -> F::Output {
    match scope {
        Some(scope) => SCOPE.scope(scope, f).await,
        None => f.await,
    }
}

/// `f`, carrying the current scope into whatever task polls it.
pub fn carry<F: Future>(f: F) -> impl Future<Output = F::Output> {
    within_maybe(current(), f)
}

/// `f` run in the current scope with `meter` as its meter.
pub async fn with_meter<F: Future>(meter: Arc<dyn Meter>, f: F) -> F::Output {
    match current() {
        Some(scope) => {
            SCOPE
                .scope(
                    Scope {
                        meter: Some(meter),
                        ..scope
                    },
                    f,
                )
                .await
        }
        None => f.await,
    }
}

/// `f` run in a scope whose trace parent is `cx`.
pub async fn with_trace<F: Future>(cx: Option<Context>, f: F) -> F::Output {
    match (current(), cx) {
        (Some(scope), Some(cx)) => {
            SCOPE
                .scope(
                    Scope {
                        trace: Some(cx),
                        ..scope
                    },
                    f,
                )
                .await
        }
        _ => f.await,
    }
}

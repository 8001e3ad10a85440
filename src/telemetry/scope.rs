//! What a request's work carries wherever it runs: the tenant whose request
//! it is (token counters) and its trace context (the parent of the spans it
//! starts). Set once per `/v1` request; a task spawned on the request's
//! behalf takes it along with [`carry`].

use std::future::Future;
use std::sync::Arc;

use opentelemetry::Context;

#[derive(Clone, Debug)]
pub struct Scope {
    pub tenant: Arc<str>,
    /// `None` without `[telemetry]`.
    pub trace: Option<Context>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// The scope of the request this task works for, if any.
pub fn current() -> Option<Scope> {
    SCOPE.try_with(Clone::clone).ok()
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

//! Natural mode's stream transform with its repairs: wraps the sans-IO
//! [`StreamRewriter`], runs the repairs it asks for on the fallback model,
//! and keeps the client's stream alive while its calls wait for them.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use crate::error::GatewayError;
use crate::natural::repair::Repairer;
use crate::natural::reply::InvalidCall;
use crate::natural::stream::StreamRewriter;
use crate::sse::encoder;
use crate::sse::transform::Transform;

/// A comment line is sent while a repair takes longer than this, so clients
/// and proxies with read timeouts keep the stream open (conformance rule 1).
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(3);

type RepairOutcome = (u64, u32, Result<(String, Map<String, Value>), InvalidCall>);

/// Used only with a fallback model: without one the rewriter never asks for
/// repairs (`ReplySettings::repair`) and runs as a transform on its own.
pub struct Repairing {
    rewriter: StreamRewriter,
    repairer: Arc<Repairer>,
    repairs: JoinSet<RepairOutcome>,
    keep_alive: Option<Pin<Box<Sleep>>>,
    /// The request's scope: repairs start while the body is polled, outside it.
    scope: Option<crate::telemetry::scope::Scope>,
}

impl Repairing {
    pub fn new(rewriter: StreamRewriter, repairer: Arc<Repairer>) -> Self {
        Repairing {
            rewriter,
            repairer,
            repairs: JoinSet::new(),
            keep_alive: None,
            scope: crate::telemetry::scope::current(),
        }
    }
}

impl Transform for Repairing {
    fn on_event(&mut self, data: &[u8], out: &mut BytesMut) {
        self.rewriter.on_event(data, out);
    }

    fn finish(&mut self, out: &mut BytesMut) {
        self.rewriter.finish(out);
    }

    fn fail(&mut self, out: &mut BytesMut, error: &GatewayError) {
        self.rewriter.fail(out, error);
    }

    fn is_ended(&self) -> bool {
        self.rewriter.is_ended()
    }

    fn poll_side(&mut self, cx: &mut Context<'_>, out: &mut BytesMut) -> Poll<bool> {
        // Start the repairs the rewriter asked for.
        for (choice, request) in self.rewriter.take_repairs() {
            let repairer = self.repairer.clone();
            let scope = self.scope.clone();
            self.repairs
                .spawn(crate::telemetry::scope::within_maybe(scope, async move {
                    let result = repairer.repair(&request).await;
                    (choice, request.id, result)
                }));
        }
        if !self.repairs.is_empty()
            && let Poll::Ready(Some(joined)) = self.repairs.poll_join_next(cx)
        {
            match joined {
                Ok((choice, id, result)) => self.rewriter.resolve(choice, id, result, out),
                // A repair task that panicked or was cancelled cannot fill its slot.
                Err(e) => self.rewriter.fail(
                    out,
                    &GatewayError::InvalidToolCall {
                        message: format!("A tool-call repair failed: {e}"),
                        raw: None,
                        text: None,
                    },
                ),
            }
            return Poll::Ready(true);
        }
        if !self.rewriter.is_blocked() {
            self.keep_alive = None;
            return Poll::Ready(false);
        }
        // Only `[DONE]` waits for the repairs now: keep the client's stream alive.
        let sleep = self
            .keep_alive
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.keep_alive = None;
        out.extend_from_slice(encoder::KEEP_ALIVE);
        Poll::Ready(true)
    }
}

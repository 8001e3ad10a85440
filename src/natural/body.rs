//! Drives the SSE decoder and a [`StreamRewriter`] from an upstream body's
//! frames, and runs the rewriter's repairs on the fallback model. Thin on
//! purpose: every decision lives in the sans-IO parts; this file only moves
//! bytes, spawns repairs and keeps the client's stream alive while they run.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use crate::body::BoxError;
use crate::error::GatewayError;
use crate::natural::repair::Repairer;
use crate::natural::reply::InvalidCall;
use crate::natural::stream::StreamRewriter;
use crate::sse::{Decoder, Event, encoder};

/// A comment line is sent while a repair takes longer than this, so clients
/// and proxies with read timeouts keep the stream open (conformance rule 1).
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(3);

type RepairOutcome = (u64, u32, Result<(String, Map<String, Value>), InvalidCall>);

pin_project! {
    pub struct RewriteBody<B> {
        #[pin]
        inner: B,
        decoder: Decoder,
        rewriter: StreamRewriter,
        events: VecDeque<Event>,
        scratch: Vec<Event>,
        out: BytesMut,
        done: bool,
        repairer: Option<Arc<Repairer>>,
        repairs: JoinSet<RepairOutcome>,
        keep_alive: Option<Pin<Box<Sleep>>>,
    }
}

impl<B> RewriteBody<B> {
    pub fn new(inner: B, rewriter: StreamRewriter, repairer: Option<Arc<Repairer>>) -> Self {
        RewriteBody {
            inner,
            decoder: Decoder::new(),
            rewriter,
            events: VecDeque::new(),
            scratch: Vec::new(),
            out: BytesMut::new(),
            done: false,
            repairer,
            repairs: JoinSet::new(),
            keep_alive: None,
        }
    }
}

impl<B> Body for RewriteBody<B>
where
    // A concrete error type: a generic `Into<BoxError>` bound here trips
    // rustc's higher-ranked lifetime check inside the async handler.
    B: Body<Data = Bytes, Error = BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            if !this.out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(this.out.split().freeze()))));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            // Start the repairs the rewriter asked for.
            for (choice, request) in this.rewriter.take_repairs() {
                match this.repairer {
                    Some(repairer) => {
                        let repairer = repairer.clone();
                        this.repairs.spawn(async move {
                            let result = repairer.repair(&request).await;
                            (choice, request.id, result)
                        });
                    }
                    None => {
                        let err = InvalidCall {
                            tool: request.tool,
                            reason: request.error,
                        };
                        this.rewriter
                            .resolve(choice, request.id, Err(err), this.out);
                    }
                }
            }
            if !this.repairs.is_empty()
                && let Poll::Ready(Some(joined)) = this.repairs.poll_join_next(cx)
            {
                let (choice, id, result) = joined.unwrap_or_else(|e| {
                    (
                        0,
                        u32::MAX,
                        Err(InvalidCall {
                            tool: None,
                            reason: format!("repair task failed: {e}"),
                        }),
                    )
                });
                this.rewriter.resolve(choice, id, result, this.out);
                finish_if_ended(this.rewriter, this.done);
                continue;
            }
            if this.rewriter.is_blocked() {
                // Waiting for a repair: keep the client's stream alive.
                let sleep = this
                    .keep_alive
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY)));
                ready!(sleep.as_mut().poll(cx));
                *this.keep_alive = None;
                this.out.extend_from_slice(encoder::KEEP_ALIVE);
                continue;
            }
            *this.keep_alive = None;
            if let Some(event) = this.events.pop_front() {
                this.rewriter.on_event(&event.data, this.out);
                finish_if_ended(this.rewriter, this.done);
                continue;
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if let Err(e) = this.decoder.feed(&data, this.scratch) {
                        let err = GatewayError::UpstreamInvalid {
                            message: format!("The upstream stream is malformed: {e}"),
                            code: "upstream_invalid_event",
                        };
                        this.rewriter.fail(this.out, &err);
                    }
                    this.events.extend(this.scratch.drain(..));
                }
                Some(Err(e)) => {
                    let err = GatewayError::UpstreamInvalid {
                        message: format!("The upstream stream failed: {e}"),
                        code: "upstream_stream_error",
                    };
                    this.rewriter.fail(this.out, &err);
                }
                None => this.rewriter.finish(this.out),
            }
            finish_if_ended(this.rewriter, this.done);
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn finish_if_ended(rewriter: &StreamRewriter, done: &mut bool) {
    if rewriter.is_ended() {
        *done = true;
    }
}

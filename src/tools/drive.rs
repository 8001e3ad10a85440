//! The IO around [`Rounds`]: reads each round's upstream answer, runs the
//! gateway's calls in parallel (at most `max_parallel_tools` at once), sends
//! the next round, and writes everything to the client's [`Output`] as it
//! happens. A streamed answer is driven by a task of its own whose output
//! goes through a small channel; when the client leaves, the body is dropped,
//! the task is aborted, and with it the running calls and the upstream request.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body::Frame;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::body::Body;
use crate::error::GatewayError;
use crate::exchange::{Event, Request, Sink};
use crate::metrics as m;
use crate::sse;
use crate::tools::Tools;
use crate::tools::executor::{self, Outcome};
use crate::tools::rounds::{Action, Next, Rounds};
use crate::upstream::chat_decode::{self, ChatDecoder};
use crate::upstream::reply::{self, Shape};

/// A comment goes to a streaming client after this long without output.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(3);

/// Where the answer goes: a [`Sink`] whose output can be handed on.
pub trait Output: Sink + Send {
    /// Hands on what was written.
    fn flush(&mut self) -> impl Future<Output = Flushed> + Send;
}

/// What a flush did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Something went to the client.
    Sent,
    /// Nothing was waiting.
    Nothing,
    /// The client is gone.
    Gone,
}

/// Sends the next round's request; the driver's only way upstream. The
/// request is written out before the future starts, so the loop may change
/// it while the round is on its way.
pub trait Upstream: Send + Sync {
    fn send<'a>(
        &'a self,
        request: &Request,
    ) -> impl Future<Output = Result<Response<Body>, GatewayError>> + Send + use<'a, Self>;
}

/// What the driver needs besides the loop.
pub struct Plan<U> {
    pub upstream: U,
    pub tools: Arc<Tools>,
    pub max_parallel: usize,
    pub max_result_chars: usize,
}

/// Drives `rounds` from the first round's `response` to the end of the
/// answer. Returns the loop (for its kept steps) and the rounds run.
pub async fn drive<U: Upstream, O: Output>(
    plan: &Plan<U>,
    mut rounds: Rounds,
    mut response: Response<Body>,
    out: &mut O,
) -> Rounds {
    let limit = Arc::new(Semaphore::new(plan.max_parallel));
    let mut actions: Vec<Action> = Vec::new();
    loop {
        let mut reply = match RoundReply::new(response) {
            Ok(r) => r,
            Err(e) => return fail(rounds, out, e).await,
        };
        let mut running: JoinSet<(String, Outcome)> = JoinSet::new();
        // The keep-alive timer is moved only when it fires: output in the
        // meantime is noted in `last_sent`, not by touching the timer.
        let mut idle = Box::pin(tokio::time::sleep(KEEP_ALIVE_EVERY));
        let mut last_sent = tokio::time::Instant::now();
        while !(reply.is_done() && running.is_empty()) {
            tokio::select! {
                Some(joined) = running.join_next(), if !running.is_empty() => match joined {
                    Ok((id, outcome)) => rounds.on_result(&id, outcome, &mut actions),
                    Err(e) => return fail(rounds, out, GatewayError::UpstreamInvalid {
                        message: format!("A gateway tool call failed: {e}"),
                        code: "gateway_tool_failed",
                    }).await,
                },
                event = reply.next(), if !reply.is_done() => match event {
                    Ok(Some(event)) => {
                        rounds.on_event(event, &mut actions);
                        // The rest of what one upstream frame brought goes
                        // out with it: one write to the client per frame,
                        // not per event.
                        while let Some(event) = reply.ready() {
                            rounds.on_event(event, &mut actions);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return fail(rounds, out, e).await,
                },
                () = &mut idle => {
                    let now = tokio::time::Instant::now();
                    let due = last_sent + KEEP_ALIVE_EVERY;
                    if now >= due {
                        out.keep_alive();
                        idle.as_mut().reset(now + KEEP_ALIVE_EVERY);
                    } else {
                        idle.as_mut().reset(due);
                    }
                }
            }
            apply(plan, &mut actions, &mut running, &limit, out);
            match out.flush().await {
                Flushed::Gone => return rounds,
                // Keep-alives are for silence the client sees, not the upstream's.
                Flushed::Sent => last_sent = tokio::time::Instant::now(),
                Flushed::Nothing => {}
            }
        }
        let next = rounds.end_round(&mut actions);
        apply(plan, &mut actions, &mut running, &limit, out);
        if next == Next::Done {
            metrics::histogram!(m::GATEWAY_ROUNDS).record(f64::from(rounds.round()));
            out.end();
            out.flush().await;
            return rounds;
        }
        if out.flush().await == Flushed::Gone {
            return rounds;
        }
        let sent = plan.upstream.send(rounds.request());
        tokio::pin!(sent);
        let sent = loop {
            tokio::select! {
                r = &mut sent => break r,
                () = tokio::time::sleep(KEEP_ALIVE_EVERY) => {
                    out.keep_alive();
                    if out.flush().await == Flushed::Gone {
                        return rounds;
                    }
                }
            }
        };
        response = match sent.and_then(successful) {
            Ok(r) => r,
            Err(e) => return fail(rounds, out, e).await,
        };
    }
}

/// A later round answered with an error status: the answer cannot go on.
fn successful(response: Response<Body>) -> Result<Response<Body>, GatewayError> {
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(GatewayError::UpstreamInvalid {
            message: format!(
                "The upstream answered a continuation round with HTTP {}",
                response.status().as_u16()
            ),
            code: "upstream_error",
        })
    }
}

/// The answer ends with `error`: the door's encoder tells the client (and
/// the request's log line takes its code).
async fn fail<O: Output>(rounds: Rounds, out: &mut O, error: GatewayError) -> Rounds {
    out.fail(error);
    out.end();
    out.flush().await;
    rounds
}

/// Carries out the loop's actions: events to the client, calls to run.
fn apply<U, O: Output>(
    plan: &Plan<U>,
    actions: &mut Vec<Action>,
    running: &mut JoinSet<(String, Outcome)>,
    limit: &Arc<Semaphore>,
    out: &mut O,
) {
    for action in actions.drain(..) {
        match action {
            Action::Emit(event) => out.event(event),
            Action::Execute {
                id,
                tool,
                arguments,
            } => {
                let tools = plan.tools.clone();
                let limit = limit.clone();
                let max = plan.max_result_chars;
                running.spawn(crate::telemetry::scope::carry(async move {
                    let _permit = limit.acquire_owned().await;
                    let outcome = executor::execute(
                        &tools,
                        &tool,
                        &id,
                        &arguments,
                        max,
                        executor::Route::Model,
                    )
                    .await;
                    (id, outcome)
                }));
            }
        }
    }
}

/// One round's upstream answer, as events.
struct RoundReply {
    body: Body,
    shape: Shape,
    sse: sse::Decoder,
    chat: ChatDecoder,
    events: VecDeque<Event>,
    scratch: Vec<sse::Event>,
    decoded: Vec<Event>,
    done: bool,
    /// The error the round's stream ended with, given once the events
    /// decoded before it (the text before an invalid call) are out.
    failed: Option<GatewayError>,
}

impl RoundReply {
    fn new(response: Response<Body>) -> Result<Self, GatewayError> {
        let (mut parts, body) = response.into_parts();
        let shape = reply::prepare(&mut parts)?;
        Ok(RoundReply {
            body,
            shape,
            sse: sse::Decoder::new(),
            chat: ChatDecoder::new(),
            events: VecDeque::new(),
            scratch: Vec::new(),
            decoded: Vec::new(),
            done: false,
            failed: None,
        })
    }

    fn is_done(&self) -> bool {
        self.done && self.events.is_empty() && self.failed.is_none()
    }

    /// An event already decoded, without reading the upstream.
    fn ready(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next event; `None` when a frame brought none (call again).
    async fn next(&mut self) -> Result<Option<Event>, GatewayError> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        if let Some(error) = self.failed.take() {
            return Err(error);
        }
        if self.done {
            return Ok(None);
        }
        if let Shape::Whole = self.shape {
            let body = std::mem::replace(&mut self.body, crate::body::empty());
            let bytes = reply::read(body).await?;
            self.events.extend(chat_decode::completion(&bytes)?);
            self.done = true;
            return Ok(self.events.pop_front());
        }
        match self.body.frame().await {
            None => {
                self.done = true;
                if let Err(error) = self.chat.finish(&mut self.decoded) {
                    self.failed = Some(error);
                }
            }
            Some(Err(e)) => {
                return Err(GatewayError::UpstreamInvalid {
                    message: format!("The upstream stream failed: {e}"),
                    code: "upstream_stream_error",
                });
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.sse.feed(&data, &mut self.scratch).map_err(|e| {
                        GatewayError::UpstreamInvalid {
                            message: format!("The upstream stream is malformed: {e}"),
                            code: "upstream_invalid_event",
                        }
                    })?;
                    for event in self.scratch.drain(..) {
                        if let Err(error) = self.chat.feed(&event.data, &mut self.decoded) {
                            self.failed = Some(error);
                            self.done = true;
                            break;
                        }
                    }
                    if self.chat.is_done() {
                        self.done = true;
                    }
                }
            }
        }
        self.events.extend(self.decoded.drain(..));
        Ok(self.events.pop_front())
    }
}

/// A streamed answer: the encoder's bytes go to the client through the
/// response body, which drives the answer itself (see [`stream`]).
pub struct Streamed<E> {
    pub encoder: E,
    slot: Arc<Slot>,
}

/// An encoder whose written bytes can be taken.
pub trait Take {
    fn take(&mut self) -> BytesMut;
}

impl<E: Sink> Sink for Streamed<E> {
    fn event(&mut self, event: Event) {
        self.encoder.event(event);
    }
    fn fail(&mut self, error: GatewayError) {
        self.encoder.fail(error);
    }
    fn end(&mut self) {
        self.encoder.end();
    }
    fn keep_alive(&mut self) {
        self.encoder.keep_alive();
    }
}

impl<E: Sink + Take + Send> Output for Streamed<E> {
    async fn flush(&mut self) -> Flushed {
        let bytes = self.encoder.take();
        if bytes.is_empty() {
            return Flushed::Nothing;
        }
        self.slot.put(bytes.freeze());
        // The body hands the bytes on as soon as this future waits, and
        // polls it again when the client wants more: that is the wake.
        std::future::poll_fn(|_| {
            if self.slot.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        Flushed::Sent
    }
}

/// The bytes one flush hands to the body.
#[derive(Default)]
struct Slot(Mutex<Option<Bytes>>);

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Bytes>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    fn put(&self, bytes: Bytes) {
        *self.lock() = Some(bytes);
    }
    fn take(&self) -> Option<Bytes> {
        self.lock().take()
    }
    fn is_empty(&self) -> bool {
        self.lock().is_none()
    }
}

/// The body a streamed answer is written to, driving `run` as the client
/// reads: no task and no channel between the answer and the connection
/// (the way a rewritten stream is read). The client leaving drops the body
/// and, with it, the answer.
pub fn stream<E, F>(encoder: E, run: F) -> Body
where
    E: Sink + Take + Send + 'static,
    F: FnOnce(Streamed<E>) -> Pin<Box<dyn Future<Output = ()> + Send>>,
{
    let slot = Arc::new(Slot::default());
    let answer = run(Streamed {
        encoder,
        slot: slot.clone(),
    });
    // The answer works for the request: it keeps its tenant and trace.
    let answer = Box::pin(crate::telemetry::scope::carry(answer));
    crate::body::boxed(Driven {
        answer: Some(answer),
        slot,
    })
}

struct Driven {
    answer: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    slot: Arc<Slot>,
}

impl http_body::Body for Driven {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(answer) = self.answer.as_mut()
            && answer.as_mut().poll(cx).is_ready()
        {
            self.answer = None;
        }
        match self.slot.take() {
            Some(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            None if self.answer.is_none() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.answer.is_none() && self.slot.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Writes each text event as it comes.
    #[derive(Default)]
    struct Echo(BytesMut);

    impl Sink for Echo {
        fn event(&mut self, event: Event) {
            if let Event::Text(text) = event {
                self.0.extend_from_slice(text.as_bytes());
            }
        }
        fn fail(&mut self, _: GatewayError) {}
        fn end(&mut self) {
            self.0.extend_from_slice(b"|end");
        }
    }

    impl Take for Echo {
        fn take(&mut self) -> BytesMut {
            self.0.split()
        }
    }

    /// Sets its flag when dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Each flush is one frame, in order, and the body ends with the
    /// answer; a flush with nothing written sends nothing.
    #[tokio::test]
    async fn each_flush_is_one_frame_of_the_body() {
        let mut body = stream(Echo::default(), |mut out| {
            Box::pin(async move {
                for piece in ["a", "bc", "", "d"] {
                    out.event(Event::Text(piece.into()));
                    out.flush().await;
                }
                out.end();
                out.flush().await;
            })
        });
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames, ["a", "bc", "d", "|end"]);
        assert!(http_body::Body::is_end_stream(&body));
    }

    /// The client leaving drops the body, and the answer with it.
    #[tokio::test]
    async fn dropping_the_body_drops_the_answer() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let mut body = stream(Echo::default(), move |mut out| {
            Box::pin(async move {
                let _guard = guard;
                out.event(Event::Text("first".into()));
                out.flush().await;
                std::future::pending::<()>().await;
            })
        });
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first");
        assert!(!dropped.load(Ordering::SeqCst));
        drop(body);
        assert!(dropped.load(Ordering::SeqCst));
    }
}

//! Accounting for one request: metrics and the single log line, emitted when
//! the response body is finished or dropped (client gone), so durations and
//! byte counts cover the whole stream, not just the response head.

use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use std::sync::Arc;

use crate::log_writer::request_line::RequestLine;
use crate::metrics::request::{self as m, ProviderMetrics, ROUTES};

/// What is known about a request; recorded once, on drop.
#[derive(Debug)]
pub struct RequestLog {
    /// The routed provider's handles; `None` until routing succeeds.
    pub provider: Option<Arc<ProviderMetrics>>,
    /// The key's tenant, once the key was checked.
    pub tenant: Option<Arc<crate::config::Tenant>>,
    pub model: String,
    /// The upstream target and attempts.
    pub attempted: Attempted,
    /// Index into [`ROUTES`].
    pub route: usize,
    pub status: u16,
    pub start: Instant,
    pub streaming: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Set when the body ended in an error (upstream reset, idle timeout).
    pub failed: Option<String>,
    /// The code of the error the client was told, as an error answer or
    /// as an error event in its stream (the first one).
    pub code: Option<&'static str>,
    /// The request's place under `max_concurrent_requests`, held until the body ends.
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The request body's bytes counted under `max_buffered_request_bytes`
    /// (the gateway's reservation: this layer only drops it when the body
    /// ends).
    pub held: Option<Guard>,
    /// Keeps the client's connection busy (not idle) until the body ends
    /// (the server's guard, dropped likewise).
    pub busy: Option<Guard>,
    /// The request's admission under its tenant's limits (its concurrency
    /// slot; its usage is charged once every holder dropped it).
    pub admission: Option<Guard>,
    /// Set when shutdown's grace period ended the stream (see `drain`).
    pub drained: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The request's server span, when traces are on.
    pub trace: Option<crate::telemetry::Context>,
    /// `x-request-id`.
    pub request_id: Option<http::HeaderValue>,
    /// A streamed answer's first token was seen (and timed).
    first_token: bool,
    finished: bool,
}

/// The target and attempt count of a request's upstream sends, for its log
/// line (the upstream layer fills it in).
#[derive(Debug, Clone, Default)]
pub struct Attempted {
    pub target: Option<Arc<str>>,
    pub attempts: u32,
    /// The first send returned: later sends (the rounds of a gateway-tools
    /// answer, repairs) are not attempts of the request's.
    pub settled: bool,
}

/// Something held until a response body ends and then dropped (a
/// reservation, a connection's busy mark); this layer knows nothing else
/// of it.
pub struct Guard {
    _held: Box<dyn Send + Sync>,
}

impl Guard {
    pub fn new(held: impl Send + Sync + 'static) -> Guard {
        Guard {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

impl RequestLog {
    pub fn start(route: usize) -> Self {
        m::active_requests().increment(1.0);
        RequestLog {
            provider: None,
            tenant: None,
            model: String::new(),
            attempted: Attempted::default(),
            route,
            status: 0,
            start: Instant::now(),
            streaming: false,
            bytes_in: 0,
            bytes_out: 0,
            failed: None,
            code: None,
            permit: None,
            held: None,
            busy: None,
            admission: None,
            drained: None,
            trace: None,
            request_id: None,
            first_token: false,
            finished: false,
        }
    }

    pub fn set_streaming(&mut self) {
        if !self.streaming {
            self.streaming = true;
            m::active_streams().increment(1.0);
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed();
        m::active_requests().decrement(1.0);
        if self.streaming {
            m::active_streams().decrement(1.0);
        }
        // Requests that reached no provider count under `provider="none"`.
        let provider = self.provider.as_ref().unwrap_or_else(|| m::no_provider());
        provider.record(&m::Finished {
            route: self.route,
            tenant: self.tenant.as_deref(),
            status: self.status,
            seconds: elapsed.as_secs_f64(),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
        });
        let drained = self
            .drained
            .as_ref()
            .is_some_and(|d| d.load(std::sync::atomic::Ordering::Acquire));
        let error = self.failed.take().or_else(|| {
            drained.then(|| "ended by shutdown at the end of its grace period".to_owned())
        });
        let trace_id = self.trace.as_ref().and_then(|cx| {
            crate::telemetry::server_span::end(
                cx,
                crate::telemetry::server_span::Ended {
                    status: self.status,
                    provider: &provider.name,
                    tenant: self.tenant.as_ref().map(|t| &*t.name),
                    model: &self.model,
                    error: error.as_deref(),
                },
            );
            crate::telemetry::propagate::trace_id(cx).map(String::into_boxed_str)
        });
        // Model names are logged; prompts, keys and bodies never are.
        crate::log_writer::request(RequestLine {
            at: std::time::SystemTime::now(),
            provider: provider.name.clone(),
            tenant: self.tenant.take().map(|t| t.name.clone()),
            model: std::mem::take(&mut self.model),
            target: self.attempted.target.take(),
            attempts: self.attempted.attempts,
            route: ROUTES[self.route],
            status: self.status,
            stream: self.streaming,
            duration: elapsed,
            bytes_out: self.bytes_out,
            complete: self.finished && self.failed.is_none() && !drained,
            code: self.code,
            error,
            trace_id,
            request_id: self.request_id.take(),
        });
    }
}

thread_local! {
    /// The code of the error event written during the body poll under way
    /// on this thread (see [`told`]).
    static TOLD: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Notes that the answer being written tells its client error `code` in
/// its body (an in-stream error event). Every such event is written while
/// the request's [`Observed`] body polls the answer (the rewriters and the
/// doors' encoders run inside that poll), which puts the code on the
/// request's log line; written anywhere else (a whole answer's round, read
/// in the handler, whose error reaches the client as an error answer), it
/// is not taken.
pub fn told(code: &'static str) {
    TOLD.set(Some(code));
}

/// Runs `poll`, returning what it [`told`].
fn noting<T>(poll: impl FnOnce() -> T) -> (T, Option<&'static str>) {
    let outer = TOLD.replace(None);
    let polled = poll();
    (polled, TOLD.replace(outer))
}

/// Whether a frame of an event stream carries the answer's first token: a
/// text, reasoning or call delta of a chat chunk, a Responses delta, or a
/// Messages content delta (role and empty-content chunks do not). Looked
/// for only until it is found.
fn carries_a_token(frame: &[u8]) -> bool {
    const NON_EMPTY: [&[u8]; 3] = [
        b"\"content\":\"",
        b"\"reasoning_content\":\"",
        b"\"reasoning\":\"",
    ];
    const ANY: [&[u8]; 3] = [b"\"tool_calls\":[{", b".delta\"", b"_delta\""];
    NON_EMPTY.iter().any(|key| {
        memchr::memmem::find_iter(frame, key).any(|at| frame.get(at + key.len()) != Some(&b'"'))
    }) || ANY
        .iter()
        .any(|key| memchr::memmem::find(frame, key).is_some())
}

pin_project! {
    /// A body that counts what it yields and finishes its [`RequestLog`] when done.
    pub struct Observed<B> {
        #[pin]
        inner: B,
        log: RequestLog,
    }
}

impl<B> Observed<B> {
    pub fn new(inner: B, log: RequestLog) -> Self {
        Observed { inner, log }
    }
}

impl<B> Body for Observed<B>
where
    B: Body,
    B::Error: std::fmt::Display,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let (polled, told) = noting(|| this.inner.as_mut().poll_frame(cx));
        if let Some(code) = told {
            this.log.code.get_or_insert(code);
        }
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.log.bytes_out += data.remaining() as u64;
                    if this.log.streaming
                        && !this.log.first_token
                        && data.chunk().len() == data.remaining()
                        && carries_a_token(data.chunk())
                    {
                        this.log.first_token = true;
                        if let Some(provider) = &this.log.provider {
                            provider.first_token(this.log.start.elapsed().as_secs_f64());
                        }
                    }
                }
                // hyper stops polling once the body says it has ended, so
                // `Ready(None)` may never be seen for sized bodies.
                if this.inner.is_end_stream() {
                    this.log.finished = true;
                }
            }
            Poll::Ready(Some(Err(e))) => this.log.failed = Some(e.to_string()),
            Poll::Ready(None) => this.log.finished = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::carries_a_token;

    #[test]
    fn the_first_token_is_a_delta_with_something_in_it() {
        let role = br#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert!(!carries_a_token(role));
        assert!(carries_a_token(
            br#"data: {"choices":[{"delta":{"content":"Hi"}}]}"#
        ));
        assert!(carries_a_token(
            br#"data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}"#
        ));
        assert!(carries_a_token(
            br#"data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#
        ));
        assert!(carries_a_token(
            br#"data: {"type":"response.output_text.delta","delta":"Hi"}"#
        ));
        assert!(carries_a_token(
            br#"data: {"type":"content_block_delta","delta":{"type":"text_delta"}}"#
        ));
        assert!(!carries_a_token(br#"data: {"type":"message_start"}"#));
        assert!(!carries_a_token(b": keep-alive\n\n"));
    }
}

//! What one upstream attempt tells the operator: its `chat {model}` client
//! span (when traces are on) and the tokens its answer used
//! (`toolgate_tokens_total`, always; when it reports none and the request
//! has a meter, the estimate the meter is charged, labelled
//! `estimated="true"`, so the tokens counted are the tokens priced). The span starts before the request is
//! sent, carries the `traceparent` the upstream receives, and ends when the
//! answer's body ends or is dropped, with the model, finish reasons and
//! usage read from it ([`super::usage`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use opentelemetry::trace::{SpanKind, TraceContextExt};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use pin_project_lite::pin_project;

use super::usage::Scan;
use crate::body::{self, Body, BoxError};
use crate::config::limits::Price;
use crate::config::{Provider, Target, UpstreamTarget};
use crate::telemetry::scope::{Meter, Tokens};
use crate::telemetry::{self, genai as g};

/// An attempt's span, started under the request's trace context.
pub(super) fn start(
    provider: &Provider,
    target: &UpstreamTarget,
    attempt: u32,
    req: &mut Request<http_body_util::Full<Bytes>>,
    body: &Bytes,
) -> Option<Context> {
    let parent = telemetry::scope::trace()?;
    if !parent.span().span_context().is_sampled() {
        // Nothing of this trace is kept: the upstream learns that from the
        // request's own span, and no attempt span is built.
        telemetry::propagate::inject(&parent, req.headers_mut());
        return None;
    }
    let model = crate::inbound::find_model(req.headers(), body)
        .ok()
        .flatten()
        .map(|m| m.name)
        .unwrap_or_default();
    let mut attributes = vec![
        KeyValue::new(g::OPERATION_NAME, "chat"),
        KeyValue::new(g::PROVIDER_NAME, provider.name.clone()),
        KeyValue::new(g::REQUEST_MODEL, model.clone()),
        KeyValue::new(g::TARGET, target.label.to_string()),
        KeyValue::new(g::ATTEMPT, i64::from(attempt)),
    ];
    match &target.endpoint {
        Target::Http(http) => {
            attributes.push(KeyValue::new(
                g::SERVER_ADDRESS,
                http.authority.host().to_owned(),
            ));
            if let Some(port) = http.authority.port_u16() {
                attributes.push(KeyValue::new(g::SERVER_PORT, i64::from(port)));
            }
        }
        Target::Demo(_) => attributes.push(KeyValue::new(g::SERVER_ADDRESS, "demo")),
    }
    if telemetry::get().is_some_and(|t| t.capture_content)
        && let Ok(request) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(messages) = telemetry::content::input_messages(&request)
    {
        attributes.push(KeyValue::new(g::INPUT_MESSAGES, messages));
    }
    let cx = g::start(
        format!("chat {model}"),
        SpanKind::Client,
        attributes,
        &parent,
    )?;
    telemetry::propagate::inject(&cx, req.headers_mut());
    Some(cx)
}

/// Ends `span` for an attempt that got no answer.
pub(super) fn failed(span: Option<Context>, error_type: &'static str, message: &str) {
    if let Some(cx) = span {
        g::fail(&cx, error_type, message);
        cx.span().end();
    }
}

/// A provider and tenant's `toolgate_tokens_total` (input, output): the
/// tokens answers reported, and those estimated for answers that reported
/// none.
#[derive(Clone)]
pub(super) struct TokenCounters {
    pub reported: [metrics::Counter; 2],
    pub estimated: [metrics::Counter; 2],
}

/// Where an answer's usage is charged, and at what price.
pub(super) struct Charge {
    pub meter: Arc<dyn Meter>,
    pub provider: String,
    pub price: Option<Price>,
    /// The request body's size, for an estimate when no usage comes.
    pub request_bytes: usize,
}

/// Wraps an answer: a success's body is read for usage (and ends the span
/// when it ends); any other status ends the span at once.
pub(super) fn observe(
    response: Response<Body>,
    span: Option<Context>,
    tokens: Option<TokenCounters>,
    charge: Option<Charge>,
) -> Response<Body> {
    let status = response.status();
    if let Some(cx) = &span {
        cx.span()
            .set_attribute(KeyValue::new(g::HTTP_STATUS, i64::from(status.as_u16())));
    }
    if !status.is_success() {
        if let Some(cx) = span {
            // The conventions' error type of an HTTP failure: its status code.
            g::fail(
                &cx,
                status.as_u16().to_string(),
                "the upstream answered with an error status",
            );
            cx.span().end();
        }
        return response;
    }
    let capture =
        (span.is_some() && telemetry::get().is_some_and(|t| t.capture_content)).then(Vec::new);
    response.map(|inner| {
        body::boxed(Answered {
            inner,
            scan: Scan::default(),
            ending: Some(Ending {
                span,
                tokens,
                capture,
                charge,
                bytes: 0,
                events: 0,
            }),
        })
    })
}

struct Ending {
    span: Option<Context>,
    tokens: Option<TokenCounters>,
    /// `capture_content`: the answer's first bytes, for its output messages.
    capture: Option<Vec<u8>>,
    charge: Option<Charge>,
    /// The answer's bytes so far.
    bytes: usize,
    /// Its server-sent events so far (a stream's chunks, one token each
    /// for most servers).
    events: usize,
}

impl Ending {
    fn keep(&mut self, data: &Bytes) {
        self.bytes += data.len();
        if self.charge.is_some() {
            self.events += memchr::memmem::find_iter(data, b"data:").count();
        }
        if let Some(kept) = &mut self.capture {
            let room = telemetry::content::MAX_CAPTURE.saturating_sub(kept.len());
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
    }

    fn finish(self, scan: &Scan, error: Option<String>) {
        let seen = scan.finish(self.span.is_some());
        let reported = Tokens {
            input: seen.input_tokens.unwrap_or(0),
            output: seen.output_tokens.unwrap_or(0),
            estimated: false,
        };
        // What the meter is charged is what the metric counts.
        let used = self.charge.as_ref().map_or(reported, |charge| {
            match (seen.input_tokens, seen.output_tokens) {
                (None, None) => Tokens {
                    input: estimate(charge.request_bytes),
                    // A stream: a token a chunk, less the role and finish
                    // chunks; a whole answer: from its size.
                    output: match self.events {
                        0 => estimate(self.bytes),
                        n => n.saturating_sub(2) as u64,
                    },
                    estimated: true,
                },
                _ => reported,
            }
        });
        if let Some(tokens) = &self.tokens {
            let counters = if used.estimated {
                &tokens.estimated
            } else {
                &tokens.reported
            };
            counters[0].increment(used.input);
            counters[1].increment(used.output);
        }
        if let Some(charge) = &self.charge {
            charge.meter.used(&charge.provider, charge.price, used);
        }
        let Some(cx) = self.span else { return };
        let span = cx.span();
        if let Some(model) = seen.model {
            span.set_attribute(KeyValue::new(g::RESPONSE_MODEL, model));
        }
        if !seen.finish_reasons.is_empty() {
            let reasons: Vec<StringValue> = seen
                .finish_reasons
                .into_iter()
                .map(StringValue::from)
                .collect();
            span.set_attribute(KeyValue::new(
                g::RESPONSE_FINISH_REASONS,
                Value::Array(reasons.into()),
            ));
        }
        if let Some(n) = seen.input_tokens {
            span.set_attribute(KeyValue::new(g::USAGE_INPUT_TOKENS, n as i64));
        }
        if let Some(n) = seen.output_tokens {
            span.set_attribute(KeyValue::new(g::USAGE_OUTPUT_TOKENS, n as i64));
        }
        if let Some(messages) = self
            .capture
            .and_then(|kept| telemetry::content::output_messages(&kept))
        {
            span.set_attribute(KeyValue::new(g::OUTPUT_MESSAGES, messages));
        }
        if let Some(error) = error {
            g::fail(&cx, "stream_error", error);
        }
        span.end();
    }
}

/// Tokens guessed from a body's size when its answer reported no usage
/// (a stream cut before its usage chunk, an upstream that sends none):
/// four bytes a token, which errs high for JSON framing.
fn estimate(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

pin_project! {
    struct Answered {
        #[pin]
        inner: Body,
        scan: Scan,
        ending: Option<Ending>,
    }

    impl PinnedDrop for Answered {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(ending) = this.ending.take() {
                // Dropped before its end: the client left or a rewrite stopped reading.
                ending.finish(this.scan, None);
            }
        }
    }
}

impl HttpBody for Answered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.scan.push(data);
                    if let Some(ending) = this.ending.as_mut() {
                        ending.keep(data);
                    }
                }
                if this.inner.is_end_stream()
                    && let Some(ending) = this.ending.take()
                {
                    ending.finish(this.scan, None);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(ending) = this.ending.take() {
                    ending.finish(this.scan, Some(e.to_string()));
                }
            }
            Poll::Ready(None) => {
                if let Some(ending) = this.ending.take() {
                    ending.finish(this.scan, None);
                }
            }
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

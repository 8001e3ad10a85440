//! The per-request log line, written without tracing's formatter.
//!
//! Every `/v1` request logs one line. Through tracing-subscriber's formatter
//! that line cost about 14,000 instructions (field visitors, `fmt::Write`
//! through several adapters, a calendar conversion per line): a fifth of a
//! passthrough request's user-space work. [`RequestLine`] writes the same
//! bytes straight into a buffer: the text layout of tracing-subscriber's
//! default format, or its JSON layout, with a timestamp whose date and time
//! of day are converted once per second.
//!
//! The unit tests render the same values through tracing-subscriber and
//! require identical lines, so the two layouts cannot drift apart.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one request's line says, and when it happened.
#[derive(Debug, Clone)]
pub struct RequestLine {
    pub at: SystemTime,
    pub provider: Arc<str>,
    /// The key's identity (names from the config, or `key-` and hex digits).
    pub tenant: Option<Arc<str>>,
    /// The model as the client sent it: escaped, since anyone can choose it.
    pub model: String,
    /// The upstream target of the last attempt (its configured name or index).
    pub target: Option<Arc<str>>,
    /// Upstream attempts made (written with `target`).
    pub attempts: u32,
    pub route: &'static str,
    pub status: u16,
    pub stream: bool,
    pub duration: Duration,
    pub bytes_out: u64,
    pub complete: bool,
    /// The code of the error the client was told (an error answer, or an
    /// error event in its stream): `invalid_tool_call`, `upstream_timeout`…
    pub code: Option<&'static str>,
    /// Why the body ended early; escaped like the model.
    pub error: Option<String>,
    /// The request's trace (32 hex digits), when traces are on.
    pub trace_id: Option<Box<str>>,
    /// `x-request-id`: the client's (plain ASCII), or one toolgate made.
    pub request_id: Option<http::HeaderValue>,
}

/// The two layouts tracing-subscriber writes (without ANSI colours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Text,
    Json,
}

impl RequestLine {
    /// Appends the line (with its newline).
    pub fn write(&self, layout: Layout, out: &mut Vec<u8>) {
        match layout {
            Layout::Text => self.write_text(self.at, out),
            Layout::Json => self.write_json(self.at, out),
        }
    }

    fn write_text(&self, now: SystemTime, out: &mut Vec<u8>) {
        timestamp(now, out);
        out.extend_from_slice(b"  INFO toolgate::request: request provider=");
        debug_str(&self.provider, out);
        if let Some(tenant) = &self.tenant {
            out.extend_from_slice(b" tenant=");
            debug_str(tenant, out);
        }
        out.extend_from_slice(b" model=");
        debug_str(&self.model, out);
        if let Some(target) = &self.target {
            out.extend_from_slice(b" target=");
            debug_str(target, out);
            out.extend_from_slice(b" attempts=");
            integer(u64::from(self.attempts), out);
        }
        out.extend_from_slice(b" route=");
        debug_str(self.route, out);
        out.extend_from_slice(b" status=");
        integer(u64::from(self.status), out);
        out.extend_from_slice(if self.stream {
            b" stream=true duration_ms="
        } else {
            b" stream=false duration_ms="
        });
        millis(self.duration, out);
        out.extend_from_slice(b" bytes_out=");
        integer(self.bytes_out, out);
        out.extend_from_slice(if self.complete {
            b" complete=true"
        } else {
            b" complete=false"
        });
        if let Some(code) = self.code {
            out.extend_from_slice(b" code=");
            debug_str(code, out);
        }
        if let Some(error) = &self.error {
            out.extend_from_slice(b" error=");
            debug_str(error, out);
        }
        if let Some(trace_id) = &self.trace_id {
            out.extend_from_slice(b" trace_id=");
            debug_str(trace_id, out);
        }
        if let Some(request_id) = self.request_id.as_ref().and_then(|v| v.to_str().ok()) {
            out.extend_from_slice(b" request_id=");
            debug_str(request_id, out);
        }
        out.push(b'\n');
    }

    fn write_json(&self, now: SystemTime, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"timestamp\":\"");
        timestamp(now, out);
        out.extend_from_slice(
            b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"request\",\"provider\":",
        );
        json_str(&self.provider, out);
        if let Some(tenant) = &self.tenant {
            out.extend_from_slice(b",\"tenant\":");
            json_str(tenant, out);
        }
        out.extend_from_slice(b",\"model\":");
        json_str(&self.model, out);
        if let Some(target) = &self.target {
            out.extend_from_slice(b",\"target\":");
            json_str(target, out);
            out.extend_from_slice(b",\"attempts\":");
            integer(u64::from(self.attempts), out);
        }
        out.extend_from_slice(b",\"route\":");
        json_str(self.route, out);
        out.extend_from_slice(b",\"status\":");
        integer(u64::from(self.status), out);
        out.extend_from_slice(if self.stream {
            b",\"stream\":true,\"duration_ms\":"
        } else {
            b",\"stream\":false,\"duration_ms\":"
        });
        millis(self.duration, out);
        out.extend_from_slice(b",\"bytes_out\":");
        integer(self.bytes_out, out);
        out.extend_from_slice(if self.complete {
            b",\"complete\":true"
        } else {
            b",\"complete\":false"
        });
        if let Some(code) = self.code {
            out.extend_from_slice(b",\"code\":");
            json_str(code, out);
        }
        if let Some(error) = &self.error {
            out.extend_from_slice(b",\"error\":");
            json_str(error, out);
        }
        if let Some(trace_id) = &self.trace_id {
            out.extend_from_slice(b",\"trace_id\":");
            json_str(trace_id, out);
        }
        if let Some(request_id) = self.request_id.as_ref().and_then(|v| v.to_str().ok()) {
            out.extend_from_slice(b",\"request_id\":");
            json_str(request_id, out);
        }
        out.extend_from_slice(b"},\"target\":\"toolgate::request\"}\n");
    }
}

/// `1.537` for 1537 µs, `2.0` for 2000 µs: what `{:?}` prints for the
/// `f64` of whole microseconds divided by 1,000, without the float.
fn millis(duration: Duration, out: &mut Vec<u8>) {
    let micros = duration.as_micros();
    if micros >= 1 << 53 {
        // Past 285 years the float is no longer exact: print it as such.
        let _ = write!(VecWriter(out), "{:?}", micros as f64 / 1e3);
        return;
    }
    let (whole, mut frac) = ((micros / 1000) as u64, (micros % 1000) as u32);
    integer(whole, out);
    out.push(b'.');
    if frac == 0 {
        out.push(b'0');
        return;
    }
    let mut digits = 3;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    let mut buf = [b'0'; 3];
    for slot in buf[..digits].iter_mut().rev() {
        *slot = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    out.extend_from_slice(&buf[..digits]);
}

fn integer(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Characters that `{:?}` of a `str` and a JSON string both write as they are.
fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// A `&str` field as tracing's text layout records it: `{:?}`, quoted.
fn debug_str(s: &str, out: &mut Vec<u8>) {
    if plain(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = write!(VecWriter(out), "{s:?}");
    }
}

fn json_str(s: &str, out: &mut Vec<u8>) {
    if plain(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Serializing a `str` into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

thread_local! {
    /// The last second formatted on this thread, and its text.
    static SECOND: RefCell<(u64, [u8; 19])> = const { RefCell::new((u64::MAX, [0; 19])) };
}

/// `2026-11-25T10:41:52.118553Z`, as tracing-subscriber writes `SystemTime`
/// (UTC, microseconds). Times before 1970 are written as 1970.
fn timestamp(now: SystemTime, out: &mut Vec<u8>) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            *cached = (secs, civil(secs));
        }
        out.extend_from_slice(&cached.1);
    });
    out.push(b'.');
    let micros = since.subsec_micros();
    let mut buf = [0u8; 6];
    let mut n = micros;
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&buf);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix time (proleptic Gregorian, UTC).
fn civil(secs: u64) -> [u8; 19] {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = date_of(days);
    let mut text = [0u8; 19];
    let mut put = |at: usize, value: u64, width: usize| {
        let mut v = value;
        for i in (0..width).rev() {
            text[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, year % 10_000, 4);
    put(5, month, 2);
    put(8, day, 2);
    put(11, rem / 3600, 2);
    put(14, rem / 60 % 60, 2);
    put(17, rem % 60, 2);
    text[4] = b'-';
    text[7] = b'-';
    text[10] = b'T';
    text[13] = b':';
    text[16] = b':';
    text
}

/// (year, month, day) of a count of days since 1970-01-01: Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch.
fn date_of(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }

    /// The line as tracing-subscriber formats the same event.
    fn through_tracing(line: &RequestLine, layout: Layout) -> String {
        let capture = Capture::default();
        let builder = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(capture.clone());
        let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = match layout {
            Layout::Text => Box::new(builder.finish()),
            Layout::Json => Box::new(builder.json().finish()),
        };
        // The same call the log writer makes when it leaves the line to tracing.
        tracing::subscriber::with_default(subscriber, || super::super::through_tracing(line));
        String::from_utf8(capture.0.lock().unwrap().clone()).unwrap()
    }

    fn ours(line: &RequestLine, layout: Layout) -> String {
        let mut out = Vec::new();
        line.write(layout, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// Drops the timestamp, the only part that differs between two renderings.
    fn without_time(line: &str, layout: Layout) -> String {
        match layout {
            Layout::Text => line.split_once(' ').unwrap().1.to_owned(),
            Layout::Json => {
                let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
                let stamp = v["timestamp"].as_str().unwrap().to_owned();
                assert_eq!(stamp.len(), 27, "{stamp}");
                v["timestamp"] = serde_json::Value::Null;
                // Key order matters too: compare the serialized text.
                let mut text = serde_json::to_string(&v).unwrap();
                text.push('\n');
                text
            }
        }
    }

    #[test]
    fn lines_match_tracing_subscribers_layouts() {
        let base = RequestLine {
            at: SystemTime::now(),
            provider: "pt".into(),
            tenant: None,
            model: "bench-json".into(),
            target: None,
            attempts: 0,
            route: "chat_completions",
            status: 200,
            stream: false,
            duration: Duration::from_micros(1537),
            bytes_out: 410,
            complete: true,
            code: None,
            error: None,
            trace_id: None,
            request_id: None,
        };
        let cases = [
            RequestLine {
                stream: true,
                complete: false,
                duration: Duration::from_micros(2000),
                error: Some("upstream sent nothing for 120s".into()),
                ..base.clone()
            },
            RequestLine {
                model: "gpt\nINFO forged line\u{1b}[31m".into(),
                error: Some("a \"quoted\"\tcause\n".into()),
                provider: "odd \"name\" é".into(),
                status: 404,
                duration: Duration::from_nanos(999),
                bytes_out: 0,
                ..base.clone()
            },
            RequestLine {
                model: "".into(),
                route: "other",
                duration: Duration::from_secs(86_400 * 3) + Duration::from_micros(10),
                bytes_out: u64::MAX,
                status: 599,
                ..base.clone()
            },
            RequestLine {
                tenant: Some("team-a".into()),
                ..base.clone()
            },
            RequestLine {
                target: Some("vllm-0".into()),
                attempts: 3,
                ..base.clone()
            },
            RequestLine {
                status: 502,
                code: Some("invalid_tool_call"),
                ..base.clone()
            },
            RequestLine {
                stream: true,
                code: Some("upstream_stream_cut"),
                error: Some("cut".into()),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
                request_id: Some(http::HeaderValue::from_static("req-7f3a")),
                ..base.clone()
            },
            RequestLine {
                model: "m tenant=\"admin\" status=200".into(),
                ..base.clone()
            },
            RequestLine {
                model: "modèle-1 \\ back".into(),
                duration: Duration::from_micros(1_000_010),
                ..base.clone()
            },
        ];
        let cases = [base.clone()].into_iter().chain(cases).collect::<Vec<_>>();
        for layout in [Layout::Text, Layout::Json] {
            for case in &cases {
                let expected = through_tracing(case, layout);
                let got = ours(case, layout);
                assert_eq!(
                    without_time(&got, layout),
                    without_time(&expected, layout),
                    "{layout:?} {case:?}"
                );
            }
        }
    }

    #[test]
    fn milliseconds_print_as_the_float_would() {
        for micros in
            (0..5000).chain([10_000, 99_999, 123_456_789, 1_000_000_000_000, u64::MAX / 7])
        {
            let mut out = Vec::new();
            millis(Duration::from_micros(micros), &mut out);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{:?}", micros as f64 / 1e3),
                "{micros} µs"
            );
        }
    }

    #[test]
    fn timestamps_match_chrono() {
        let samples = [
            0u64,
            59,
            86_399,
            86_400,
            951_782_400,   // 2000-02-29
            1_709_164_800, // 2024-02-29
            1_764_067_312,
            4_102_444_799, // 2099-12-31T23:59:59
            253_402_300_799,
        ];
        for secs in samples
            .into_iter()
            .chain((0..2000).map(|i| i * 7_777_777 + 12_345))
        {
            let time = UNIX_EPOCH + Duration::new(secs, 123_456_789);
            let mut out = Vec::new();
            timestamp(time, &mut out);
            let expected = chrono::DateTime::<chrono::Utc>::from(time)
                .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            assert_eq!(String::from_utf8(out).unwrap(), expected, "{secs}");
        }
    }
}

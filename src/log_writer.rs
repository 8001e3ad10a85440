//! Where log lines go: stderr, written off the request path.
//!
//! Every `/v1` request logs one line (target [`REQUEST_TARGET`]), formatted
//! by [`request_line`] without tracing's formatter and appended to a
//! buffer. A flusher thread (`toolgate-log`, started by [`init`]) writes the
//! buffer out a few times a second while lines keep coming, and sleeps
//! while none do: a worker never makes a write syscall for its request
//! lines, and under load thousands of lines share one write. Every other
//! line, and a buffer past [`MAX_BUFFER`], is written at once, after what is
//! buffered, so the order holds. Without the flusher (a library user that
//! never called [`init`]), workers flush when they run out of work.

pub mod request_line;

use std::cell::{Cell, RefCell};
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// The target of the per-request log line, the only line that is buffered.
pub const REQUEST_TARGET: &str = "toolgate::request";

/// Buffered bytes beyond which lines are written without waiting.
const MAX_BUFFER: usize = 64 * 1024;

/// How long a request line may wait in the buffer while lines keep coming.
const FLUSH_EVERY: Duration = Duration::from_millis(50);

static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// The flusher thread, once [`init`] started it.
static FLUSHER: OnceLock<Thread> = OnceLock::new();
/// The flusher is parked until a line arrives.
static IDLE: AtomicBool = AtomicBool::new(false);

/// How request lines are written: 0 through tracing (ANSI colours on a
/// terminal), 1 text, 2 JSON.
static LAYOUT: AtomicU8 = AtomicU8::new(LAYOUT_TRACING);
const LAYOUT_TRACING: u8 = 0;
const LAYOUT_TEXT: u8 = 1;
const LAYOUT_JSON: u8 = 2;

/// Sets the request lines' layout to match tracing's (`json` or text) and
/// starts the flusher thread. Call once, when installing the subscriber.
pub fn init(json: bool) {
    let layout = if json {
        LAYOUT_JSON
    } else if io::stderr().is_terminal() {
        // Colours for a person at a terminal: tracing's own formatter.
        LAYOUT_TRACING
    } else {
        LAYOUT_TEXT
    };
    LAYOUT.store(layout, Ordering::Relaxed);
    if FLUSHER.get().is_some() {
        return;
    }
    let started = std::thread::Builder::new()
        .name("toolgate-log".into())
        .spawn(flusher);
    if let Ok(handle) = started {
        let _ = FLUSHER.set(handle.thread().clone());
    }
}

/// Writes out what is buffered: before exit, and when a worker parks if no
/// flusher thread runs.
pub fn flush() {
    write_pending();
    let buffer = lock();
    if !buffer.is_empty() {
        write_out(buffer, io::stderr().lock());
    }
}

/// A worker ran out of work: its request lines are formatted, and written
/// unless the flusher thread does it.
pub fn on_park() {
    PARKS.set(true);
    write_pending();
    if FLUSHER.get().is_none() {
        flush();
    }
}

/// Writes the buffer out every [`FLUSH_EVERY`] while lines keep coming;
/// parks when a round found none.
fn flusher() {
    loop {
        std::thread::sleep(FLUSH_EVERY);
        let buffer = lock();
        if buffer.is_empty() {
            // Announce the park before re-checking, so a line appended now
            // either is seen below or unparks us (`IDLE` is read after it).
            IDLE.store(true, Ordering::SeqCst);
            drop(buffer);
            if lock().is_empty() {
                std::thread::park();
            }
            IDLE.store(false, Ordering::SeqCst);
            continue;
        }
        write_out(buffer, io::stderr().lock());
    }
}

/// Request lines held on a worker until it runs out of work.
const MAX_PENDING: usize = 256;

thread_local! {
    /// This thread's request lines not yet formatted: a worker formats them
    /// when it parks, after the responses went out, so a request's own line
    /// costs nothing between its last byte in and its last byte out.
    static PENDING: RefCell<Vec<request_line::RequestLine>> = const { RefCell::new(Vec::new()) };
    /// This thread's runtime calls [`on_park`]: lines may wait for it.
    static PARKS: Cell<bool> = const { Cell::new(false) };
}

/// Logs one request's line, if the filter lets `toolgate::request` at
/// info through.
pub fn request(line: request_line::RequestLine) {
    if !tracing::enabled!(target: REQUEST_TARGET, tracing::Level::INFO) {
        return;
    }
    if LAYOUT.load(Ordering::Relaxed) == LAYOUT_TRACING {
        return through_tracing(&line);
    }
    if !PARKS.get() {
        return write_lines(&[line]);
    }
    if hold(line) {
        write_pending();
    }
}

/// Adds `line` to this thread's pending lines; true when they reached
/// [`MAX_PENDING`] and must be written now.
fn hold(line: request_line::RequestLine) -> bool {
    PENDING.with_borrow_mut(|pending| {
        pending.push(line);
        pending.len() >= MAX_PENDING
    })
}

/// Formats this thread's pending request lines into the buffer.
fn write_pending() {
    let lines = PENDING.with_borrow_mut(std::mem::take);
    if !lines.is_empty() {
        write_lines(&lines);
        // Keep the allocation for the next round.
        PENDING.with_borrow_mut(|pending| {
            if pending.is_empty() {
                let mut lines = lines;
                lines.clear();
                *pending = lines;
            }
        });
    }
}

fn write_lines(lines: &[request_line::RequestLine]) {
    let layout = if LAYOUT.load(Ordering::Relaxed) == LAYOUT_JSON {
        request_line::Layout::Json
    } else {
        request_line::Layout::Text
    };
    let mut buffer = lock();
    for line in lines {
        line.write(layout, &mut buffer);
    }
    if buffer.len() >= MAX_BUFFER {
        write_out(buffer, io::stderr().lock());
    } else if IDLE.load(Ordering::SeqCst) {
        drop(buffer);
        if let Some(flusher) = FLUSHER.get() {
            flusher.unpark();
        }
    }
}

/// The line through tracing's formatter (ANSI colours on a terminal).
fn through_tracing(line: &request_line::RequestLine) {
    tracing::info!(
        target: REQUEST_TARGET,
        provider = &*line.provider,
        tenant = line.tenant.as_deref(),
        model = line.model.as_str(),
        target = line.target.as_deref(),
        attempts = line.target.is_some().then_some(line.attempts),
        route = line.route,
        status = line.status,
        stream = line.stream,
        // Whole microseconds: `1.537`, not `1.5367309999999998`.
        duration_ms = line.duration.as_micros() as f64 / 1e3,
        bytes_out = line.bytes_out,
        complete = line.complete,
        code = line.code,
        error = line.error.as_deref(),
        trace_id = line.trace_id.as_deref(),
        request_id = line.request_id.as_ref().and_then(|v| v.to_str().ok()),
        "request"
    );
}

fn lock() -> MutexGuard<'static, Vec<u8>> {
    // A panic while holding the lock leaves only log bytes behind; keep going.
    BUFFER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes the buffered lines and writes them to `sink` (stderr, locked by the
/// caller) once the buffer's lock is released: a slow or blocked stderr then
/// holds only the output, and other threads keep buffering their lines.
/// `sink` is locked before the buffer is released, so the order holds.
fn write_out<W: Write>(mut buffer: MutexGuard<'_, Vec<u8>>, mut sink: W) {
    let lines = std::mem::take(&mut *buffer);
    drop(buffer);
    // Nowhere to report a failed log write; the lines are dropped.
    let _ = sink.write_all(&lines);
}

/// The `MakeWriter` for tracing's formatter.
#[derive(Clone, Copy, Default)]
pub struct ParkFlushed;

/// One event's writer; `urgent` events are written out immediately.
pub struct LineWriter {
    urgent: bool,
}

impl Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let shown = without_credentials(bytes);
        let mut buffer = lock();
        buffer.extend_from_slice(&shown);
        if self.urgent || buffer.len() >= MAX_BUFFER {
            write_out(buffer, io::stderr().lock());
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A log line with every secret in it hidden by the config's one rule
/// ([`crate::config::redact::in_text`]): whatever wrote it (a library's own
/// error, say) may quote a URL, a command line or a `NAME=value`. On a
/// terminal tracing colours each field's name apart from its `=`, which
/// would hide `token=…` from the rule: such a line is read without its
/// colours, and written without them when something in it was hidden.
fn without_credentials(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    let text = String::from_utf8_lossy(bytes);
    let plain = if bytes.contains(&0x1b) {
        Cow::Owned(without_colours(&text))
    } else {
        text
    };
    match crate::config::redact::in_text(&plain) {
        Cow::Owned(hidden) => Cow::Owned(hidden.into_bytes()),
        Cow::Borrowed(_) => Cow::Borrowed(bytes),
    }
}

/// `text` without its ANSI escape sequences (`ESC [ … m`).
fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            // Parameters up to the final byte (`@` to `~`).
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

impl<'a> MakeWriter<'a> for ParkFlushed {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter { urgent: true }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> LineWriter {
        LineWriter {
            urgent: meta.target() != REQUEST_TARGET || *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_wait_for_a_flush_and_urgent_ones_do_not() {
        // The buffer is process-global; this is its only test.
        LineWriter { urgent: false }
            .write_all(b"info line\n")
            .unwrap();
        assert_eq!(&*lock(), b"info line\n", "held until a flush");
        flush();
        assert!(lock().is_empty());

        LineWriter { urgent: false }.write_all(b"queued\n").unwrap();
        LineWriter { urgent: true }.write_all(b"warning\n").unwrap();
        assert!(
            lock().is_empty(),
            "an urgent line writes out itself and what came before"
        );

        // The write itself happens with the buffer free for other threads.
        struct Probe(bool);
        impl Write for Probe {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                self.0 = BUFFER.try_lock().is_ok();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        LineWriter { urgent: false }.write_all(b"probe\n").unwrap();
        let mut probe = Probe(false);
        write_out(lock(), &mut probe);
        assert!(probe.0, "the buffer's lock is free during the write");
    }

    #[test]
    fn credentials_never_reach_the_output() {
        let line = b"ERROR rmcp: url: \"http://u:pw@h/mcp?token=T9&jwt=J9\" command: npx srv -p P9 TOKEN=K9\n";
        let text = String::from_utf8(without_credentials(line).into_owned()).unwrap();
        for secret in ["pw", "T9", "J9", "P9", "K9"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        assert!(text.contains("token=<redacted>&jwt=<redacted>"), "{text}");
        assert!(text.ends_with("-p <redacted> TOKEN=<redacted>\n"), "{text}");
        assert!(matches!(
            without_credentials(b"plain line a=b\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        // tracing's colours around a field's name and its `=`.
        let coloured = b"\x1b[2m2026\x1b[0m \x1b[33m WARN\x1b[0m x: m \x1b[3mpassword\x1b[0m\x1b[2m=\x1b[0m\"S9\" \x1b[3mn\x1b[0m\x1b[2m=\x1b[0m1\n";
        let text = String::from_utf8(without_credentials(coloured).into_owned()).unwrap();
        assert_eq!(text, "2026  WARN x: m password=\"<redacted>\" n=1\n");
        let uncoloured = b"\x1b[3mn\x1b[0m\x1b[2m=\x1b[0m1\n";
        assert!(matches!(
            without_credentials(uncoloured),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_worker_holds_at_most_max_pending_lines() {
        // On a thread of its own: the pending list is thread-local.
        std::thread::spawn(|| {
            let line = request_line::RequestLine {
                at: std::time::SystemTime::now(),
                provider: "p".into(),
                tenant: None,
                model: "m".into(),
                target: None,
                attempts: 0,
                route: "chat_completions",
                status: 200,
                stream: false,
                duration: Duration::from_millis(1),
                bytes_out: 0,
                complete: true,
                code: None,
                error: None,
                trace_id: None,
                request_id: None,
            };
            for _ in 1..MAX_PENDING {
                assert!(!hold(line.clone()));
            }
            assert!(hold(line), "the 256th line must be written at once");
        })
        .join()
        .unwrap();
    }
}

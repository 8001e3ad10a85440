//! Where log lines go: stderr, written when the runtime runs out of work.
//!
//! Every request logs one line (target [`REQUEST_TARGET`]). Written straight
//! to stderr, that is a write syscall per request, made while the request's
//! task still runs. Those lines are appended to a buffer instead, and the
//! buffer is written when a runtime worker is about to sleep ([`flush`] is
//! the runtime's `on_thread_park` hook), after the responses that produced
//! them have gone out. Under load many lines share one write; when idle, a
//! line is written as soon as its request is done. Every other line, and a
//! buffer past [`MAX_BUFFER`], is written at once (after what is buffered,
//! so the order holds).

use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard};

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// The target of the per-request log line, the only line that is buffered.
pub const REQUEST_TARGET: &str = "toolgate::request";

/// Buffered bytes beyond which lines are written without waiting.
const MAX_BUFFER: usize = 64 * 1024;

static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Writes out what is buffered. Called when a worker parks and before exit.
pub fn flush() {
    let buffer = lock();
    if !buffer.is_empty() {
        write_out(buffer, io::stderr().lock());
    }
}

/// A string from a client, a model or an upstream, for a log field: control
/// characters are escaped (`\n`, `\u{1b}`), so a model name cannot end the
/// line and forge another, nor drive the terminal.
pub struct Untrusted<'a>(pub &'a str);

impl std::fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_fmt(format_args!("{c}"))?;
            }
        }
        Ok(())
    }
}

fn lock() -> MutexGuard<'static, Vec<u8>> {
    // A panic while holding the lock leaves only log bytes behind; keep going.
    BUFFER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let mut buffer = lock();
        buffer.extend_from_slice(bytes);
        if self.urgent || buffer.len() >= MAX_BUFFER {
            write_out(buffer, io::stderr().lock());
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
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
    fn untrusted_strings_cannot_forge_lines() {
        let shown = Untrusted("gpt\nINFO forged line\u{1b}[31m").to_string();
        assert_eq!(shown, "gpt\\nINFO forged line\\u{1b}[31m");
        assert_eq!(Untrusted("modèle-1").to_string(), "modèle-1");
    }
}

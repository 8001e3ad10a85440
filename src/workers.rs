//! Thread per core: one single-threaded tokio runtime per worker thread, and
//! connections dealt out to them in turn.
//!
//! A connection stays on the worker that got it, with everything it opens:
//! its upstream connections (see [`crate::upstream::pool`]), its timers, its
//! repair requests. Nothing on a request's path wakes another thread, so no
//! futex wake-up or cross-core cache traffic per event. Under tokio's
//! work-stealing scheduler every readiness event could wake a sibling worker
//! to look for work; measured with `benches/load.sh`, this layout cut
//! toolgate's CPU per request by about a quarter at both concurrencies.
//!
//! The price is the one every thread-per-core server (nginx included) pays:
//! a worker busy with one connection does not hand its other connections to
//! an idle worker. toolgate's per-request work is microseconds, and
//! connections are dealt round-robin, so load stays even.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::thread::JoinHandle;

use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle, Runtime as TokioRuntime};
use tokio::sync::watch;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker running on this thread: 0 on the main thread and
/// on any thread not started here (tests, tokio's own threads).
pub fn current() -> usize {
    WORKER.with(Cell::get)
}

/// A single-threaded tokio runtime with toolgate's park hooks: buffered log
/// lines are written and freed memory is given back when the worker goes
/// idle. (Not [`crate::runtime::Runtime`], the configuration a reload swaps.)
pub fn tokio_runtime() -> io::Result<TokioRuntime> {
    Builder::new_current_thread()
        .enable_all()
        .on_thread_park(|| {
            crate::log_writer::on_park();
            crate::memory::release_if_due();
        })
        .build()
}

/// The worker threads besides the main one. Each blocks on its tokio
/// runtime until [`Workers::stop`].
pub struct Workers {
    handles: Vec<Handle>,
    threads: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl Workers {
    /// Starts `count` worker threads, numbered from 1 (the main thread is 0).
    pub fn start(count: usize) -> io::Result<Workers> {
        let (stop, stopped) = watch::channel(false);
        let mut workers = Workers {
            handles: Vec::with_capacity(count),
            threads: Vec::with_capacity(count),
            stop,
        };
        for index in 1..=count {
            let tokio_runtime = tokio_runtime()?;
            workers.handles.push(tokio_runtime.handle().clone());
            let mut stopped = stopped.clone();
            let thread = std::thread::Builder::new()
                .name(format!("toolgate-worker-{index}"))
                .spawn(move || {
                    WORKER.with(|w| w.set(index));
                    tokio_runtime.block_on(async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    });
                })?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// The tokio runtimes of the worker threads.
    pub fn handles(&self) -> Vec<Handle> {
        self.handles.clone()
    }

    /// Stops the worker threads (their remaining tasks are dropped) and waits
    /// for them. Call after the server drained.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// Deals accepted connections out in turn: to the tokio runtime the accept
/// loop runs on, then to each other worker.
pub struct Dealer {
    others: Vec<Handle>,
    next: usize,
}

impl Dealer {
    /// The current tokio runtime and `others` in turn.
    pub fn new(others: Vec<Handle>) -> Dealer {
        Dealer { others, next: 0 }
    }

    /// How many tokio runtimes connections are dealt to.
    pub fn len(&self) -> usize {
        self.others.len() + 1
    }

    /// Always at least the current tokio runtime.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Starts `task()` on every tokio runtime, this one included (a task per
    /// worker, such as its connections' sweep).
    pub fn on_each<F, Fut>(&self, task: F) -> Vec<tokio::task::JoinHandle<()>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut handles = vec![tokio::spawn(task())];
        handles.extend(self.others.iter().map(|h| h.spawn(task())));
        handles
    }

    /// Runs `serve` with `stream` on the next worker. A stream moved to
    /// another tokio runtime is registered with that runtime's reactor, so
    /// its readiness events wake that worker alone.
    pub fn spawn<F, Fut>(&mut self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let turn = self.next;
        self.next = (turn + 1) % (self.others.len() + 1);
        let Some(handle) = turn.checked_sub(1).map(|i| &self.others[i]) else {
            tokio::spawn(serve(stream));
            return;
        };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "cannot hand a connection to a worker");
                return;
            }
        };
        handle.spawn(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(e) => tracing::warn!(error = %e, "a worker cannot take a connection"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    /// Connections alternate between the accepting tokio runtime and the
    /// other worker, and a moved socket still works on its new one.
    #[tokio::test]
    async fn connections_are_dealt_in_turn_and_served_where_they_land() {
        let workers = Workers::start(1).unwrap();
        let mut dealer = Dealer::new(workers.handles());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut clients = Vec::new();
        for byte in [b'a', b'b', b'c'] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            dealer.spawn(server, move |mut stream| async move {
                let mut buf = [0u8; 1];
                stream.read_exact(&mut buf).await.unwrap();
                stream.write_all(&buf).await.unwrap();
                tx.send((current(), buf[0])).unwrap();
            });
            client.write_all(&[byte]).await.unwrap();
            let mut echo = [0u8; 1];
            client.read_exact(&mut echo).await.unwrap();
            assert_eq!(echo[0], byte);
            clients.push(client);
        }
        // Each connection reports from its own worker thread: the reports may
        // arrive in any order, but where each connection was served may not.
        let mut served = Vec::new();
        for _ in 0..3 {
            served.push(rx.recv().await.unwrap());
        }
        served.sort_by_key(|&(_, byte)| byte);
        assert_eq!(served, [(0, b'a'), (1, b'b'), (0, b'c')]);
        tokio::task::spawn_blocking(move || workers.stop())
            .await
            .unwrap();
    }
}

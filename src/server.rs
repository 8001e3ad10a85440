//! Accepting connections and draining them on shutdown.
//!
//! [`run`] takes its listener and a shutdown future as arguments so tests
//! bind port 0 and stop the server when they like. Each connection speaks
//! HTTP/1.1 or h2c (prior knowledge), detected from its first bytes.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::body::observed::Guard;
use crate::gateway::Gateway;
use crate::workers::Dealer;

mod conn;
pub mod layers;
mod sniff;
mod sweep;

pub use conn::InFlight;

/// After the grace period, how long ended streams get to flush their last event.
const FINAL_FLUSH: Duration = Duration::from_secs(2);
/// Largest request head accepted; hyper answers 431 beyond it.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The two protocol engines, configured once; cloned per connection.
#[derive(Clone)]
struct Engines {
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    layers: layers::Layers,
}

impl Engines {
    fn new(server: &crate::config::ServerConfig) -> Self {
        let mut http1 = http1::Builder::new();
        // Request heads are timed by the connection's sweep (`conn`), not
        // by a timer per request.
        http1
            .header_read_timeout(None)
            .max_buf_size(MAX_HEADER_BYTES);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            // A peer that stops answering pings is gone: free its streams.
            .keep_alive_interval(server.h2_keepalive)
            .keep_alive_timeout(server.h2_keepalive);
        Engines {
            http1,
            http2,
            layers: layers::Layers::new(server),
        }
    }

    /// Serves one connection, already past TLS, in the protocol it speaks.
    async fn serve<I>(
        &self,
        mut io: I,
        alpn_h2: Option<bool>,
        gateway: Arc<Gateway>,
        activity: Arc<conn::Activity>,
        watcher: Watcher,
    ) -> Result<(), BoxedError>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (protocol, prefix) = match alpn_h2 {
            Some(true) => (sniff::Protocol::Http2, Default::default()),
            Some(false) => (sniff::Protocol::Http1, Default::default()),
            None => sniff::sniff(&mut io).await?,
        };
        let tracked = activity.clone();
        let serve = move |req| {
            let gateway = gateway.clone();
            // Held until hyper drops the response body: the connection is busy until then.
            let in_flight = tracked.begin();
            async move { Ok::<_, Infallible>(gateway.serve(req, Some(Guard::new(in_flight))).await) }
        };
        let io = TokioIo::new(sniff::Rewound::new(prefix, io));
        // The CORS layer only when configured: otherwise hyper calls the
        // gateway straight, as it always did.
        match self.layers.around(tower::service_fn(serve.clone())) {
            Some(layered) => {
                let service = TowerToHyperService::new(layered);
                self.serve_with(io, protocol, &activity, watcher, service)
                    .await
            }
            None => {
                self.serve_with(io, protocol, &activity, watcher, service_fn(serve))
                    .await
            }
        }
    }

    /// Serves `io` as `protocol` with `service`.
    async fn serve_with<I, S>(
        &self,
        io: TokioIo<I>,
        protocol: sniff::Protocol,
        activity: &conn::Activity,
        watcher: Watcher,
        service: S,
    ) -> Result<(), BoxedError>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: hyper::service::Service<
                http::Request<hyper::body::Incoming>,
                Response = http::Response<crate::body::Body>,
                Error = Infallible,
            > + Send
            + 'static,
        S::Future: Send + 'static,
    {
        match protocol {
            sniff::Protocol::Http1 => {
                activity.set_http1();
                let conn = self.http1.serve_connection(io, service);
                watcher.watch(conn).await?;
            }
            sniff::Protocol::Http2 => {
                // Boxed: HTTP/2's connection state is several times
                // HTTP/1.1's, and a task is as large as its largest branch.
                let conn = self.http2.serve_connection(io, service);
                Box::pin(watcher.watch(conn)).await?;
            }
        }
        Ok(())
    }
}

type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// Serves until `shutdown` resolves, then stops accepting, marks the gateway
/// as draining and waits up to the configured grace period for in-flight
/// requests before returning.
///
/// Connections go to the runtimes of `dealer` in turn (see [`crate::workers`]).
pub async fn run(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    mut dealer: Dealer,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let engines = Engines::new(&gateway.config().server);
    let graceful = GracefulShutdown::new();
    let upkeep = tokio::spawn(metrics_upkeep(gateway.clone()));
    let sweep = sweep::Sweep::new(dealer.len());
    let sweepers = dealer.on_each(|| sweep.clone().run());
    tokio::pin!(shutdown);
    tracing::info!(addr = %listener.local_addr()?, "toolgate listening");
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Usually EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        // Read per connection, so a reload's new certificate and timeouts apply to new connections.
        let server = gateway.config().server.clone();
        let engines = engines.clone();
        let watcher = graceful.watcher();
        let sweep = sweep.clone();
        dealer.spawn(stream, move |stream| async move {
            let activity = conn::Activity::new(conn::Limits::of(&server));
            // The first-request deadline covers the TLS handshake and the protocol sniff.
            sweep.register(&activity);
            let stream = conn::Io::new(stream, activity.clone());
            let served = conn::serve(
                async {
                    match server.tls {
                        None => {
                            engines
                                .serve(stream, None, gateway, activity.clone(), watcher)
                                .await
                        }
                        // Boxed, as above: the handshake and the TLS stream
                        // would make every plain connection's task as large.
                        Some(config) => {
                            Box::pin(async {
                                match TlsAcceptor::from(config).accept(stream).await {
                                    Ok(tls) => {
                                        let h2 =
                                            tls.get_ref().1.alpn_protocol().map(|p| p == b"h2");
                                        engines
                                            .serve(tls, h2, gateway, activity.clone(), watcher)
                                            .await
                                    }
                                    Err(e) => Err(e.into()),
                                }
                            })
                            .await
                        }
                    }
                },
                &activity,
            )
            .await;
            match served {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended with an error"),
                Err(closed) => tracing::debug!(%peer, ?closed, "connection closed by its deadline"),
            }
        });
    }
    drop(listener);
    gateway.start_draining();
    let grace = gateway.config().server.shutdown_grace;
    let open = graceful.count();
    tracing::info!(
        open_connections = open,
        grace_secs = grace.as_secs_f64(),
        "draining"
    );
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        () = &mut drained => tracing::info!("drained"),
        () = tokio::time::sleep(grace) => {
            // Streams still open get an error event and `[DONE]` at their
            // next event boundary; then their connections close.
            tracing::warn!("grace period over; ending the streams still open");
            gateway.expire_streams();
            if tokio::time::timeout(FINAL_FLUSH, &mut drained).await.is_err() {
                tracing::warn!("closing connections that did not finish");
            }
        }
    }
    upkeep.abort();
    for sweeper in sweepers {
        sweeper.abort();
    }
    Ok(())
}

/// The Prometheus recorder needs periodic upkeep to drain histogram buffers.
async fn metrics_upkeep(gateway: Arc<Gateway>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        gateway.metrics().run_upkeep();
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}

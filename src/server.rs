//! Accepting connections and draining them on shutdown.
//!
//! [`run`] takes its listener and a shutdown future as arguments so tests
//! bind port 0 and stop the server when they like. Each connection speaks
//! HTTP/1.1 or h2c (prior knowledge), detected from its first bytes.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::body;
use crate::gateway::Gateway;
use crate::workers::Dealer;

mod conn;

/// After the grace period, how long ended streams get to flush their last event.
const FINAL_FLUSH: Duration = Duration::from_secs(2);
/// Largest request head accepted; hyper answers 431 beyond it.
const MAX_HEADER_BYTES: usize = 64 * 1024;

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
    let mut builder = auto::Builder::new(TokioExecutor::new());
    let server = gateway.config().server.clone();
    builder
        .http1()
        // Without a timer the header-read timeout silently does nothing.
        .timer(TokioTimer::new())
        .header_read_timeout(server.request_head_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        // A peer that stops answering pings is gone: free its streams.
        .keep_alive_interval(server.h2_keepalive)
        .keep_alive_timeout(server.h2_keepalive);
    let graceful = GracefulShutdown::new();
    let upkeep = tokio::spawn(metrics_upkeep(gateway.clone()));
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
        let gw = gateway.clone();
        let activity = conn::Activity::new();
        let tracked = activity.clone();
        let service = service_fn(move |req| {
            let gw = gw.clone();
            // Held until hyper drops the response body: the connection is busy until then.
            let in_flight = tracked.begin();
            async move {
                let response = gw.handle(req).await;
                Ok::<_, Infallible>(response.map(|b| {
                    body::boxed(http_body_util::BodyExt::map_frame(b, move |frame| {
                        let _busy = &in_flight;
                        frame
                    }))
                }))
            }
        });
        // Read per connection, so a reload's new certificate and timeouts apply to new connections.
        let server = gateway.config().server.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        dealer.spawn(stream, move |stream| async move {
            let (first, idle) = (server.request_head_timeout, server.idle_timeout);
            let stream = conn::StallIo::new(stream, server.write_stall_timeout);
            // The first-request deadline covers the TLS handshake and the protocol sniff.
            let served = conn::serve(
                async {
                    match server.tls {
                        None => {
                            let conn = builder.serve_connection(TokioIo::new(stream), service);
                            watcher.watch(conn.into_owned()).await
                        }
                        Some(config) => match TlsAcceptor::from(config).accept(stream).await {
                            Ok(tls) => {
                                let conn = builder.serve_connection(TokioIo::new(tls), service);
                                watcher.watch(conn.into_owned()).await
                            }
                            Err(e) => Err(e.into()),
                        },
                    }
                },
                &activity,
                first,
                idle,
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

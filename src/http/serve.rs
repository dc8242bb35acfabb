//! The HTTP listener: accepts TCP connections and serves an axum app on each with
//! hyper, with the connection timeouts `axum::serve` leaves unset.
//!
//! hyper's HTTP/1 `header_read_timeout` only runs when the connection has a timer;
//! `axum::serve` gives it none, so a client that sends half a request line (or
//! nothing) holds its socket and file descriptor forever ("slowloris"). Here every
//! connection gets a [`TokioTimer`], so:
//! - a request's headers must arrive within `header_read_timeout`, which also
//!   bounds how long an idle keep-alive connection stays open (hyper starts the
//!   same timer while it waits for the next request);
//! - its body must arrive within `body_read_timeout` (tower-http's
//!   `RequestBodyTimeoutLayer`, added by [`super::app`]).
//!
//! Response streams (SSE) are not bounded by either: a connection stops reading
//! while it writes a response.
//!
//! Half-closed connections are served (`half_close(true)`): HTTP/1.1 lets a
//! client shut down its sending side once its request is complete and still
//! read the answer. Without this hyper takes the end of input while a response
//! is pending as an aborted exchange and drops it, so the call runs at the
//! backend and its host never hears of it. A peer that really went away is found
//! when a write fails (the answer, or at the latest an SSE keep-alive); its calls
//! go on and their events stay in the session's log for `Last-Event-ID`
//! resumption, since a disconnect is not a cancellation (MCP transports).
//!
//! HTTP/1.1 only. hyper-util's automatic HTTP/1-or-2 detection first waits for
//! the 24-byte HTTP/2 preface with no timer at all, so a client sending `PRI` and
//! nothing more would stall it; hosts reach the endpoint over HTTP/1.1, and
//! HTTP/2 from browsers ends at the TLS-terminating load balancer.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

/// Pause after a failed `accept` (typically `EMFILE`: out of file descriptors),
/// so that the loop does not spin while connections drain.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `stop` is cancelled, then stops accepting,
/// lets every connection finish its current exchange (hyper graceful shutdown:
/// idle keep-alive connections close at once) and returns when all are gone.
/// Callers bound that wait with their own timeout.
///
/// Each request carries the peer address as `ConnectInfo<SocketAddr>`, as with
/// axum's `into_make_service_with_connect_info`.
pub async fn serve<S>(
    listener: TcpListener,
    app: S,
    header_read_timeout: Duration,
    stop: CancellationToken,
) where
    S: Service<
            axum::http::Request<Incoming>,
            Response = axum::response::Response,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .half_close(true);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |mut req: axum::http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, cause = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

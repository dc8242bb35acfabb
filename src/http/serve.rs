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
//! - its body must arrive within `body_read_timeout` (`body_timeout`'s
//!   layer, added by [`super::app`]).
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
//! The application is a [`LiveApp`]: each request goes to the router in force
//! when it arrives, so a reload (new routes, limits, rules) applies from the
//! next request on, on connections already open too; a request in progress
//! finishes with the generation it started with. The header read timeout is
//! read per accepted connection. It counts the requests it is answering (from
//! arrival to the response head, [`LiveApp::answering`]), so that a shutdown can
//! tell when no request is left that could still reach a backend.
//!
//! HTTP/1.1 only. hyper-util's automatic HTTP/1-or-2 detection first waits for
//! the 24-byte HTTP/2 preface with no timer at all, so a client sending `PRI` and
//! nothing more would stall it; hosts reach the endpoint over HTTP/1.1, and
//! HTTP/2 from browsers ends at the TLS-terminating load balancer.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router as AxumRouter;
use axum::extract::ConnectInfo;
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::Service;

/// Pause after a failed `accept` (typically `EMFILE`: out of file descriptors),
/// so that the loop does not spin while connections drain.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The application a listener serves, replaceable while it serves: a router, or
/// a service around one (the server face, [`super::Face`]).
pub struct LiveApp<S = AxumRouter> {
    app: ArcSwap<S>,
    /// Requests between their arrival and their response head.
    answering: AtomicUsize,
}

impl<S> LiveApp<S> {
    /// Serves `app` until it is replaced.
    pub fn new(app: S) -> Arc<LiveApp<S>> {
        Arc::new(LiveApp {
            app: ArcSwap::from_pointee(app),
            answering: AtomicUsize::new(0),
        })
    }

    /// Requests that arrive from now on go to `app`.
    pub fn replace(&self, app: S) {
        self.app.store(Arc::new(app));
    }

    /// How many requests have arrived and not yet got their response head (an
    /// SSE answer counts until its head is sent, not while it streams). A
    /// request counted here may still start a backend call; once the listener
    /// is stopped and this is 0, no new call can start.
    pub fn answering(&self) -> usize {
        self.answering.load(Ordering::Acquire)
    }
}

/// The future of one request, counted in [`LiveApp::answering`] until it
/// resolves or is dropped.
struct Answering<F, S> {
    inner: F,
    app: Arc<LiveApp<S>>,
}

impl<F: Future + Unpin, S> Future for Answering<F, S> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.inner).poll(cx)
    }
}

impl<F, S> Drop for Answering<F, S> {
    fn drop(&mut self) {
        self.app.answering.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What [`serve`] can serve: a cloneable service of hyper requests that
/// answers every one (errors are responses).
pub trait App:
    Service<
        axum::http::Request<Incoming>,
        Response = Response,
        Error = Infallible,
        Future: Send + Unpin + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> App for S where
    S: Service<
            axum::http::Request<Incoming>,
            Response = Response,
            Error = Infallible,
            Future: Send + Unpin + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// One connection's service: the application in force per request (an
/// `ArcSwap` load and a clone: the cost of the reload), with the peer address.
struct Current<S> {
    app: Arc<LiveApp<S>>,
    peer: SocketAddr,
}

impl<S> Clone for Current<S> {
    fn clone(&self) -> Self {
        Current {
            app: self.app.clone(),
            peer: self.peer,
        }
    }
}

impl<S: App> Service<axum::http::Request<Incoming>> for Current<S> {
    type Response = Response;
    type Error = Infallible;
    type Future = Answering<S::Future, S>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: axum::http::Request<Incoming>) -> Self::Future {
        req.extensions_mut()
            .insert(ConnectInfo::<SocketAddr>(self.peer));
        let mut app = S::clone(&self.app.app.load());
        self.app.answering.fetch_add(1, Ordering::AcqRel);
        Answering {
            inner: app.call(req),
            app: self.app.clone(),
        }
    }
}

/// Serves `app` on `listener` until `stop` is cancelled, then stops accepting,
/// lets every connection finish its current exchange (hyper graceful shutdown:
/// idle keep-alive connections close at once) and returns when all are gone.
/// Callers bound that wait with their own timeout. `header_read_timeout` is
/// asked once per accepted connection (a reload may change it).
///
/// Each request carries the peer address as `ConnectInfo<SocketAddr>`, as with
/// axum's `into_make_service_with_connect_info`.
pub async fn serve<S: App>(
    listener: TcpListener,
    app: Arc<LiveApp<S>>,
    header_read_timeout: impl Fn() -> Duration,
    stop: CancellationToken,
) {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).half_close(true);
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
        let service = Current {
            app: app.clone(),
            peer,
        };
        builder.header_read_timeout(header_read_timeout());
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

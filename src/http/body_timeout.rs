//! The request body read timeout (`server.body_read_timeout`): the rest of a
//! request body must arrive within the timeout, counted from the first time
//! the body keeps its reader waiting; otherwise reading fails with
//! [`BodyTimedOut`] (`accept::read_body` answers 408). A deadline for the
//! whole body, not per frame: a body trickled a byte at a time (slowloris)
//! is cut at the timeout too.
//!
//! tower-http's `RequestBodyTimeoutLayer` bounds only the wait for each frame
//! (so a trickle is never cut) and starts a timer (a clock read, a timer-wheel
//! entry and its removal) for every frame before it looks at the body: a small
//! body that hyper already holds cost two timers per request, ~1,500
//! instructions (`bench/README.md`, 2026-12-07 perf7). Here the body is polled
//! first and the one timer is started only when it is not ready.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::http::Request;
use hyper::body::{Body, Frame};
use tokio::time::Sleep;

/// Wraps each request's body in a [`TimeoutBody`] of `timeout`.
#[derive(Clone, Copy, Debug)]
pub struct BodyTimeoutLayer(Duration);

impl BodyTimeoutLayer {
    /// A request body may keep its reader waiting at most `timeout` in all,
    /// counted from the first wait.
    pub fn new(timeout: Duration) -> Self {
        BodyTimeoutLayer(timeout)
    }
}

impl<S> tower::Layer<S> for BodyTimeoutLayer {
    type Service = BodyTimeout<S>;

    fn layer(&self, inner: S) -> BodyTimeout<S> {
        BodyTimeout {
            inner,
            timeout: self.0,
        }
    }
}

/// The service of [`BodyTimeoutLayer`]: `inner` gets the request with its body
/// wrapped.
#[derive(Clone, Debug)]
pub struct BodyTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> tower::Service<Request<B>> for BodyTimeout<S>
where
    S: tower::Service<Request<TimeoutBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        let (parts, body) = req.into_parts();
        let body = TimeoutBody {
            body,
            timeout: self.timeout,
            sleep: None,
        };
        self.inner.call(Request::from_parts(parts, body))
    }
}

/// A request body whose reader waits at most `timeout` for the rest of it,
/// counted from the first wait.
pub struct TimeoutBody<B> {
    body: B,
    timeout: Duration,
    /// The deadline, armed the first time the body keeps the reader waiting
    /// and kept for the rest of it (boxed: only then).
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Body for TimeoutBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            if frame.is_none() {
                // The body is complete: its deadline no longer matters.
                this.sleep = None;
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A request body did not arrive within `server.body_read_timeout`.
#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive within server.body_read_timeout")
    }
}

impl std::error::Error for BodyTimedOut {}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};

    #[tokio::test(start_paused = true)]
    async fn a_ready_body_needs_no_timer_and_a_stalled_one_times_out() {
        let ready = TimeoutBody {
            body: http_body_util::Full::new(Bytes::from_static(b"{}")),
            timeout: Duration::from_secs(1),
            sleep: None,
        };
        let got = ready.collect().await.map(|c| c.to_bytes());
        assert_eq!(got.ok(), Some(Bytes::from_static(b"{}")));

        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
        let stalled = TimeoutBody {
            body: StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            timeout: Duration::from_secs(1),
            sleep: None,
        };
        tx.send(Ok(Frame::data(Bytes::from_static(b"{"))))
            .await
            .ok();
        let started = tokio::time::Instant::now();
        let Err(err) = stalled.collect().await else {
            panic!("a stalled body times out");
        };
        assert!(err.is::<BodyTimedOut>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        drop(tx);
    }

    /// `server.body_read_timeout` is how long the whole body may take once it
    /// keeps the reader waiting: a body trickled a byte every half timeout
    /// (what a slowloris upload does) is cut at the timeout, not read forever.
    #[tokio::test(start_paused = true)]
    async fn a_trickled_body_is_cut_at_the_timeout() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
        let trickled = TimeoutBody {
            body: StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            timeout: Duration::from_secs(1),
            sleep: None,
        };
        let sender = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if tx
                    .send(Ok(Frame::data(Bytes::from_static(b" "))))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        let started = tokio::time::Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(10), trickled.collect()).await;
        let Ok(Err(err)) = got else {
            panic!("a trickled body is cut at the timeout, not read for 10 s");
        };
        assert!(err.is::<BodyTimedOut>(), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        sender.abort();
    }
}

//! Answers to hosts: one JSON body, or an SSE stream flushed per event.
//!
//! SSE framing is written here rather than with `axum::response::sse` because the
//! 2025-11-25 priming event (SEP-1699) is an event with an id and an *empty* data
//! field, which axum's writer omits. Every event carries an id `{stream}-{seq}`,
//! unique within the session and naming its stream (MCP 2025-11-25 transports,
//! resumability). Idle streams get `: keep-alive` comments so load balancers do not
//! cut long tool calls , and responses carry `X-Accel-Buffering: no` .

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use crate::metrics::Metrics;
use crate::session::{Attached, Frame, Outbound, Session, StreamSlot};

/// Reconnection delay announced to hosts in the priming event (`retry`, ms).
const RETRY_MS: u64 = 1000;

/// A `200 application/json` response with `body`.
pub fn json_response(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn frame(f: &Frame) -> Bytes {
    let mut b = BytesMut::with_capacity(f.data.len() + 48);
    b.put_slice(format!("id: {}-{}\n", f.stream, f.seq).as_bytes());
    if f.seq == 0 && f.data.is_empty() {
        b.put_slice(format!("retry: {RETRY_MS}\n").as_bytes());
    }
    b.put_slice(b"data: ");
    b.put_slice(&f.data);
    b.put_slice(b"\n\n");
    b.freeze()
}

/// A `200 text/event-stream` response: the priming event (when `prime`), the
/// `replay` frames, then live frames until the stream's last event or until the
/// event log detaches it.
///
/// `slot` is the session's stream slot this stream holds until it ends.
pub fn sse_response(
    slot: StreamSlot,
    prime: bool,
    attached: Attached,
    keep_alive: Duration,
    metrics: &Arc<Metrics>,
) -> Response {
    struct State {
        queued: VecDeque<Frame>,
        live: Option<mpsc::Receiver<Frame>>,
        tick: tokio::time::Interval,
        done: bool,
        open: OpenStream,
    }
    let mut queued: VecDeque<Frame> = attached.replay.into();
    if prime {
        queued.push_front(Frame {
            stream: attached.stream,
            seq: 0,
            data: Bytes::new(),
            last: false,
        });
    }
    let mut tick = interval_at(Instant::now() + keep_alive, keep_alive);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        queued,
        live: attached.live,
        tick,
        done: false,
        open: OpenStream::new(metrics, slot),
    };
    let body = stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let next = match st.queued.pop_front() {
            Some(f) => f,
            None => {
                let live = st.live.as_mut()?;
                tokio::select! {
                    f = live.recv() => f?,
                    _ = st.tick.tick() => {
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                }
            }
        };
        st.tick.reset();
        st.done = next.last;
        let bytes = frame(&next);
        st.open.metrics.bytes_out.inc_by(bytes.len() as u64);
        Some((Ok::<Bytes, std::io::Error>(bytes), st))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Answers a routed host request: waits up to `window` for the first message;
/// if it is the response, answers `application/json`, otherwise (related messages
/// first, or a slow backend) switches to an SSE stream recorded in the session's
/// event log, so the host can resume it after a disconnect.
///
/// `slot` is freed at once for a JSON answer and held by an SSE stream.
pub async fn stream_reply(
    mut rx: mpsc::Receiver<Outbound>,
    session: &Arc<Session>,
    slot: StreamSlot,
    window: Duration,
    keep_alive: Duration,
    metrics: &Arc<Metrics>,
) -> Response {
    let first = match tokio::time::timeout(window, rx.recv()).await {
        Ok(Some(Outbound::Final(body))) => {
            metrics.bytes_out.inc_by(body.len() as u64);
            return json_response(body);
        }
        Ok(Some(m)) => Some(m),
        Ok(None) | Err(_) => None,
    };
    let (stream, live) = session.events().open();
    tokio::spawn(pump(session.clone(), stream, first, rx));
    let attached = Attached {
        stream,
        replay: Vec::new(),
        live: Some(live),
    };
    sse_response(
        slot,
        session.version().primes_streams(),
        attached,
        keep_alive,
        metrics,
    )
}

/// Counts an open SSE stream (the global gauge) and holds its session's stream
/// slot while its body lives.
struct OpenStream {
    metrics: Arc<Metrics>,
    _slot: StreamSlot,
}

impl OpenStream {
    fn new(metrics: &Arc<Metrics>, slot: StreamSlot) -> Self {
        metrics.sse_streams_open.inc();
        OpenStream {
            metrics: metrics.clone(),
            _slot: slot,
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.metrics.sse_streams_open.dec();
    }
}

/// Moves a host call's messages into the session's event log. It outlives the
/// HTTP response, so a host that disconnects can resume (a disconnect is not a
/// cancellation).
async fn pump(
    session: Arc<Session>,
    stream: u64,
    first: Option<Outbound>,
    mut rx: mpsc::Receiver<Outbound>,
) {
    let mut next = first;
    loop {
        let m = match next.take() {
            Some(m) => m,
            None => match rx.recv().await {
                Some(m) => m,
                None => {
                    // Cancelled by the host: the stream ends without a response.
                    session.events().finish(stream);
                    return;
                }
            },
        };
        match m {
            Outbound::Message(b) => session.events().push(stream, b, false),
            Outbound::Final(b) => {
                session.events().push(stream, b, true);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(seq: u64, data: &'static [u8]) -> Frame {
        Frame {
            stream: 3,
            seq,
            data: Bytes::from_static(data),
            last: false,
        }
    }

    #[test]
    fn frames_events() {
        assert_eq!(&frame(&f(0, b""))[..], b"id: 3-0\nretry: 1000\ndata: \n\n");
        assert_eq!(
            &frame(&f(1, br#"{"a":1}"#))[..],
            b"id: 3-1\ndata: {\"a\":1}\n\n"
        );
    }
}

//! Answers to hosts: one JSON body, or an SSE stream flushed per event.
//!
//! SSE framing is written here rather than with `axum::response::sse` because the
//! 2025-11-25 priming event (SEP-1699) is an event with an id and an *empty* data
//! field, which axum's writer omits. Every event carries an id `{stream}-{seq}`,
//! unique within the session and naming its stream (MCP 2025-11-25 transports,
//! resumability). Idle streams get `: keep-alive` comments so load balancers do not
//! cut long tool calls (BR-06), and responses carry `X-Accel-Buffering: no` (BR-05).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use crate::session::{Outbound, Session};

/// How an SSE stream is framed.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// Stream number within the session (first half of every event id).
    pub stream: u64,
    /// Send a priming event first (hosts on 2025-11-25).
    pub prime: bool,
    /// Keep-alive comment interval.
    pub keep_alive: Duration,
    /// Whether the stream ends after the response (POST streams) or stays open
    /// until the sender goes away (the GET stream).
    pub ends_with_response: bool,
}

/// A `200 application/json` response with `body`.
pub fn json_response(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn frame(id: Option<&str>, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + 32);
    if let Some(id) = id {
        b.put_slice(b"id: ");
        b.put_slice(id.as_bytes());
        b.put_u8(b'\n');
    }
    b.put_slice(b"data: ");
    b.put_slice(data);
    b.put_slice(b"\n\n");
    b.freeze()
}

/// A `200 text/event-stream` response: `first` (already received) then whatever
/// arrives on `rx`.
pub fn sse_response(
    first: Vec<Outbound>,
    rx: mpsc::Receiver<Outbound>,
    spec: StreamSpec,
) -> Response {
    struct State {
        rx: mpsc::Receiver<Outbound>,
        queued: std::collections::VecDeque<Outbound>,
        tick: tokio::time::Interval,
        stream: u64,
        seq: u64,
        prime: bool,
        done: bool,
        ends_with_response: bool,
    }
    let mut tick = interval_at(Instant::now() + spec.keep_alive, spec.keep_alive);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        rx,
        queued: first.into(),
        tick,
        stream: spec.stream,
        seq: 0,
        prime: spec.prime,
        done: false,
        ends_with_response: spec.ends_with_response,
    };
    let body = stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        if st.prime {
            st.prime = false;
            let id = format!("{}-{}", st.stream, st.seq);
            st.seq += 1;
            return Some((Ok::<Bytes, std::io::Error>(frame(Some(&id), b"")), st));
        }
        let next = match st.queued.pop_front() {
            Some(m) => Some(m),
            None => {
                tokio::select! {
                    m = st.rx.recv() => m,
                    _ = st.tick.tick() => {
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                }
            }
        };
        let (data, last) = match next? {
            Outbound::Message(b) => (b, false),
            Outbound::Final(b) => (b, st.ends_with_response),
        };
        st.tick.reset();
        let id = format!("{}-{}", st.stream, st.seq);
        st.seq += 1;
        st.done = last;
        Some((Ok(frame(Some(&id), &data)), st))
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
/// first, or a slow backend) switches to an SSE stream so they arrive as they come.
pub async fn stream_reply(
    mut rx: mpsc::Receiver<Outbound>,
    session: &Session,
    window: Duration,
    keep_alive: Duration,
) -> Response {
    let first = match tokio::time::timeout(window, rx.recv()).await {
        Ok(Some(Outbound::Final(body))) => return json_response(body),
        Ok(Some(m)) => vec![m],
        Ok(None) | Err(_) => Vec::new(),
    };
    sse_response(
        first,
        rx,
        StreamSpec {
            stream: session.next_stream(),
            prime: session.version.primes_streams(),
            keep_alive,
            ends_with_response: true,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_events() {
        assert_eq!(&frame(Some("3-0"), b"")[..], b"id: 3-0\ndata: \n\n");
        assert_eq!(
            &frame(Some("3-1"), br#"{"a":1}"#)[..],
            b"id: 3-1\ndata: {\"a\":1}\n\n"
        );
    }
}

//! Per-session SSE streams for Streamable HTTP: event ids, replay buffers, live connections.
//!
//! MCP 2025-11-25 basic/transports: each POST that is answered with SSE gets its own
//! stream; stream 0 is the standalone GET stream. Event ids are `<stream>_<seq>`, unique
//! within the session and naming their stream, so a `Last-Event-ID` resumes exactly that
//! stream and never replays another's messages ("Resumability and Redelivery"). A
//! stream outlives its HTTP connection: messages sent while no connection is attached are
//! buffered and replayed on reconnection (SEP-1699 polling).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use tokio::sync::mpsc;

use crate::demo::server::{Route, Sink, lock};
use mcpgate::jsonrpc::Id;

/// The standalone (GET) stream's number.
const STANDALONE: u64 = 0;
/// Finished request streams kept for late resumption.
const KEPT_FINISHED: usize = 32;
/// Events the standalone stream keeps for resumption.
const STANDALONE_BUFFER: usize = 256;

type Sender = mpsc::UnboundedSender<Bytes>;
/// The receiving end of one SSE connection.
pub(crate) type Receiver = mpsc::UnboundedReceiver<Bytes>;

/// Why a `Last-Event-ID` cannot be resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResumeError {
    /// Not of the form `<stream>_<seq>`.
    #[error("malformed Last-Event-ID")]
    Malformed,
    /// The stream is unknown or was already forgotten.
    #[error("unknown or expired Last-Event-ID")]
    Unknown,
}

/// The SSE streams of one session; also the session's [`Sink`].
pub(crate) struct Streams {
    state: Mutex<State>,
    retry: Duration,
    /// Whether to send priming events (negotiated revision ≥ 2025-11-25: older clients
    /// cannot digest an event with empty data).
    priming: AtomicBool,
}

#[derive(Default)]
struct State {
    next_stream: u64,
    streams: HashMap<u64, Stream>,
    by_request: HashMap<Id, u64>,
    finished: VecDeque<u64>,
    closed: bool,
}

struct Stream {
    /// `(seq, framed event)` for replay.
    events: VecDeque<(u64, Bytes)>,
    next_seq: u64,
    /// Attached connections: at most one for a request stream, any number for stream 0
    /// (each message goes to the newest one only).
    live: Vec<Sender>,
    done: bool,
}

impl Default for Stream {
    /// Sequence numbers start at 1: `<stream>_0` is the priming event's id.
    fn default() -> Self {
        Stream {
            events: VecDeque::new(),
            next_seq: 1,
            live: Vec::new(),
            done: false,
        }
    }
}

impl Stream {
    fn push(&mut self, number: u64, message: &[u8]) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let framed = frame(&format!("{number}_{seq}"), None, message);
        self.events.push_back((seq, framed.clone()));
        if number == STANDALONE && self.events.len() > STANDALONE_BUFFER {
            self.events.pop_front();
        }
        while let Some(conn) = self.live.last() {
            if conn.send(framed.clone()).is_ok() {
                break;
            }
            self.live.pop();
        }
    }
}

/// Formats one SSE event. `data` is compact JSON (no raw newlines), but lines are split
/// anyway so that any text stays one event.
pub(crate) fn frame(id: &str, retry: Option<Duration>, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + id.len() + 32);
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(id.as_bytes());
    out.push(b'\n');
    if let Some(retry) = retry {
        out.extend_from_slice(format!("retry: {}\n", retry.as_millis()).as_bytes());
    }
    for line in data.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
    }
    out.push(b'\n');
    Bytes::from(out)
}

impl Streams {
    pub(crate) fn new(retry: Duration) -> Self {
        Streams {
            state: Mutex::new(State {
                next_stream: STANDALONE + 1,
                ..State::default()
            }),
            retry,
            priming: AtomicBool::new(false),
        }
    }

    /// Enables priming events once the session negotiated 2025-11-25 or later.
    pub(crate) fn set_priming(&self, on: bool) {
        self.priming.store(on, Ordering::Relaxed);
    }

    /// The priming event (SEP-1699): an id and empty data, plus the `retry` advice.
    fn priming_frame(&self, id: &str) -> Option<Bytes> {
        self.priming
            .load(Ordering::Relaxed)
            .then(|| frame(id, Some(self.retry), b""))
    }

    /// Opens the stream that will carry request `id`'s related messages and response.
    /// `None` if a stream for that id is already open (a reused request id).
    pub(crate) fn open_request(&self, id: &Id) -> Option<Receiver> {
        let mut st = lock(&self.state);
        if st.closed || st.by_request.contains_key(id) {
            return None;
        }
        let number = st.next_stream;
        st.next_stream += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(p) = self.priming_frame(&format!("{number}_0")) {
            let _ = tx.send(p);
        }
        let mut stream = Stream::default();
        stream.live.push(tx);
        st.streams.insert(number, stream);
        st.by_request.insert(id.clone(), number);
        Some(rx)
    }

    /// Ends request `id`'s stream, after its response if there is one (none when the
    /// request was cancelled). Its connection closes; the stream stays resumable for a while.
    pub(crate) fn finish(&self, id: &Id, response: Option<Vec<u8>>) {
        let mut st = lock(&self.state);
        let Some(number) = st.by_request.remove(id) else {
            return;
        };
        if let Some(stream) = st.streams.get_mut(&number) {
            if let Some(response) = response {
                stream.push(number, &response);
            }
            stream.done = true;
            stream.live.clear();
        }
        st.finished.push_back(number);
        while st.finished.len() > KEPT_FINISHED {
            if let Some(old) = st.finished.pop_front() {
                st.streams.remove(&old);
            }
        }
    }

    /// Attaches a new connection to the standalone stream (a GET without `Last-Event-ID`).
    pub(crate) fn open_standalone(&self) -> Receiver {
        let mut st = lock(&self.state);
        let (tx, rx) = mpsc::unbounded_channel();
        if st.closed {
            return rx;
        }
        let stream = st.streams.entry(STANDALONE).or_default();
        if let Some(p) = self.priming_frame(&format!("{STANDALONE}_{}", stream.next_seq - 1)) {
            let _ = tx.send(p);
        }
        stream.live.push(tx);
        rx
    }

    /// Resumes the stream named by `last_event_id` on a new connection: replays what came
    /// after it, then stays attached unless the stream is finished.
    pub(crate) fn resume(&self, last_event_id: &str) -> Result<Receiver, ResumeError> {
        let (number, seq) = last_event_id
            .split_once('_')
            .and_then(|(n, s)| Some((n.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
            .ok_or(ResumeError::Malformed)?;
        let mut st = lock(&self.state);
        let stream = st.streams.get_mut(&number).ok_or(ResumeError::Unknown)?;
        let (tx, rx) = mpsc::unbounded_channel();
        for (_, framed) in stream.events.iter().filter(|(s, _)| *s > seq) {
            let _ = tx.send(framed.clone());
        }
        if !stream.done {
            if number != STANDALONE {
                // A request stream has one connection: the new one replaces the old.
                stream.live.clear();
            }
            stream.live.push(tx);
        }
        Ok(rx)
    }

    /// `true` if some connection is attached (the client is listening).
    pub(crate) fn has_live(&self) -> bool {
        lock(&self.state)
            .streams
            .values()
            .any(|s| s.live.iter().any(|c| !c.is_closed()))
    }

    /// Closes every connection and forgets every stream (session end).
    pub(crate) fn close_all(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        st.streams.clear();
        st.by_request.clear();
    }
}

impl Sink for Streams {
    fn send(&self, route: &Route, message: Vec<u8>) {
        let mut st = lock(&self.state);
        let number = match route {
            Route::Related(id) => st.by_request.get(id).copied().unwrap_or(STANDALONE),
            Route::Unrelated => STANDALONE,
        };
        match st.streams.get_mut(&number) {
            Some(stream) if !stream.done => stream.push(number, &message),
            _ => tracing::debug!(stream = number, "no open SSE stream; message dropped"),
        }
    }

    /// Detaches the connection of `request`'s stream so the client polls back with
    /// `Last-Event-ID`. Only done when the client got a priming event (it has an id to
    /// resume from).
    fn close_stream(&self, request: &Id) {
        if !self.priming.load(Ordering::Relaxed) {
            return;
        }
        let mut st = lock(&self.state);
        if let Some(number) = st.by_request.get(request).copied()
            && let Some(stream) = st.streams.get_mut(&number)
        {
            stream.live.clear();
        }
    }
}

/// An SSE response body: the connection's frames, with a comment line every
/// `keep_alive` so that idle proxies keep it open. Ends when the stream detaches it.
pub(crate) fn sse_body(rx: Receiver, keep_alive: Duration) -> Body {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keep_alive, keep_alive);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let frames = stream::unfold((rx, ticker), |(mut rx, mut ticker)| async move {
        let next = tokio::select! {
            frame = rx.recv() => frame?,
            _ = ticker.tick() => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok::<_, Infallible>(next), (rx, ticker)))
    });
    Body::from_stream(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(rx: &mut Receiver) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(b) = rx.try_recv() {
            out.push(String::from_utf8_lossy(&b).into_owned());
        }
        out
    }

    #[test]
    fn frames_events() {
        assert_eq!(&frame("1_2", None, b"{}")[..], b"id: 1_2\ndata: {}\n\n");
        assert_eq!(
            &frame("1_0", Some(Duration::from_millis(500)), b"")[..],
            b"id: 1_0\nretry: 500\ndata: \n\n"
        );
        assert_eq!(
            &frame("x", None, b"a\nb")[..],
            b"id: x\ndata: a\ndata: b\n\n"
        );
    }

    #[test]
    fn request_stream_primes_buffers_and_resumes() {
        let s = Streams::new(Duration::from_millis(500));
        s.set_priming(true);
        let id = Id::Num(7);
        let mut rx = s.open_request(&id).unwrap();
        assert!(s.open_request(&id).is_none(), "reused id refused");
        assert_eq!(drain(&mut rx), ["id: 1_0\nretry: 500\ndata: \n\n"]);
        s.send(&Route::Related(id.clone()), b"{\"n\":1}".to_vec());
        s.close_stream(&id);
        assert_eq!(drain(&mut rx), ["id: 1_1\ndata: {\"n\":1}\n\n"]);
        assert!(rx.is_closed() || rx.try_recv().is_err());
        // Sent while detached: buffered, then replayed after the given id.
        s.send(&Route::Related(id.clone()), b"{\"n\":2}".to_vec());
        let mut again = s.resume("1_1").unwrap();
        s.finish(&id, Some(b"{\"result\":{}}".to_vec()));
        assert_eq!(
            drain(&mut again),
            [
                "id: 1_2\ndata: {\"n\":2}\n\n",
                "id: 1_3\ndata: {\"result\":{}}\n\n"
            ]
        );
        // A finished stream replays and closes.
        let mut late = s.resume("1_2").unwrap();
        assert_eq!(drain(&mut late), ["id: 1_3\ndata: {\"result\":{}}\n\n"]);
        assert_eq!(s.resume("9_0").err(), Some(ResumeError::Unknown));
        assert_eq!(s.resume("nonsense").err(), Some(ResumeError::Malformed));
    }

    #[test]
    fn unrelated_messages_go_to_the_newest_get_connection_only() {
        let s = Streams::new(Duration::from_secs(1));
        s.send(&Route::Unrelated, b"{\"dropped\":true}".to_vec());
        let mut first = s.open_standalone();
        let mut second = s.open_standalone();
        s.send(&Route::Unrelated, b"{}".to_vec());
        assert!(drain(&mut first).is_empty());
        assert_eq!(drain(&mut second), ["id: 0_1\ndata: {}\n\n"]);
        drop(second);
        s.send(&Route::Unrelated, b"[]".to_vec());
        assert_eq!(drain(&mut first), ["id: 0_2\ndata: []\n\n"]);
        s.close_all();
        assert!(!s.has_live());
    }
}

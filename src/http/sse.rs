//! Answers to hosts: one JSON body, or an SSE stream flushed per event.
//!
//! The SSE events come from the session's event log, written by
//! [`Attached::into_sse`]: every event carries an id `{stream}-{seq}`, unique
//! within the session and naming its stream (MCP 2025-11-25 transports,
//! resumability); a priming event opens a 2025-11-25 stream; idle streams get
//! keep-alive comments. Responses also carry `X-Accel-Buffering: no`, so a
//! buffering reverse proxy passes each event on at once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{StreamExt, stream};
use hyper::body::{Frame, SizeHint};
use tokio::sync::{mpsc, oneshot};

use crate::cluster::{MirroredEvent, Purpose, Sealer, SharedStore};
use crate::dispatch::Call;
use crate::jsonrpc::Encoded;
use crate::metrics::Metrics;
use crate::session::{Outbound, Session, StreamSlot};
use crate::streamable_http::{Attached, EVENT_STREAM, JSON, KEEP_ALIVE};

/// A `200 application/json` response with `body`.
pub fn json_response(body: Bytes) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    resp
}

/// A `200 application/json` response whose body is `body`'s pieces, written
/// one after the other (a large backend result is not copied into one buffer);
/// its `Content-Length` is their total.
pub fn json_pieces(body: Encoded) -> Response {
    let [head, result, tail] = body.into_pieces();
    if result.is_empty() && tail.is_empty() {
        return json_response(head);
    }
    let left = (head.len() + result.len() + tail.len()) as u64;
    let pieces = Pieces {
        pieces: [head, result, tail],
        next: 0,
        left,
    };
    let mut resp = Response::new(Body::new(pieces));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    resp
}

/// The body of [`json_pieces`]: each non-empty piece is one data frame (hyper
/// writes them with one vectored write); its exact size is known.
struct Pieces {
    pieces: [Bytes; 3],
    next: usize,
    left: u64,
}

impl HttpBody for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        while let Some(piece) = this.pieces.get_mut(this.next) {
            this.next += 1;
            let piece = std::mem::take(piece);
            if !piece.is_empty() {
                this.left -= piece.len() as u64;
                return std::task::Poll::Ready(Some(Ok(Frame::data(piece))));
            }
        }
        std::task::Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// For a host that accepts only `text/event-stream`: a `200 application/json`
/// answer becomes an SSE stream of one `message` event (no event id: there is
/// nothing to resume); any other response (a stream already, an error, a 202)
/// is left as it is.
pub async fn json_as_sse(resp: Response) -> Response {
    let json = resp.status() == StatusCode::OK
        && resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == JSON.as_bytes());
    if !json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // A JSON answer's body is in memory already.
    let Ok(json) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut out = Vec::with_capacity(json.len() + 32);
    out.extend_from_slice(b"event: message\n");
    // A line break inside JSON text is whitespace: each line is a `data:` line
    // (the reader joins them with `\n`).
    for line in json.split(|b| matches!(b, b'\n' | b'\r')) {
        if !line.is_empty() {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out.push(b'\n');
    let h = &mut parts.headers;
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
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
    let events = Box::pin(attached.into_sse(prime, keep_alive));
    // The guard is part of the state: the slot is freed as soon as the events end.
    let state = (events, OpenStream::new(metrics, slot));
    let body = stream::unfold(state, |(mut events, open)| async move {
        let bytes = events.next().await?;
        if bytes != KEEP_ALIVE {
            open.metrics.bytes_out.inc_by(bytes.len() as u64);
        }
        Some((Ok::<Bytes, std::io::Error>(bytes), (events, open)))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Answers a routed host request: waits up to `window` for the first message
/// (running `call`'s task meanwhile, then detaching it);
/// if it is the response, answers `application/json`, otherwise (related messages
/// first, or a slow backend) switches to an SSE stream recorded in the session's
/// event log, so the host can resume it after a disconnect.
///
/// `slot` is freed at once for a JSON answer and held by an SSE stream; with
/// `mirror` the stream's events are also written to the shared store (a JSON
/// answer writes nothing).
pub async fn stream_reply(
    mut call: Call,
    session: &Arc<Session>,
    slot: StreamSlot,
    (window, keep_alive): (Duration, Duration),
    metrics: &Arc<Metrics>,
    mirror: Option<Mirror>,
) -> Response {
    // The call runs in this task while the window lasts; if the response is
    // its first message, no task is spawned for it.
    let first = match tokio::time::timeout(window, call.recv()).await {
        Ok(Some(Outbound::Final(body))) => {
            metrics.bytes_out.inc_by(body.len() as u64);
            return json_pieces(body);
        }
        Ok(Some(m)) => Some(m),
        Ok(None) | Err(_) => None,
    };
    let rx = call.detach();
    let (stream, live) = session.events().open();
    let mirror = mirror.map(|m| m.writer(stream));
    if let Some(m) = &mirror {
        // Awaited: once the host has an event id, the stream is known to
        // every replica (and a dead producer can be told from a lagging one).
        m.write(0, b"", true).await;
    }
    tokio::spawn(pump(session.clone(), stream, first, rx, mirror));
    let attached = Attached {
        stream,
        replay: Vec::new(),
        live: Some(live),
        prime_due: true,
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

/// Where a stream's events are mirrored for a resumption on another replica:
/// the shared store, the session's store key and the answered request's id
/// (JSON text).
pub struct Mirror {
    /// The shared store.
    pub store: Arc<SharedStore>,
    /// The session's store key.
    pub h: String,
    /// The JSON-RPC id of the request, as JSON text.
    pub request_id: String,
    /// Seals each event's data (tool results do not sit in Redis in clear).
    pub sealer: Arc<Sealer>,
}

/// The additional data an event's sealed data is bound to: its session and its
/// place, so that no entry opens as another (`Purpose::Value`).
pub fn event_aad(h: &str, stream: u64, seq: u64) -> String {
    format!("mcpgate/event/v1 {h} {stream}-{seq}")
}

impl Mirror {
    /// Starts the writer of `stream`'s events: one at a time, in order, off
    /// the host's path; see [`Writer::write`].
    fn writer(self, stream: u64) -> Writer {
        let (tx, mut rx) =
            mpsc::unbounded_channel::<(MirroredEvent, Option<oneshot::Sender<()>>)>();
        let (store, h) = (self.store.clone(), self.h.clone());
        tokio::spawn(async move {
            // Whether the last related message was given up on: the next are
            // tried once until one lands (an outage holds the stream back
            // by NEXT_RETRY once, not per message).
            let mut lost = false;
            while let Some((ev, done)) = rx.recv().await {
                // The response is retried until it lands (a follower on
                // another replica waits for it), for up to FINAL_RETRY; a
                // related message (progress, a server→client request)
                // briefly, in order, like the response after it.
                let limit = match (&done, lost) {
                    (Some(_), _) => FINAL_RETRY,
                    (None, false) => NEXT_RETRY,
                    (None, true) => Duration::ZERO,
                };
                let landed = write_retried(&store, &h, &ev, limit, done).await;
                lost = !landed;
            }
        });
        Writer {
            mirror: self,
            stream,
            tx,
        }
    }
}

/// How long a stream's last event is retried while the store does not take
/// it.
const FINAL_RETRY: Duration = Duration::from_secs(30);

/// How long a stream's other events are retried while the store does not
/// take them (a store marked down is up again at its next heartbeat).
const NEXT_RETRY: Duration = Duration::from_secs(5);

/// Writes `ev` to the store, again while it refuses it (from 50 ms, doubling
/// to 1 s), until `limit` passed; whether it landed. `done` is told at the
/// first failure or when it landed, whichever comes first.
async fn write_retried(
    store: &SharedStore,
    h: &str,
    ev: &MirroredEvent,
    limit: Duration,
    mut done: Option<oneshot::Sender<()>>,
) -> bool {
    let end = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(50);
    let landed = loop {
        if store.mirror().add(h, ev).await.is_ok() {
            break true;
        }
        if let Some(d) = done.take() {
            let _ = d.send(());
        }
        if tokio::time::Instant::now() >= end {
            break false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    };
    if let Some(d) = done {
        let _ = d.send(());
    }
    landed
}

/// The writer of one stream's mirrored events.
struct Writer {
    mirror: Mirror,
    stream: u64,
    tx: mpsc::UnboundedSender<(MirroredEvent, Option<oneshot::Sender<()>>)>,
}

impl Writer {
    fn seal(&self, seq: u64, data: &[u8]) -> Vec<u8> {
        let aad = event_aad(&self.mirror.h, self.stream, seq);
        let sealed = self
            .mirror
            .sealer
            .seal(Purpose::Value, aad.as_bytes(), data);
        sealed.into_bytes()
    }

    /// Queues event `seq` (the stream's `last`, or the opening marker seq 0),
    /// and waits until it is written when `wait` (at most the store's deadline
    /// and a little more).
    async fn write(&self, seq: u64, data: &[u8], wait: bool) {
        let ev = MirroredEvent {
            stream: self.stream,
            seq,
            last: wait && seq > 0,
            producer: self.mirror.store.tag().to_owned(),
            request_id: self.mirror.request_id.clone(),
            data: self.seal(seq, data),
            entry: String::new(),
        };
        if !wait {
            let _ = self.tx.send((ev, None));
            return;
        }
        let (done, wait) = oneshot::channel();
        if self.tx.send((ev, Some(done))).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(1), wait).await;
        }
    }
}

/// Moves a host call's messages into the session's event log (and, with a
/// `mirror`, into the shared store; the last one awaited). It
/// outlives the HTTP response, so a host that disconnects can resume (a
/// disconnect is not a cancellation).
async fn pump(
    session: Arc<Session>,
    stream: u64,
    first: Option<Outbound>,
    mut rx: mpsc::Receiver<Outbound>,
    mirror: Option<Writer>,
) {
    let mut next = first;
    let mut seq = 1;
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
            Outbound::Message(b) => {
                if let Some(m) = &mirror {
                    m.write(seq, &b, false).await;
                }
                session.events().push(stream, b, false);
            }
            Outbound::Final(b) => {
                let b = b.to_bytes();
                if let Some(m) = &mirror {
                    m.write(seq, &b, true).await;
                }
                session.events().push(stream, b, true);
                return;
            }
        }
        seq += 1;
    }
}

/// The messages of a call run here for another replica (`owner.rs`), written
/// to the mirror of stream `stream` only (the caller wrote seq 0, the mark
/// that the call was picked up): related messages from seq 1, then the
/// response, awaited. A call that ends without one (the host cancelled it)
/// ends with a last event without data, which a follower never sends on.
pub async fn mirror_only(mut call: Call, mirror: Mirror, stream: u64) {
    let writer = mirror.writer(stream);
    let mut seq = 1;
    loop {
        match call.recv().await {
            Some(Outbound::Message(b)) => writer.write(seq, &b, false).await,
            Some(Outbound::Final(b)) => return writer.write(seq, &b.to_bytes(), true).await,
            None => return writer.write(seq, b"", true).await,
        }
        seq += 1;
    }
}

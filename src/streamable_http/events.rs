//! The per-session event log behind resumable SSE streams (MCP 2025-11-25
//! basic/transports, resumability and redelivery).
//!
//! Every SSE stream of a session (a POST answer or the standalone GET stream) has a
//! number; its events have ids `{stream}-{seq}`, unique within the session, and
//! `seq` 0 is the priming event. Events are recorded in a bounded buffer (oldest
//! evicted first) and forwarded to the HTTP response currently attached to their
//! stream, if any. A client (a host of the gateway) that lost the connection sends
//! `GET` with `Last-Event-ID` and gets what came after on THAT stream only, then the
//! rest live. A client that reads too slowly is disconnected (it can resume) instead
//! of letting queues grow.
//!
//! [`Attached::into_sse`] writes what a response gets as SSE bytes. The framing is
//! our own rather than `axum::response::sse` because the 2025-11-25 priming event
//! (SEP-1699) is an event with an id and an *empty* data field, which axum's writer
//! omits. Idle streams get `: keep-alive` comments so load balancers do not cut long
//! tool calls.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

/// Most events kept per session for resumption.
const MAX_EVENTS: usize = 256;
/// Most bytes of event data kept per session for resumption.
const MAX_BYTES: usize = 1024 * 1024;
/// Frames queued toward one attached HTTP response before it is cut off.
const LIVE_CAPACITY: usize = 256;
/// Reconnection delay announced in the priming event (`retry`, ms).
pub const RETRY_MS: u64 = 1000;
/// The SSE comment written on an idle stream.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// A stream number never used before in this process, by any session: an event
/// id of one session never names a stream of another (it is refused with 410,
/// not answered with that session's own events). The counter starts at a random
/// point so ids from an earlier process are not reused either.
/// Also the number of a stream another process produces for this one (a call
/// run by the session's owner replica).
pub fn next_stream_id() -> u64 {
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    NEXT.get_or_init(|| {
        let mut b = [0u8; 4];
        let _ = getrandom::fill(&mut b);
        AtomicU64::new(u64::from(u32::from_le_bytes(b)) << 16)
    })
    .fetch_add(1, Ordering::Relaxed)
}

/// One SSE event ready to write.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Stream number.
    pub stream: u64,
    /// Sequence number within the stream (0 = priming event).
    pub seq: u64,
    /// The JSON-RPC message (empty for the priming event).
    pub data: Bytes,
    /// Whether this is the stream's last event (a POST stream's response).
    pub last: bool,
}

impl Frame {
    /// The SSE event id, `{stream}-{seq}`.
    #[cfg(test)]
    pub fn id(&self) -> String {
        format!("{}-{}", self.stream, self.seq)
    }

    /// The SSE event: `id: {stream}-{seq}`, the `retry` advice on a priming event
    /// (no data: seq 0, or the one recorded for a `GET` taking a standalone stream
    /// over), then the data on one line (JSON-RPC messages are compact
    /// JSON, without raw newlines).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.data.len() + 48);
        b.put_slice(format!("id: {}-{}\n", self.stream, self.seq).as_bytes());
        if self.data.is_empty() {
            b.put_slice(format!("retry: {RETRY_MS}\n").as_bytes());
        }
        b.put_slice(b"data: ");
        b.put_slice(&self.data);
        b.put_slice(b"\n\n");
        b.freeze()
    }
}

/// Why a `Last-Event-ID` cannot be honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// Not of the form `{stream}-{seq}` (HTTP 400).
    #[error("malformed Last-Event-ID")]
    Malformed,
    /// Unknown stream, or events after it were already evicted (HTTP 410).
    #[error("the events after this Last-Event-ID are no longer available")]
    Gone,
}

/// Whether an event is a JSON-RPC notification, conservatively: a message with
/// no `"id"` anywhere in it (a request or a response always has one; a
/// notification that mentions one counts as essential too). The priming event's
/// empty data is no message to lose.
fn is_notification(data: &[u8]) -> bool {
    let has = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
    data.is_empty() || (has(b"\"method\"") && !has(b"\"id\""))
}

/// Which stream to attach a response to.
#[derive(Debug)]
pub struct Attached {
    /// Stream number.
    pub stream: u64,
    /// Recorded events to write first.
    pub replay: Vec<Frame>,
    /// Live events, unless the stream already ended.
    pub live: Option<mpsc::Receiver<Frame>>,
    /// Whether the stream's priming event (seq 0) is still due to this
    /// response: `false` for a `GET` that takes over a standalone stream whose
    /// seq 0 an earlier `GET` was sent (event ids are unique within the
    /// session, MCP 2025-11-25 basic/transports): its first replayed event,
    /// or an empty one recorded for it, carries its id instead.
    pub prime_due: bool,
}

struct Stream {
    next_seq: u64,
    finished: bool,
    /// Highest seq evicted from the buffer (0 = none).
    evicted_upto: u64,
    /// Highest seq evicted that was not a notification (a request or a
    /// response; 0 = none): a resumption before it is refused, one that only
    /// skips notifications is not.
    lost_upto: u64,
    /// Highest seq handed to an attached response (0 = none): a `GET` without
    /// `Last-Event-ID` on the standalone stream starts after it, so it neither
    /// repeats what an earlier `GET` was sent nor depends on what was evicted.
    delivered: u64,
    /// Whether a `GET` attached to it was primed (sent seq 0): a later one
    /// needs an id of its own.
    primed: bool,
    /// Whether its events go to the standalone mirror (see
    /// [`EventLog::set_standalone_mirror`]).
    mirrored: bool,
    /// Whether the store refused its events because the host listens to
    /// another stream (see [`EventLog::take_back`]): a response still attached
    /// here is one the host left, not a listener, until one attaches again.
    left: bool,
    /// `next_seq` when a response last attached: a refusal of an event
    /// numbered before that predates the host's return here.
    attached_at: u64,
    /// The seqs of buffered events this process made for its own copy of
    /// the session (see [`EventLog::push_standalone_own`]): never handed to
    /// another replica, which makes its own.
    own: Vec<u64>,
    /// The response events go to; on the standalone stream, the newest
    /// `GET` attached.
    live: Option<mpsc::Sender<Frame>>,
    /// Earlier `GET`s still attached to the standalone stream, oldest first: a
    /// host may hold several streams, and each message goes on one (MCP
    /// 2025-11-25 basic/transports, multiple connections), so a later `GET`
    /// does not end them; an event goes to the newest that takes it.
    older: Vec<mpsc::Sender<Frame>>,
}

#[derive(Default)]
struct Inner {
    streams: HashMap<u64, Stream>,
    events: VecDeque<Frame>,
    bytes: usize,
    standalone: Option<u64>,
}

/// The event log of one session.
#[derive(Default)]
pub struct EventLog {
    inner: Mutex<Inner>,
    /// Counts messages toward the host that were dropped or whose stream was cut
    /// (`mcpgate_dropped_messages_total{reason="slow_host"}`), once set.
    dropped: OnceLock<prometheus::IntCounter>,
    /// Called (under the log's lock, so in order) with every event of a stream
    /// marked with [`EventLog::mirror_standalone`]; it must not block.
    mirror: OnceLock<StandaloneMirror>,
}

/// What receives the events of a mirrored standalone stream.
pub type StandaloneMirror = Box<dyn Fn(&Frame) + Send + Sync>;

impl EventLog {
    /// Sets the counter of drops toward a slow host.
    pub fn count_drops_in(&self, counter: prometheus::IntCounter) {
        let _ = self.dropped.set(counter);
    }

    /// Counts one message toward the host dropped (or a stream cut) for slowness.
    pub fn count_drop(&self) {
        if let Some(c) = self.dropped.get() {
            c.inc();
        }
    }

    /// Opens a new stream with an attached response. The first data event gets
    /// seq 1 (seq 0 is reserved for the priming event).
    pub fn open(&self) -> (u64, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(LIVE_CAPACITY);
        let Ok(mut g) = self.inner.lock() else {
            return (0, rx);
        };
        let id = next_stream_id();
        g.streams.insert(id, Stream::new(Some(tx)));
        (id, rx)
    }

    /// Records an event on `stream` and forwards it to the attached response. A
    /// response that cannot keep up is detached (its HTTP stream ends; the host
    /// resumes from the buffer).
    pub fn push(&self, stream: u64, data: Bytes, last: bool) {
        let Ok(mut g) = self.inner.lock() else { return };
        self.push_locked(&mut g, stream, data, last);
    }

    fn push_locked(&self, g: &mut Inner, stream: u64, data: Bytes, last: bool) {
        let Some(s) = g.streams.get_mut(&stream) else {
            return;
        };
        if s.finished {
            return;
        }
        let frame = Frame {
            stream,
            seq: s.next_seq,
            data,
            last,
        };
        s.next_seq += 1;
        s.finished = last;
        if s.mirrored
            && let Some(m) = self.mirror.get()
        {
            m(&frame);
        }
        // A response the host left (`left`) is not written to: what is kept
        // here waits for the next GET, undelivered. Otherwise the newest
        // attached response takes it; one that is gone or cannot keep up is
        // let go, and the next newest (a standalone stream's earlier GET) is
        // tried.
        let left = s.left;
        while let Some(tx) = s.live.take_if(|_| !left) {
            match tx.try_send(frame.clone()) {
                Ok(()) => {
                    s.delivered = frame.seq;
                    s.live = Some(tx);
                    break;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(stream, "host reads too slowly; stream cut, it can resume");
                    if let Some(c) = self.dropped.get() {
                        c.inc();
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
            s.live = s.older.pop();
        }
        if last {
            s.live = None;
            s.older.clear();
        }
        g.bytes += frame.data.len();
        g.events.push_back(frame);
        while g.events.len() > MAX_EVENTS || g.bytes > MAX_BYTES {
            let Some(old) = g.events.pop_front() else {
                break;
            };
            g.bytes -= old.data.len();
            if let Some(s) = g.streams.get_mut(&old.stream) {
                s.evicted_upto = s.evicted_upto.max(old.seq);
                s.own.retain(|&q| q > old.seq);
                if !is_notification(&old.data) {
                    s.lost_upto = s.lost_upto.max(old.seq);
                }
                if s.finished && s.next_seq == old.seq + 1 {
                    g.streams.remove(&old.stream);
                }
            }
        }
    }

    /// Sends an event on the standalone stream, creating it (detached, events
    /// queued in the buffer until a GET attaches) if there is none yet.
    pub fn push_standalone(&self, data: Bytes) {
        let Ok(mut g) = self.inner.lock() else { return };
        let stream = g.standalone_stream();
        self.push_locked(&mut g, stream, data, false);
    }

    /// Attaches a `GET` without `Last-Event-ID` to the standalone stream: the events
    /// queued since the last one handed to an earlier `GET` (those still buffered),
    /// then live ones. An earlier `GET` still attached stays attached (two tabs
    /// of one host must not end each other's stream, each reconnecting after
    /// `retry`): each later event goes to the newest `GET` that takes it, once
    /// (2025-11-25 basic/transports, multiple connections). Never refused: events
    /// evicted while nobody listened are gone (a host that must not miss any resumes
    /// with `Last-Event-ID` instead), and what an earlier `GET` was sent is not sent
    /// again (2025-11-25 basic/transports: a message goes on one stream, once).
    /// `prime`: the answer will be primed (revision 2025-11-25 or later); seq 0
    /// is sent once per stream, so a later primed `GET` with nothing queued gets
    /// an empty event recorded as its priming event (see [`Attached::prime_due`]).
    pub fn attach_standalone(&self, prime: bool) -> Attached {
        let Ok(mut g) = self.inner.lock() else {
            return Attached::empty();
        };
        let g = &mut *g;
        let stream = match g.standalone {
            Some(s) if g.streams.get(&s).is_some_and(|s| !s.finished) => s,
            _ => {
                let id = next_stream_id();
                g.streams.insert(id, Stream::new(None));
                g.standalone = Some(id);
                id
            }
        };
        let Some(s) = g.streams.get_mut(&stream) else {
            return Attached::empty();
        };
        let again = prime && s.primed;
        s.primed |= prime;
        let after = s.delivered;
        let mut replay = replay_after(&g.events, stream, after);
        if again && replay.is_empty() {
            // Seq 0 went to an earlier GET: this one's priming event is an
            // empty event of its own, recorded (and mirrored) like any other,
            // so that resuming from its id works. The earlier GETs must not
            // get it: set aside while it is recorded.
            let held = (s.live.take(), std::mem::take(&mut s.older));
            self.push_locked(g, stream, Bytes::new(), false);
            replay = replay_after(&g.events, stream, after);
            if let Some(s) = g.streams.get_mut(&stream) {
                (s.live, s.older) = held;
            }
        }
        let Some(s) = g.streams.get_mut(&stream) else {
            return Attached::empty();
        };
        let mut attached = attach_live(s, stream, replay, true);
        attached.prime_due = !again;
        attached
    }

    /// Resumes after `last_event_id`: the recorded events after it on its stream,
    /// then live events if the stream has not ended.
    pub fn resume(&self, last_event_id: &str) -> Result<Attached, ResumeError> {
        let (stream, seq) = parse_id(last_event_id).ok_or(ResumeError::Malformed)?;
        self.attach(stream, seq)
    }

    fn attach(&self, stream: u64, after: u64) -> Result<Attached, ResumeError> {
        let mut g = self.inner.lock().map_err(|_| ResumeError::Gone)?;
        let g = &mut *g;
        let s = g.streams.get_mut(&stream).ok_or(ResumeError::Gone)?;
        if after >= s.next_seq.max(1) || s.lost_upto > after {
            return Err(ResumeError::Gone);
        }
        if s.evicted_upto > after {
            // Only notifications (progress, logs) were evicted: the host gets the
            // rest, its answer included, rather than a 410 that would lose it.
            tracing::info!(
                stream,
                after,
                evicted_upto = s.evicted_upto,
                "resumed over evicted notifications"
            );
        }
        let replay = replay_after(&g.events, stream, after);
        if s.finished && replay.is_empty() {
            // Nothing was left and nothing will come: an empty 200 would only make
            // the client reconnect again.
            return Err(ResumeError::Gone);
        }
        // A resumed standalone stream keeps the other GETs on it (see
        // `attach_standalone`); a POST stream has one response at a time.
        let keep = g.standalone == Some(stream);
        Ok(attach_live(s, stream, replay, keep))
    }

    /// Detaches the response attached to `stream` without ending the stream: that
    /// HTTP body ends, later events are recorded for a resumption with
    /// `Last-Event-ID` (SEP-1699 polling: a server may close the connection).
    pub fn detach(&self, stream: u64) {
        if let Ok(mut g) = self.inner.lock()
            && let Some(s) = g.streams.get_mut(&stream)
        {
            s.live = None;
            s.older.clear();
        }
    }

    /// Whether a response is attached to some stream (a client is listening).
    pub fn is_attached(&self) -> bool {
        self.inner
            .lock()
            .is_ok_and(|g| g.streams.values().any(Stream::listened))
    }

    /// Ends `stream` without a final event (the host cancelled its request).
    pub fn finish(&self, stream: u64) {
        if let Ok(mut g) = self.inner.lock()
            && let Some(s) = g.streams.get_mut(&stream)
        {
            s.finished = true;
            s.live = None;
            s.older.clear();
        }
    }

    /// Makes `stream` (another process's standalone stream, or `None`: a new
    /// number) this log's standalone stream, its next event numbered
    /// `next_seq`, and attaches a response to it: `replay` (events of it this
    /// process did not produce; kept for a later resumption here), then the
    /// events this log's earlier standalone stream had not yet handed to a
    /// response (renumbered onto it), then live ones. Its events are mirrored.
    pub fn take_standalone(
        &self,
        stream: Option<u64>,
        next_seq: u64,
        replay: Vec<Frame>,
    ) -> Attached {
        let Ok(mut g) = self.inner.lock() else {
            return Attached::empty();
        };
        let g = &mut *g;
        let stream = stream.unwrap_or_else(next_stream_id);
        let queued: Vec<Bytes> = match g.standalone.take() {
            Some(old) if old != stream => {
                let after = g.streams.remove(&old).map_or(0, |s| s.delivered);
                let bytes = &mut g.bytes;
                let mut queued = Vec::new();
                g.events.retain(|f| {
                    if f.stream != old {
                        return true;
                    }
                    *bytes -= f.data.len();
                    if f.seq > after {
                        queued.push(f.data.clone());
                    }
                    false
                });
                queued
            }
            _ => Vec::new(),
        };
        let mut s = Stream::new(None);
        s.next_seq = next_seq.max(1);
        s.mirrored = true;
        // What came before is not here: a resumption before it is refused.
        let held_from = replay.first().map_or(s.next_seq, |f| f.seq);
        s.lost_upto = held_from.saturating_sub(1);
        s.evicted_upto = s.lost_upto;
        for f in &replay {
            g.bytes += f.data.len();
            g.events.push_back(f.clone());
        }
        let attached = attach_live(&mut s, stream, replay, false);
        g.streams.insert(stream, s);
        g.standalone = Some(stream);
        for data in queued {
            self.push_locked(g, stream, data, false);
        }
        attached
    }

    /// Ends every stream (session ended): attached responses close.
    pub fn close_all(&self) {
        if let Ok(mut g) = self.inner.lock() {
            *g = Inner::default();
        }
    }
}

impl Stream {
    fn new(live: Option<mpsc::Sender<Frame>>) -> Self {
        Stream {
            next_seq: 1,
            finished: false,
            evicted_upto: 0,
            lost_upto: 0,
            delivered: 0,
            primed: false,
            mirrored: false,
            left: false,
            attached_at: 0,
            own: Vec::new(),
            live,
            older: Vec::new(),
        }
    }

    /// Whether a response still open is attached (the newest or an older one).
    fn listened(&self) -> bool {
        let open = |tx: &mpsc::Sender<Frame>| !tx.is_closed();
        self.live.as_ref().is_some_and(open) || self.older.iter().any(open)
    }
}

/// The buffered events of `stream` after seq `after`, oldest first.
fn replay_after(events: &VecDeque<Frame>, stream: u64, after: u64) -> Vec<Frame> {
    events
        .iter()
        .filter(|f| f.stream == stream && f.seq > after)
        .cloned()
        .collect()
}

/// Attaches a new response to `s`: `replay` first, then live frames unless the
/// stream has ended. The replayed frames count as delivered. An earlier
/// response is detached, or, with `keep` (the standalone stream), kept
/// attached behind the new one.
fn attach_live(s: &mut Stream, stream: u64, replay: Vec<Frame>, keep: bool) -> Attached {
    if let Some(f) = replay.last() {
        s.delivered = s.delivered.max(f.seq);
    }
    s.left = false;
    s.attached_at = s.next_seq;
    s.older.retain(|tx| keep && !tx.is_closed());
    if let Some(earlier) = s.live.take().filter(|tx| keep && !tx.is_closed()) {
        s.older.push(earlier);
    }
    let live = if s.finished {
        None
    } else {
        let (tx, rx) = mpsc::channel(LIVE_CAPACITY);
        s.live = Some(tx);
        Some(rx)
    };
    Attached {
        stream,
        replay,
        live,
        prime_due: true,
    }
}

/// An event id `{stream}-{seq}` as its two numbers (`None`: malformed).
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (a, b) = id.trim().split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

mod mirror;
mod sse;
#[cfg(test)]
mod tests;

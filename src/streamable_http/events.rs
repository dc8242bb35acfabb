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
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

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
fn next_stream_id() -> u64 {
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
    /// (seq 0, no data), then the data on one line (JSON-RPC messages are compact
    /// JSON, without raw newlines).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.data.len() + 48);
        b.put_slice(format!("id: {}-{}\n", self.stream, self.seq).as_bytes());
        if self.seq == 0 && self.data.is_empty() {
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
    live: Option<mpsc::Sender<Frame>>,
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
}

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
        let g = &mut *g;
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
        if let Some(tx) = &s.live {
            match tx.try_send(frame.clone()) {
                Ok(()) => s.delivered = frame.seq,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(stream, "host reads too slowly; stream cut, it can resume");
                    s.live = None;
                    if let Some(c) = self.dropped.get() {
                        c.inc();
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => s.live = None,
            }
        }
        if last {
            s.live = None;
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
        let stream = {
            let Ok(mut g) = self.inner.lock() else { return };
            match g.standalone {
                Some(s) => s,
                None => {
                    let id = next_stream_id();
                    g.streams.insert(id, Stream::new(None));
                    g.standalone = Some(id);
                    id
                }
            }
        };
        self.push(stream, data, false);
    }

    /// Attaches a `GET` without `Last-Event-ID` to the standalone stream: the events
    /// queued since the last one handed to an earlier `GET` (those still buffered),
    /// then live ones. An earlier attached GET is detached. Never refused: events
    /// evicted while nobody listened are gone (a host that must not miss any resumes
    /// with `Last-Event-ID` instead), and what an earlier `GET` was sent is not sent
    /// again (2025-11-25 basic/transports: a message goes on one stream, once).
    pub fn attach_standalone(&self) -> Attached {
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
        let after = s.delivered;
        let replay = replay_after(&g.events, stream, after);
        attach_live(s, stream, replay)
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
        Ok(attach_live(s, stream, replay))
    }

    /// Detaches the response attached to `stream` without ending the stream: that
    /// HTTP body ends, later events are recorded for a resumption with
    /// `Last-Event-ID` (SEP-1699 polling: a server may close the connection).
    pub fn detach(&self, stream: u64) {
        if let Ok(mut g) = self.inner.lock()
            && let Some(s) = g.streams.get_mut(&stream)
        {
            s.live = None;
        }
    }

    /// Whether a response is attached to some stream (a client is listening).
    pub fn is_attached(&self) -> bool {
        self.inner.lock().is_ok_and(|g| {
            g.streams
                .values()
                .any(|s| s.live.as_ref().is_some_and(|tx| !tx.is_closed()))
        })
    }

    /// Ends `stream` without a final event (the host cancelled its request).
    pub fn finish(&self, stream: u64) {
        if let Ok(mut g) = self.inner.lock()
            && let Some(s) = g.streams.get_mut(&stream)
        {
            s.finished = true;
            s.live = None;
        }
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
            live,
        }
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

/// Attaches a new response to `s` (detaching any earlier one): `replay` first, then
/// live frames unless the stream has ended. The replayed frames count as delivered.
fn attach_live(s: &mut Stream, stream: u64, replay: Vec<Frame>) -> Attached {
    if let Some(f) = replay.last() {
        s.delivered = s.delivered.max(f.seq);
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
    }
}

impl Attached {
    fn empty() -> Self {
        Attached {
            stream: 0,
            replay: Vec::new(),
            live: None,
        }
    }

    /// The SSE body of the response: the priming event (when `prime`: revision
    /// 2025-11-25 or later, see `ProtocolVersion::primes_streams`), the replayed
    /// frames, then live frames until the stream's last event or until the log
    /// detaches the response; a [`KEEP_ALIVE`] comment after each `keep_alive` of
    /// silence. Every item is one [`Frame::encode`]d event or a [`KEEP_ALIVE`].
    pub fn into_sse(
        self,
        prime: bool,
        keep_alive: Duration,
    ) -> impl futures_util::Stream<Item = Bytes> + Send {
        struct State {
            queued: VecDeque<Frame>,
            live: Option<mpsc::Receiver<Frame>>,
            tick: tokio::time::Interval,
            done: bool,
        }
        let mut queued: VecDeque<Frame> = self.replay.into();
        if prime {
            queued.push_front(Frame {
                stream: self.stream,
                seq: 0,
                data: Bytes::new(),
                last: false,
            });
        }
        let mut tick = interval_at(Instant::now() + keep_alive, keep_alive);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let state = State {
            queued,
            live: self.live,
            tick,
            done: false,
        };
        stream::unfold(state, |mut st| async move {
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
                            return Some((Bytes::from_static(KEEP_ALIVE), st));
                        }
                    }
                }
            };
            st.tick.reset();
            st.done = next.last;
            Some((next.encode(), st))
        })
    }
}

/// An event id `{stream}-{seq}` as its two numbers (`None`: malformed).
pub fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (a, b) = id.trim().split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn frames_events() {
        let f = |seq: u64, data: &'static [u8]| Frame {
            stream: 3,
            seq,
            data: Bytes::from_static(data),
            last: false,
        };
        assert_eq!(&f(0, b"").encode()[..], b"id: 3-0\nretry: 1000\ndata: \n\n");
        assert_eq!(
            &f(1, br#"{"a":1}"#).encode()[..],
            b"id: 3-1\ndata: {\"a\":1}\n\n"
        );
    }

    #[tokio::test]
    async fn replays_only_its_own_stream_after_the_id() {
        let log = EventLog::default();
        let (a, mut rx_a) = log.open();
        let (b, _rx_b) = log.open();
        log.push(a, data("a1"), false);
        log.push(b, data("b1"), false);
        log.push(a, data("a2"), false);
        assert_eq!(rx_a.recv().await.unwrap().data, data("a1"));
        drop(rx_a);
        log.push(a, data("a3"), true);
        let r = log.resume(&format!("{a}-1")).unwrap();
        let got: Vec<Bytes> = r.replay.iter().map(|f| f.data.clone()).collect();
        assert_eq!(got, [data("a2"), data("a3")]);
        assert!(r.live.is_none(), "stream ended with its response");
        assert_eq!(r.replay[1].id(), format!("{a}-3"));
        // From the priming event on: everything.
        assert_eq!(log.resume(&format!("{a}-0")).unwrap().replay.len(), 3);
    }

    #[tokio::test]
    async fn resumed_stream_continues_live() {
        let log = EventLog::default();
        let (a, rx) = log.open();
        drop(rx);
        log.push(a, data("x"), false);
        let mut r = log.resume(&format!("{a}-0")).unwrap();
        assert_eq!(r.replay.len(), 1);
        log.push(a, data("y"), true);
        let f = r.live.as_mut().unwrap().recv().await.unwrap();
        assert_eq!((f.data, f.last), (data("y"), true));
    }

    #[test]
    fn a_cut_stream_flooded_with_notifications_still_resumes_to_its_answer() {
        // The 60-minute soak: a host reading a tool's 2,000 progress notifications
        // too slowly was cut, resumed, and got 410: the notifications after its
        // last id had been evicted, and with them the way to the call's result.
        let log = EventLog::default();
        let (a, rx) = log.open();
        let progress = |i: usize| {
            data(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{i}}}}}"#
            ))
        };
        for i in 0..(LIVE_CAPACITY + 1) {
            log.push(a, progress(i), false);
        }
        drop(rx); // the host read nothing more: the stream was cut at LIVE_CAPACITY
        for i in 0..2000 {
            log.push(a, progress(i), false);
        }
        let answer = data(r#"{"jsonrpc":"2.0","id":"flood-1","result":{}}"#);
        log.push(a, answer.clone(), true);
        let r = log
            .resume(&format!("{a}-{LIVE_CAPACITY}"))
            .expect("only notifications were lost: resumable");
        let last = r.replay.last().expect("replay");
        assert_eq!((&last.data, last.last), (&answer, true));
        // A lost request or response is never skipped over.
        let (b, _rx) = log.open();
        log.push(
            b,
            data(r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}"#),
            false,
        );
        for i in 0..(MAX_EVENTS + 1) {
            log.push(b, progress(i), false);
        }
        assert_eq!(
            log.resume(&format!("{b}-0")).unwrap_err(),
            ResumeError::Gone
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        let log = EventLog::default();
        assert_eq!(log.resume("nope").unwrap_err(), ResumeError::Malformed);
        assert_eq!(log.resume("9-1").unwrap_err(), ResumeError::Gone);
        let (a, _rx) = log.open();
        for i in 0..(MAX_EVENTS + 10) {
            log.push(a, data(&i.to_string()), false);
        }
        assert_eq!(
            log.resume(&format!("{a}-1")).unwrap_err(),
            ResumeError::Gone,
            "evicted"
        );
        assert!(log.resume(&format!("{a}-{}", MAX_EVENTS + 5)).is_ok());
        assert_eq!(
            log.resume(&format!("{a}-99999")).unwrap_err(),
            ResumeError::Gone,
            "future id"
        );
    }

    #[tokio::test]
    async fn standalone_queues_until_attached() {
        let log = EventLog::default();
        log.push_standalone(data("early"));
        let mut att = log.attach_standalone();
        assert_eq!(att.replay.len(), 1);
        log.push_standalone(data("late"));
        assert_eq!(
            att.live.as_mut().unwrap().recv().await.unwrap().data,
            data("late")
        );
    }

    #[tokio::test]
    async fn a_new_standalone_get_does_not_repeat_what_an_earlier_one_was_sent() {
        let log = EventLog::default();
        let mut first = log.attach_standalone();
        log.push_standalone(data("one"));
        assert_eq!(
            first.live.as_mut().unwrap().recv().await.unwrap().data,
            data("one")
        );
        drop(first);
        log.push_standalone(data("queued"));
        let mut second = log.attach_standalone();
        let got: Vec<Bytes> = second.replay.iter().map(|f| f.data.clone()).collect();
        assert_eq!(got, [data("queued")], "only what nobody was sent");
        log.push_standalone(data("live"));
        assert_eq!(
            second.live.as_mut().unwrap().recv().await.unwrap().data,
            data("live")
        );
        // The explicit resumption still replays from the id it names.
        let r = log.resume(&format!("{}-0", second.stream)).unwrap();
        assert_eq!(r.replay.len(), 3);
    }

    #[tokio::test]
    async fn a_standalone_get_after_evictions_still_gets_live_events() {
        // A long-lived session whose standalone stream saw more events than the
        // buffer holds: each later GET must still be attached (the soak run found
        // GETs that stayed silent forever once anything had been evicted).
        let log = EventLog::default();
        for round in 0..3 {
            let mut att = log.attach_standalone();
            for i in 0..(MAX_EVENTS + 10) {
                log.push_standalone(data(&format!("{round}-{i}")));
                let f = att.live.as_mut().expect("attached").recv().await.unwrap();
                assert_eq!(f.data, data(&format!("{round}-{i}")));
            }
        }
        log.push_standalone(data("while detached"));
        let mut att = log.attach_standalone();
        assert_eq!(att.replay.len(), 1, "the one queued while nobody listened");
        log.push_standalone(data("after"));
        assert_eq!(
            att.live.as_mut().unwrap().recv().await.unwrap().data,
            data("after")
        );
    }

    #[tokio::test]
    async fn slow_reader_is_cut_off() {
        let log = EventLog::default();
        let (a, mut rx) = log.open();
        for i in 0..(LIVE_CAPACITY + 5) {
            log.push(a, data(&i.to_string()), false);
        }
        let mut n = 0;
        while rx.recv().await.is_some() {
            n += 1;
        }
        assert_eq!(n, LIVE_CAPACITY, "channel closed after the overflow");
    }
}

//! `GET` with `Last-Event-ID` for a stream another replica produced (MCP
//! 2025-11-25 basic/transports, resumability): its events are read from the
//! shared store's mirror (`mcpg:{h}:ev`), the ones after the id replayed, then
//! the rest followed until the last event: read again when the session's
//! doorbell rings (`cluster::Bell`: the producer publishes with each event),
//! and polled slowly in case a ring was lost. If the producing replica
//! stops heartbeating before the last event, the request it was serving ends
//! with a terminal JSON-RPC error (-32603) written for every resumer: the call
//! is never run again (at most once).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::sse::event_aad;
use crate::cluster::{Bell, MirroredEvent, Purpose, Sealer, SharedStore};
use crate::jsonrpc::{self, ErrorObject, Id};
use crate::streamable_http::{Attached, Frame, ResumeError};

/// How often, at most, a resumed stream without a doorbell (the store did
/// not answer the subscription) looks for the producer's next events: the
/// first look comes after [`FIRST_POLL`], each next one after twice the wait
/// (up to this), back to [`FIRST_POLL`] after events came.
const POLL: Duration = Duration::from_millis(200);

/// How often a resumed stream with a doorbell reads the mirror unrung (a
/// ring lost while the connection was down).
const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// The first wait of a follower (a forwarded call's answer often comes
/// within a few milliseconds).
const FIRST_POLL: Duration = Duration::from_millis(2);

/// How often, at most, a follower asks whether the producer still heartbeats.
const ALIVE_EVERY: Duration = Duration::from_secs(1);

/// The terminal error of a stream whose producer stopped heartbeating.
const STOPPED: &str =
    "the gateway replica serving this request stopped before it answered; it was not retried";

/// The terminal error of a handed request whose answer never came.
const NO_ANSWER: &str = "the gateway replica running this session's backend process did not write its answer in time; it may have run";

/// Frames queued toward the resumed response.
const CAPACITY: usize = 64;

/// Attaches to stream `stream` of session `h` after `after`, from the mirror.
/// `Gone` when the mirror does not know the stream, lost events after `after`,
/// or has nothing more to give.
pub async fn elsewhere(
    store: &Arc<SharedStore>,
    sealer: &Arc<Sealer>,
    h: &str,
    stream: u64,
    after: u64,
) -> Result<Attached, ResumeError> {
    let events = store
        .mirror()
        .events_of(h, stream, None)
        .await
        .map_err(|_| ResumeError::Gone)?;
    attach(store, sealer, h, stream, after, &events, None)
}

/// Follows stream `stream` of session `h` that `producer` runs for this
/// replica (a request handed to the session's owner, `owner.rs`, its
/// JSON-RPC id `request_id` as JSON text), from its start: `None` only when
/// the stream really ended without a response (the host cancelled it). A
/// store that does not answer now, or a mirror not showing the stream yet,
/// is followed all the same. The follower ends the stream with a terminal
/// -32603 once nothing came for `backstop` (the backend's call timeout and a
/// margin): the owner then failed to write the response.
pub async fn handed(
    store: &Arc<SharedStore>,
    sealer: &Arc<Sealer>,
    h: &str,
    stream: u64,
    producer: &str,
    request_id: &str,
    backstop: Duration,
) -> Option<Attached> {
    if let Ok(events) = store.mirror().events_of(h, stream, None).await {
        match attach(store, sealer, h, stream, 0, &events, Some(backstop)) {
            Ok(attached) => return Some(attached),
            Err(_) if events.iter().any(|e| e.last) => return None,
            Err(_) => {}
        }
    }
    let (tx, rx) = mpsc::channel(CAPACITY);
    let follow = Follow {
        store: store.clone(),
        sealer: sealer.clone(),
        h: h.to_owned(),
        stream,
        producer: producer.to_owned(),
        request_id: request_id.to_owned(),
        backstop: Some(backstop),
    };
    tokio::spawn(follow.run(0, String::new(), tx));
    Some(Attached {
        stream,
        replay: Vec::new(),
        live: Some(rx),
        prime_due: true,
    })
}

/// Attaches to stream `stream` after `after` given the mirror's `events`.
fn attach(
    store: &Arc<SharedStore>,
    sealer: &Arc<Sealer>,
    h: &str,
    stream: u64,
    after: u64,
    events: &[MirroredEvent],
    backstop: Option<Duration>,
) -> Result<Attached, ResumeError> {
    let first = events.first().ok_or(ResumeError::Gone)?;
    if first.seq > after + 1 {
        return Err(ResumeError::Gone);
    }
    // Events are mirrored behind the host's copy: the host may have seen more
    // than the store holds yet. Follow from what it saw.
    let known = events.iter().map(|e| e.seq).max().unwrap_or(0).max(after);
    let finished = events.iter().any(|e| e.last);
    // A write retried after a late reply may be there twice: the first only.
    let mut seen = after;
    let replay: Vec<Frame> = events
        .iter()
        .filter(|e| {
            let new = e.seq > seen;
            seen = seen.max(e.seq);
            new && e.seq > 0
        })
        .map(|e| open(sealer, h, e))
        .collect::<Option<Vec<_>>>()
        .ok_or(ResumeError::Gone)?
        .into_iter()
        .filter(|f| !is_closed(f))
        .collect();
    if finished && replay.is_empty() {
        return Err(ResumeError::Gone);
    }
    let live = (!finished).then(|| {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let follow = Follow {
            store: store.clone(),
            sealer: sealer.clone(),
            h: h.to_owned(),
            stream,
            producer: first.producer.clone(),
            request_id: first.request_id.clone(),
            backstop,
        };
        let entry = events.last().map(|e| e.entry.clone()).unwrap_or_default();
        tokio::spawn(follow.run(known, entry, tx));
        rx
    });
    Ok(Attached {
        stream,
        replay,
        live,
        prime_due: true,
    })
}

/// Whether `f` is the mark of a stream that ended without a response (the
/// host cancelled the request): a last event with no data, never sent.
fn is_closed(f: &Frame) -> bool {
    f.last && f.data.is_empty()
}

/// A mirrored event as a frame, its data opened (`None`: it does not open
/// with our keys, or not as this session's event at this place).
fn open(sealer: &Sealer, h: &str, e: &MirroredEvent) -> Option<Frame> {
    let sealed = std::str::from_utf8(&e.data).ok()?;
    let aad = event_aad(h, e.stream, e.seq);
    let data = sealer.open(Purpose::Value, aad.as_bytes(), sealed)?;
    Some(Frame {
        stream: e.stream,
        seq: e.seq,
        data: Bytes::from(data),
        last: e.last,
    })
}

/// Resolves when `bell` rings; never without one.
async fn rung(bell: &mut Option<Bell>) {
    match bell {
        Some(b) => b.rung().await,
        None => std::future::pending().await,
    }
}

/// How long ago (ms, by this machine's clock) the store took the entry whose
/// id is `entry` (`MS-N`: Redis stamps entries with its own clock), for the
/// debug log; `None` when it cannot tell.
fn lag_ms(entry: &str) -> Option<i128> {
    let added: i128 = entry.split_once('-')?.0.parse().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(now.as_millis() as i128 - added)
}

/// Follows a stream another replica is producing.
struct Follow {
    store: Arc<SharedStore>,
    sealer: Arc<Sealer>,
    h: String,
    stream: u64,
    producer: String,
    request_id: String,
    /// Ends the stream with a terminal error once no event came for this
    /// long (a handed request; `None`: only the producer's death ends it).
    backstop: Option<Duration>,
}

impl Follow {
    /// Sends the events after `seen` (read after store entry `entry`) to `tx`
    /// until the last one, the host leaving, or the producer's death (then the
    /// terminal error).
    async fn run(self, mut seen: u64, mut entry: String, tx: mpsc::Sender<Frame>) {
        // Subscribed before the first read: nothing written after it is
        // missed (what came since the caller's read is read at once).
        let mut bell = self.store.bell(&self.h).await;
        let mut wait = FIRST_POLL;
        let mut alive_checked: Option<tokio::time::Instant> = None;
        let mut heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                () = rung(&mut bell) => {}
                _ = tx.closed() => return,
            }
            wait = match bell {
                Some(_) => FALLBACK_POLL,
                None => (wait * 2).min(POLL),
            };
            let after = Some(entry.as_str()).filter(|e| !e.is_empty());
            let Ok(events) = self
                .store
                .mirror()
                .events_of(&self.h, self.stream, after)
                .await
            else {
                continue;
            };
            if let Some(e) = events.last() {
                entry = e.entry.clone();
            }
            let new: Vec<&MirroredEvent> = events.iter().filter(|e| e.seq > seen).collect();
            if new.is_empty() {
                if self.backstop.is_some_and(|b| heard.elapsed() >= b) {
                    let _ = tx.send(self.terminal(seen + 1, NO_ANSWER).await).await;
                    return;
                }
                if alive_checked.is_some_and(|at| at.elapsed() < ALIVE_EVERY) {
                    continue;
                }
                alive_checked = Some(tokio::time::Instant::now());
                if !self.store.is_alive(&self.producer).await {
                    let _ = tx.send(self.terminal(seen + 1, STOPPED).await).await;
                    return;
                }
                continue;
            }
            if bell.is_none() {
                wait = FIRST_POLL;
            }
            heard = tokio::time::Instant::now();
            for e in new {
                seen = e.seq;
                let Some(frame) = open(&self.sealer, &self.h, e) else {
                    tracing::warn!(
                        stream = self.stream,
                        seq = e.seq,
                        "a mirrored event does not open; stream ended"
                    );
                    return;
                };
                tracing::debug!(stream = self.stream, seq = e.seq, lag_ms = ?lag_ms(&e.entry),
                    "followed event sent on");
                if is_closed(&frame) || tx.send(frame).await.is_err() || e.last {
                    return;
                }
            }
        }
    }

    /// The terminal error for a request whose replica stopped: mirrored too,
    /// so every resumer sees the same end.
    async fn terminal(&self, seq: u64, why: &str) -> Frame {
        let id = Id::from_json(&self.request_id);
        let error = ErrorObject::new(jsonrpc::INTERNAL_ERROR, why);
        let data = jsonrpc::error_bytes(id.as_ref(), &error);
        let aad = event_aad(&self.h, self.stream, seq);
        let sealed = self.sealer.seal(Purpose::Value, aad.as_bytes(), &data);
        tracing::info!(replica = %self.producer, stream = self.stream, why,
            "a followed stream ended with an error");
        let ev = MirroredEvent {
            stream: self.stream,
            seq,
            last: true,
            producer: self.store.tag().to_owned(),
            request_id: self.request_id.clone(),
            data: sealed.into_bytes(),
            entry: String::new(),
        };
        let _ = self.store.mirror().add(&self.h, &ev).await;
        Frame {
            stream: self.stream,
            seq,
            data: Bytes::from(data),
            last: true,
        }
    }
}

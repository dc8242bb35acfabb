//! The standalone (GET) stream with a shared store: a host's `GET` claims the
//! stream it attaches to for this replica (`cluster::StandaloneClaim`), whose
//! events are then mirrored (sealed) to the store; a `GET` + `Last-Event-ID`
//! of a standalone stream another replica produced re-attaches here.
//!
//! The rule (MCP 2025-11-25 basic/transports, resumability and redelivery:
//! replay is optional, never from another stream; event ids unique within the
//! session): when the mirror holds every event after the host's id, they are
//! replayed and this replica continues the same stream with the next sequence
//! numbers, so the host sees ids that keep increasing with no gap and no
//! repeat. When it does not (trimmed, expired, not written while the store was
//! down), the host gets a new standalone stream that starts from now (200,
//! priming event), not 410: the standalone stream carries only messages
//! unrelated to any request, which the host may miss, and a 410 would leave it
//! with no stream at all (the Python SDK stops after two tries). A POST
//! stream's resumption is `resume.rs`'s. An id is only honoured as a
//! standalone stream of this session if this session's record or mirror names
//! it (both are keyed by the session): another session's id never replays
//! anything.
//!
//! What this replica's backends send for the standalone stream while it does
//! not produce it (no `GET` attached here, no claim) is forwarded to the
//! replica the record's `sa` names, through its inbox, and that replica puts
//! it on the stream (MCP 2025-11-25 basic/transports: a message goes on one
//! stream only, so it is never also kept here); with no other live producer it
//! stays on this replica's stream, as without a store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use prometheus::IntCounter;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::AppState;
use super::sse::event_aad;
use crate::cluster::{MirroredEvent, Purpose, SharedStore, StandaloneClaim, StandaloneWrite};
use crate::session::{ForwardQueue, Session, forward_channel};
use crate::streamable_http::{Attached, Frame, ResumeError};

/// How long a read of `sa` naming another replica is trusted.
const ELSEWHERE_FOR: Duration = Duration::from_secs(1);

/// How long a read of `sa` naming no other replica is trusted (short: a host
/// opening its `GET` elsewhere is heard of soon).
const NOWHERE_FOR: Duration = Duration::from_millis(200);

/// At most this many messages are forwarded in one round trip.
const FORWARD_BATCH: usize = 64;

/// Gives `session`'s event log the writer of its mirrored standalone events,
/// and the session the hand-off of unrelated messages to the replica that
/// produces its standalone stream (with a shared store; nothing otherwise).
/// One task each per session, ended with the session; events are written in
/// order, off the host's path.
pub(super) fn wire(st: &AppState, session: &Arc<Session>) {
    let Some(store) = st.supervisor.shared().cloned() else {
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    session
        .events()
        .set_standalone_mirror(Box::new(move |f: &Frame| {
            let _ = tx.send(f.clone());
        }));
    let (sealer, weak) = (st.sealer.clone(), Arc::downgrade(session));
    let h = session.store_key().to_owned();
    let forward_store = store.clone();
    // Set when the store names another producer than last read.
    let reread = Arc::new(AtomicBool::new(false));
    let stale = reread.clone();
    tokio::spawn(async move {
        // Events of a stream taken back (stream, up to seq): not written.
        let mut taken: Option<(u64, u64)> = None;
        while let Some(f) = rx.recv().await {
            if taken.is_some_and(|(stream, upto)| f.stream == stream && f.seq <= upto) {
                continue;
            }
            let aad = event_aad(&h, f.stream, f.seq);
            let sealed = sealer.seal(Purpose::Value, aad.as_bytes(), &f.data);
            let write = store
                .standalone()
                .mirror(&h, f.stream, f.seq, sealed.as_bytes());
            let taken_over = match write.await {
                Ok(StandaloneWrite::TakenOver) => true,
                // The host listens to another stream: this one is no longer
                // claimed here.
                Ok(StandaloneWrite::NotCurrent) => false,
                _ => continue,
            };
            let Some(s) = weak.upgrade() else { return };
            if taken_over {
                // Forgotten here, so that a `Last-Event-ID` of it reaching
                // this replica is served from the mirror.
                tracing::info!(session = %s.log_id(), stream = f.stream,
                    "the standalone stream continues on another replica; forgotten here");
            }
            // What the stream's host may not have read goes to its producer now.
            tracing::debug!(session = %s.log_id(), stream = f.stream, seq = f.seq, taken_over,
                "standalone event refused by the store; handed on");
            stale.store(true, Ordering::Release);
            taken = s
                .hand_back_standalone(f.stream, f.seq, taken_over)
                .map(|upto| (f.stream, upto));
        }
    });
    let (forward, queue) = forward_channel();
    session.forward_unrelated(forward);
    let counter = st
        .metrics
        .cluster_forwarded
        .with_label_values(&["standalone"]);
    tokio::spawn(hand_off(
        forward_store,
        Arc::downgrade(session),
        queue,
        counter,
        reread,
    ));
}

/// Hands the unrelated messages of `session` that no standalone stream here
/// takes to the replica producing the one its host listens to (one `EVAL`
/// per batch, and an `HGET` of `sa` at most every [`ELSEWHERE_FOR`]); puts
/// them on the local stream when there is none (or it is dead, or the store
/// does not answer). `reread`: set when the store refused a mirrored event,
/// so the producer last read is stale.
async fn hand_off(
    store: Arc<SharedStore>,
    session: Weak<Session>,
    mut queue: ForwardQueue,
    counter: IntCounter,
    reread: Arc<AtomicBool>,
) {
    let mut producer = Producer::default();
    while let Some(batch) = queue.next_batch(FORWARD_BATCH).await {
        let Some(s) = session.upgrade() else { return };
        if reread.swap(false, Ordering::AcqRel) {
            // The store refused a mirrored event: the producer changed.
            producer = Producer::default();
        }
        let n = batch.len();
        let to = if s.events().standalone_here() {
            None
        } else {
            producer.elsewhere(&store, &s).await
        };
        let sent = match to {
            Some(tag) => {
                let messages: Vec<&[u8]> = batch.iter().map(|m| &m[..]).collect();
                match store
                    .standalone()
                    .forward(&tag, s.store_key(), &messages)
                    .await
                {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::debug!(session = %s.log_id(), replica = %tag,
                            "the replica producing the standalone stream is gone; kept here");
                        producer = Producer::default();
                        false
                    }
                    Err(_) => {
                        tracing::debug!(session = %s.log_id(),
                            "standalone messages not forwarded: the shared store is unavailable; kept here");
                        false
                    }
                }
            }
            None => false,
        };
        if sent {
            counter.inc_by(n as u64);
        } else {
            for m in batch {
                s.send_unrelated_here(m);
            }
        }
        queue.done(n);
    }
}

/// The replica producing a session's standalone stream, as last read.
#[derive(Default)]
struct Producer {
    /// Another replica's tag (`None`: none, or this one).
    tag: Option<String>,
    /// Until when the read is trusted (`None`: never read).
    until: Option<Instant>,
}

impl Producer {
    /// The tag of the other replica producing `session`'s standalone stream,
    /// read again once the last read is too old; `None` when none does or the
    /// store does not answer (not remembered).
    async fn elsewhere(&mut self, store: &SharedStore, session: &Session) -> Option<String> {
        if self.until.is_some_and(|u| Instant::now() < u) {
            return self.tag.clone();
        }
        let Ok(claim) = store.standalone().current(session.store_key()).await else {
            tracing::debug!(session = %session.log_id(),
                "standalone producer unknown: the shared store is unavailable");
            return None;
        };
        self.tag = claim.map(|c| c.producer).filter(|p| p != store.tag());
        let trust = if self.tag.is_some() {
            ELSEWHERE_FOR
        } else {
            NOWHERE_FOR
        };
        self.until = Some(Instant::now() + trust);
        self.tag.clone()
    }
}

/// Attaches a `GET` without `Last-Event-ID` to the standalone stream (`prime`:
/// its answer will be primed, see `EventLog::attach_standalone`) and,
/// with a shared store, claims it for this replica (one round trip; a store
/// that does not answer leaves it unclaimed, so unmirrored).
pub(super) async fn attach(st: &AppState, session: &Session, prime: bool) -> Attached {
    let attached = session.events().attach_standalone(prime);
    if let Some(store) = st.supervisor.shared()
        && let Ok(Some(_)) = store
            .standalone()
            .claim(session.store_key(), attached.stream, true)
            .await
    {
        session.events().mirror_standalone(attached.stream, true);
    }
    attached
}

/// A `GET` + `Last-Event-ID` `{stream}-{after}` as the resumption of a
/// standalone stream: `None` when it is not one of this session's (then it is
/// a POST stream's id, or unknown); otherwise the attached stream and whether
/// it is new (its priming event is due).
pub(super) async fn resume(
    st: &AppState,
    store: &Arc<SharedStore>,
    session: &Session,
    stream: u64,
    after: u64,
) -> Option<Result<(Attached, bool), ResumeError>> {
    let h = session.store_key();
    let prev = store.standalone().claim(h, stream, false).await.ok()??;
    let current = prev.filter(|c| c.stream == stream);
    let Some(claim) = current else {
        // Not the stream the record names: an earlier standalone stream of
        // this session (the mirror says so), or not a standalone stream.
        let events = store.mirror().events_of(h, stream, None).await.ok()?;
        events
            .iter()
            .any(|e| e.request_id.is_empty())
            .then_some(())?;
        return Some(Ok((fresh(store, session).await, true)));
    };
    if claim.producer == store.tag() && session.events().standalone() == Some(stream) {
        // Still ours: the local log has it.
        let id = format!("{stream}-{after}");
        if let Ok(attached) = session.events().resume(&id) {
            return Some(Ok((attached, false)));
        }
    }
    session.events().forget(stream);
    match replay(st, store, h, &claim, after).await {
        Some((next, frames)) => {
            tracing::info!(session = %session.log_id(), stream, after, replayed = frames.len(),
                from = %claim.producer, "standalone stream continued from the shared store");
            let attached = session.events().take_standalone(Some(stream), next, frames);
            Some(Ok((attached, false)))
        }
        None => {
            tracing::info!(session = %session.log_id(), stream, after,
                "standalone stream's events after this id are not all in the shared store: a new stream");
            Some(Ok((fresh(store, session).await, true)))
        }
    }
}

/// The mirrored events of `claim`'s stream after `after`, opened, and the
/// next sequence number; `None` when one of them is missing or does not open.
async fn replay(
    st: &AppState,
    store: &SharedStore,
    h: &str,
    claim: &StandaloneClaim,
    after: u64,
) -> Option<(u64, Vec<Frame>)> {
    let events = store.mirror().events_of(h, claim.stream, None).await.ok()?;
    let mut expected = after + 1;
    let mut frames = Vec::new();
    for e in events
        .iter()
        .filter(|e| e.seq > after && e.request_id.is_empty())
    {
        if e.seq != expected {
            return None;
        }
        frames.push(open(st, h, e)?);
        expected += 1;
    }
    // The host may have seen events the store never got (written behind):
    // continue after what it saw. It must not have missed stored ones.
    (claim.last_seq < expected).then_some((expected, frames))
}

/// A mirrored standalone event as a frame (`None`: it does not open as this
/// session's event at this place).
fn open(st: &AppState, h: &str, e: &MirroredEvent) -> Option<Frame> {
    let sealed = std::str::from_utf8(&e.data).ok()?;
    let aad = event_aad(h, e.stream, e.seq);
    let data = st.sealer.open(Purpose::Value, aad.as_bytes(), sealed)?;
    Some(Frame {
        stream: e.stream,
        seq: e.seq,
        data: Bytes::from(data),
        last: false,
    })
}

/// A new standalone stream from now, claimed for this replica.
async fn fresh(store: &SharedStore, session: &Session) -> Attached {
    let attached = session.events().take_standalone(None, 1, Vec::new());
    let claimed = store
        .standalone()
        .claim(session.store_key(), attached.stream, true)
        .await;
    if !matches!(claimed, Ok(Some(_))) {
        // Unclaimed: its events stay local (not mirrored).
        tracing::debug!(
            stream = attached.stream,
            "new standalone stream not claimed"
        );
    }
    attached
}

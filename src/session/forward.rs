//! The hand-off of a session's messages for its standalone stream when this
//! process does not produce that stream (with a shared store another replica
//! may: `http/standalone.rs` reads which and forwards them there). Messages
//! keep their order: while any is waiting to be handed off, later ones wait
//! behind it rather than going to the local stream first. What the store
//! refused to mirror because another replica produces the stream the host
//! listens to now is handed off too, ahead of what follows.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Session;

/// The sending side, held by the session.
pub struct Forward {
    tx: mpsc::UnboundedSender<Bytes>,
    /// Messages sent and not yet [`ForwardQueue::done`].
    pending: Arc<AtomicUsize>,
}

/// The receiving side, held by the task that hands messages off.
pub struct ForwardQueue {
    rx: mpsc::UnboundedReceiver<Bytes>,
    pending: Arc<AtomicUsize>,
}

/// A new hand-off: the session's side and the task's.
pub fn forward_channel() -> (Forward, ForwardQueue) {
    let (tx, rx) = mpsc::unbounded_channel();
    let pending = Arc::new(AtomicUsize::new(0));
    let queue = ForwardQueue {
        rx,
        pending: pending.clone(),
    };
    (Forward { tx, pending }, queue)
}

impl Forward {
    /// Whether messages are waiting to be handed off.
    pub(super) fn busy(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Queues `msg`; back when the task is gone.
    pub(super) fn send(&self, msg: Bytes) -> Result<(), Bytes> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.tx.send(msg).map_err(|e| {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            e.0
        })
    }
}

impl ForwardQueue {
    /// The messages waiting (at least one, at most `max`, in order); `None`
    /// once the session is gone.
    pub async fn next_batch(&mut self, max: usize) -> Option<Vec<Bytes>> {
        let mut batch = Vec::new();
        (self.rx.recv_many(&mut batch, max).await > 0).then_some(batch)
    }

    /// `n` messages were handed off (or put on the local stream).
    pub fn done(&self, n: usize) {
        self.pending.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Session {
    /// Sends a message unrelated to any host request on the standalone (GET)
    /// stream; queued (bounded) until the host opens one. With a hand-off
    /// ([`Session::forward_unrelated`]) and no standalone stream produced
    /// here, or messages waiting in it, it goes through the hand-off (to the
    /// replica that produces it).
    pub fn send_unrelated(&self, mut msg: Bytes) -> bool {
        if let Some(f) = self.live.forward.get() {
            if !f.busy() {
                match self.live.events.push_standalone_if_here(msg) {
                    Ok(()) => return true,
                    Err(back) => msg = back,
                }
            }
            match f.send(msg) {
                Ok(()) => return true,
                Err(back) => msg = back,
            }
        }
        self.send_unrelated_here(msg)
    }

    /// Sends a message on this process's standalone stream, not handed off:
    /// what another replica handed off to this one, or what the hand-off put
    /// back here (no other replica produces the stream).
    pub fn send_unrelated_here(&self, msg: Bytes) -> bool {
        self.live.events.push_standalone(msg);
        true
    }

    /// Sends what this process makes for its own copy of the session (lists
    /// changed) on its standalone stream: every replica sends its own, so it
    /// is never handed off, nor back when the store refuses it.
    pub fn announce_here(&self, msg: Bytes) {
        self.live.events.push_standalone_own(msg);
    }

    /// Sets where unrelated messages go while no standalone stream is
    /// produced here (once).
    pub fn forward_unrelated(&self, forward: Forward) {
        let _ = self.live.forward.set(forward);
    }

    /// The store refused to mirror event `seq` of standalone stream `stream`
    /// (`taken_over`: another replica continues that stream; otherwise the
    /// host listens to another one): it and the later events of that stream
    /// that no `GET` here was handed go through the hand-off, in order,
    /// ahead of any message sent after (see `EventLog::take_back`). Returns
    /// the last seq the stream had numbered (`None`: not here).
    pub fn hand_back_standalone(&self, stream: u64, seq: u64, taken_over: bool) -> Option<u64> {
        let forward = self.live.forward.get();
        self.live.events.take_back(stream, seq, taken_over, |m| {
            // No hand-off (or its task ended with the session): nowhere to go.
            if let Some(f) = forward {
                let _ = f.send(m);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn busy_until_done() {
        let (f, mut q) = forward_channel();
        assert!(!f.busy());
        f.send(Bytes::from_static(b"a")).unwrap();
        f.send(Bytes::from_static(b"b")).unwrap();
        assert!(f.busy());
        let batch = q.next_batch(8).await.unwrap();
        assert_eq!(batch, [&b"a"[..], &b"b"[..]]);
        assert!(f.busy(), "until handled");
        q.done(batch.len());
        assert!(!f.busy());
        drop(q);
        assert_eq!(
            f.send(Bytes::from_static(b"c")),
            Err(Bytes::from_static(b"c"))
        );
        assert!(!f.busy());
    }
}

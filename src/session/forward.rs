//! The hand-off of a session's messages for its standalone stream when this
//! process does not produce that stream (with a shared store another replica
//! may: `http/standalone.rs` reads which and forwards them there). Messages
//! keep their order: while any is waiting to be handed off, later ones wait
//! behind it rather than going to the local stream first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

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

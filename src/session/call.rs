//! One host request being served by a backend ([`HostCall`]): where its related
//! messages and its response go, and which upstream request it became, so a
//! host's `notifications/cancelled` reaches it (MCP 2025-11-25
//! basic/utilities/cancellation).

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::Session;
use crate::backend::{Caller, Connection};
use crate::jsonrpc::Id;

/// A message for a host: one serialized JSON-RPC message.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// A notification or request related to the host request (goes before the
    /// response on its stream).
    Message(Bytes),
    /// The response that ends the host request's stream.
    Final(Bytes),
}

/// One host request being served by a backend.
pub struct HostCall {
    /// The session.
    pub session: Arc<Session>,
    /// The host's id for the request.
    pub id: Id,
    /// The host's progress token, if it asked for progress.
    pub progress_token: Option<Value>,
    sink: mpsc::Sender<Outbound>,
    upstream: Mutex<Option<(Weak<Connection>, u64)>>,
    last_progress: Mutex<Option<f64>>,
    cancelled: AtomicBool,
}

impl HostCall {
    /// A call whose messages go to `sink`.
    pub fn new(
        session: Arc<Session>,
        id: Id,
        progress_token: Option<Value>,
        sink: mpsc::Sender<Outbound>,
    ) -> Self {
        HostCall {
            session,
            id,
            progress_token,
            sink,
            upstream: Mutex::new(None),
            last_progress: Mutex::new(None),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Marks the call cancelled by the host. Returns the upstream request it
    /// became, if any, so the caller can cancel that too. A request started after
    /// this gives up by itself ([`Caller::started`] answers `false`).
    pub fn mark_cancelled(&self) -> Option<(Arc<Connection>, u64)> {
        self.cancelled.store(true, Ordering::SeqCst);
        self.upstream()
    }

    /// Whether the host cancelled this call.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// The upstream request, if it is still known.
    pub fn upstream(&self) -> Option<(Arc<Connection>, u64)> {
        let u = self.upstream.lock().ok()?;
        let (conn, id) = u.as_ref()?;
        Some((conn.upgrade()?, *id))
    }

    /// Accepts a progress value only if it increases (MCP basic/utilities/progress:
    /// progress MUST increase with each notification).
    pub fn accept_progress(&self, progress: f64) -> bool {
        let Ok(mut last) = self.last_progress.lock() else {
            return false;
        };
        if last.is_some_and(|l| progress <= l) {
            return false;
        }
        *last = Some(progress);
        true
    }

    /// Sends a related message to the host (dropped, and counted, if the host is
    /// not reading).
    pub fn send_related(&self, msg: Bytes) -> bool {
        let sent = self.sink.try_send(Outbound::Message(msg));
        if matches!(sent, Err(mpsc::error::TrySendError::Full(_))) {
            tracing::debug!("host call queue full; related message dropped");
            self.session.events().count_drop();
        }
        sent.is_ok()
    }

    /// Sends the response; returns false if the host no longer listens.
    pub async fn finish(&self, msg: Bytes) -> bool {
        self.sink.send(Outbound::Final(msg)).await.is_ok()
    }

    /// Sends the response and waits, at most `limit`, until its stream took it
    /// (the JSON answer or the SSE pump let go of the call's queue), so closing
    /// the session right after cannot cut the response off.
    pub async fn finish_flushed(&self, msg: Bytes, limit: std::time::Duration) -> bool {
        let sent = self.finish(msg).await;
        let _ = tokio::time::timeout(limit, self.sink.closed()).await;
        sent
    }
}

impl Caller for HostCall {
    fn wants_progress(&self) -> bool {
        self.progress_token.is_some()
    }

    fn started(&self, conn: &Arc<Connection>, id: u64) -> bool {
        if let Ok(mut u) = self.upstream.lock() {
            *u = Some((Arc::downgrade(conn), id));
        }
        // A host cancel that came before the line above found no upstream
        // request to cancel; it set the flag instead.
        !self.is_cancelled()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

//! Host cancels that reach the owner of a session's per-session children
//! (`[cluster] redis`, the `ctl` broadcast) before the request they name,
//! handed to it through its inbox, is registered: the two travel apart, so
//! the cancel may come first. Held briefly, bounded, and applied when the
//! request registers (`http/owner.rs`), so the request is cancelled as if the
//! cancel had come after it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::Relay;
use crate::jsonrpc::Id;
use crate::session::Session;

/// Most cancels held for requests not registered yet.
const EARLY_MAX: usize = 256;
/// How long such a cancel is held: longer than a handed request takes to be
/// picked up (`http/owner.rs`, 1 s).
const EARLY_TTL: Duration = Duration::from_secs(5);

/// Host cancels forwarded by other replicas, and those held for requests not
/// registered yet (session id, `notifications/cancelled` params, arrival);
/// from [`Relay::cancels`]. The lock also orders a cancel's look for its
/// request against that request's look for its cancel: one of them sees the
/// other.
#[derive(Default)]
pub struct Cancels(Mutex<VecDeque<(Arc<str>, Value, Instant)>>);

impl Cancels {
    /// A cancel another replica received for a call of `session` (`params`:
    /// the notification's params as JSON text): applied if the call runs
    /// here; held for a moment if this replica owns the session's children
    /// (the call may be on its way: [`Cancels::apply_early`]); else
    /// ignored.
    pub fn forwarded(&self, session: &Session, params: &str) {
        let Ok(p) = serde_json::from_str::<Value>(params) else {
            return;
        };
        let Ok(mut held) = self.0.lock() else {
            return;
        };
        if Relay::cancel_here(session, &p) || !session.may_own() {
            return;
        }
        let now = Instant::now();
        held.retain(|e| now.duration_since(e.2) < EARLY_TTL);
        if held.len() >= EARLY_MAX {
            held.pop_front();
        }
        held.push_back((session.id().clone(), p, now));
    }

    /// Applies a held cancel for request `id` of `session`, which has just
    /// registered (its call is in flight here); whether there was one.
    pub fn apply_early(&self, session: &Session, id: &Id) -> bool {
        let Ok(mut held) = self.0.lock() else {
            return false;
        };
        let now = Instant::now();
        let found = held.iter().position(|(sid, p, at)| {
            now.duration_since(*at) < EARLY_TTL
                && **sid == **session.id()
                && p.get("requestId").is_some_and(|v| id.matches_value(v))
        });
        let Some(params) = found.and_then(|i| held.remove(i)).map(|e| e.1) else {
            return false;
        };
        tracing::info!(session = %session.log_id(), %id, "a cancel that came before its request applied");
        Relay::cancel_here(session, &params);
        true
    }
}

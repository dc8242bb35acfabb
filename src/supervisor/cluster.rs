//! Sessions shared with other replicas through the shared store (`[cluster]
//! redis`): what they broadcast (a session ended, a log level changed, a host
//! cancelled a request or changed its roots, let go of a backend's GET
//! stream: `listener.rs`, an owner's children list for their session alone) or send this replica (a host's answer to a request
//! relayed here, a message for a standalone stream produced here, a request
//! for a per-session child owned here: `owner.rs`), the
//! revalidation of cached sessions after a store outage (broadcasts are lost
//! while the connection is down), and fencing (`owner.rs`). Releasing
//! sessions at a drain is `sessions.rs`'s.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Supervisor;
use crate::cluster::Ctl;
use crate::mcp::LogLevel;
use crate::session::Session;

/// Follows what the shared store reports until it stops.
pub async fn follow_cluster(sup: Arc<Supervisor>, mut events: mpsc::UnboundedReceiver<Ctl>) {
    while let Some(ctl) = events.recv().await {
        match ctl {
            // Ending a session (its children stopping) and a revalidation
            // take seconds: they run on their own, so that requests handed
            // to this replica as an owner meanwhile are picked up in time.
            Ctl::Ended(h) => {
                if let Some(s) = cached(&sup, &h) {
                    tracing::info!(session = %s.log_id(), "session ended on another replica");
                    // Gone at once: nothing that follows runs in it.
                    sup.sessions.remove(s.id());
                    let sup = sup.clone();
                    // That replica ends the backend sessions (one DELETE each).
                    tokio::spawn(async move { sup.end_session_here(&s).await });
                }
            }
            Ctl::Level { h, level } => {
                if let (Some(s), Some(level)) = (cached(&sup, &h), LogLevel::parse(&level)) {
                    sup.apply_level(&s, level);
                }
            }
            Ctl::Answer { h, message } => match cached(&sup, &h) {
                Some(s) => sup.relay.answer_forwarded(&s, &message),
                None => tracing::info!(
                    "answer forwarded for a session this replica no longer holds; dropped"
                ),
            },
            Ctl::Standalone { h, message } => match cached(&sup, &h) {
                Some(s) => {
                    s.send_unrelated_here(message.into());
                }
                None => tracing::debug!(
                    "standalone message forwarded for a session this replica no longer holds; dropped"
                ),
            },
            Ctl::Cancel { h, params } => {
                if let Some(s) = cached(&sup, &h) {
                    sup.relay.cancels().forwarded(&s, &params);
                }
            }
            Ctl::OwnLists { h, on } => {
                if let Some(s) = cached(&sup, &h) {
                    s.set_lists_elsewhere(on);
                }
            }
            Ctl::Roots(h) => {
                if let Some(s) = cached(&sup, &h).filter(|s| s.may_own()) {
                    sup.relay.roots_changed(&s);
                }
            }
            Ctl::Held { h, holder } => {
                if let Some(s) = cached(&sup, &h) {
                    sup.watch_holder(&s, holder);
                }
            }
            Ctl::Vacated(h) => {
                if let Some(s) = cached(&sup, &h) {
                    sup.spawn_take_over(&s);
                }
            }
            Ctl::Unsubscribe { h, backend, uri } => {
                if let Some(s) = cached(&sup, &h) {
                    sup.unsubscribe_forwarded(&s, &backend, &uri);
                }
            }
            Ctl::Call { h, message } => sup.owner_call(h, message),
            Ctl::Listener { h, backend } => sup.standbys.freed(&h, &backend),
            Ctl::Resync => {
                let sup = sup.clone();
                tokio::spawn(async move { revalidate(&sup).await });
            }
            Ctl::Fenced => sup.fence(),
            Ctl::Unfenced => {
                let sup = sup.clone();
                tokio::spawn(async move {
                    sup.unfence().await;
                    sup.recheck_holds().await;
                });
            }
        }
    }
}

/// The cached session whose store key is `h`.
fn cached(sup: &Supervisor, h: &str) -> Option<Arc<Session>> {
    sup.sessions.all().into_iter().find(|s| s.store_key() == h)
}

/// Ends the cached sessions whose record is gone (ended or expired
/// elsewhere while broadcasts could not arrive, or a store that restarted
/// empty). If the store fails again, the next reconnect asks again.
async fn revalidate(sup: &Supervisor) {
    let Some(store) = &sup.shared else {
        return;
    };
    let sessions = sup.sessions.all();
    let keys: Vec<String> = sessions.iter().map(|s| s.store_key().to_owned()).collect();
    let Some(exist) = store.exist(&keys).await else {
        return;
    };
    let mut ended = 0;
    for (s, exists) in sessions.iter().zip(exist) {
        if !exists {
            ended += 1;
            sup.end_session(s).await;
        }
    }
    tracing::info!(
        checked = sessions.len(),
        ended,
        "cached sessions revalidated against the shared store"
    );
}

//! Per-session Streamable HTTP backends' own sessions shared by the replicas
//! through the shared store (`[cluster] redis`, issue 11 item 4): a session's
//! connection to such a backend, opened on any replica, calls the backend on
//! the one backend session recorded for the host session.
//!
//! - The replica that opens a backend session records it (`up:NAME`, sealed:
//!   `cluster/upstream.rs`) with a compare-and-set on the one it replaces (none
//!   the first time). Losing it means another replica recorded its own first:
//!   the loser goes on with the winner's and `DELETE`s its own, just opened
//!   (`Connection::adopt`); when the two were negotiated at different
//!   revisions it keeps its own, unrecorded.
//! - A session's connection to the backend on any replica (its first there,
//!   or one replacing a connection closed for idleness or lost) goes on with
//!   the recorded one, without `initialize`: as the session knows it (the
//!   record read when it was restored, or what this replica recorded or
//!   adopted since), else with one `HGET`. An idle close does not `DELETE`
//!   it (`sessions.rs`).
//! - A 404 for the backend session (the backend forgot it): the connection
//!   first reads the record (another replica may have replaced it already:
//!   adopt that), else initializes once and records the new one as above.
//!
//! Costs: no command per call; one `HGET` when a replica first needs the
//! backend for a session whose restored record named no backend session
//! there (also on the replica that creates it), one `EVAL` per backend
//! session opened, one `HGET` per 404.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;

use prometheus::IntCounterVec;

use super::listener::{Standbys, StoreGate, next_conn};
use crate::backend::{Connection, ListenGate, Owner, RecordedSession, Resume, SessionRecorder};
use crate::catalog::{BackendState, Catalog};
use crate::cluster::{
    Recorded, Sealer, SharedStore, fingerprint, open_upstream, seal_upstream, upstream_field,
};
use crate::config::Transport;
use crate::relay::Relay;
use crate::session::{Session, UpstreamSession};

/// A session's backend sessions on one backend, in the shared store.
struct StoreRecorder {
    store: Arc<SharedStore>,
    sealer: Arc<Sealer>,
    backend: Arc<str>,
    /// The session's store key.
    h: String,
    /// Told what is recorded, so its record stays true.
    session: Weak<Session>,
}

impl StoreRecorder {
    /// The recorded backend session (`None`: none, unreadable, or the store
    /// did not answer).
    async fn fetch(&self) -> Option<RecordedSession> {
        let value = self
            .store
            .upstream()
            .get(&self.h, &self.backend)
            .await
            .ok()??;
        self.open(&value)
    }

    fn open(&self, value: &str) -> Option<RecordedSession> {
        let payload = open_upstream(&self.sealer, &self.h, &self.backend, value);
        let Some(u) = payload.and_then(|p| serde_json::from_slice::<UpstreamSession>(&p).ok())
        else {
            tracing::warn!(backend = %self.backend, "a recorded backend session does not open; ignored");
            return None;
        };
        Some(RecordedSession {
            id: u.id,
            version: u.version,
            capabilities: u.capabilities,
        })
    }

    /// Notes `r` as the session's backend session on this backend.
    fn note(&self, r: &RecordedSession) {
        if let Some(s) = self.session.upgrade() {
            s.set_upstream_session(&self.backend, Some(to_upstream(r)));
        }
    }
}

impl SessionRecorder for StoreRecorder {
    fn recorded(&self, stale: &str) -> BoxFuture<'_, Option<RecordedSession>> {
        let stale = stale.to_owned();
        Box::pin(async move {
            let found = self.fetch().await?;
            (found.id != stale).then(|| {
                self.note(&found);
                found
            })
        })
    }

    fn record(
        &self,
        stale: Option<String>,
        new: RecordedSession,
    ) -> BoxFuture<'_, Option<RecordedSession>> {
        Box::pin(async move {
            let replaces = stale.map(|id| fingerprint(&self.sealer, &id));
            let payload = serde_json::to_vec(&to_upstream(&new)).unwrap_or_default();
            let value = seal_upstream(&self.sealer, &self.h, &self.backend, &new.id, &payload);
            let put =
                self.store
                    .upstream()
                    .record(&self.h, &self.backend, replaces.as_deref(), &value);
            match put.await {
                Ok(Recorded::Taken(v)) => {
                    if let Some(winner) = self.open(&v).filter(|w| w.id != new.id) {
                        self.note(&winner);
                        return Some(winner);
                    }
                }
                Ok(Recorded::Written) => {}
                Ok(Recorded::NoRecord) | Err(_) => {
                    tracing::debug!(backend = %self.backend, "backend session not recorded (session ended, or the store is down)");
                }
            }
            self.note(&new);
            None
        })
    }
}

fn to_upstream(r: &RecordedSession) -> UpstreamSession {
    UpstreamSession {
        id: r.id.clone(),
        version: r.version,
        capabilities: r.capabilities.clone(),
    }
}

/// The shared store's side of per-session Streamable HTTP backends' sessions
/// (a replica with `[cluster] redis` has one): resumes a session's
/// connection on the recorded backend session, gates its GET stream, and ends
/// the ones other replicas opened.
pub(super) struct SharedUpstreams {
    pub(super) store: Arc<SharedStore>,
    pub(super) sealer: Arc<Sealer>,
    pub(super) standbys: Arc<Standbys>,
    /// `mcpgate_cluster_listener_takeovers_total`.
    pub(super) takeovers: IntCounterVec,
    pub(super) catalog: Arc<Catalog>,
    pub(super) relay: Arc<Relay>,
}

impl SharedUpstreams {
    /// How `session`'s own connection to backend `b` starts (`None` for a
    /// backend that is not Streamable HTTP: as without a store): on the
    /// recorded backend session (the one the session knows, else one `HGET`),
    /// also when it replaces an earlier connection here (idle, lost: the
    /// backend session outlives it; if it is gone, the 404 path replaces it),
    /// with its replacements recorded, and its GET stream opened only by the
    /// replica that claims it (`listener.rs`).
    pub(super) async fn resume_for(
        &self,
        session: &Arc<Session>,
        b: &BackendState,
    ) -> Option<Resume> {
        if !matches!(b.spec.config.transport, Transport::Http { .. }) {
            return None;
        }
        let recorder = Arc::new(StoreRecorder {
            store: self.store.clone(),
            sealer: self.sealer.clone(),
            backend: b.spec.name.clone(),
            h: session.store_key().to_owned(),
            session: Arc::downgrade(session),
        });
        let gate = Arc::new(StoreGate {
            store: self.store.clone(),
            h: session.store_key().to_owned(),
            backend: b.spec.name.clone(),
            standbys: self.standbys.clone(),
            takeovers: self.takeovers.clone(),
            held: Default::default(),
            conn: next_conn(),
        });
        let known = session.record().upstream_sessions.remove(&*b.spec.name);
        let recorded = match known {
            Some(u) => Some(RecordedSession {
                id: u.id,
                version: u.version,
                capabilities: u.capabilities,
            }),
            None => recorder.fetch().await,
        };
        let gate: Arc<dyn ListenGate> = gate;
        Some(Resume {
            recorded,
            recorder,
            gate: Some(gate),
        })
    }

    /// Ends (`DELETE`) the backend sessions recorded for `session` that this
    /// process held no connection to (`closed_here`: the ids it just closed),
    /// when the session ends here: another replica opened them.
    pub(super) async fn end_recorded(&self, session: &Arc<Session>, closed_here: &[String]) {
        let record = session.record();
        let ends = record
            .upstream_sessions
            .iter()
            .filter(|(_, u)| !closed_here.contains(&u.id))
            .filter_map(|(name, u)| {
                let b = self.catalog.backends().by_name(name)?;
                let recorded = RecordedSession {
                    id: u.id.clone(),
                    version: u.version,
                    capabilities: u.capabilities.clone(),
                };
                let owner = Owner::Exclusive(session.id().clone());
                let handler = self.relay.handler();
                Some(async move { b.spec.end_recorded(owner, handler, &recorded).await })
            });
        futures_util::future::join_all(ends).await;
    }
}

/// After a session's own connection `conn` opened: records its backend
/// session when it opened a new one (in place of `known`, the one the session
/// knew), and goes on with another replica's when that one was recorded first.
pub(super) async fn record_opened(
    recorder: &Arc<dyn SessionRecorder>,
    conn: &Arc<Connection>,
    known: Option<String>,
) {
    let Some(new) = conn.recorded_session() else {
        return;
    };
    if known.as_deref() == Some(new.id.as_str()) {
        return;
    }
    if let Some(other) = recorder.record(known, new).await {
        conn.adopt(&other).await;
    }
}

/// The backend sessions a session record's fields (`fields`, of session `h`)
/// name, by backend: the `up:NAME` fields that open (others are ignored and
/// the backend is initialized as if none was recorded).
pub fn recorded_upstreams(
    sealer: &Sealer,
    h: &str,
    fields: &HashMap<String, String>,
) -> BTreeMap<String, UpstreamSession> {
    let prefix = upstream_field("");
    fields
        .iter()
        .filter_map(|(k, v)| {
            let backend = k.strip_prefix(&prefix)?;
            let payload = open_upstream(sealer, h, backend, v)?;
            let u = serde_json::from_slice(&payload).ok()?;
            Some((backend.to_owned(), u))
        })
        .collect()
}

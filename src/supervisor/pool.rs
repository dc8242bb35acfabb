//! Per-session backends' connections for stateless 2026-07-28 requests, pooled
//! by (backend, caller, the client capabilities the request declared among
//! roots, sampling and elicitation): a backend never sends a request for a
//! capability this host request did not declare, and one principal's backend
//! session is never another's (MCP 2026-07-28 bridging: capabilities are per
//! request on one side and per session on the other). The caller is the
//! principal, or on an open endpoint the client address (`ClientKey`): each
//! connection is charged to its `max_connections_per_client` and serves it
//! alone.
//!
//! A pool key holds its connections ("lanes"). A pooled HTTP connection, or any
//! 2026-07-28 backend's, serves many requests at once (what a backend sends is
//! tied to a request by its stream), so such a key has one. A legacy stdio child
//! has only its pipe and serves one call at a time: a call takes a connection
//! nobody holds (a parked bridge continuation holds its own) and, when all are
//! held, another is started. What a cold burst may spawn is bounded:
//!
//! - at most `pool_max_starting` connections of a key start at once (a key whose
//!   one connection serves every call starts one); a request that finds them
//!   starting waits until one is ready (rung) or, on a one-call key, free
//!   (checked every `FREE_CHECK`: nothing rings when a call lets go of its
//!   connection), at most the backend's `queue_timeout`, then gets "busy";
//! - every start is counted against `max_connections` and the caller's
//!   `max_connections_per_client` first (`BackendState::reserve_connection`):
//!   a key at its client's share waits for one of its lanes, one with none
//!   reclaims an idle session connection of the client (`reclaim.rs`) or is
//!   refused at once;
//! - after a failed start, the key's requests get that error at once for a
//!   backoff (0.5 s doubling to 30 s), rather than each spawning again.
//!
//! Pooled connections hold no host state: one unused for `pool_idle_timeout`
//! (default 60 s) is closed, and a reload that removes their backend closes
//! them all (`Pool::take_backend`). One whose backend was told a host's roots is
//! retired (`Connection::retire`): it leaves the pool and closes once its calls
//! are done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Supervisor;
use super::sessions::client_capabilities_for_backend;
use crate::auth::ClientKey;
use crate::backend::{BackendError, Connection, Owner};
use crate::catalog::{BackendState, ConnectionRefusal, ConnectionTicket};
use crate::session::ModernHost;

/// How often a request waiting on a one-call key looks for a lane let go of.
const FREE_CHECK: Duration = Duration::from_millis(10);

/// Every pool key's lanes.
#[derive(Default)]
pub(super) struct Pool {
    keys: Mutex<HashMap<(usize, String), Arc<Lanes>>>,
}

/// One pool key's connections.
#[derive(Default)]
struct Lanes {
    state: Mutex<LaneState>,
    /// Rung when a start ends (ready or failed).
    changed: Notify,
}

#[derive(Default)]
struct LaneState {
    conns: Vec<Arc<Connection>>,
    /// Starts in progress (each holds a `Starting`).
    starting: usize,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<BackendError>,
}

/// What a request finds on its key.
enum Found {
    Ready(Arc<Connection>),
    Start(ConnectionTicket),
    /// Wait for a start to end or a lane to be let go of; the refusal, if the
    /// limits would refuse a start now.
    Wait(Option<ConnectionRefusal>),
    /// The limits refuse a start and the key has no connection to wait for.
    Refused,
    Failed(BackendError),
}

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A usable connection, or whether the request may start one.
    fn find(&self, b: &Arc<BackendState>, one_call: bool, client: Option<&ClientKey>) -> Found {
        let mut st = self.lock();
        st.conns.retain(|c| {
            if c.is_retired() {
                // It holds another host's roots: out of the pool, closed once
                // its calls are done.
                tokio::spawn(close_when_done(c.clone()));
            }
            c.is_alive() && !c.is_retired()
        });
        // Held by the lane alone: nobody uses it.
        let free =
            |c: &&Arc<Connection>| !one_call || c.modern().is_some() || Arc::strong_count(c) == 1;
        if let Some(c) = st.conns.iter().find(free) {
            return Found::Ready(c.clone());
        }
        if let (Some(at), Some(e)) = (st.retry_at, &st.last_error)
            && Instant::now() < at
        {
            return Found::Failed(e.clone());
        }
        // A key whose one connection serves every call starts one.
        if (!one_call && st.starting > 0) || st.starting >= b.spec.config.pool_max_starting {
            return Found::Wait(None);
        }
        match b.reserve_connection(client) {
            Ok(ticket) => {
                st.starting += 1;
                Found::Start(ticket)
            }
            Err(_) if st.conns.is_empty() && st.starting == 0 => Found::Refused,
            Err(r) => Found::Wait(Some(r)),
        }
    }
}

/// A start in progress on a key: ended by [`Starting::end`], or by dropping it
/// (the request went away while connecting).
struct Starting(Arc<Lanes>);

impl Starting {
    fn end(self, made: &Result<Arc<Connection>, BackendError>) {
        {
            let mut st = self.0.lock();
            match made {
                Ok(c) => {
                    st.conns.push(c.clone());
                    st.failures = 0;
                    st.retry_at = None;
                    st.last_error = None;
                }
                Err(e) => {
                    st.failures = st.failures.saturating_add(1);
                    st.retry_at = Some(Instant::now() + crate::backend::backoff(st.failures));
                    st.last_error = Some(e.clone());
                }
            }
        }
        // `Drop` ends the start.
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.0.lock().starting -= 1;
        self.0.changed.notify_waiters();
    }
}

impl Pool {
    fn lanes(&self, key: (usize, String)) -> Arc<Lanes> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.entry(key).or_default().clone()
    }

    /// Takes out every pooled connection (shutdown).
    pub(super) fn drain(&self) -> Vec<Arc<Connection>> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.drain()
            .flat_map(|(_, lanes)| std::mem::take(&mut lanes.lock().conns))
            .collect()
    }

    /// Takes out every pooled connection of backend `idx` (a reload removed
    /// it). Its keys stay: a start in progress ends in its lanes, and the
    /// idle reaper closes what it makes.
    pub(super) fn take_backend(&self, idx: usize) -> Vec<Arc<Connection>> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter(|((i, _), _)| *i == idx)
            .flat_map(|(_, lanes)| std::mem::take(&mut lanes.lock().conns))
            .collect()
    }

    /// Takes out the connections unused for longer than their backend's
    /// `pool_idle_timeout` (`limit` of the backend index) and nobody holds,
    /// and forgets keys left with nothing.
    pub(super) fn take_idle(&self, limit: impl Fn(usize) -> Duration) -> Vec<Arc<Connection>> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut idle = Vec::new();
        keys.retain(|(idx, _), lanes| {
            let limit = limit(*idx);
            let mut st = lanes.lock();
            st.conns.retain(|c| {
                let unused = c.calls_in_flight() == 0 && Arc::strong_count(c) == 1;
                if unused && c.idle_for() > limit {
                    idle.push(c.clone());
                    return false;
                }
                c.is_alive()
            });
            // Held by the map alone: no request is waiting on or starting it.
            !st.conns.is_empty() || st.starting > 0 || Arc::strong_count(lanes) > 1
        });
        idle
    }
}

impl Supervisor {
    /// A per-session backend's connection for a stateless request (module docs).
    ///
    /// Errors: "busy" ([`BackendError::Busy`]) over `max_connections` or the
    /// caller's `max_connections_per_client`, or when no connection of its key
    /// was ready or free within `queue_timeout`; the backend's own error when a
    /// start failed (and during its backoff).
    pub(super) async fn pooled_connection(
        &self,
        idx: usize,
        host: &ModernHost,
    ) -> Result<Arc<Connection>, BackendError> {
        let b = self.catalog.backend(idx);
        let caps = client_capabilities_for_backend(&host.capabilities);
        let client = ClientKey::of(host.principal.as_ref(), host.client);
        // Each lane is charged to the client that started it: it serves that
        // client alone, or another one's use would keep it charged.
        let caller = match &client {
            Some(ClientKey::Principal(p)) => format!("p\u{0}{}\u{0}{}", p.issuer, p.subject),
            Some(ClientKey::Address(ip)) => format!("a\u{0}{ip}"),
            None => String::new(),
        };
        let one_call = b.spec.one_call_at_a_time();
        let lanes = self.pool.lanes((idx, format!("{caller}\u{0}{caps}")));
        let deadline = Instant::now() + b.spec.config.queue_timeout;
        let ticket = loop {
            let changed = lanes.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let refusal = match lanes.find(&b, one_call, client.as_ref()) {
                Found::Ready(conn) => return Ok(conn),
                Found::Failed(e) => return Err(e),
                Found::Start(ticket) => break ticket,
                Found::Refused => match self.reserve_or_reclaim(&b, client.as_ref()).await {
                    // Room was made: the key's first start.
                    Ok(ticket) => {
                        lanes.lock().starting += 1;
                        break ticket;
                    }
                    Err(r) => return Err(self.refuse(&b, client.as_ref(), r)),
                },
                Found::Wait(r) => r,
            };
            let now = Instant::now();
            if now >= deadline {
                let r = refusal.unwrap_or_else(|| {
                    ConnectionRefusal::Pool(BackendError::Busy {
                        backend: b.spec.name.to_string(),
                        reason: format!(
                            "no pooled connection was ready or free within {:?} (queue_timeout)",
                            b.spec.config.queue_timeout
                        ),
                    })
                });
                return Err(self.refuse(&b, client.as_ref(), r));
            }
            let until = match one_call {
                true => deadline.min(now + FREE_CHECK),
                false => deadline,
            };
            tokio::select! {
                () = &mut changed => {}
                () = tokio::time::sleep_until(until) => {}
            }
        };
        let starting = Starting(lanes.clone());
        let made = b
            .spec
            .connect(Owner::Shared, self.relay.handler(), caps, None)
            .await;
        starting.end(&made);
        let conn = made?;
        BackendState::count_connection(&conn, ticket);
        Ok(conn)
    }

    /// Counts and logs a refused connection; the error the call gets.
    pub(super) fn refuse(
        &self,
        b: &BackendState,
        client: Option<&ClientKey>,
        r: ConnectionRefusal,
    ) -> BackendError {
        let reason = r.reason();
        self.metrics
            .backend_connection_refusals
            .with_label_values(&[&b.spec.name, reason])
            .inc();
        let e = r.into_error();
        let client = client.map(ToString::to_string);
        tracing::warn!(backend = %b.spec.name, client = client.as_deref().unwrap_or("unknown"),
            reason, cause = %e, "a per-session backend connection was refused");
        e
    }
}

/// Closes a connection taken out of the pool once no request is in flight on
/// it (each ends by its answer, its cancel or the backend's call timeout).
async fn close_when_done(conn: Arc<Connection>) {
    while conn.is_alive() && conn.calls_in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::debug!(backend = %conn.backend, "closing a pooled connection that holds a host's roots");
    conn.close().await;
}

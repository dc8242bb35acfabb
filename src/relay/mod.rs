//! The relay: everything between hosts and backends outside plain
//! request/response. Backend notifications and server→client requests go to
//! exactly the right host; the host's notifications and answers go back to
//! exactly the right backend request, through the gateway's own id tables
//! (MCP 2025-11-25 basic/utilities: progress, cancellation). Nothing from one host session ever reaches another.
//!
//! The relay is the [`UpstreamHandler`] of every backend connection: the client
//! face reports what a backend sends through it, with the [`HostCall`] the
//! message relates to when the connection could tell.

mod cancels;
mod listen;
mod own;
mod requests;
mod subscriptions;
mod tasks;

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use cancels::Cancels;
pub use listen::{Filter, Listens};
pub use subscriptions::Subscriptions;
pub use tasks::EarlyStatuses;

use crate::backend::{Caller, Connection, UpstreamHandler};
use crate::catalog::Catalog;
use crate::cluster::SharedStore;
use crate::config::{ConnectionMode, Transport};
use crate::jsonrpc::{self, ErrorObject};
use crate::mcp::{Method, Notification, Request, names};
use crate::metrics::Metrics;
use crate::session::{HostCall, Session, SessionStore, TaskRoute};
use own::OwnLists;

/// The relay; see the module docs.
pub struct Relay {
    catalog: Arc<Catalog>,
    sessions: Arc<dyn SessionStore>,
    subs: Subscriptions,
    listens: Listens,
    early: EarlyStatuses,
    /// Host cancels from other replicas, and those that came before the
    /// handed request they name.
    cancels: Cancels,
    /// Backends whose lists changed, for the supervisor to re-read.
    refresh: mpsc::UnboundedSender<usize>,
    /// Counts what shared connections send that no single host call can take.
    metrics: Arc<Metrics>,
    /// The shared store (`[cluster] redis`): answers and cancels that belong to
    /// another replica go through it.
    shared: Option<Arc<SharedStore>>,
    /// Sessions' own connections being re-listed (`own.rs`).
    own: Arc<OwnLists>,
}

/// What the client face holds: the relay, without keeping it alive.
struct Sink(Weak<Relay>);

/// The host call a backend message relates to, if the connection could tell.
fn host_call(call: Option<Arc<dyn Caller>>) -> Option<Arc<HostCall>> {
    call?.into_any().downcast::<HostCall>().ok()
}

impl UpstreamHandler for Sink {
    fn on_notification(
        &self,
        conn: &Arc<Connection>,
        call: Option<Arc<dyn Caller>>,
        n: Notification,
    ) {
        if let Some(r) = self.0.upgrade() {
            r.on_backend_notification(conn, host_call(call), n);
        }
    }

    fn on_request(&self, conn: &Arc<Connection>, call: Option<Arc<dyn Caller>>, req: Request) {
        match self.0.upgrade() {
            Some(r) => r.on_backend_request(conn, host_call(call).as_ref(), &req),
            None => conn.respond(
                &req.id,
                Err(&ErrorObject::new(
                    jsonrpc::INTERNAL_ERROR,
                    "gateway is shutting down",
                )),
            ),
        }
    }

    fn on_closed(&self, _conn: &Arc<Connection>) {}

    fn subject_token(&self, conn: &Connection) -> Option<Arc<str>> {
        self.0.upgrade()?.owner_session(conn)?.subject_token()
    }
}

impl Relay {
    /// A relay over `catalog` and `sessions`; backends whose lists changed are
    /// sent on `refresh`; `metrics` counts unroutable backend messages; with a
    /// `shared` store, relayed requests carry this replica's tag and what
    /// belongs to another replica is sent there.
    pub fn new(
        catalog: Arc<Catalog>,
        sessions: Arc<dyn SessionStore>,
        refresh: mpsc::UnboundedSender<usize>,
        metrics: Arc<Metrics>,
        shared: Option<Arc<SharedStore>>,
    ) -> Arc<Relay> {
        let own = Arc::new(OwnLists::new(
            catalog.clone(),
            sessions.clone(),
            shared.clone(),
        ));
        Arc::new(Relay {
            catalog,
            sessions,
            subs: Subscriptions::default(),
            listens: Listens::default(),
            early: EarlyStatuses::default(),
            cancels: Cancels::default(),
            refresh,
            metrics,
            shared,
            own,
        })
    }

    /// Host cancels forwarded by other replicas (`cancels.rs`).
    pub fn cancels(&self) -> &Cancels {
        &self.cancels
    }

    /// The handler to give a new backend connection.
    pub fn handler(self: &Arc<Self>) -> Arc<dyn UpstreamHandler> {
        Arc::new(Sink(Arc::downgrade(self)))
    }

    /// The refcounted resource subscriptions.
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subs
    }

    /// The open `subscriptions/listen` streams of 2026-07-28 hosts.
    pub fn listens(&self) -> &Listens {
        &self.listens
    }

    /// Task statuses that arrived before their task was registered.
    pub fn early_statuses(&self) -> &EarlyStatuses {
        &self.early
    }

    /// The host session that owns `conn` (per-session connections).
    fn owner_session(&self, conn: &Connection) -> Option<Arc<Session>> {
        self.sessions.get(conn.owner_key()?)
    }

    /// The session a backend message belongs to: the related call's (none for a
    /// stateless request), else the connection owner's.
    fn session_of(&self, conn: &Connection, call: Option<&Arc<HostCall>>) -> Option<Arc<Session>> {
        match call {
            Some(c) => c.host.session().cloned(),
            None => self.owner_session(conn),
        }
    }

    fn backend_index(&self, conn: &Connection) -> Option<usize> {
        self.catalog
            .backends()
            .by_name(&conn.backend)
            .map(|b| b.index)
    }

    /// A notification from a backend.
    fn on_backend_notification(
        self: &Arc<Self>,
        conn: &Arc<Connection>,
        call: Option<Arc<HostCall>>,
        n: Notification,
    ) {
        let Notification { method, params } = n;
        let mut params = params.unwrap_or_else(|| json!({}));
        match method {
            Method::Progress => relay_progress(conn, call, params),
            Method::LogMessage => self.relay_log(conn, call, params),
            Method::ToolsListChanged
            | Method::PromptsListChanged
            | Method::ResourcesListChanged => {
                if let Some(idx) = self.backend_index(conn) {
                    // A child process serving one session lists for it alone:
                    // re-listed there, not in the backend's catalogue (its own
                    // child announces its changes). An HTTP backend's
                    // per-session connections share one server, whose lists
                    // the catalogue connection reads.
                    let own_process = matches!(
                        self.catalog.backend(idx).spec.config.transport,
                        Transport::Stdio { .. }
                    );
                    match self.owner_session(conn) {
                        Some(session) if own_process => {
                            self.own.changed(conn, idx, session);
                        }
                        _ => drop(self.refresh.send(idx)),
                    }
                }
            }
            Method::ResourcesUpdated => {
                if let Some(idx) = self.backend_index(conn) {
                    if conn.owner_key().is_none()
                        && let Some(uri) = params.get("uri").and_then(Value::as_str)
                    {
                        self.listens.updated(idx, uri, &params);
                    }
                    let owner = conn.owner_key().cloned();
                    self.subs.updated(
                        &self.catalog,
                        &*self.sessions,
                        idx,
                        owner.as_deref(),
                        self.shared.is_some(),
                        params,
                    );
                }
            }
            Method::Cancelled => self.backend_cancelled(conn, call.as_ref(), &params),
            Method::TaskStatus => self.relay_task_status(conn, call, params),
            Method::ElicitationComplete => {
                if let Some(Value::String(id)) = params.get_mut("elicitationId") {
                    *id = names::expose_id(&conn.backend, id);
                }
                if let Some(session) = self.session_of(conn, call.as_ref()) {
                    session.send_unrelated(notification(&method, &params));
                }
            }
            _ => {
                if let Some(session) = self.session_of(conn, call.as_ref()) {
                    session.send_unrelated(notification(&method, &params));
                }
            }
        }
    }

    /// `notifications/message`: the logger names the backend; delivered with the
    /// call it relates to, else to the owning session's GET stream, at or above
    /// the level the host set. A shared connection cannot tell whose log it is.
    fn relay_log(&self, conn: &Connection, call: Option<Arc<HostCall>>, mut params: Value) {
        let logger = match params.get("logger").and_then(Value::as_str) {
            Some(l) => format!("{}/{l}", conn.backend),
            None => conn.backend.to_string(),
        };
        params["logger"] = logger.into();
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .unwrap_or("info")
            .to_owned();
        let bytes = notification(&Method::LogMessage, &params);
        match (call, self.owner_session(conn)) {
            (Some(call), _) => {
                if call.host.wants_log(&level) {
                    call.send_related(bytes);
                }
            }
            (None, Some(session)) => {
                if session.wants_log(&level) {
                    session.send_unrelated(bytes);
                }
            }
            (None, None) => self.shared_message(conn, "notifications/message", false),
        }
    }

    /// What a shared connection sent that only one host can use (a server→client
    /// request, a log): `routed` when it went to the only host call in flight.
    /// Either way the backend has shown it keeps state per client (with
    /// `mode = "auto"` sessions from now on get their own connection). A message
    /// no single call could take is counted in
    /// `mcpgate_unroutable_backend_requests_total` and reported once per backend.
    fn shared_message(&self, conn: &Connection, what: &str, routed: bool) {
        if conn.owner_key().is_some() {
            return;
        }
        let Some(b) = self.catalog.backends().by_name(&conn.backend) else {
            return;
        };
        if b.note_stateful() && b.mode == ConnectionMode::Auto {
            tracing::info!(backend = %conn.backend, message = what, "backend sent a message for one client on its shared connection: it keeps state per client; sessions created from now on get their own connection (mode = \"auto\")");
        }
        if routed {
            return;
        }
        self.metrics
            .unroutable_backend_messages
            .with_label_values(&[&conn.backend])
            .inc();
        if b.note_unroutable() && b.mode != ConnectionMode::PerSession {
            let advice = if b.mode == ConnectionMode::Auto {
                "sessions created from now on get their own connection; configure mode = \"per_session\" to give every session one"
            } else {
                "configure mode = \"per_session\" for it"
            };
            tracing::warn!(backend = %conn.backend, message = what, advice, "backend sent a message for one client on its shared connection while not exactly one call was in flight: refused or dropped, never guessed; this backend keeps state per client");
        } else {
            tracing::debug!(backend = %conn.backend, message = what, "unroutable message of a shared connection refused or dropped");
        }
    }

    /// `notifications/tasks/status`: the task id becomes the exposed one of the
    /// session that created the task.
    fn relay_task_status(
        self: &Arc<Self>,
        conn: &Connection,
        call: Option<Arc<HostCall>>,
        mut params: Value,
    ) {
        let Some(idx) = self.backend_index(conn) else {
            return;
        };
        let original = params
            .get("taskId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let hint = self.session_of(conn, call.as_ref());
        let Some((session, exposed)) = self.task_owner(conn, &original, hint) else {
            // Possibly a task whose CreateTaskResult is still on its way:
            // held until it is registered (bounded), else dropped. With a
            // shared store, maybe a task another replica made (`tasks.rs`).
            tracing::debug!(backend = %conn.backend, "status of a task no session owns (yet); held");
            self.early.hold(idx, &original, params);
            // Only a shared connection's statuses may belong to a session the
            // index names: a per-session connection's are its owner's.
            if conn.stdio_process().is_none() && conn.owner_key().is_none() {
                self.find_task_elsewhere(conn.backend.clone(), idx, original);
            }
            return;
        };
        params["taskId"] = exposed.into();
        let bytes = notification(&Method::TaskStatus, &params);
        match call {
            Some(c) if c.host.session().is_some_and(|s| Arc::ptr_eq(s, &session)) => {
                c.send_related(bytes);
            }
            _ => {
                session.send_unrelated(bytes);
            }
        }
    }

    /// The session and exposed id of task `original` of `conn`'s backend: a
    /// session that made it on this backend process (a stdio child's ids are
    /// its own: another child's task of the same id is another task).
    fn task_owner(
        &self,
        conn: &Connection,
        original: &str,
        hint: Option<Arc<Session>>,
    ) -> Option<(Arc<Session>, String)> {
        let exposed = names::expose_id(&conn.backend, original);
        let tag = self.shared.as_ref().map_or("-", |s| s.tag());
        let process = TaskRoute::process_of(tag, conn.stdio_process());
        let owns = |s: &Session| {
            s.task(&exposed)
                .is_some_and(|r| r.reached_by(process.as_deref()))
        };
        if let Some(s) = hint {
            return owns(&s).then_some((s, exposed));
        }
        self.sessions
            .all()
            .into_iter()
            .find(|s| owns(s))
            .map(|s| (s, exposed))
    }
}

/// `notifications/progress` for a call that asked for it: the host's token
/// replaces the upstream one; non-increasing progress is dropped.
fn relay_progress(conn: &Connection, call: Option<Arc<HostCall>>, mut params: Value) {
    let Some(call) = call else {
        tracing::debug!(backend = %conn.backend, "progress for a token we never gave; dropped");
        return;
    };
    let (Some(token), Some(progress)) = (
        call.progress_token(),
        params.get("progress").and_then(Value::as_f64),
    ) else {
        return;
    };
    if !call.accept_progress(progress) {
        tracing::debug!(backend = %conn.backend, progress, "non-increasing progress dropped");
        return;
    }
    params["progressToken"] = token;
    call.send_related(notification(&Method::Progress, &params));
}

/// A serialized notification.
fn notification(method: &Method, params: &Value) -> bytes::Bytes {
    jsonrpc::notification_bytes(method.as_str(), Some(params)).into()
}

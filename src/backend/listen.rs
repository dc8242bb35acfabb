//! What a 2026-07-28 backend sends on its own, through `subscriptions/listen`
//! (MCP 2026-07-28 basic/patterns/subscriptions; dual-era R29): a modern
//! connection has no GET stream and no `resources/subscribe`, so it keeps one
//! listen open for what its users asked, and hands what arrives on it to its
//! handler as a legacy connection would hand its GET stream's notifications:
//! `list_changed` (the supervisor watches the lists of its shared or catalogue
//! connection, [`watch_lists`]) and `resources/updated` (a `resources/subscribe`
//! or `resources/unsubscribe` on a modern connection adds or removes a URI of the
//! filter and is answered `{}` at once, [`resource`]).
//!
//! One listen per connection carries the union. A changed filter opens a new
//! listen and cancels the older ones once it is acknowledged, so nothing falls
//! between the two. The acknowledgement is consumed and `subscriptionId` taken
//! out of what is handed on. A listen that ends (the backend's graceful result,
//! an error, the long request timeout) is opened again after a backoff, and its
//! new acknowledgement tells the handler that the watched lists may have changed
//! meanwhile (a refresh that finds nothing new announces nothing). A backend that
//! does not serve `subscriptions/listen` (-32601) is not asked again on this
//! connection.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{BackendError, Caller, Connection, backoff};
use crate::jsonrpc::{METHOD_NOT_FOUND, RawJson};
use crate::mcp::{Changed, META_SUBSCRIPTION_ID, Method, Notification};

/// How long one listen request may stay open before it is renewed.
const LISTEN_LIMIT: Duration = Duration::from_secs(3600);

/// How long a `resources/subscribe` waits for the backend to acknowledge the
/// listen that carries its URI before it is answered anyway.
const ACK_WAIT: Duration = Duration::from_secs(5);

/// The listen of one connection: what it is asked to deliver, the listen
/// requests open for it, and the newest generation the backend acknowledged
/// (`u64::MAX` once it turned out to have no listen: nothing to wait for).
pub(crate) struct Watch {
    state: Mutex<State>,
    acked: tokio::sync::watch::Sender<u64>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            state: Mutex::default(),
            acked: tokio::sync::watch::channel(0).0,
        }
    }
}

#[derive(Default)]
struct State {
    /// `list_changed` kinds watched.
    lists: Vec<Changed>,
    /// Subscribed resource URIs (the backend's own).
    uris: BTreeSet<String>,
    /// Bumped whenever the filter changes; older listens are superseded.
    generation: u64,
    /// Open listen requests.
    open: Vec<Open>,
    /// The backend answered -32601: it has no listen.
    unsupported: bool,
}

/// One open listen request.
struct Open {
    generation: u64,
    /// Its upstream id.
    id: u64,
    /// Not the first listen of its generation: its acknowledgement means the
    /// watched lists may have changed unseen.
    again: bool,
}

impl State {
    fn filter(&self) -> Option<Value> {
        let mut f = Map::new();
        for kind in &self.lists {
            let member = match kind {
                Changed::Tools => "toolsListChanged",
                Changed::Prompts => "promptsListChanged",
                Changed::Resources => "resourcesListChanged",
            };
            f.insert(member.into(), true.into());
        }
        if !self.uris.is_empty() {
            f.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        (!f.is_empty()).then_some(Value::Object(f))
    }
}

impl Connection {
    /// Requests in flight on this connection other than its own standing
    /// `subscriptions/listen` (open for as long as the connection lives, so
    /// never a sign of use): what idle close and reclaim must wait for.
    pub fn calls_in_flight(&self) -> usize {
        self.in_flight().saturating_sub(state(self).open.len())
    }
}

fn state(conn: &Connection) -> std::sync::MutexGuard<'_, State> {
    conn.watch
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Watches the lists a modern backend says change (`listChanged` in its
/// `server/discover` capabilities) on `conn`. Nothing for a legacy connection
/// (its GET stream carries them) or a backend with no changing list.
pub fn watch_lists(conn: &Arc<Connection>) {
    let Some(info) = conn.info().filter(|_| conn.modern().is_some()) else {
        return;
    };
    let lists: Vec<Changed> = [
        ("tools", Changed::Tools),
        ("prompts", Changed::Prompts),
        ("resources", Changed::Resources),
    ]
    .into_iter()
    .filter(|(cap, _)| info.capabilities[*cap]["listChanged"] == Value::Bool(true))
    .map(|(_, kind)| kind)
    .collect();
    let changed = {
        let mut s = state(conn);
        let changed = s.lists != lists;
        s.lists = lists;
        changed
    };
    if changed {
        restart(conn);
    }
}

/// `resources/subscribe` (`on`) or `resources/unsubscribe` of `params.uri` on a
/// modern connection: the URI joins or leaves the listen's filter. Answered `{}`;
/// a subscribe once the backend acknowledged a listen carrying the URI (at
/// most [`ACK_WAIT`]), so an update made right after the answer is not missed
/// (MCP 2025-11-25 server/resources: updates follow the subscription).
pub(super) async fn resource(
    conn: &Arc<Connection>,
    params: Option<&Value>,
    on: bool,
) -> Result<RawJson, BackendError> {
    let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) else {
        return Err(BackendError::Rpc(crate::jsonrpc::ErrorObject::new(
            crate::jsonrpc::INVALID_PARAMS,
            "params.uri must be a string",
        )));
    };
    let changed = {
        let mut s = state(conn);
        if on {
            s.uris.insert(uri.to_owned())
        } else {
            s.uris.remove(uri)
        }
    };
    if changed
        && let Some(generation) = restart(conn)
        && on
    {
        let mut acked = conn.watch.acked.subscribe();
        let wait = tokio::time::timeout(ACK_WAIT, acked.wait_for(|g| *g >= generation));
        tokio::select! {
            r = wait => if r.is_err() {
                tracing::warn!(backend = %conn.backend, uri, "the backend did not acknowledge the listen for a subscription in time; answered anyway");
            },
            _ = conn.closed.cancelled() => {}
        }
    }
    Ok(RawJson::empty_object())
}

/// Opens a listen for the current filter (superseding the open ones), or, with
/// nothing left to watch, cancels them. Returns the generation of the listen
/// opened (`None`: none).
fn restart(conn: &Arc<Connection>) -> Option<u64> {
    let (generation, filter, stale) = {
        let mut s = state(conn);
        if s.unsupported {
            return None;
        }
        s.generation += 1;
        let filter = s.filter();
        let stale = if filter.is_none() {
            std::mem::take(&mut s.open)
        } else {
            Vec::new()
        };
        (s.generation, filter, stale)
    };
    for open in stale {
        conn.cancel(open.id, Some("nothing left to listen for"));
    }
    let filter = filter?;
    tokio::spawn(listen(conn.clone(), generation, filter));
    Some(generation)
}

/// Keeps a listen of `generation` open until a newer one supersedes it or the
/// connection closes.
async fn listen(conn: Arc<Connection>, generation: u64, filter: Value) {
    let mut failures = 0u32;
    loop {
        if conn.closed.is_cancelled() || state(&conn).generation != generation {
            return;
        }
        let caller = Arc::new(Listen {
            generation,
            again: failures > 0,
        });
        let params = json!({ "notifications": filter });
        let ended = conn
            .request(
                &Method::SubscriptionsListen,
                Some(params),
                Some(caller),
                LISTEN_LIMIT,
            )
            .await;
        state(&conn).open.retain(|o| o.generation != generation);
        match ended {
            Err(BackendError::Rpc(e)) if e.code == METHOD_NOT_FOUND => {
                tracing::warn!(backend = %conn.backend, "backend does not serve subscriptions/listen: its list changes and resource updates are not followed");
                state(&conn).unsupported = true;
                conn.watch.acked.send_replace(u64::MAX);
                return;
            }
            Err(BackendError::Cancelled | BackendError::Unavailable { .. }) => {
                if conn.closed.is_cancelled() || state(&conn).generation != generation {
                    return;
                }
            }
            Err(BackendError::Timeout { .. }) => {
                failures = 1;
                continue;
            }
            Ok(_) | Err(_) => {}
        }
        failures = failures.saturating_add(1);
        tracing::debug!(backend = %conn.backend, failures, "backend listen ended; listening again");
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// The caller of a listen request: records its upstream id, and is never taken
/// for the host call a backend message relates to.
struct Listen {
    generation: u64,
    again: bool,
}

impl Caller for Listen {
    fn wants_progress(&self) -> bool {
        false
    }

    fn started(&self, conn: &Arc<Connection>, id: u64) -> bool {
        let mut s = state(conn);
        s.open.push(Open {
            generation: self.generation,
            id,
            again: self.again,
        });
        s.generation == self.generation
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn background(&self) -> bool {
        true
    }
}

/// A notification from the backend: one of a listen of this connection (its
/// `_meta` names the listen's id) is handled here — the acknowledgement consumed
/// (older listens then cancelled), the id taken out of the others, which are
/// returned to be handed on. Anything else is returned unchanged.
pub(super) fn intercept(conn: &Arc<Connection>, mut n: Notification) -> Option<Notification> {
    let Some(id) = n
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_SUBSCRIPTION_ID))
        .and_then(Value::as_u64)
    else {
        return Some(n);
    };
    let (generation, again) = {
        let s = state(conn);
        let open = s.open.iter().find(|o| o.id == id)?;
        (open.generation, open.again)
    };
    if n.method != Method::SubscriptionsAcknowledged {
        if let Some(meta) = n
            .params
            .as_mut()
            .and_then(|p| p.get_mut("_meta"))
            .and_then(Value::as_object_mut)
        {
            meta.remove(META_SUBSCRIPTION_ID);
        }
        return Some(n);
    }
    acknowledged(conn, generation, again);
    None
}

/// A listen of `generation` is acknowledged: older listens are cancelled; a
/// renewed one (`again`) tells the handler its lists may have changed unseen,
/// and so does the first one of a connection serving one client (what it lists
/// for that client may have changed before its listen was open).
fn acknowledged(conn: &Arc<Connection>, generation: u64, again: bool) {
    let again = again || conn.owner_key().is_some();
    let (older, lists) = {
        let mut s = state(conn);
        let older: Vec<u64> = s
            .open
            .iter()
            .filter(|o| o.generation < generation)
            .map(|o| o.id)
            .collect();
        s.open.retain(|o| o.generation >= generation);
        (older, s.lists.clone())
    };
    conn.watch.acked.send_if_modified(|g| {
        let before = *g;
        *g = before.max(generation);
        *g != before
    });
    for old in older {
        conn.cancel(old, Some("superseded by a listen with a new filter"));
    }
    if again {
        for kind in lists {
            let n = Notification {
                method: kind.method(),
                params: None,
            };
            conn.handler.on_notification(conn, None, n);
        }
    }
}

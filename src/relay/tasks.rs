//! Task statuses on their way to hosts (MCP 2025-11-25 basic/utilities/tasks):
//! statuses that arrive before their task is registered, and the `related-task`
//! `_meta` of relayed messages, with the task id in the session's namespace.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::Relay;
use crate::jsonrpc;
use crate::mcp::{META_RELATED_TASK, Method, names};
use crate::session::TaskRoute;

/// Most task statuses held for tasks not registered yet.
const EARLY_MAX: usize = 64;
/// How long such a status is held.
const EARLY_TTL: Duration = Duration::from_secs(30);

/// `notifications/tasks/status` that arrived before the `CreateTaskResult` of its
/// task was relayed (servers announce a new task while its result travels): held
/// briefly, bounded, and delivered once the task is registered with its session.
#[derive(Default)]
pub struct EarlyStatuses(Mutex<VecDeque<(usize, String, Value, tokio::time::Instant)>>);

impl EarlyStatuses {
    /// Holds `params` of a status for backend task `original` on `backend`.
    pub fn hold(&self, backend: usize, original: &str, params: Value) {
        let Ok(mut q) = self.0.lock() else { return };
        let now = tokio::time::Instant::now();
        q.retain(|e| now.duration_since(e.3) < EARLY_TTL);
        if q.len() >= EARLY_MAX {
            q.pop_front();
        }
        q.push_back((backend, original.to_owned(), params, now));
    }

    /// Takes the held statuses of backend task `original` on `backend`, in order.
    pub fn take(&self, backend: usize, original: &str) -> Vec<Value> {
        let Ok(mut q) = self.0.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        q.retain(|e| {
            let mine = e.0 == backend && e.1 == original;
            if mine {
                out.push(e.2.clone());
            }
            !mine
        });
        out
    }
}

impl Relay {
    /// A status of backend `backend` (index `idx`) task `original` that no
    /// session here owns, held early: with a shared store, the task's index
    /// names the session that made it (through another replica, or a copy
    /// here that lacks it); its held statuses go to that session, on its
    /// standalone stream: here if it is cached here, else to the replica that
    /// produces that stream (inbox, kind `sa`). One `GET` (and an `HGET` of
    /// the task or of `sa`); nothing when no session recorded the task.
    pub(super) fn find_task_elsewhere(
        self: &Arc<Self>,
        backend: Arc<str>,
        idx: usize,
        original: String,
    ) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let Ok(Some(h)) = store.tasks().session_of(&backend, &original).await else {
                return;
            };
            let exposed = names::expose_id(&backend, &original);
            let here = me.sessions.all().into_iter().find(|s| s.store_key() == h);
            let claim = match &here {
                Some(session) if !session.owns_task(&exposed) => {
                    let value = store.tasks().get(&h, &exposed).await.ok().flatten();
                    let Some(route) = value.and_then(|v| TaskRoute::from_field(&v)) else {
                        return;
                    };
                    session.add_task(&exposed, route);
                    None
                }
                Some(_) => None,
                None => match store.standalone().current(&h).await {
                    Ok(Some(c)) if c.producer != store.tag() => Some(c.producer),
                    _ => return,
                },
            };
            let messages: Vec<Vec<u8>> = (me.early.take(idx, &original).into_iter())
                .map(|mut status| {
                    status["taskId"] = exposed.clone().into();
                    jsonrpc::notification_bytes(Method::TaskStatus.as_str(), Some(&status))
                })
                .collect();
            match (here, claim) {
                (Some(session), _) => {
                    for m in messages {
                        session.send_unrelated(m.into());
                    }
                }
                (None, Some(producer)) if !messages.is_empty() => {
                    let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
                    if !matches!(
                        store.standalone().forward(&producer, &h, &refs).await,
                        Ok(true)
                    ) {
                        tracing::debug!(backend = %backend, "task status for a session elsewhere not delivered");
                    }
                }
                _ => {}
            }
        });
    }
}

/// Rewrites the `related-task` `_meta` of a message relayed to a host.
pub fn expose_related_task(params: &mut Value, backend_name: &str) {
    let pointer = format!("/_meta/{}/taskId", META_RELATED_TASK.replace('/', "~1"));
    if let Some(Value::String(t)) = params.pointer_mut(&pointer) {
        *t = names::expose_id(backend_name, t);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn related_task_meta_is_namespaced() {
        let mut p = json!({"_meta": {META_RELATED_TASK: {"taskId": "t1"}}, "message": "x"});
        expose_related_task(&mut p, "everything");
        assert_eq!(p["_meta"][META_RELATED_TASK]["taskId"], "everything:t1");
        let mut none = json!({"message": "x"});
        expose_related_task(&mut none, "b");
        assert_eq!(none, json!({"message": "x"}));
    }
}

//! Tasks (MCP 2025-11-25 basic/utilities/tasks, experimental) through the gateway.
//!
//! Task ids are minted by backends, so the gateway exposes them namespaced
//! (`{backend}:{taskId}`) and keeps them in the session's own table: a task is
//! reachable only from the session that created it (tasks MUST be bound to the
//! requestor's context), and `tasks/get|result|cancel` route to the owning backend
//! by table lookup. `tasks/list` merges the session's tasks across backends.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::rewrite::{ResultKind, rewrite_result};
use super::{Reply, Router};
use crate::backend::BackendError;
use crate::jsonrpc::{self, ErrorObject, Id};
use crate::session::Session;

/// `_meta` key tying messages to a task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

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
    pub(super) fn hold(&self, backend: usize, original: &str, params: Value) {
        let Ok(mut q) = self.0.lock() else { return };
        let now = tokio::time::Instant::now();
        q.retain(|e| now.duration_since(e.3) < EARLY_TTL);
        if q.len() >= EARLY_MAX {
            q.pop_front();
        }
        q.push_back((backend, original.to_owned(), params, now));
    }

    /// Takes the held statuses of backend task `original` on `backend`, in order.
    fn take(&self, backend: usize, original: &str) -> Vec<Value> {
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

/// Where an exposed task id leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRoute {
    /// Backend index.
    pub backend: usize,
    /// The backend's task id.
    pub original: String,
}

/// The exposed id of backend task `original` on backend `name`.
pub fn expose_task_id(name: &str, original: &str) -> String {
    format!("{name}:{original}")
}

impl Router {
    /// After a task-augmented `tools/call`: the `CreateTaskResult`'s task id is
    /// namespaced and registered with the session.
    pub(super) fn register_created_task(
        &self,
        session: &Session,
        backend: usize,
        raw: Box<RawValue>,
    ) -> Box<RawValue> {
        let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else {
            return raw;
        };
        let Some(Value::String(id)) = v.pointer_mut("/task/taskId") else {
            return raw;
        };
        let exposed = expose_task_id(&self.backends.at(backend).spec.name, id);
        if let Ok(mut t) = session.tasks.lock() {
            t.insert(
                exposed.clone(),
                TaskRoute {
                    backend,
                    original: id.clone(),
                },
            );
        }
        for mut status in self.early_status.take(backend, id) {
            status["taskId"] = exposed.clone().into();
            let bytes = jsonrpc::notification_bytes("notifications/tasks/status", Some(&status));
            session.send_unrelated(bytes.into());
        }
        *id = exposed;
        serde_json::value::to_raw_value(&v).unwrap_or(raw)
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel`: route by the session's table.
    pub(super) fn task_call(
        self: &Arc<Self>,
        session: &Arc<Session>,
        id: Id,
        method: &str,
        mut params: Value,
    ) -> Reply {
        let exposed = params
            .get("taskId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let route = session
            .tasks
            .lock()
            .ok()
            .and_then(|t| t.get(&exposed).cloned());
        let Some(route) = route else {
            let e = ErrorObject::new(jsonrpc::INVALID_PARAMS, format!("Unknown task: {exposed}"));
            return Reply::Now(jsonrpc::error_bytes(Some(&id), &e).into());
        };
        params["taskId"] = route.original.clone().into();
        let kind = if method == "tasks/result" {
            ResultKind::ToolCall
        } else {
            ResultKind::Opaque
        };
        self.forward_with(
            session,
            id,
            route.backend,
            method,
            params,
            kind,
            Some(exposed),
        )
    }

    /// `tasks/list`: the session's tasks, from every backend it has tasks on.
    pub(super) async fn task_list(self: &Arc<Self>, session: &Arc<Session>, id: &Id) -> Reply {
        let mine: Vec<(String, TaskRoute)> = session
            .tasks
            .lock()
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let mut by_backend: HashMap<usize, HashMap<String, String>> = HashMap::new();
        for (exposed, route) in mine {
            by_backend
                .entry(route.backend)
                .or_default()
                .insert(route.original, exposed);
        }
        let mut tasks = Vec::new();
        for (backend, ids) in by_backend {
            match self.list_backend_tasks(session, backend).await {
                Ok(list) => {
                    for mut task in list {
                        let exposed = task
                            .get("taskId")
                            .and_then(Value::as_str)
                            .and_then(|t| ids.get(t));
                        if let Some(exposed) = exposed {
                            task["taskId"] = exposed.clone().into();
                            tasks.push(task);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(backend = %self.backends.at(backend).spec.name, cause = %e, "tasks/list failed");
                }
            }
        }
        Reply::Now(jsonrpc::result_value_bytes(id, &json!({ "tasks": tasks })).into())
    }

    async fn list_backend_tasks(
        &self,
        session: &Arc<Session>,
        backend: usize,
    ) -> Result<Vec<Value>, BackendError> {
        let conn = self.connection_for(backend, session).await?;
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
            let raw = conn
                .request("tasks/list", params, None, conn.timeout())
                .await?;
            let page: Value = serde_json::from_str(raw.get())
                .map_err(|e| BackendError::protocol(&conn.backend, format!("tasks/list: {e}")))?;
            if let Some(items) = page.get("tasks").and_then(Value::as_array) {
                out.extend(items.iter().cloned());
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) if cursor.as_deref() != Some(c) => cursor = Some(c.to_owned()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Rewrites a task-related result: `taskId` (tasks/get, tasks/cancel) and the
    /// `related-task` `_meta` (tasks/result) carry the exposed id.
    pub(super) fn expose_task_result(
        raw: Box<RawValue>,
        kind: ResultKind,
        prefix: &str,
        session: &Session,
        exposed: &str,
    ) -> Box<RawValue> {
        let raw = rewrite_result(raw, kind, prefix, session.version);
        let Ok(mut v) = serde_json::from_str::<Value>(raw.get()) else {
            return raw;
        };
        if let Some(t) = v.get_mut("taskId") {
            *t = exposed.into();
        }
        if let Some(t) = v.pointer_mut(&format!(
            "/_meta/{}/taskId",
            RELATED_TASK.replace('/', "~1")
        )) {
            *t = exposed.into();
        }
        serde_json::value::to_raw_value(&v).unwrap_or(raw)
    }

    /// Finds the session and exposed id of backend task `original` on `backend`.
    pub(super) fn task_owner(
        &self,
        backend: usize,
        original: &str,
        hint: Option<Arc<Session>>,
    ) -> Option<(Arc<Session>, String)> {
        let exposed = expose_task_id(&self.backends.at(backend).spec.name, original);
        let owns = |s: &Session| s.tasks.lock().is_ok_and(|t| t.contains_key(&exposed));
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

/// Rewrites the `related-task` `_meta` of a message relayed to a host.
pub fn expose_related_task(params: &mut Value, backend_name: &str) {
    let pointer = format!("/_meta/{}/taskId", RELATED_TASK.replace('/', "~1"));
    if let Some(Value::String(t)) = params.pointer_mut(&pointer) {
        *t = expose_task_id(backend_name, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn related_task_meta_is_namespaced() {
        let mut p = json!({"_meta": {RELATED_TASK: {"taskId": "t1"}}, "message": "x"});
        expose_related_task(&mut p, "everything");
        assert_eq!(p["_meta"][RELATED_TASK]["taskId"], "everything:t1");
        let mut none = json!({"message": "x"});
        expose_related_task(&mut none, "b");
        assert_eq!(none, json!({"message": "x"}));
    }
}

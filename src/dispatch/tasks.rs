//! Tasks (MCP 2025-11-25 basic/utilities/tasks, experimental) through the gateway.
//!
//! Task ids are minted by backends, so the gateway exposes them namespaced
//! (`{backend}:{taskId}`) and keeps them in the session's own table: a task is
//! reachable only from the session that created it (tasks MUST be bound to the
//! requestor's context), and `tasks/get|result|cancel` route to the owning backend
//! by table lookup. `tasks/list` merges the session's tasks across backends.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::backend::BackendError;
use crate::catalog::Catalog;
use crate::error::RpcError;
use crate::jsonrpc::{self, Id, RawJson};
use crate::mcp::{META_RELATED_TASK, Method};
use crate::session::{Host, Session};
use crate::supervisor::Supervisor;

/// A task-related result (already in the host's namespace otherwise): `taskId`
/// (tasks/get, tasks/cancel) and the `related-task` `_meta` (tasks/result)
/// carry the exposed id.
pub(super) fn expose_task_result(raw: RawJson, exposed: &str) -> RawJson {
    let Ok(mut v) = raw.parse::<Value>() else {
        return raw;
    };
    if let Some(t) = v.get_mut("taskId") {
        *t = exposed.into();
    }
    let pointer = format!("/_meta/{}/taskId", META_RELATED_TASK.replace('/', "~1"));
    if let Some(t) = v.pointer_mut(&pointer) {
        *t = exposed.into();
    }
    RawJson::from_value(&v).unwrap_or(raw)
}

/// `tasks/list`: the session's tasks, from every backend it has tasks on
/// (with a shared store, those made through other replicas too).
pub(super) async fn task_list(
    catalog: &Catalog,
    supervisor: &Supervisor,
    session: &Arc<Session>,
    id: &Id,
) -> Result<Bytes, RpcError> {
    supervisor.load_recorded_tasks(session).await;
    let mut by_backend: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut bound: HashMap<String, String> = HashMap::new();
    for (exposed, route) in session.tasks() {
        if let Some(p) = &route.process {
            bound.insert(exposed.clone(), p.clone());
        }
        by_backend
            .entry(route.backend)
            .or_default()
            .insert(route.original, exposed);
    }
    let mut tasks = Vec::new();
    for (backend, mut ids) in by_backend {
        let Some(b) = catalog.backends().by_name(&backend) else {
            continue;
        };
        // A task held by another process than the one that serves the
        // session here (a restarted child, another replica's) is not among
        // its tasks; an id it lists is another task.
        let here = (supervisor.live_connection(b.index, session))
            .and_then(|c| supervisor.task_process(&c));
        ids.retain(|_, exposed| bound.get(exposed).is_none_or(|p| Some(p) == here.as_ref()));
        if ids.is_empty() {
            continue;
        }
        match list_backend_tasks(supervisor, session, b.index).await {
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
                tracing::warn!(backend = %backend, cause = %e, "tasks/list failed");
            }
        }
    }
    Ok(jsonrpc::result_value_bytes(id, &json!({ "tasks": tasks })).into())
}

async fn list_backend_tasks(
    supervisor: &Supervisor,
    session: &Arc<Session>,
    backend: usize,
) -> Result<Vec<Value>, BackendError> {
    let conn = supervisor
        .connection_for(backend, &Host::Legacy(session.clone()))
        .await?;
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
        let raw = conn
            .request(&Method::TasksList, params, None, conn.timeout())
            .await?;
        let page: Value = raw
            .parse()
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

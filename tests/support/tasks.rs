//! The fake stdio server's tasks (`--tasks`, MCP 2025-11-25 basic/utilities/tasks):
//! a task-augmented `tools/call` answers `CreateTaskResult` at once and runs the
//! tool in the background; `tasks/get|result|cancel|list` read and end it, and
//! every status change is sent as `notifications/tasks/status`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::{Server, StdioPeer, tools};

/// A task created by a task-augmented `tools/call` (`--tasks`).
pub(super) struct FakeTask {
    status: &'static str,
    created: String,
    result: Option<Result<Value, (i64, String)>>,
    handle: Option<tokio::task::AbortHandle>,
}

impl FakeTask {
    fn to_json(&self, id: &str) -> Value {
        json!({"taskId": id, "status": self.status, "createdAt": self.created,
               "lastUpdatedAt": self.created, "ttl": 60000, "pollInterval": 50})
    }

    fn terminal(&self) -> bool {
        matches!(self.status, "completed" | "failed" | "cancelled")
    }
}

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

impl Server {
    fn now() -> String {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        format!("1970-01-01T00:00:00.{:03}Z+{ms}", ms % 1000)
    }

    /// Sends `notifications/tasks/status` with the task's current state.
    fn task_status(&self, id: &str) {
        let task = self
            .tasks
            .lock()
            .ok()
            .and_then(|t| t.get(id).map(|x| x.to_json(id)));
        if let Some(task) = task {
            self.notify("notifications/tasks/status", task);
        }
    }

    /// A task-augmented `tools/call`: answers `CreateTaskResult` at once and runs
    /// the tool in the background.
    pub(super) fn create_task(self: &Arc<Self>, id: &Value, mut params: Value) {
        let task_id = format!(
            "task-{}",
            self.next_task.fetch_add(1, Ordering::Relaxed) + 1
        );
        if let Some(o) = params.as_object_mut() {
            o.remove("task");
        }
        let me = self.clone();
        let tid = task_id.clone();
        let handle = tokio::spawn(async move {
            let peer = StdioPeer(me.clone());
            let outcome = tools::call_tool(&me.catalog, &peer, &params).await;
            let failed = match &outcome {
                Ok(v) => v.get("isError") == Some(&Value::Bool(true)),
                Err(_) => true,
            };
            if let Ok(mut t) = me.tasks.lock()
                && let Some(task) = t.get_mut(&tid)
            {
                if task.terminal() {
                    return;
                }
                task.status = if failed { "failed" } else { "completed" };
                task.result = Some(outcome);
            }
            me.task_status(&tid);
        });
        let task = FakeTask {
            status: "working",
            created: Server::now(),
            result: None,
            handle: Some(handle.abort_handle()),
        };
        let created = task.to_json(&task_id);
        if let Ok(mut t) = self.tasks.lock() {
            t.insert(task_id.clone(), task);
        }
        self.log
            .write(json!({"event": "task created", "taskId": task_id}));
        // Like real servers, announce the new task's status before (or while) the
        // CreateTaskResult travels.
        self.task_status(&task_id);
        self.answer(id, Ok(json!({ "task": created })));
    }

    pub(super) fn task_request(self: &Arc<Self>, method: &str, id: Value, params: &Value) {
        if method == "tasks/list" {
            let list: Vec<Value> = self
                .tasks
                .lock()
                .map(|t| t.iter().map(|(k, v)| v.to_json(k)).collect())
                .unwrap_or_default();
            return self.answer(&id, Ok(json!({ "tasks": list })));
        }
        let task_id = params
            .get("taskId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let unknown_task = |t: &str| Err((-32602, format!("Unknown task: {t}")));
        let unknown = || unknown_task(&task_id);
        match method {
            "tasks/get" => {
                let task = self
                    .tasks
                    .lock()
                    .ok()
                    .and_then(|t| t.get(&task_id).map(|x| x.to_json(&task_id)));
                self.answer(&id, task.map_or_else(unknown, Ok));
            }
            "tasks/cancel" => {
                let outcome = match self.tasks.lock() {
                    Ok(mut t) => match t.get_mut(&task_id) {
                        None => unknown(),
                        Some(task) if task.terminal() => {
                            Err((-32602, format!("Task {task_id} is already {}", task.status)))
                        }
                        Some(task) => {
                            task.status = "cancelled";
                            if let Some(h) = task.handle.take() {
                                h.abort();
                            }
                            Ok(task.to_json(&task_id))
                        }
                    },
                    Err(_) => unknown(),
                };
                let ok = outcome.is_ok();
                self.answer(&id, outcome);
                if ok {
                    self.log
                        .write(json!({"event": "task cancelled", "taskId": task_id}));
                    self.task_status(&task_id);
                }
            }
            _ => {
                let me = self.clone();
                let task_id = task_id.clone();
                tokio::spawn(async move {
                    loop {
                        let state = me
                            .tasks
                            .lock()
                            .ok()
                            .map(|t| t.get(&task_id).map(|x| (x.status, x.result.clone())));
                        match state.flatten() {
                            None => return me.answer(&id, unknown_task(&task_id)),
                            Some((_, Some(result))) => {
                                let meta = json!({ RELATED_TASK: {"taskId": task_id} });
                                let outcome = result.map(|mut r| {
                                    r["_meta"] = meta;
                                    r
                                });
                                return me.answer(&id, outcome);
                            }
                            Some(("cancelled", None)) => {
                                return me.answer(&id, Err((-32603, "Task cancelled".into())));
                            }
                            Some(_) => {
                                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            }
                        }
                    }
                });
            }
        }
    }
}

//! Tasks (MCP 2025-11-25 basic/utilities/tasks) for the fake HTTP backend
//! (`FakeHttpOptions::tasks`): a task-augmented `tools/call` answers a
//! `CreateTaskResult` at once and "runs" for `arguments.s` seconds (result
//! text `slept`); `tasks/get|result|cancel|list` read and end it. Tasks
//! belong to the server, not to one backend session, so every gateway
//! replica's backend session reaches every task (a shared backend behind a
//! cluster). Ids are `htask-N`. Status notifications are the test's to send
//! (`FakeHttp::notify`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

type Outcome = Result<Value, (i64, String)>;

/// One task: its status and when it completes by itself.
struct Task {
    status: &'static str,
    done_at: Instant,
}

/// The server's tasks.
#[derive(Default)]
pub struct Tasks {
    tasks: Mutex<BTreeMap<String, Task>>,
    next: AtomicU64,
}

/// The tasks capability the fake declares with them.
pub fn capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

fn to_json(id: &str, t: &Task) -> Value {
    json!({"taskId": id, "status": t.status, "createdAt": "2026-01-01T00:00:00Z",
           "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 60000, "pollInterval": 50})
}

impl Tasks {
    /// The status of every task, with completion applied.
    fn settle(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Task>> {
        let mut t = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        for task in t.values_mut() {
            if task.status == "working" && now >= task.done_at {
                task.status = "completed";
            }
        }
        t
    }

    /// The answer to `method` with `params` when it is a task request
    /// (`None`: not one, the fake answers it as usual).
    pub async fn handle(&self, method: &str, params: &Value) -> Option<Outcome> {
        let id = params.get("taskId").and_then(Value::as_str).unwrap_or("");
        let unknown = || Err((-32602, format!("Unknown task: {id}")));
        Some(match method {
            "tools/call" if params.get("task").is_some() => {
                let s = params.pointer("/arguments/s").and_then(Value::as_f64);
                let id = format!("htask-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
                let task = Task {
                    status: "working",
                    done_at: Instant::now() + Duration::from_secs_f64(s.unwrap_or(0.0)),
                };
                let created = to_json(&id, &task);
                self.settle().insert(id, task);
                Ok(json!({ "task": created }))
            }
            "tasks/list" => {
                let t = self.settle();
                let list: Vec<Value> = t.iter().map(|(k, v)| to_json(k, v)).collect();
                Ok(json!({ "tasks": list }))
            }
            "tasks/get" => self
                .settle()
                .get(id)
                .map_or_else(unknown, |t| Ok(to_json(id, t))),
            "tasks/cancel" => match self.settle().get_mut(id) {
                None => unknown(),
                Some(t) if t.status != "working" => {
                    Err((-32602, format!("Task {id} is {}", t.status)))
                }
                Some(t) => {
                    t.status = "cancelled";
                    Ok(to_json(id, t))
                }
            },
            "tasks/result" => loop {
                let status = self.settle().get(id).map(|t| t.status);
                match status {
                    None => break unknown(),
                    Some("completed") => {
                        let meta = json!({"io.modelcontextprotocol/related-task": {"taskId": id}});
                        break Ok(
                            json!({"content": [{"type": "text", "text": "slept"}], "_meta": meta}),
                        );
                    }
                    Some("cancelled") => break Err((-32603, "Task cancelled".into())),
                    Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            },
            _ => return None,
        })
    }
}

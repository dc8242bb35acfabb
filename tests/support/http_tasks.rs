//! Tasks (MCP 2025-11-25 basic/utilities/tasks) for the fake HTTP backend
//! (`FakeHttpOptions::tasks`): a task-augmented `tools/call` answers a
//! `CreateTaskResult` at once and "runs" for `arguments.s` seconds (result
//! text `slept`); `tasks/get|result|cancel|list` read and end it. Tasks
//! belong to the server, not to one backend session, so every gateway
//! replica's backend session reaches every task (a shared backend behind a
//! cluster). Ids are `htask-N`. Status notifications are the test's to send
//! (`FakeHttp::notify`). With `FakeHttpOptions::session_tasks`, tasks belong
//! to their backend session instead (each numbers its own from `htask-1`,
//! as a per-session server), and a task-augmented call first sends a
//! `working` status on its session's GET streams, answering [`EARLY`] later.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

type Outcome = Result<Value, (i64, String)>;

/// With session tasks: the time between a task's early status and its
/// `CreateTaskResult`.
pub const EARLY: Duration = Duration::from_millis(400);

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
    /// With session tasks: each backend session's last task number.
    per_session: Mutex<BTreeMap<String, u64>>,
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

    /// The next task number of backend session `scope` (`None`: server-wide).
    fn number(&self, scope: Option<&str>) -> u64 {
        let Some(sid) = scope else {
            return self.next.fetch_add(1, Ordering::Relaxed) + 1;
        };
        let mut m = self.per_session.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(sid.to_owned()).or_default();
        *n += 1;
        *n
    }

    /// The answer to `method` with `params` on backend session `scope`
    /// (`None`: tasks are server-wide) when it is a task request (`None`: not
    /// one, the fake answers it as usual); with a scope, `announce` sends a
    /// new task's early status on the session's GET streams.
    pub async fn handle(
        &self,
        method: &str,
        params: &Value,
        scope: Option<&str>,
        announce: &(dyn Fn(Value) -> usize + Sync),
    ) -> Option<Outcome> {
        let shown = params.get("taskId").and_then(Value::as_str).unwrap_or("");
        let key = scope.map_or_else(|| shown.to_owned(), |s| format!("{s}/{shown}"));
        let (id, shown) = (key.as_str(), shown);
        let unknown = || Err((-32602, format!("Unknown task: {shown}")));
        Some(match method {
            "tools/call" if params.get("task").is_some() => {
                let s = params.pointer("/arguments/s").and_then(Value::as_f64);
                let shown = format!("htask-{}", self.number(scope));
                let task = Task {
                    status: "working",
                    done_at: Instant::now() + Duration::from_secs_f64(s.unwrap_or(0.0)),
                };
                let created = to_json(&shown, &task);
                if scope.is_some() {
                    announce(created.clone());
                    tokio::time::sleep(EARLY).await;
                }
                let key = scope.map_or_else(|| shown.clone(), |s| format!("{s}/{shown}"));
                self.settle().insert(key, task);
                Ok(json!({ "task": created }))
            }
            "tasks/list" => {
                let t = self.settle();
                let prefix = scope.map_or_else(String::new, |s| format!("{s}/"));
                let list: Vec<Value> = (t.iter())
                    .filter_map(|(k, v)| Some(to_json(k.strip_prefix(&prefix)?, v)))
                    .collect();
                Ok(json!({ "tasks": list }))
            }
            "tasks/get" => self
                .settle()
                .get(id)
                .map_or_else(unknown, |t| Ok(to_json(shown, t))),
            "tasks/cancel" => match self.settle().get_mut(id) {
                None => unknown(),
                Some(t) if t.status != "working" => {
                    Err((-32602, format!("Task {shown} is {}", t.status)))
                }
                Some(t) => {
                    t.status = "cancelled";
                    Ok(to_json(shown, t))
                }
            },
            "tasks/result" => loop {
                let status = self.settle().get(id).map(|t| t.status);
                match status {
                    None => break unknown(),
                    Some("completed") => {
                        let meta =
                            json!({"io.modelcontextprotocol/related-task": {"taskId": shown}});
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

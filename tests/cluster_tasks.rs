//! Tasks (2025-11-25) made through one replica are served by the others
//! (`[cluster] redis`, issue 11): the session record holds each task
//! (`tk:EXPOSED`), so `tasks/get|result|list` on another replica forward on
//! that replica's own connection to a shared backend, also after the
//! replica that made the task died (`kill -9`); a `notifications/tasks/status`
//! that reaches another replica's backend connection finds its session
//! through the task's index key; a task held by a stdio child that is no
//! more (it died with its replica) is refused with a clear error instead of
//! being asked of another child; a per-session connection's early status
//! reaches its own session only (the index is for shared connections). A real `redis-server`, two `mcpgate serve`
//! replicas with the same keys; backends: the in-process fake HTTP server
//! with server-wide tasks (`tests/support/http_tasks.rs`) and the fake stdio
//! server with `--tasks`.

mod common;

use std::time::Duration;

use common::fake_http::{FakeHttp, FakeHttpOptions};
use common::served::Served;
use common::store::{TestRedis, at, replica};
use common::{McpClient, Rpc, TestDir};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Redis, the fake HTTP server with tasks as shared backend `fx`, and two
/// replicas.
async fn setup() -> (TestRedis, FakeHttp, Served, Served) {
    setup_in("shared").await
}

/// [`setup`] with the backend in connection mode `mode`.
async fn setup_in(mode: &str) -> (TestRedis, FakeHttp, Served, Served) {
    let redis = TestRedis::start().await;
    let fake = FakeHttp::start(FakeHttpOptions {
        tasks: true,
        ..Default::default()
    })
    .await;
    fake.add_tool(
        json!({"name": "task_sleep", "inputSchema": {"type": "object"},
                         "execution": {"taskSupport": "optional"}}),
    );
    let backend = format!(
        "[backends.fx]\ntype = \"http\"\nurl = \"{}\"\nmode = \"{mode}\"\n",
        fake.url
    );
    let a = replica(Some(&redis), &backend).await;
    let b = replica(Some(&redis), &backend).await;
    (redis, fake, a, b)
}

/// A task-augmented `fx__task_sleep` of `seconds` through `c`: the task.
async fn create_task(c: &McpClient, seconds: f64) -> Value {
    let r = c
        .request(
            "tools/call",
            json!({"name": "fx__task_sleep", "arguments": {"s": seconds}, "task": {"ttl": 60000}}),
        )
        .await;
    assert!(r.response["result"]["task"].is_object(), "{}", r.response);
    r.result()["task"].clone()
}

/// `method` for task `id` through `c`.
async fn on_task(c: &McpClient, method: &str, id: &str) -> Rpc {
    c.request(method, json!({ "taskId": id })).await
}

/// The backend session ids that the fake saw `method` on.
fn sessions_of(fake: &FakeHttp, method: &str) -> Vec<String> {
    (fake.calls(method).iter())
        .filter_map(|r| r.header("mcp-session-id").map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_task_made_through_one_replica_is_served_by_another() {
    let (redis, fake, a, b) = setup().await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);
    // B holds the session before the task exists: its copy lacks the task.
    let pong = on_b.request("ping", json!({})).await;
    assert_eq!(pong.response["result"], json!({}), "{}", pong.response);

    let task = create_task(&s, 0.3).await;
    assert_eq!(task["taskId"], "fx:htask-1", "{task}");
    let got = on_task(&on_b, "tasks/get", "fx:htask-1").await;
    assert_eq!(
        got.result()["taskId"],
        "fx:htask-1",
        "{}\n{}",
        got.response,
        b.log()
    );
    let result = on_task(&on_b, "tasks/result", "fx:htask-1").await;
    let r = result.result();
    assert_eq!(r["content"][0]["text"], "slept", "{r}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        "fx:htask-1"
    );
    let list = on_b.request("tasks/list", json!({})).await;
    let listed = list.result()["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 1, "{}", list.response);
    assert_eq!(listed[0]["taskId"], "fx:htask-1");
    assert_eq!(listed[0]["status"], "completed");
    // B asked on its own backend session, with the backend's id.
    let made_on = sessions_of(&fake, "tools/call");
    let got_on = sessions_of(&fake, "tasks/get");
    assert_eq!(got_on.len(), 1, "{got_on:?}");
    assert_ne!(made_on[0], got_on[0], "B's own connection");
    let asked = fake.calls("tasks/get")[0].body.clone().unwrap_or_default();
    assert_eq!(asked["params"]["taskId"], "htask-1", "{asked}");
    let records = redis.keys("mcpg:*:rec");
    let record = redis.cli(&["HGETALL", &records[0]]);
    assert!(record.contains("tk:fx:htask-1"), "{record}");

    // Ordinary calls on both replicas cost no store command.
    let before = redis.request_commands();
    for c in [&s, &on_b] {
        let r = c.call_tool("fx__echo", json!({"text": "hi"})).await;
        assert!(r.response["result"].is_object(), "{}", r.response);
    }
    assert_eq!(redis.request_commands(), before, "hot path");
}

#[tokio::test]
async fn a_task_outlives_the_replica_that_made_it() {
    outlives("shared").await;
}

#[tokio::test]
async fn a_per_session_backends_task_outlives_the_replica_that_made_it() {
    outlives("per_session").await;
}

/// Create through A (backend in `mode`), kill A: B serves the task.
async fn outlives(mode: &str) {
    let (_redis, fake, a, b) = setup_in(mode).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    create_task(&s, 0.5).await;
    a.signal(Signal::SIGKILL);
    drop(a);

    // B has never seen the session: it restores it with its tasks.
    let on_b = at(&s, &b);
    let got = on_task(&on_b, "tasks/get", "fx:htask-1").await;
    assert_eq!(
        got.result()["taskId"],
        "fx:htask-1",
        "{}\n{}",
        got.response,
        b.log()
    );
    assert_eq!(got.result()["status"], "working", "{}", got.response);
    let result = on_task(&on_b, "tasks/result", "fx:htask-1").await;
    assert_eq!(
        result.result()["content"][0]["text"],
        "slept",
        "{}",
        result.response
    );
    let list = on_b.request("tasks/list", json!({})).await;
    assert_eq!(
        list.result()["tasks"][0]["taskId"],
        "fx:htask-1",
        "{}",
        list.response
    );
    assert_eq!(fake.calls("tasks/result").len(), 1);
    if mode == "per_session" {
        // On the host session's one backend session, the one A opened.
        let made_on = sessions_of(&fake, "tools/call");
        assert_eq!(sessions_of(&fake, "tasks/result"), made_on, "{}", b.log());
    }
}

#[tokio::test]
async fn a_status_on_another_replicas_connection_reaches_the_session() {
    let (_redis, fake, a, b) = setup().await;
    // Another session on B tells which backend session B's connection has.
    let mut other = McpClient::new(&b.url);
    other.initialize(json!({})).await;
    other.call_tool("fx__echo", json!({"text": "b"})).await;
    let b_sid = sessions_of(&fake, "tools/call")[0].clone();

    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let mut stream = s.get_stream().await;
    create_task(&s, 5.0).await;
    let status = json!({"taskId": "htask-1", "status": "input_required",
                        "createdAt": "2026-01-01T00:00:00Z", "ttl": 60000});
    // B's connection listens on its backend session (GET) once it is up.
    let end = Instant::now() + Duration::from_secs(5);
    while fake.notify(Some(&b_sid), "notifications/tasks/status", status.clone()) == 0 {
        assert!(Instant::now() < end, "B never opened its GET stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut got = Vec::new();
    while let Some(m) = stream.next(Duration::from_secs(3)).await {
        if m["method"] == "notifications/tasks/status" {
            got.push(m["params"].clone());
            break;
        }
    }
    assert_eq!(
        got.len(),
        1,
        "routed through the store:\n{}\n{}",
        b.log(),
        a.log()
    );
    assert_eq!(got[0]["taskId"], "fx:htask-1", "{got:?}");
    assert_eq!(got[0]["status"], "input_required");
    // The other session heard nothing of it.
    let mut theirs = other.get_stream().await;
    while let Some(m) = theirs.next(Duration::from_millis(500)).await {
        assert_ne!(m["method"], "notifications/tasks/status", "{m}");
    }
}

#[tokio::test]
async fn a_task_of_a_stdio_child_that_died_with_its_replica_is_lost() {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let log = dir.path("fx.log");
    let backend = format!(
        "[backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--tasks\", \"--log\", \"{}\"]\nmode = \"shared\"\n",
        log.display()
    );
    let a = replica(Some(&redis), &backend).await;
    let b = replica(Some(&redis), &backend).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let task = create_task(&s, 30.0).await;
    assert_eq!(task["taskId"], "fx:task-1", "{task}");
    let on_b = at(&s, &b);
    // B's child has a task-1 of its own (another session's): never this one.
    let mut other = McpClient::new(&b.url);
    other.initialize(json!({})).await;
    assert_eq!(create_task(&other, 30.0).await["taskId"], "fx:task-1");

    // A lives: its child holds the task, which B cannot reach.
    let r = on_task(&on_b, "tasks/get", "fx:task-1").await;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.response);
    let e = &r.response["error"];
    assert!(
        e["message"]
            .as_str()
            .unwrap_or("")
            .contains("another gateway replica"),
        "{e}"
    );
    assert_eq!(e["data"]["taskId"], "fx:task-1", "{e}");
    assert_eq!(e["data"]["backend"], "fx", "{e}");

    a.signal(Signal::SIGKILL);
    drop(a);
    // Its child died with it: the task is lost, said so, and B's child is
    // not asked about an id that means another task there.
    let end = Instant::now() + Duration::from_secs(5);
    let lost = loop {
        let r = on_task(&on_b, "tasks/get", "fx:task-1").await;
        if r.error_code() == Some(-32602) || Instant::now() > end {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let e = &lost.response["error"];
    assert_eq!(
        e["message"], "Task fx:task-1 was lost when its backend process restarted",
        "{}",
        lost.response
    );
    assert_eq!(e["data"]["taskId"], "fx:task-1", "{e}");
    for method in ["tasks/result", "tasks/cancel"] {
        let r = on_task(&on_b, method, "fx:task-1").await;
        assert_eq!(r.error_code(), Some(-32602), "{method}: {}", r.response);
    }
    let list = on_b.request("tasks/list", json!({})).await;
    assert_eq!(list.result()["tasks"], json!([]), "{}", list.response);
    let asked = std::fs::read_to_string(&log).unwrap_or_default();
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        assert!(
            !asked.contains(&format!("\"{method}\"")),
            "{method} forwarded:\n{asked}"
        );
    }
}

/// The task statuses `stream` gets within `wait`.
async fn statuses(stream: &mut common::SseStream, wait: Duration) -> Vec<Value> {
    let mut got = Vec::new();
    while let Some(m) = stream.next(wait).await {
        if m["method"] == "notifications/tasks/status" {
            got.push(m["params"].clone());
        }
    }
    got
}

#[tokio::test]
async fn an_early_status_on_a_per_session_connection_reaches_only_its_session() {
    // Each backend session numbers its own tasks and announces each before
    // its CreateTaskResult: both sessions' first task is htask-1.
    let redis = TestRedis::start().await;
    let fake = FakeHttp::start(FakeHttpOptions {
        tasks: true,
        session_tasks: true,
        ..Default::default()
    })
    .await;
    fake.add_tool(
        json!({"name": "task_sleep", "inputSchema": {"type": "object"},
                         "execution": {"taskSupport": "optional"}}),
    );
    let backend = format!(
        "[backends.fx]\ntype = \"http\"\nurl = \"{}\"\nmode = \"per_session\"\n",
        fake.url
    );
    let a = replica(Some(&redis), &backend).await;
    let mut one = McpClient::new(&a.url);
    one.initialize(json!({})).await;
    let mut two = McpClient::new(&a.url);
    two.initialize(json!({})).await;
    let mut streams = [one.get_stream().await, two.get_stream().await];
    for c in [&one, &two] {
        let r = c.call_tool("fx__echo", json!({"text": "hi"})).await;
        assert!(r.response["result"].is_object(), "{}", r.response);
    }
    let sids = sessions_of(&fake, "tools/call");
    assert_eq!(sids.len(), 2, "{sids:?}");
    assert_ne!(sids[0], sids[1], "a backend session each");
    // Both connections listen (GET) before the tasks are made.
    let end = Instant::now() + Duration::from_secs(5);
    while sids.iter().any(|sid| fake.gets(sid).0 == 0) {
        assert!(Instant::now() < end, "no GET streams:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for c in [&one, &two] {
        assert_eq!(create_task(c, 5.0).await["taskId"], "fx:htask-1");
    }
    for (n, stream) in streams.iter_mut().enumerate() {
        let got = statuses(stream, Duration::from_millis(1500)).await;
        assert_eq!(got.len(), 1, "session {n}: {got:?}\n{}", a.log());
        assert_eq!(got[0]["taskId"], "fx:htask-1", "{got:?}");
        assert_eq!(got[0]["status"], "working", "{got:?}");
    }
    assert_eq!(redis.keys("mcpg:task:*"), Vec::<String>::new(), "no index");
}

#[tokio::test]
async fn a_record_keeps_at_most_a_thousand_tasks_dropping_the_oldest() {
    let (redis, _fake, a, _b) = setup().await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let s = &s;
    for batch in 0..(1003 / 17 + 1) {
        let made = (0..17).map(|i| batch * 17 + i).filter(|n| *n < 1003);
        futures_util::future::join_all(made.map(|_| create_task(s, 0.0))).await;
    }
    let records = redis.keys("mcpg:*:rec");
    let fields = redis.cli(&["HKEYS", &records[0]]);
    let tasks: Vec<&str> = (fields.lines()).filter(|f| f.starts_with("tk:")).collect();
    assert_eq!(tasks.len(), 1000, "task fields");
    // The three recorded first went: of the first batch (17 at once, in
    // any order), every later task is kept.
    let kept = |n: usize| tasks.contains(&format!("tk:fx:htask-{n}").as_str());
    assert_eq!((1..=17).filter(|n| !kept(*n)).count(), 3, "{tasks:?}");
    assert!((18..=1003).all(kept), "{tasks:?}");
    assert_eq!(redis.keys("mcpg:task:*").len(), 1000, "index keys");
    let queue = fields.lines().filter(|f| f.starts_with("tq:")).count();
    assert_eq!(queue, 1000, "one number per kept task");
    // Their index keys went with them: no other session is named.
    let kept: Vec<String> = redis.keys("mcpg:task:*");
    let h = redis.cli(&["GET", &kept[0]]);
    assert!(records[0].contains(h.trim()), "{h} {records:?}");

    // Ordinary calls still cost no store command.
    let before = redis.request_commands();
    let r = s.call_tool("fx__echo", json!({"text": "hi"})).await;
    assert!(r.response["result"].is_object(), "{}", r.response);
    assert_eq!(redis.request_commands(), before, "hot path");
}

//! Tasks (2025-11-25): a task-augmented `tools/call` returns a `CreateTaskResult`
//! with a namespaced `taskId`; `tasks/get|result|cancel|list` reach the owning
//! backend; the task is invisible to other sessions (-32602);
//! `notifications/tasks/status` is relayed with the namespaced id; tools of
//! backends without the tasks capability lose `execution.taskSupport`; hosts on
//! 2025-06-18 see no tasks capability.

mod common;

use std::time::Duration;

use common::{McpClient, TestDir, TestGateway, logged, read_log};
use serde_json::{Value, json};

async fn start() -> TestGateway {
    let dir = TestDir::new();
    let tool = json!([{"name": "offers_tasks", "inputSchema": {"type": "object"},
                       "execution": {"taskSupport": "optional"}}]);
    std::fs::write(dir.path("tools.json"), tool.to_string()).unwrap();
    TestGateway::start_in(
        dir,
        r#"
        [server]
        metrics_listen = "off"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tasks", "--tools-json", "${TEST_DIR}/tools.json", "--log", "${TEST_DIR}/fx.log"]
        [backends.nt]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tools-json", "${TEST_DIR}/tools.json"]
        "#,
    )
    .await
}

async fn create_task(s: &McpClient, seconds: f64) -> Value {
    let r = s
        .request(
            "tools/call",
            json!({"name": "fx__task_sleep", "arguments": {"s": seconds}, "task": {"ttl": 60000}}),
        )
        .await;
    r.result()["task"].clone()
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

#[tokio::test]
async fn task_augmented_calls_are_namespaced_routed_and_bound_to_their_session() {
    let gw = start().await;
    let mut a = gw.client();
    let init = a.initialize(json!({})).await;
    let tasks_cap = &init["result"]["capabilities"]["tasks"];
    assert!(tasks_cap["requests"]["tools"]["call"].is_object(), "{init}");
    let mut listen = a.get_stream().await;

    let tools = a.list_all("tools/list", "tools").await;
    assert_eq!(
        tool(&tools, "fx__task_sleep")["execution"]["taskSupport"],
        "optional"
    );
    assert_eq!(
        tool(&tools, "fx__offers_tasks")["execution"]["taskSupport"],
        "optional"
    );
    assert!(
        tool(&tools, "nt__offers_tasks")
            .pointer("/execution/taskSupport")
            .is_none(),
        "a backend without the tasks capability cannot run tasks: {tools:?}"
    );

    let task = create_task(&a, 0.3).await;
    assert_eq!(task["taskId"], "fx:task-1", "{task}");
    assert_eq!(task["status"], "working");
    let id = task["taskId"].as_str().unwrap().to_owned();

    let got = a.request("tasks/get", json!({ "taskId": id })).await;
    assert_eq!(got.result()["taskId"], id.as_str(), "{}", got.response);

    let result = a.request("tasks/result", json!({ "taskId": id })).await;
    let r = result.result();
    assert_eq!(r["content"][0]["text"], "slept", "{r}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str(),
        "{r}"
    );

    // The backend's status notifications reach the owner with the exposed id,
    // including the one it sent before its CreateTaskResult.
    let mut statuses = Vec::new();
    while let Some(m) = listen.next(Duration::from_secs(2)).await {
        if m["method"] == "notifications/tasks/status" {
            assert_eq!(m["params"]["taskId"], id.as_str(), "{m}");
            let done = m["params"]["status"] == "completed";
            statuses.push(
                m["params"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            if done {
                break;
            }
        }
    }
    assert_eq!(
        statuses,
        ["working", "completed"],
        "notifications/tasks/status relayed"
    );

    let list = a.request("tasks/list", json!({})).await;
    let listed: Vec<&Value> = list.result()["tasks"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["taskId"], id.as_str());

    // Upstream, the backend saw its own task id.
    let gets = logged(&gw.dir.path("fx.log"), "tasks/get");
    assert_eq!(gets[0]["msg"]["params"]["taskId"], "task-1");

    // Another session can neither see nor use the task, and nothing reaches the backend.
    let b = gw.session().await;
    let before = read_log(&gw.dir.path("fx.log")).len();
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = b.request(method, json!({ "taskId": id })).await;
        assert_eq!(r.error_code(), Some(-32602), "{method}: {}", r.response);
        let r = b.request(method, json!({ "taskId": "task-1" })).await;
        assert_eq!(
            r.error_code(),
            Some(-32602),
            "{method} with the raw id: {}",
            r.response
        );
    }
    let list = b.request("tasks/list", json!({})).await;
    assert_eq!(list.result()["tasks"], json!([]), "{}", list.response);
    let forwarded = read_log(&gw.dir.path("fx.log"))[before..]
        .iter()
        .filter(|e| {
            e.pointer("/msg/method")
                .and_then(Value::as_str)
                .is_some_and(|m| m.starts_with("tasks/") && m != "tasks/list")
        })
        .count();
    assert_eq!(forwarded, 0, "refused by the gateway");
}

#[tokio::test]
async fn a_task_can_be_cancelled_and_its_status_is_relayed() {
    let gw = start().await;
    let a = gw.session().await;
    let mut listen = a.get_stream().await;
    let task = create_task(&a, 5.0).await;
    let id = task["taskId"].as_str().unwrap().to_owned();
    let r = a.request("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(r.result()["status"], "cancelled", "{}", r.response);
    assert_eq!(r.result()["taskId"], id.as_str());
    let mut seen = Vec::new();
    while let Some(m) = listen.next(Duration::from_secs(1)).await {
        seen.push(m);
    }
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == id.as_str()
                && m["params"]["status"] == "cancelled"),
        "{seen:?}"
    );
    // Cancelling a terminal task is the backend's -32602, passed on.
    let again = a.request("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(again.error_code(), Some(-32602), "{}", again.response);
    let cancels = logged(&gw.dir.path("fx.log"), "tasks/cancel");
    assert_eq!(cancels[0]["msg"]["params"]["taskId"], "task-1");
}

#[tokio::test]
async fn hosts_before_2025_11_25_see_no_tasks() {
    let gw = start().await;
    for version in ["2025-06-18", "2025-03-26"] {
        let mut s = gw.client();
        let init = s.initialize_version(version, json!({})).await;
        assert_eq!(init["result"]["protocolVersion"], version);
        assert!(
            init["result"]["capabilities"].get("tasks").is_none(),
            "{version}: {init}"
        );
        let tools = s.list_all("tools/list", "tools").await;
        assert!(
            tools.iter().all(|t| t.get("execution").is_none()),
            "{version}: {tools:?}"
        );
    }
}

#[tokio::test]
async fn equal_task_ids_of_two_backends_stay_apart() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.one]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tasks", "--log", "${TEST_DIR}/one.log"]
        [backends.two]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tasks", "--log", "${TEST_DIR}/two.log"]
        mode = "per_session"
        "#,
    )
    .await;
    let s = gw.session().await;
    let mut ids = Vec::new();
    for (backend, seconds) in [("one", 0.2), ("two", 5.0)] {
        let r = s
            .request(
                "tools/call",
                json!({"name": format!("{backend}__task_sleep"), "arguments": {"s": seconds},
                       "task": {"ttl": 60000}}),
            )
            .await;
        ids.push(r.result()["task"]["taskId"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        ids,
        ["one:task-1", "two:task-1"],
        "same backend ids, distinct exposed ids"
    );
    // Cancelling two's task reaches two only; one's task completes.
    let r = s
        .request("tasks/cancel", json!({"taskId": "two:task-1"}))
        .await;
    assert_eq!(r.result()["status"], "cancelled", "{}", r.response);
    let r = s
        .request("tasks/result", json!({"taskId": "one:task-1"}))
        .await;
    assert_eq!(r.result()["content"][0]["text"], "slept", "{}", r.response);
    assert_eq!(logged(&gw.dir.path("two.log"), "tasks/cancel").len(), 1);
    assert!(logged(&gw.dir.path("one.log"), "tasks/cancel").is_empty());
    assert_eq!(logged(&gw.dir.path("one.log"), "tasks/result").len(), 1);
    assert!(logged(&gw.dir.path("two.log"), "tasks/result").is_empty());
    // The list is one page: a cursor is none the gateway issued (as for the
    // other lists), a cursor of another type is not a cursor.
    for (cursor, code) in [(json!("garbage"), -32602), (json!(7), -32602)] {
        let r = s.request("tasks/list", json!({ "cursor": cursor })).await;
        assert_eq!(
            r.response["error"]["code"], code,
            "{cursor}: {}",
            r.response
        );
    }
    let list = s.request("tasks/list", json!({})).await;
    let mut listed: Vec<(String, String)> = list.result()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["taskId"].as_str().unwrap().to_owned(),
                t["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("one:task-1".to_owned(), "completed".to_owned()),
            ("two:task-1".to_owned(), "cancelled".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_task_of_a_stdio_child_that_restarted_is_lost_not_asked_of_the_new_one() {
    let gw = TestGateway::start(
        r#"
        [server]
        metrics_listen = "off"
        [backends.fx]
        type = "stdio"
        command = "${FAKE_STDIO}"
        args = ["--tasks", "--exit-after-calls", "1", "--log", "${TEST_DIR}/fx.log"]
        mode = "shared"
        "#,
    )
    .await;
    let s = gw.session().await;
    let task = create_task(&s, 30.0).await;
    assert_eq!(task["taskId"], "fx:task-1", "{task}");
    // The next call ends the child; supervision starts another, whose
    // task-1 would be another task.
    s.call_tool("fx__echo", json!({"text": "bye"})).await;
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    let lost = loop {
        let r = s.request("tasks/get", json!({"taskId": "fx:task-1"})).await;
        let message = r.response["error"]["message"].as_str().unwrap_or("");
        if message.contains("lost") || tokio::time::Instant::now() > end {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(lost.error_code(), Some(-32602), "{}", lost.response);
    assert_eq!(
        lost.response["error"]["message"],
        "Task fx:task-1 was lost when its backend process restarted"
    );
    assert_eq!(lost.response["error"]["data"]["backend"], "fx");
    // The new child runs; it was never asked about the old child's task.
    let r = s.call_tool("fx__echo", json!({"text": "again"})).await;
    assert!(r.response["result"].is_object(), "{}", r.response);
    assert!(logged(&gw.dir.path("fx.log"), "tasks/get").is_empty());
    let list = s.request("tasks/list", json!({})).await;
    assert_eq!(list.result()["tasks"], json!([]), "{}", list.response);
}

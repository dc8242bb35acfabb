//! Requests that only the owner replica of a session's per-session stdio
//! child can answer (`[cluster] redis`, issue 11, review items 6, 7, 9): a
//! task made by a call that ran on the owner is reached through another
//! replica; a tool the owner's child lists for its session alone is called
//! through another replica; a forwarded call is counted once, where the host
//! sent it, with its real outcome, and both replicas' access lines name it.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{TestRedis, at, replica, scrape};
use common::{McpClient, TestDir, metric, text_of};
use serde_json::{Value, json};

/// Redis and two replicas A and B with the fake stdio backend `fx` in
/// per-session mode (`--tasks`: it runs task-augmented calls).
async fn setup() -> (TestRedis, TestDir, Served, Served) {
    let redis = TestRedis::start().await;
    let dir = TestDir::new();
    let fx = format!(
        "[backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--tasks\", \"--log\", \"{}\"]\nmode = \"per_session\"\n",
        dir.path("fx.log").display()
    );
    let a = replica(Some(&redis), &fx).await;
    let b = replica(Some(&redis), &fx).await;
    (redis, dir, a, b)
}

/// A session opened on A whose child A owns (one call ran there).
async fn owned_by_a(a: &Served) -> McpClient {
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let r = s.call_tool("fx__echo", json!({"text": "claim"})).await;
    assert_eq!(text_of(&r.response), "claim", "{}", r.response);
    s
}

/// The access lines a replica wrote for `method`.
fn access_lines(gw: &Served, method: &str) -> Vec<Value> {
    gw.log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "mcpgate::access" && v["fields"]["method"] == method)
        .map(|v| v["fields"].clone())
        .collect()
}

#[tokio::test]
async fn a_task_made_through_b_runs_on_a_and_is_reached_through_b() {
    let (redis, _dir, a, b) = setup().await;
    let s = owned_by_a(&a).await;
    let on_b = at(&s, &b);
    let made = on_b
        .request(
            "tools/call",
            json!({"name": "fx__task_sleep", "arguments": {"s": 0.3}, "task": {"ttl": 60000}}),
        )
        .await;
    let id = made.result()["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", made.response))
        .to_owned();
    // The task lives on A (its call ran there): B hands its requests over.
    let got = on_b.request("tasks/get", json!({ "taskId": id })).await;
    assert_eq!(got.result()["taskId"], id.as_str(), "{}", got.response);
    let result = on_b.request("tasks/result", json!({ "taskId": id })).await;
    assert_eq!(text_of(&result.response), "slept", "{}", result.response);
    let listed = on_b.request("tasks/list", json!({})).await;
    let tasks = listed.result()["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tasks.len(), 1, "{}", listed.response);
    assert_eq!(tasks[0]["taskId"], id.as_str());
    // An id nobody knows is unknown on the owner too.
    let unknown = on_b
        .request("tasks/get", json!({"taskId": "fx:nope"}))
        .await;
    assert_eq!(
        unknown.response["error"]["code"], -32602,
        "{}",
        unknown.response
    );

    // On the owner, known ids cost no Redis command.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = redis.calls("hget") + redis.calls("eval");
    let got = s.request("tasks/get", json!({ "taskId": id })).await;
    assert_eq!(got.result()["taskId"], id.as_str(), "{}", got.response);
    assert_eq!(
        redis.calls("hget") + redis.calls("eval"),
        before,
        "owner: no store command"
    );
}

#[tokio::test]
async fn a_tool_only_the_owners_child_lists_is_called_through_b() {
    let (_redis, _dir, a, b) = setup().await;
    let s = owned_by_a(&a).await;
    let r = s.call_tool("fx__add_tool", json!({"name": "mine"})).await;
    assert_eq!(text_of(&r.response), "added mine", "{}", r.response);
    let mut listed = false;
    for _ in 0..50 {
        let r = s
            .request("tools/call", json!({"name": "fx__mine", "arguments": {}}))
            .await;
        if r.response["result"]["content"][0]["text"] == "called mine" {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(listed, "A's own list has fx__mine");
    let on_b = at(&s, &b);
    let r = on_b.call_tool("fx__mine", json!({})).await;
    assert_eq!(text_of(&r.response), "called mine", "{}", r.response);
    // A name nobody lists: the owner says so (and B records an error).
    let r = on_b
        .request(
            "tools/call",
            json!({"name": "fx__nothing", "arguments": {}}),
        )
        .await;
    assert_eq!(r.response["error"]["code"], -32602, "{}", r.response);
    let m = scrape(&b).await;
    assert_eq!(
        metric(&m, "mcpgate_cluster_forwarded_total", &[("kind", "call")]),
        Some(2.0),
        "{m}"
    );
    let lines = access_lines(&b, "tools/call");
    let outcomes: Vec<&str> = lines.iter().filter_map(|l| l["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["ok", "error"], "{lines:?}");
}

#[tokio::test]
async fn a_forwarded_call_is_counted_once_and_audited_on_both_replicas() {
    let (_redis, _dir, a, b) = setup().await;
    let s = owned_by_a(&a).await;
    let on_b = at(&s, &b);
    let r = on_b.call_tool("fx__echo", json!({"text": "via b"})).await;
    assert_eq!(text_of(&r.response), "via b", "{}", r.response);
    let count = |m: &str, outcome: &str| {
        metric(
            m,
            "mcpgate_requests_total",
            &[("method", "tools/call"), ("outcome", outcome)],
        )
    };
    let (ma, mb) = (scrape(&a).await, scrape(&b).await);
    assert_eq!(
        count(&ma, "ok"),
        Some(1.0),
        "A counts only its host's call:\n{ma}"
    );
    assert_eq!(
        count(&mb, "ok"),
        Some(1.0),
        "B counts the call its host sent:\n{mb}"
    );

    let sent = access_lines(&b, "tools/call");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["backend"], "fx", "{sent:?}");
    assert_eq!(sent[0]["name"], "fx__echo", "{sent:?}");
    assert_eq!(sent[0]["outcome"], "ok");
    let ran = access_lines(&a, "tools/call");
    let handed: Vec<&Value> = ran.iter().filter(|l| l["handed"] == true).collect();
    assert_eq!(handed.len(), 1, "{ran:?}");
    assert_eq!(handed[0]["client"], "127.0.0.1", "{handed:?}");
    assert_eq!(handed[0]["backend"], "fx");
    assert_eq!(handed[0]["session"], sent[0]["session"]);
    assert_eq!(handed[0]["rpc_id"], sent[0]["rpc_id"]);
}

//! The demo server's 2026-07-28 ("modern", stateless) face, next to its sessions:
//! the test spawns `mcpgate demo-server` (stdio, and `--http 127.0.0.1:0`) and
//! plays a 2026-07-28 client. `server/discover`, the validation ladder (with HTTP
//! statuses), results with `resultType` and cache hints, MRTR rounds instead of
//! server→client requests (a sealed `requestState`, a tampered one refused, a
//! capability the request did not declare -32021), logs only with a `logLevel`,
//! `subscriptions/listen`, and a session opened afterwards on the same stdio
//! connection.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::McpClient;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);
const MODERN: &str = "2026-07-28";

fn meta(caps: &Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"}
    })
}

/// `params` with the envelope declaring `caps` (and `extra` members) added.
fn with_meta(mut params: Value, caps: &Value) -> Value {
    params["_meta"] = meta(caps);
    params
}

struct Pipe {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Pipe {
    fn spawn() -> Pipe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .arg("demo-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcpgate demo-server");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        Pipe {
            _child: child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        }
    }

    async fn send(&mut self, msg: &Value) {
        let line = format!("{msg}\n");
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    async fn recv(&mut self) -> Value {
        let line = timeout(WAIT, self.lines.next_line())
            .await
            .expect("answered in time")
            .expect("read")
            .expect("still running");
        serde_json::from_str(&line).expect("JSON")
    }

    /// The response to `id` and the messages before it.
    async fn call(&mut self, id: Value, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let mut before = Vec::new();
        loop {
            let m = self.recv().await;
            if m["id"] == id && m.get("method").is_none() {
                return (m, before);
            }
            before.push(m);
        }
    }
}

#[tokio::test]
async fn stdio_serves_stateless_requests_then_a_session_on_the_same_pipe() {
    let mut c = Pipe::spawn();
    let none = json!({});
    let (d, _) = c
        .call(json!(1), "server/discover", with_meta(json!({}), &none))
        .await;
    let r = &d["result"];
    assert_eq!(r["supportedVersions"][0], MODERN, "{d}");
    assert_eq!(
        (
            r["resultType"].clone(),
            r["ttlMs"].clone(),
            r["cacheScope"].clone()
        ),
        (json!("complete"), json!(0), json!("public")),
        "{d}"
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpgate-demo"
    );
    // The ladder without headers: envelope, revision, method. (Without a claim a
    // request is a session's: that is how a stdio server tells the eras apart.)
    let claim = json!({"io.modelcontextprotocol/protocolVersion": MODERN});
    let (e, _) = c
        .call(json!(2), "server/discover", json!({"_meta": claim}))
        .await;
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let mut old = meta(&none);
    old["io.modelcontextprotocol/protocolVersion"] = json!("v999");
    let (e, _) = c.call(json!(3), "tools/list", json!({"_meta": old})).await;
    assert_eq!(e["error"]["code"], -32022, "{e}");
    assert_eq!(e["error"]["data"]["requested"], "v999", "{e}");
    let (e, _) = c.call(json!(4), "ping", with_meta(json!({}), &none)).await;
    assert_eq!(e["error"]["code"], -32601, "{e}");
    // Logs only with a logLevel, at or above it.
    let call = json!({"name": "test_tool_with_logging", "arguments": {}});
    let (_, before) = c
        .call(json!(5), "tools/call", with_meta(call.clone(), &none))
        .await;
    assert!(before.is_empty(), "no logLevel, no logs: {before:?}");
    let mut loud = with_meta(call, &none);
    loud["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let (_, before) = c.call(json!(6), "tools/call", loud).await;
    assert_eq!(before.len(), 3, "{before:?}");
    // Three rounds of one call, each answer carried in the next requestState.
    let caps = json!({"elicitation": {}});
    let tool = json!({"name": "test_input_required_result_multi_round", "arguments": {}});
    let mut params = with_meta(tool.clone(), &caps);
    let mut states = Vec::new();
    for (id, key, answer) in [
        (7, "", json!(null)),
        (8, "step1", json!({"name": "Ada"})),
        (9, "step2", json!({"color": "red"})),
    ] {
        if !key.is_empty() {
            params["inputResponses"] = json!({ key: {"action": "accept", "content": answer} });
        }
        let (r, before) = c.call(json!(id), "tools/call", params.clone()).await;
        assert!(before.is_empty(), "never a request on the pipe: {before:?}");
        if id < 9 {
            assert_eq!(r["result"]["resultType"], "input_required", "{r}");
            let state = r["result"]["requestState"].clone();
            assert!(!states.contains(&state), "a new state each round: {r}");
            states.push(state.clone());
            params["requestState"] = state;
        } else {
            assert_eq!(r["result"]["content"][0]["text"], "Ada likes red", "{r}");
        }
    }
    // A session on the same connection: initialize still negotiates 2025-11-25.
    let init = json!({"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}});
    let (r, _) = c.call(json!(10), "initialize", init).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
}

#[tokio::test]
async fn stdio_listen_acknowledges_tags_and_ends_on_cancel() {
    let mut c = Pipe::spawn();
    let none = json!({});
    let listen = with_meta(
        json!({"notifications": {"toolsListChanged": true, "promptsListChanged": false}}),
        &none,
    );
    c.send(
        &json!({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": listen}),
    )
    .await;
    let ack = c.recv().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    let toggle = with_meta(json!({"name": "toggle_bonus", "arguments": {}}), &none);
    let (_, before) = c.call(json!(1), "tools/call", toggle).await;
    let changed: Vec<&Value> = before
        .iter()
        .filter(|m| m["method"] == "notifications/tools/list_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{before:?}");
    assert_eq!(
        changed[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    assert!(
        before
            .iter()
            .all(|m| m["method"] != "notifications/prompts/list_changed")
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L"}})).await;
    let (r, before) = c
        .call(json!(2), "tools/list", with_meta(json!({}), &none))
        .await;
    assert!(r["result"]["tools"].is_array(), "{r}");
    assert!(
        before.iter().all(|m| m["id"] != "L"),
        "a cancelled listen gets no response: {before:?}"
    );
}

/// Starts `mcpgate demo-server --http 127.0.0.1:0`: the process and its endpoint.
async fn serve_http() -> (Child, McpClient) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["demo-server", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcpgate demo-server --http");
    let stdout = child.stdout.take().expect("stdout");
    let url = timeout(WAIT, BufReader::new(stdout).lines().next_line())
        .await
        .expect("listening in time")
        .expect("read")
        .expect("endpoint URL on stdout");
    (child, McpClient::new(&url))
}

/// A modern POST of `method` with `params`, with the headers that mirror it.
async fn post(c: &McpClient, id: i64, method: &str, params: &Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let name = params["name"]
        .as_str()
        .or(params["uri"].as_str())
        .unwrap_or("");
    let mut h = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    if !name.is_empty() {
        h.push(("mcp-name", name));
    }
    let raw = c.post(&h, body.to_string()).await;
    assert!(raw.header("mcp-session-id").is_none(), "never a session id");
    (raw.status.as_u16(), raw.json())
}

#[tokio::test]
async fn http_climbs_the_ladder_and_runs_mrtr_rounds() {
    let (_child, c) = serve_http().await;
    let none = json!({});
    let (status, v) = post(&c, 1, "tools/list", &with_meta(json!({}), &none)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["cacheScope"], "public", "{v}");
    // A header that disagrees with the body: 400 -32020 with the id.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": with_meta(json!({}), &none)});
    let raw = c
        .post(
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
            ],
            body.to_string(),
        )
        .await;
    assert_eq!(
        (
            raw.status.as_u16(),
            raw.json()["error"]["code"].clone(),
            raw.json()["id"].clone()
        ),
        (400, json!(-32020), json!(2))
    );
    let (status, v) = post(
        &c,
        3,
        "logging/setLevel",
        &with_meta(json!({"level": "info"}), &none),
    )
    .await;
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (404, json!(-32601)),
        "{v}"
    );
    let call = json!({"name": "test_missing_capability", "arguments": {}});
    let (status, v) = post(&c, 4, "tools/call", &with_meta(call, &none)).await;
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (400, json!(-32021)),
        "{v}"
    );
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{v}"
    );
    // One round trip, a tampered state refused on the way.
    let caps = json!({"elicitation": {}});
    let call = with_meta(
        json!({"name": "test_input_required_result_elicitation", "arguments": {}}),
        &caps,
    );
    let (_, first) = post(&c, 5, "tools/call", &call).await;
    let r = &first["result"];
    assert_eq!(
        r["inputRequests"]["user_name"]["method"], "elicitation/create",
        "{first}"
    );
    let mut retry = call.clone();
    retry["inputResponses"] =
        json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}});
    retry["requestState"] = json!(format!(
        "{}-TAMPERED",
        r["requestState"].as_str().unwrap_or_default()
    ));
    let (_, v) = post(&c, 6, "tools/call", &retry).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    retry["requestState"] = r["requestState"].clone();
    let (_, v) = post(&c, 7, "tools/call", &retry).await;
    assert_eq!(v["result"]["content"][0]["text"], "Hello, Alice!", "{v}");
    // GET and DELETE from a modern client: 405, POST only.
    let raw = c
        .send_raw(
            reqwest::Method::GET,
            {
                let mut h = c.headers();
                h.insert("mcp-protocol-version", MODERN.parse().unwrap());
                h
            },
            reqwest::Body::from(""),
        )
        .await;
    assert_eq!(raw.status.as_u16(), 405);
    assert_eq!(raw.header("allow"), Some("POST"));
}

#[tokio::test]
async fn http_streams_progress_without_event_ids() {
    let (_child, c) = serve_http().await;
    let mut params = with_meta(
        json!({"name": "test_tool_with_progress", "arguments": {}}),
        &json!({}),
    );
    params["_meta"]["progressToken"] = json!("p");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let h = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_tool_with_progress"),
    ];
    let mut s = c.open_with(&h, &body).await;
    assert!(s.is_sse());
    let mut got = Vec::new();
    while let Some(m) = s.next(WAIT).await {
        got.push(m);
    }
    assert!(s.event_ids.is_empty(), "not resumable: no event ids");
    let progress: Vec<&Value> = got
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 3, "{got:?}");
    assert_eq!(
        got.last().unwrap_or(&Value::Null)["result"]["resultType"],
        "complete",
        "{got:?}"
    );
}

//! The demo server over stdio: the test spawns `mcpgate demo-server` and plays the client.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Client {
    fn spawn() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .arg("demo-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcpgate demo-server");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        Client {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        }
    }

    async fn send(&mut self, msg: Value) {
        self.send_raw(&msg.to_string()).await;
    }

    async fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.write_all(b"\n").await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// The next message from the server.
    async fn recv(&mut self) -> Value {
        let line = timeout(WAIT, self.lines.next_line())
            .await
            .expect("server answered in time")
            .expect("read")
            .expect("server still running");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Reads until the response with `id`, collecting what came before it.
    async fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let msg = self.recv().await;
            if msg["id"] == id && msg.get("method").is_none() {
                return (msg, before);
            }
            before.push(msg);
        }
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response(id).await.0
    }

    async fn initialize(&mut self, capabilities: Value) -> Value {
        let init = self
            .request(
                0,
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": capabilities,
                    "clientInfo": {"name": "demo-stdio-test", "version": "1"}
                }),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }
}

#[tokio::test]
async fn initialize_list_and_call() {
    let mut c = Client::spawn();
    let init = c.initialize(json!({})).await;
    let result = &init["result"];
    assert_eq!(
        result["protocolVersion"], "2025-06-18",
        "a supported version is echoed"
    );
    assert_eq!(result["serverInfo"]["name"], "mcpgate-demo");
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(result["capabilities"]["resources"]["subscribe"], true);
    assert!(result["capabilities"]["completions"].is_object());

    let list = c.request(1, "tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools array");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "test_simple_text",
        "test_sampling",
        "json_schema_2020_12_tool",
        "echo",
        "add",
    ] {
        assert!(names.contains(&expected), "{expected} listed in {names:?}");
    }
    assert!(
        tools
            .iter()
            .all(|t| t["inputSchema"]["type"] == "object" && t["description"].is_string())
    );

    let echo = c
        .request(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hello"}}),
        )
        .await;
    assert_eq!(
        echo["result"]["content"][0],
        json!({"type": "text", "text": "hello"})
    );

    let add = c
        .request(
            3,
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 40.5}}),
        )
        .await;
    assert_eq!(add["result"]["structuredContent"], json!({"sum": 42.5}));

    let bad_args = c
        .request(
            4,
            "tools/call",
            json!({"name": "add", "arguments": {"a": "two"}}),
        )
        .await;
    assert_eq!(
        bad_args["result"]["isError"], true,
        "input errors are tool errors"
    );

    let unknown = c.request(5, "tools/call", json!({"name": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602);
    let missing = c
        .request(6, "resources/read", json!({"uri": "test://missing"}))
        .await;
    assert_eq!(missing["error"]["code"], -32002);
    assert_eq!(missing["error"]["data"]["uri"], "test://missing");
    let no_method = c.request(7, "no/such", json!({})).await;
    assert_eq!(no_method["error"]["code"], -32601);

    c.send_raw("{not json").await;
    let parse = c.recv().await;
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(parse["id"], Value::Null);
}

#[tokio::test]
async fn notifications_arrive_before_the_response() {
    let mut c = Client::spawn();
    c.initialize(json!({})).await;
    c.request(1, "logging/setLevel", json!({"level": "info"}))
        .await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "test_tool_with_progress", "_meta": {"progressToken": "tok"}
        }}),
    )
    .await;
    let (result, before) = c.response(2).await;
    assert!(result["result"]["content"].is_array());
    let progress: Vec<f64> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            assert_eq!(m["params"]["progressToken"], "tok");
            assert!(
                m["params"]["progress"].is_i64(),
                "integral progress stays an integer"
            );
            m["params"]["progress"].as_f64().unwrap_or(-1.0)
        })
        .collect();
    assert_eq!(progress, [0.0, 50.0, 100.0]);

    c.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_tool_with_logging"}}))
        .await;
    let (_, before) = c.response(3).await;
    let logs: Vec<&str> = before
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .filter_map(|m| m["params"]["data"].as_str())
        .collect();
    assert_eq!(
        logs,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );

    // Raising the level filters the info logs out.
    c.request(4, "logging/setLevel", json!({"level": "error"}))
        .await;
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "test_tool_with_logging"}}))
        .await;
    let (_, before) = c.response(5).await;
    assert!(before.is_empty(), "no logs below the level: {before:?}");
}

#[tokio::test]
async fn sampling_round_trip_with_the_test_as_client() {
    let mut c = Client::spawn();
    c.initialize(json!({"sampling": {}, "roots": {}})).await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {
            "name": "test_sampling", "arguments": {"prompt": "What is 2+2?"}
        }}),
    )
    .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "sampling/createMessage");
    assert_eq!(
        ask["params"]["messages"][0]["content"]["text"],
        "What is 2+2?"
    );
    assert_eq!(ask["params"]["maxTokens"], 100);
    let server_id = ask["id"].clone();
    assert!(server_id.is_i64() || server_id.is_string());
    c.send(json!({"jsonrpc": "2.0", "id": server_id, "result": {
        "role": "assistant", "content": {"type": "text", "text": "4"}, "model": "test-model", "stopReason": "endTurn"
    }}))
    .await;
    let (result, _) = c.response(10).await;
    assert_eq!(result["result"]["content"][0]["text"], "LLM response: 4");

    // roots/list travels the same way.
    c.send(json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "list_roots"}}))
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "roots/list");
    c.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "roots": [{"uri": "file:///work", "name": "work"}]
    }}))
    .await;
    let (result, _) = c.response(11).await;
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("file:///work"), "{text}");

    // Without the capability the tool reports an execution error instead of asking.
    let mut plain = Client::spawn();
    plain.initialize(json!({})).await;
    let r = plain
        .request(
            1,
            "tools/call",
            json!({"name": "test_sampling", "arguments": {"prompt": "x"}}),
        )
        .await;
    assert_eq!(r["result"]["isError"], true);
}

#[tokio::test]
async fn concurrent_requests_and_cancellation() {
    let mut c = Client::spawn();
    c.initialize(json!({})).await;
    c.send(json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {
        "name": "countdown", "arguments": {"steps": 20, "delay_ms": 300}, "_meta": {"progressToken": 1}
    }}))
    .await;
    // While the countdown runs, other requests are answered.
    let ping = c.request(21, "ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));
    loop {
        let m = c.recv().await;
        if m["method"] == "notifications/progress" {
            break;
        }
    }
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20, "reason": "test"}}))
        .await;
    // The cancelled request gets no response; later requests still work.
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.send(json!({"jsonrpc": "2.0", "id": 22, "method": "ping"}))
        .await;
    let (pong, before) = c.response(22).await;
    assert_eq!(pong["result"], json!({}));
    assert!(
        before.iter().all(|m| m["id"] != 20),
        "no response to a cancelled request: {before:?}"
    );
    let late_progress = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert!(
        late_progress <= 1,
        "work stopped after cancellation: {before:?}"
    );
}

#[tokio::test]
async fn exits_cleanly_at_end_of_input() {
    let mut c = Client::spawn();
    c.initialize(json!({})).await;
    c.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "countdown", "arguments": {"steps": 20, "delay_ms": 1000}
        }}),
    )
    .await;
    drop(c.stdin.take());
    let status = timeout(WAIT, c.child.wait())
        .await
        .expect("exits in time")
        .expect("wait");
    assert!(status.success(), "exit status {status}");
    let rest = timeout(WAIT, c.lines.next_line())
        .await
        .expect("stdout closed");
    assert!(matches!(rest, Ok(None)), "stdout ends: {rest:?}");
}

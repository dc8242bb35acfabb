//! The demo server over Streamable HTTP: the test spawns `mcpgate demo-server --http
//! 127.0.0.1:0` and plays the client.

use std::process::Stdio;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);
const BOTH: &str = "application/json, text/event-stream";

/// Starts `mcpgate demo-server --http` on a free loopback port; returns the process
/// (killed when dropped) and the endpoint URL it printed on stdout.
async fn serve() -> (Child, String) {
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
        .expect("demo server listening in time")
        .expect("read stdout")
        .expect("endpoint URL on stdout");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    (child, url)
}

/// One SSE event: its id (if any) and data.
#[derive(Debug, Clone)]
struct Event {
    id: Option<String>,
    retry: Option<u64>,
    data: String,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Reads SSE events incrementally from a response body.
struct Events {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl Events {
    fn new(r: Response) -> Events {
        Events {
            body: r.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next event, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = Event {
                    id: None,
                    retry: None,
                    data: String::new(),
                };
                let mut has_data = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("retry: ") {
                        ev.retry = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        ev.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        has_data = true;
                    }
                }
                if has_data || ev.id.is_some() {
                    return Some(ev);
                }
                continue; // a comment (keep-alive)
            }
            let chunk = timeout(WAIT, self.body.next())
                .await
                .expect("event in time")?;
            self.buf
                .push_str(&String::from_utf8_lossy(&chunk.expect("body chunk")));
        }
    }

    /// Events up to and including the JSON-RPC response with `id`.
    async fn until_response(&mut self, id: i64) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            let msg = ev.json();
            out.push(ev);
            if msg["id"] == id && msg.get("method").is_none() {
                return out;
            }
        }
        panic!("stream ended before response {id}: {out:?}");
    }
}

struct Client {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl Client {
    async fn connect(url: &str, capabilities: Value) -> Client {
        let http = reqwest::Client::new();
        let r = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", BOTH)
            .body(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": capabilities,
                    "clientInfo": {"name": "demo-http-test", "version": "1"}
                }})
                .to_string(),
            )
            .send()
            .await
            .expect("initialize");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(content_type(&r), "application/json");
        let session = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("session id")
            .to_owned();
        assert!(session.len() >= 16 && session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        let body: Value = serde_json::from_str(&r.text().await.expect("body")).expect("json");
        assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
        let c = Client {
            http,
            url: url.to_owned(),
            session,
        };
        let r = c
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        c
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "mcp-session-id",
            HeaderValue::from_str(&self.session).expect("header"),
        );
        h.insert(
            "mcp-protocol-version",
            HeaderValue::from_static("2025-11-25"),
        );
        h
    }

    async fn post(&self, msg: Value) -> Response {
        self.http
            .post(&self.url)
            .headers(self.headers())
            .header("content-type", "application/json")
            .header("accept", BOTH)
            .body(msg.to_string())
            .send()
            .await
            .expect("post")
    }

    async fn call(&self, id: i64, method: &str, params: Value) -> Response {
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    async fn json(&self, id: i64, method: &str, params: Value) -> Value {
        let r = self.call(id, method, params).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(content_type(&r), "application/json");
        serde_json::from_str(&r.text().await.expect("body")).expect("json")
    }

    async fn get(&self, last_event_id: Option<&str>) -> Response {
        let mut req = self
            .http
            .get(&self.url)
            .headers(self.headers())
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        req.send().await.expect("get")
    }
}

fn content_type(r: &Response) -> String {
    r.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn tool_call_streams_related_messages_then_the_result() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    let list = c.json(1, "tools/list", json!({})).await;
    assert!(
        list["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() > 10)
    );
    c.json(2, "logging/setLevel", json!({"level": "debug"}))
        .await;

    let r = c
        .call(
            3,
            "tools/call",
            json!({"name": "test_tool_with_logging", "arguments": {}}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(content_type(&r), "text/event-stream");
    let mut events = Events::new(r);
    let evs = events.until_response(3).await;
    let priming = &evs[0];
    assert!(
        priming.id.is_some() && priming.data.is_empty() && priming.retry.is_some(),
        "{priming:?}"
    );
    let logs: Vec<Value> = evs
        .iter()
        .map(Event::json)
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 3);
    let ids: Vec<&String> = evs.iter().filter_map(|e| e.id.as_ref()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids.len(), unique.len(), "event ids are unique");
    let result = evs.last().map(Event::json).unwrap_or_default();
    assert_eq!(result["result"]["content"][0]["type"], "text");
    assert!(
        events.next().await.is_none(),
        "the stream ends after the response"
    );
}

#[tokio::test]
async fn elicitation_answer_is_posted_back() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({"elicitation": {}})).await;
    let r = c
        .call(
            5,
            "tools/call",
            json!({"name": "test_elicitation", "arguments": {"message": "Who are you?"}}),
        )
        .await;
    let mut events = Events::new(r);
    let ask = loop {
        let ev = events.next().await.expect("elicitation request");
        let msg = ev.json();
        if msg["method"] == "elicitation/create" {
            break msg;
        }
    };
    assert_eq!(ask["params"]["message"], "Who are you?");
    assert_eq!(
        ask["params"]["requestedSchema"]["required"],
        json!(["username", "email"])
    );
    let answer = c
        .post(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "action": "accept", "content": {"username": "ada", "email": "ada@example.com"}
        }}))
        .await;
    assert_eq!(answer.status(), StatusCode::ACCEPTED);
    let result = events
        .until_response(5)
        .await
        .pop()
        .map(|e| e.json())
        .unwrap_or_default();
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        text.contains("action=accept") && text.contains("ada@example.com"),
        "{text}"
    );
}

#[tokio::test]
async fn get_stream_carries_unrelated_notifications() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    let get = c.get(None).await;
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(content_type(&get), "text/event-stream");
    let mut stream = Events::new(get);
    let priming = stream.next().await.expect("priming event");
    assert!(priming.data.is_empty() && priming.id.is_some());

    assert_eq!(
        c.json(1, "resources/subscribe", json!({"uri": "demo://counter"}))
            .await["result"],
        json!({})
    );
    let bump = c
        .call(2, "tools/call", json!({"name": "bump_counter"}))
        .await;
    Events::new(bump).until_response(2).await;
    let updated = stream.next().await.expect("resources/updated").json();
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], "demo://counter");

    let toggle = c
        .call(3, "tools/call", json!({"name": "toggle_bonus"}))
        .await;
    Events::new(toggle).until_response(3).await;
    let mut changed = Vec::new();
    for _ in 0..3 {
        changed.push(stream.next().await.expect("list_changed").json()["method"].clone());
    }
    for kind in ["tools", "resources", "prompts"] {
        assert!(
            changed.contains(&json!(format!("notifications/{kind}/list_changed"))),
            "{changed:?}"
        );
    }
    let tools = c.json(4, "tools/list", json!({})).await;
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "bonus_echo"))
    );
}

#[tokio::test]
async fn closed_stream_resumes_with_last_event_id() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    let r = c
        .call(7, "tools/call", json!({"name": "test_reconnection"}))
        .await;
    let mut first = Events::new(r);
    let priming = first.next().await.expect("priming");
    assert!(first.next().await.is_none(), "connection closed mid-call");
    let last = priming.id.expect("priming id");
    let resumed = c.get(Some(&last)).await;
    assert_eq!(resumed.status(), StatusCode::OK);
    let evs = Events::new(resumed).until_response(7).await;
    let text =
        evs.last().map(Event::json).unwrap_or_default()["result"]["content"][0]["text"].clone();
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("Reconnection test completed"))
    );
    let bad = c.get(Some("999_0")).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn cancelled_request_ends_its_stream_without_a_response() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    let r = c
        .call(9, "tools/call", json!({"name": "countdown", "arguments": {"steps": 20, "delay_ms": 200}, "_meta": {"progressToken": "p"}}))
        .await;
    let mut events = Events::new(r);
    loop {
        let msg = events.next().await.expect("progress").json();
        if msg["method"] == "notifications/progress" {
            break;
        }
    }
    let cancel = c
        .post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}))
        .await;
    assert_eq!(cancel.status(), StatusCode::ACCEPTED);
    while let Some(ev) = events.next().await {
        assert_ne!(ev.json()["id"], 9, "no response after cancellation");
    }
}

#[tokio::test]
async fn delete_ends_the_session() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    assert_eq!(c.json(1, "ping", json!({})).await["result"], json!({}));
    let del = c
        .http
        .delete(&c.url)
        .headers(c.headers())
        .send()
        .await
        .expect("delete");
    assert_eq!(del.status(), StatusCode::OK);
    let after = c.call(2, "ping", json!({})).await;
    assert_eq!(after.status(), StatusCode::NOT_FOUND);
    let body: Value = serde_json::from_str(&after.text().await.expect("body")).expect("json");
    assert!(body.get("id").is_none() && body["error"]["code"].is_i64());
}

#[tokio::test]
async fn transport_errors_use_http_statuses() {
    let (_server, url) = serve().await;
    let c = Client::connect(&url, json!({})).await;
    let http = &c.http;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let send =
        |req: reqwest::RequestBuilder| async move { req.send().await.expect("send").status() };
    let base = || {
        http.post(&url)
            .header("content-type", "application/json")
            .header("accept", BOTH)
    };

    // No session id on a non-initialize request → 400; an unknown one → 404.
    assert_eq!(
        send(base().body(ping.clone())).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        send(base().header("mcp-session-id", "nope").body(ping.clone())).await,
        StatusCode::NOT_FOUND
    );
    // Unsupported MCP-Protocol-Version → 400.
    let bad_version = base()
        .header("mcp-session-id", &c.session)
        .header("mcp-protocol-version", "1999-01-01");
    assert_eq!(
        send(bad_version.body(ping.clone())).await,
        StatusCode::BAD_REQUEST
    );
    // Accept and Content-Type.
    let html = http
        .post(&url)
        .headers(c.headers())
        .header("content-type", "application/json")
        .header("accept", "text/html");
    assert_eq!(
        send(html.body(ping.clone())).await,
        StatusCode::NOT_ACCEPTABLE
    );
    let text = http
        .post(&url)
        .headers(c.headers())
        .header("content-type", "text/plain")
        .header("accept", BOTH);
    assert_eq!(
        send(text.body(ping.clone())).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let get_json = http
        .get(&url)
        .headers(c.headers())
        .header("accept", "application/json");
    assert_eq!(send(get_json).await, StatusCode::NOT_ACCEPTABLE);
    // DNS rebinding: a foreign Host or Origin → 403.
    let evil = base().header("host", "evil.example.com").body(ping.clone());
    assert_eq!(send(evil).await, StatusCode::FORBIDDEN);
    let evil_origin = base()
        .headers(c.headers())
        .header("origin", "http://evil.example.com")
        .body(ping.clone());
    assert_eq!(send(evil_origin).await, StatusCode::FORBIDDEN);
    // Bad JSON → 400 with a -32700 error; a response or notification → 202.
    let r = base()
        .headers(c.headers())
        .body("{oops")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_str(&r.text().await.expect("body")).expect("json");
    assert_eq!(body["error"]["code"], -32700);
    // A batch on a 2025-11-25 session is refused with -32600.
    let batch = c
        .post(json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]))
        .await;
    let body: Value = serde_json::from_str(&batch.text().await.expect("body")).expect("json");
    assert_eq!(body["error"]["code"], -32600);
    // A client that accepts only SSE gets SSE, even for initialize.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "sse-only", "version": "1"}
    }});
    let sse_only = http
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(content_type(&sse_only), "text/event-stream");
    assert!(sse_only.headers().contains_key("mcp-session-id"));
    let evs = Events::new(sse_only).until_response(1).await;
    assert_eq!(evs[0].json()["result"]["protocolVersion"], "2025-06-18");
    assert!(evs[0].data.len() > 2, "no priming event before 2025-11-25");
    // JSON-RPC plane errors keep HTTP 200 and travel as messages.
    let r = c.call(3, "tools/call", json!({"name": "nope"})).await;
    assert_eq!(r.status(), StatusCode::OK);
    let unknown = Events::new(r)
        .until_response(3)
        .await
        .pop()
        .map(|e| e.json())
        .unwrap_or_default();
    assert_eq!(unknown["error"]["code"], -32602);
    let missing = c
        .json(4, "resources/subscribe", json!({"uri": "test://missing"}))
        .await;
    assert_eq!(missing["error"]["code"], -32002);
}

#[tokio::test]
async fn batches_are_served_on_2025_03_26_sessions() {
    let (_server, url) = serve().await;
    let http = reqwest::Client::new();
    let post = |session: Option<String>, body: Value| {
        let mut req = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", BOTH);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.body(body.to_string()).send()
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}
        }}),
    )
    .await
    .expect("initialize");
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let batch = post(
        session.clone(),
        json!([
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "b"}}}
        ]),
    )
    .await
    .expect("batch");
    assert_eq!(batch.status(), StatusCode::OK);
    let body: Value = serde_json::from_str(&batch.text().await.expect("body")).expect("json");
    let answers = body.as_array().expect("an array of responses");
    assert_eq!(answers.len(), 2);
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 2 && a["result"] == json!({}))
    );
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == 3 && a["result"]["content"][0]["text"] == "b")
    );
    let only_notes = post(
        session,
        json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
    )
    .await
    .expect("batch");
    assert_eq!(only_notes.status(), StatusCode::ACCEPTED);
}

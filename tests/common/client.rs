//! A small MCP Streamable HTTP client for the tests, on `reqwest`: JSON and SSE
//! answers, related messages, raw requests, the GET stream and DELETE.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use mcpgate::streamable_http::{EVENT_STREAM, JSON, LAST_EVENT_ID, PROTOCOL_VERSION, SESSION_ID};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

/// How long a test waits for any single answer before failing.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(8);

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Raw {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Raw {
    /// The body as JSON, or the JSON-RPC response of an SSE body: a server may
    /// answer a POST either way (MCP basic/transports; the gateway switches to SSE
    /// when the answer takes longer than its JSON window). Panics when it is neither.
    pub fn json(&self) -> Value {
        if let Some(response) = self.sse_response() {
            return response;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?} (status {})",
                String::from_utf8_lossy(&self.body),
                self.status
            )
        })
    }

    /// The last message without a `method` on an SSE body (`None` for other bodies).
    fn sse_response(&self) -> Option<Value> {
        let text = std::str::from_utf8(&self.body).ok()?;
        if !text.starts_with("data:") && !text.starts_with(':') && !text.starts_with("id:") {
            return None;
        }
        text.split("\n\n")
            .filter_map(|event| {
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                serde_json::from_str::<Value>(&data.join("\n")).ok()
            })
            .filter(|m| m.get("method").is_none())
            .last()
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The answer to one request: the response and what came before it.
#[derive(Debug)]
pub struct Rpc {
    /// The JSON-RPC response.
    pub response: Value,
    /// Messages received on the same stream before the response.
    pub related: Vec<Value>,
    /// `Content-Type` of the HTTP answer.
    pub content_type: String,
}

impl Rpc {
    /// The `result` member (panics on an error response).
    pub fn result(&self) -> &Value {
        self.response
            .get("result")
            .unwrap_or_else(|| panic!("expected a result, got {}", self.response))
    }

    /// The `error.code` member, if the response is an error.
    pub fn error_code(&self) -> Option<i64> {
        self.response.pointer("/error/code").and_then(Value::as_i64)
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, String>> + Send>>;

/// An open answer: a JSON body (one message) or an SSE stream of messages.
pub struct SseStream {
    /// HTTP status.
    pub status: StatusCode,
    /// HTTP headers.
    pub headers: HeaderMap,
    queued: VecDeque<Value>,
    events: Option<Events>,
    /// SSE event ids seen.
    pub event_ids: Vec<String>,
    /// Every SSE event read so far (priming events included), in order.
    pub raw_events: Vec<eventsource_stream::Event>,
}

impl SseStream {
    async fn from_response(resp: reqwest::Response) -> SseStream {
        let status = resp.status();
        let headers = resp.headers().clone();
        let is_sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(EVENT_STREAM));
        if is_sse {
            let events = resp
                .bytes_stream()
                .eventsource()
                .map(|e| e.map_err(|e| e.to_string()));
            return SseStream {
                status,
                headers,
                queued: VecDeque::new(),
                events: Some(Box::pin(events)),
                event_ids: Vec::new(),
                raw_events: Vec::new(),
            };
        }
        let body = resp.bytes().await.unwrap_or_default();
        let queued = serde_json::from_slice::<Value>(&body).into_iter().collect();
        SseStream {
            status,
            headers,
            queued,
            events: None,
            event_ids: Vec::new(),
            raw_events: Vec::new(),
        }
    }

    /// A response header as text.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Whether the answer is an SSE stream.
    pub fn is_sse(&self) -> bool {
        self.events.is_some()
    }

    /// The next JSON-RPC message, skipping priming events and comments. `None` when
    /// the stream ended or nothing arrived `within`.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        if let Some(v) = self.queued.pop_front() {
            return Some(v);
        }
        let events = self.events.as_mut()?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ev = tokio::time::timeout_at(deadline, events.next())
                .await
                .ok()??;
            let Ok(ev) = ev else { return None };
            self.raw_events.push(ev.clone());
            if !ev.id.is_empty() {
                self.event_ids.push(ev.id.clone());
            }
            if ev.data.trim().is_empty() {
                continue;
            }
            return serde_json::from_str(&ev.data).ok();
        }
    }

    /// Whether the stream has ended (or ends within `within`) with no more messages.
    pub async fn ends_within(&mut self, within: Duration) -> bool {
        if !self.queued.is_empty() {
            return false;
        }
        let Some(events) = self.events.as_mut() else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, events.next()).await {
                Err(_) => return false,
                Ok(None) => return true,
                Ok(Some(Ok(ev))) if ev.data.trim().is_empty() => continue,
                Ok(Some(_)) => return false,
            }
        }
    }
}

/// An MCP client bound to one gateway endpoint (and, once initialized, a session).
#[derive(Clone)]
pub struct McpClient {
    http: reqwest::Client,
    /// Endpoint URL.
    pub url: String,
    /// `Mcp-Session-Id`, once initialized.
    pub session: Option<String>,
    /// The negotiated protocol version, sent as `MCP-Protocol-Version`.
    pub version: Option<String>,
    next_id: Arc<AtomicI64>,
}

impl McpClient {
    /// A client without a session.
    pub fn new(url: &str) -> McpClient {
        McpClient {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            version: None,
            next_id: Arc::new(AtomicI64::new(100)),
        }
    }

    /// The headers a well-behaved client sends.
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        h.insert("content-type", HeaderValue::from_static(JSON));
        if let Some(s) = &self.session {
            h.insert(SESSION_ID, HeaderValue::from_str(s).unwrap());
        }
        if let Some(v) = &self.version {
            h.insert(PROTOCOL_VERSION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// Initializes at `2025-11-25` declaring `caps`, then sends `initialized`.
    pub async fn initialize(&mut self, caps: Value) -> Value {
        self.initialize_version("2025-11-25", caps).await
    }

    /// Initializes asking for `version`; adopts what the gateway answered.
    pub async fn initialize_version(&mut self, version: &str, caps: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": caps,
            "clientInfo": {"name": "it", "version": "0"}}});
        let raw = self.post(&[], body.to_string()).await;
        assert_eq!(raw.status, StatusCode::OK, "initialize: {raw:?}");
        let v = raw.json();
        self.session = Some(
            raw.header(SESSION_ID)
                .expect("initialize answer has Mcp-Session-Id")
                .to_owned(),
        );
        self.version = v
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let ack = self.notify("notifications/initialized", None).await;
        assert_eq!(ack.status, StatusCode::ACCEPTED);
        v
    }

    /// POSTs `body` with the usual headers, `extra` replacing or adding headers
    /// (an empty value removes the header).
    pub async fn post(&self, extra: &[(&str, &str)], body: impl Into<reqwest::Body>) -> Raw {
        let mut h = self.headers();
        for (k, v) in extra {
            let name = HeaderName::from_bytes(k.as_bytes()).unwrap();
            if v.is_empty() {
                h.remove(&name);
            } else {
                h.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        self.send_raw(reqwest::Method::POST, h, body.into()).await
    }

    /// Sends exactly `headers` and `body` with HTTP `method`.
    pub async fn send_raw(
        &self,
        method: reqwest::Method,
        headers: HeaderMap,
        body: reqwest::Body,
    ) -> Raw {
        let resp = tokio::time::timeout(
            ANSWER_WITHIN,
            self.http
                .request(method, &self.url)
                .headers(headers)
                .body(body)
                .send(),
        )
        .await
        .expect("gateway answered in time")
        .expect("HTTP request failed");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = tokio::time::timeout(ANSWER_WITHIN, resp.bytes())
            .await
            .expect("body in time")
            .unwrap_or_default();
        Raw {
            status,
            headers,
            body,
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Raw {
        let mut msg = json!({"jsonrpc": "2.0", "method": method});
        if let Some(p) = params {
            msg["params"] = p;
        }
        self.post(&[], msg.to_string()).await
    }

    /// A fresh request id.
    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request with a fresh id and reads its answer.
    pub async fn request(&self, method: &str, params: Value) -> Rpc {
        self.request_id(json!(self.next_id()), method, params).await
    }

    /// Sends a request with id `id` and reads its answer.
    pub async fn request_id(&self, id: Value, method: &str, params: Value) -> Rpc {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
    }

    /// `tools/call name(args)`.
    pub async fn call_tool(&self, name: &str, args: Value) -> Rpc {
        self.request("tools/call", json!({"name": name, "arguments": args}))
            .await
    }

    /// POSTs a request and reads messages until its response.
    pub async fn send(&self, msg: Value) -> Rpc {
        let id = msg.get("id").cloned();
        let mut stream = self.open(&msg).await;
        assert_eq!(stream.status, StatusCode::OK, "POST {msg}");
        let content_type = stream
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut related = Vec::new();
        loop {
            let Some(m) = stream.next(ANSWER_WITHIN).await else {
                panic!("no response to {msg}; related so far: {related:?}");
            };
            let is_response = m.get("method").is_none() && m.get("id") == id.as_ref();
            if is_response {
                return Rpc {
                    response: m,
                    related,
                    content_type,
                };
            }
            related.push(m);
        }
    }

    /// POSTs a message and returns the open answer, to read at the test's pace.
    pub async fn open(&self, msg: &Value) -> SseStream {
        self.open_with(&[], msg).await
    }

    /// [`McpClient::open`] with `extra` headers added (dropping the stream closes
    /// the connection).
    pub async fn open_with(&self, extra: &[(&str, &str)], msg: &Value) -> SseStream {
        let mut h = self.headers();
        for (k, v) in extra {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let resp = tokio::time::timeout(
            ANSWER_WITHIN,
            self.http
                .post(&self.url)
                .headers(h)
                .body(msg.to_string())
                .send(),
        )
        .await
        .expect("gateway answered in time")
        .expect("HTTP request failed");
        SseStream::from_response(resp).await
    }

    /// Opens the standalone GET stream.
    pub async fn get_stream(&self) -> SseStream {
        self.get_stream_with(&[]).await
    }

    /// Resumes a stream: `GET` with `Last-Event-ID`.
    pub async fn resume(&self, last_event_id: &str) -> SseStream {
        self.get_stream_with(&[(LAST_EVENT_ID, last_event_id)])
            .await
    }

    /// Opens a GET stream with `extra` headers added.
    pub async fn get_stream_with(&self, extra: &[(&str, &str)]) -> SseStream {
        let mut h = self.headers();
        for (k, v) in extra {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h.remove("content-type");
        h.insert("accept", HeaderValue::from_static(EVENT_STREAM));
        let resp = tokio::time::timeout(ANSWER_WITHIN, self.http.get(&self.url).headers(h).send())
            .await
            .expect("gateway answered in time")
            .expect("HTTP request failed");
        SseStream::from_response(resp).await
    }

    /// Ends the session with DELETE.
    pub async fn delete(&self) -> Raw {
        let mut h = self.headers();
        h.remove("content-type");
        self.send_raw(reqwest::Method::DELETE, h, reqwest::Body::from(""))
            .await
    }

    /// Every item of a paginated list, following `nextCursor`.
    pub async fn list_all(&self, method: &str, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let rpc = self.request(method, params).await;
            let result = rpc.result();
            out.extend(result[key].as_array().cloned().unwrap_or_default());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => return out,
            }
        }
        panic!("{method}: more than 1000 pages");
    }
}

//! `fx-http`: an in-process Streamable HTTP MCP server for the integration tests,
//! with the same tools as `fx-stdio` and knobs for strictness. Every inbound HTTP
//! request is recorded (method, headers, JSON body, status) for assertions.
//!
//! A session's GET stream belongs to a client, named by the request's
//! [`CLIENT`] header (none: one unnamed client), so several gateway replicas
//! sharing one backend session each keep a GET stream open. A tool named
//! `log_later` (declare it with [`FakeHttp::add_tool`]) answers `later` at once
//! and sends `notifications/message` (`data`: its `text` argument) `delay_ms`
//! later on the GET stream of the client that called it (else on any open
//! one of the session), unrelated to any request. With
//! [`FakeHttpOptions::single_get`] a session has at most one GET stream, as
//! the TypeScript and Python SDK servers: a second concurrent GET gets 409.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::future::OptionFuture;
use mcpgate::streamable_http::{EVENT_STREAM, JSON, PROTOCOL_VERSION, SESSION_ID};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::modern;
pub use super::recorded::Recorded;
use super::tools::{self, Catalog, Peer};

/// The request header naming the client whose GET stream `log_later` uses.
pub const CLIENT: &str = "x-fx-client";

/// Start-up knobs of a fake HTTP backend.
#[derive(Debug, Clone)]
pub struct FakeHttpOptions {
    /// Protocol versions accepted, preferred first (answered when the client asks
    /// for one it does not know).
    pub versions: Vec<String>,
    /// 406 unless `Accept` lists both `application/json` and `text/event-stream`.
    pub strict_accept: bool,
    /// 400 when `MCP-Protocol-Version` differs from the negotiated version.
    pub strict_version_header: bool,
    /// GET opens an SSE stream (true) or gets 405 (false).
    pub get_sse: bool,
    /// What `whoami` answers.
    pub label: String,
    /// How `server/discover` (the 2026-07-28 era probe) is answered; `None`: like
    /// any request without a session (400), as a legacy-only server does.
    pub discover: Option<Discover>,
    /// Also serve 2026-07-28 requests (those whose `_meta` claims a revision)
    /// statelessly, with the `input_required` tools of `modern.rs`: a dual-era
    /// server. Before `discover`.
    pub modern: bool,
    /// 409 Conflict for a GET on a session whose GET stream is open (one
    /// standalone stream per session, as the official SDK servers).
    pub single_get: bool,
    /// Serve tasks, server-wide (`http_tasks.rs`).
    pub tasks: bool,
    /// With `tasks`: per backend session, each announced early (`http_tasks.rs`).
    pub session_tasks: bool,
}

/// Answers to the era probe, for the client face's `auto` cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discover {
    /// 200 with a body that is not JSON.
    Garbage,
    /// Never answered.
    Hang,
    /// 401 (an authentication refusal is no era evidence).
    Unauthorized,
    /// 400 + -32022 listing only legacy revisions.
    LegacyVersions,
}

impl Default for FakeHttpOptions {
    fn default() -> Self {
        FakeHttpOptions {
            versions: vec![
                "2025-11-25".into(),
                "2025-06-18".into(),
                "2025-03-26".into(),
            ],
            strict_accept: false,
            strict_version_header: false,
            get_sse: true,
            label: "fx-http".into(),
            discover: None,
            modern: false,
            single_get: false,
            tasks: false,
            session_tasks: false,
        }
    }
}

struct FakeSession {
    version: String,
    dropped: bool,
    /// The open GET stream of each client (by [`CLIENT`] header).
    gets: HashMap<String, mpsc::UnboundedSender<Value>>,
}

struct Inner {
    opts: FakeHttpOptions,
    catalog: Arc<Catalog>,
    sessions: Mutex<HashMap<String, FakeSession>>,
    next_session: AtomicU64,
    asked: Mutex<HashMap<i64, oneshot::Sender<Result<Value, Value>>>>,
    next_ask: AtomicI64,
    log: Mutex<Vec<Recorded>>,
    tasks: super::http_tasks::Tasks,
}

/// A running fake HTTP backend; stops when dropped.
pub struct FakeHttp {
    /// The MCP endpoint URL.
    pub url: String,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHttp {
    /// Starts a fake on 127.0.0.1 with an ephemeral port.
    pub async fn start(opts: FakeHttpOptions) -> FakeHttp {
        FakeHttp::start_at(opts, "127.0.0.1:0").await
    }

    /// Starts a fake listening on `addr` (e.g. where another server was).
    pub async fn start_at(opts: FakeHttpOptions, addr: &str) -> FakeHttp {
        let inner = Arc::new(Inner {
            catalog: Catalog::new(&opts.label, Vec::new()),
            opts,
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            asked: Mutex::new(HashMap::new()),
            next_ask: AtomicI64::new(500),
            log: Mutex::new(Vec::new()),
            tasks: Default::default(),
        });
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(post).get(get).delete(delete))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeHttp { url, inner, task }
    }

    /// Starts a fake with default options.
    pub async fn default_started() -> FakeHttp {
        FakeHttp::start(FakeHttpOptions::default()).await
    }

    /// From now on every existing session id gets 404 (the server "forgot" them).
    pub fn drop_sessions(&self) {
        if let Ok(mut s) = self.inner.sessions.lock() {
            for sess in s.values_mut() {
                sess.dropped = true;
                sess.gets.clear();
            }
        }
    }

    /// Adds raw tool definition `tool` (answered `called {name}`) without
    /// announcing it: for tools a test needs before the gateway lists.
    pub fn add_tool(&self, tool: Value) {
        if let Ok(mut t) = self.inner.catalog.extra_tools.lock() {
            t.push(tool);
        }
    }

    /// Adds a tool and announces it with `notifications/tools/list_changed` on
    /// every open GET stream (unrelated to any request); returns how many
    /// streams it went to.
    pub fn add_tool_and_announce(&self, name: &str) -> usize {
        if let Ok(mut t) = self.inner.catalog.extra_tools.lock() {
            t.push(json!({"name": name, "inputSchema": {"type": "object"}}));
        }
        self.notify(None, "notifications/tools/list_changed", Value::Null)
    }

    /// Sends notification `method` with `params` on every open GET stream of
    /// backend session `sid` (`None`: of every session), unrelated to any
    /// request; returns how many streams it went to.
    pub fn notify(&self, sid: Option<&str>, method: &str, params: Value) -> usize {
        notify_in(&self.inner, sid, method, params)
    }

    /// GETs on backend session `sid` answered so far: (with a stream, with
    /// 409 Conflict).
    pub fn gets(&self, sid: &str) -> (usize, usize) {
        let gets: Vec<u16> = (self.log().into_iter())
            .filter(|r| r.http_method == "GET" && r.header("mcp-session-id") == Some(sid))
            .map(|r| r.status)
            .collect();
        let count = |code| gets.iter().filter(|s| **s == code).count();
        (count(200), count(409))
    }

    /// Every request received so far.
    pub fn log(&self) -> Vec<Recorded> {
        self.inner.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Received POSTs whose JSON-RPC method is `method`.
    pub fn calls(&self, method: &str) -> Vec<Recorded> {
        self.log()
            .into_iter()
            .filter(|r| r.rpc_method() == Some(method))
            .collect()
    }

    /// Session ids handed out, in order.
    pub fn session_ids(&self) -> Vec<String> {
        let n = self.inner.next_session.load(Ordering::Relaxed);
        (1..n).map(|i| format!("fxs-{i}")).collect()
    }
}

/// [`FakeHttp::notify`].
fn notify_in(inner: &Inner, sid: Option<&str>, method: &str, params: Value) -> usize {
    let note = tools::message(None, method, params);
    let Ok(s) = inner.sessions.lock() else {
        return 0;
    };
    s.iter()
        .filter(|(id, _)| sid.is_none_or(|sid| sid == id.as_str()))
        .flat_map(|(_, sess)| sess.gets.values())
        .filter(|tx| tx.send(note.clone()).is_ok())
        .count()
}

fn record(inner: &Inner, method: &str, h: &HeaderMap, body: Option<Value>, status: StatusCode) {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in h {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        headers
            .entry(k.as_str().to_owned())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(&v);
            })
            .or_insert(v);
    }
    if let Ok(mut l) = inner.log.lock() {
        l.push(Recorded {
            http_method: method.into(),
            headers,
            body,
            status: status.as_u16(),
        });
    }
}

fn status(code: StatusCode, msg: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "error": {"code": -32000, "message": msg}});
    (code, [(header::CONTENT_TYPE, JSON)], body.to_string()).into_response()
}

fn json_reply(v: &Value) -> Response {
    let ok = StatusCode::OK;
    (ok, [(header::CONTENT_TYPE, JSON)], v.to_string()).into_response()
}

fn sse(rx: mpsc::UnboundedReceiver<Value>) -> Response {
    let body = UnboundedReceiverStream::new(rx)
        .map(|v| Ok::<_, Infallible>(Bytes::from(format!("event: message\ndata: {v}\n\n"))));
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    resp
}

/// A 2026-07-28 request's answer: JSON, or SSE when notifications go first; the
/// errors the spec gives a status get it (-32601: 404; -32602, -32021: 400).
async fn modern_reply(inner: &Inner, msg: &Value) -> Response {
    let Some(reply) = modern::answer(&inner.catalog, msg).await else {
        return StatusCode::ACCEPTED.into_response();
    };
    if !reply.related.is_empty() {
        let (tx, rx) = mpsc::unbounded_channel();
        for m in reply.related.into_iter().chain([reply.response]) {
            let _ = tx.send(m);
        }
        return sse(rx);
    }
    let code = match reply
        .response
        .pointer("/error/code")
        .and_then(Value::as_i64)
    {
        Some(-32601) => StatusCode::NOT_FOUND,
        Some(-32602 | -32021) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    let mut resp = json_reply(&reply.response);
    *resp.status_mut() = code;
    resp
}

/// The session named by the request: 400 without id, 404 unknown or dropped.
fn session_of(inner: &Inner, h: &HeaderMap) -> Result<(String, String), StatusCode> {
    let Some(id) = h.get(SESSION_ID).and_then(|v| v.to_str().ok()) else {
        return Err(StatusCode::BAD_REQUEST);
    };
    let sessions = inner
        .sessions
        .lock()
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    match sessions.get(id) {
        Some(s) if !s.dropped => Ok((id.to_owned(), s.version.clone())),
        _ => Err(StatusCode::NOT_FOUND),
    }
}

async fn post(State(inner): State<Arc<Inner>>, h: HeaderMap, body: Bytes) -> Response {
    let msg: Option<Value> = serde_json::from_slice(&body).ok();
    let resp = post_inner(&inner, &h, msg.clone()).await;
    record(&inner, "POST", &h, msg, resp.status());
    resp
}

async fn post_inner(inner: &Arc<Inner>, h: &HeaderMap, msg: Option<Value>) -> Response {
    let Some(msg) = msg else {
        return status(StatusCode::BAD_REQUEST, "parse error");
    };
    if inner.opts.strict_accept {
        let accept = h
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        if !(accept.contains(JSON) && accept.contains(EVENT_STREAM)) {
            return status(StatusCode::NOT_ACCEPTABLE, "Not Acceptable");
        }
    }
    if inner.opts.modern && modern::is_modern(&msg) {
        return modern_reply(inner, &msg).await;
    }
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let id = msg.get("id").cloned();
    if method == "server/discover"
        && let Some(d) = inner.opts.discover
    {
        return match d {
            Discover::Garbage => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, JSON)],
                "<html>hi</html>",
            )
                .into_response(),
            Discover::Hang => {
                let timeout = StatusCode::GATEWAY_TIMEOUT;
                record(inner, "POST", h, Some(msg.clone()), timeout);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                StatusCode::GATEWAY_TIMEOUT.into_response()
            }
            Discover::Unauthorized => status(StatusCode::UNAUTHORIZED, "unauthorized"),
            Discover::LegacyVersions => {
                let error = json!({"code": -32022, "message": "Unsupported protocol version",
                    "data": {"supported": inner.opts.versions, "requested": "2026-07-28"}});
                let e = tools::response_with(&id.unwrap_or_default(), Err(error));
                (
                    StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, JSON)],
                    e.to_string(),
                )
                    .into_response()
            }
        };
    }
    if method == "initialize" {
        let asked = msg
            .pointer("/params/protocolVersion")
            .and_then(Value::as_str);
        let versions = &inner.opts.versions;
        let version = asked
            .filter(|a| versions.iter().any(|v| v == a))
            .map_or_else(|| versions[0].clone(), str::to_owned);
        let sid = format!("fxs-{}", inner.next_session.fetch_add(1, Ordering::Relaxed));
        if let Ok(mut s) = inner.sessions.lock() {
            s.insert(
                sid.clone(),
                FakeSession {
                    version: version.clone(),
                    dropped: false,
                    gets: HashMap::new(),
                },
            );
        }
        let mut caps = tools::capabilities();
        if inner.opts.tasks {
            caps["tasks"] = super::http_tasks::capability();
        }
        let result = json!({"protocolVersion": version, "capabilities": caps,
                            "serverInfo": {"name": "fx-http", "version": "0"}});
        let mut resp = json_reply(&tools::response(&id.unwrap_or_default(), Ok(result)));
        resp.headers_mut()
            .insert(SESSION_ID, HeaderValue::from_str(&sid).unwrap());
        return resp;
    }
    let (sid, version) = match session_of(inner, h) {
        Ok(s) => s,
        Err(code) => return status(code, "no such session"),
    };
    if inner.opts.strict_version_header {
        let sent = h.get(PROTOCOL_VERSION).and_then(|v| v.to_str().ok());
        if sent != Some(version.as_str()) {
            return status(StatusCode::BAD_REQUEST, "Unsupported protocol version");
        }
    }
    let Some(id) = id else {
        return StatusCode::ACCEPTED.into_response();
    };
    if method.is_empty() {
        let outcome = match msg.get("result") {
            Some(r) => Ok(r.clone()),
            None => Err(msg.get("error").cloned().unwrap_or_default()),
        };
        let tx = id
            .as_i64()
            .and_then(|n| inner.asked.lock().ok()?.remove(&n));
        if let Some(tx) = tx {
            let _ = tx.send(outcome);
        }
        return StatusCode::ACCEPTED.into_response();
    }
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    let cursor = params.get("cursor").and_then(Value::as_str);
    let scope = inner.opts.session_tasks.then_some(sid.as_str());
    let announce = |p| notify_in(inner, Some(&sid), "notifications/tasks/status", p);
    let task = (inner.opts.tasks).then(|| inner.tasks.handle(method, &params, scope, &announce));
    if let Some(Some(outcome)) = OptionFuture::from(task).await {
        return json_reply(&tools::response(&id, outcome));
    }
    let outcome = match method {
        "ping" => Ok(json!({})),
        "resources/read" => {
            tools::read_resource(params.get("uri").and_then(Value::as_str).unwrap_or(""))
        }
        "prompts/get" => tools::get_prompt(&params),
        "tools/call" if params["name"] == "log_later" => {
            log_later(inner, sid, client_of(h), &params);
            Ok(json!({"content": [{"type": "text", "text": "later"}]}))
        }
        "tools/call" => return call(inner, id, params).await,
        _ => tools::list(&inner.catalog, method, cursor, 0)
            .ok_or_else(|| (-32601, format!("Method not found: {method}"))),
    };
    json_reply(&tools::response(&id, outcome))
}

/// The client a request comes from ([`CLIENT`]; `""`: unnamed).
fn client_of(h: &HeaderMap) -> String {
    h.get(CLIENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `log_later`: the log `{delay_ms}` later on the GET stream of `client` in
/// session `sid` (dropped when that client has none).
fn log_later(inner: &Arc<Inner>, sid: String, client: String, params: &Value) {
    let args = params.get("arguments").cloned().unwrap_or_default();
    let delay = args.get("delay_ms").and_then(Value::as_u64).unwrap_or(100);
    let inner = inner.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let log = json!({"level": "info", "logger": "bg", "data": args.get("text")});
        let note = tools::message(None, "notifications/message", log);
        if let Ok(s) = inner.sessions.lock()
            && let Some(sess) = s.get(&sid)
        {
            let open = |tx: &&mpsc::UnboundedSender<Value>| !tx.is_closed();
            let own = sess.gets.get(&client).filter(open);
            if let Some(tx) = own.or_else(|| sess.gets.values().find(open)) {
                let _ = tx.send(note);
            }
        }
    });
}

struct HttpPeer {
    tx: mpsc::UnboundedSender<Value>,
    inner: Arc<Inner>,
}

impl Peer for HttpPeer {
    fn notify(&self, method: &str, params: Value) {
        let _ = self.tx.send(tools::message(None, method, params));
    }

    async fn ask(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.inner.next_ask.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.inner.asked.lock() {
            m.insert(id, tx);
        }
        let _ = self.tx.send(tools::message(Some(id), method, params));
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(r)) => r,
            _ => Err(json!({"code": -1, "message": "no answer"})),
        }
    }
}

/// `tools/call`: tools that send related messages answer with SSE, others JSON.
async fn call(inner: &Arc<Inner>, id: Value, params: Value) -> Response {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let streams = matches!(
        name,
        "slow_progress" | "log" | "add_tool" | "ask_sampling" | "ask_elicit" | "ask_roots"
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let peer = HttpPeer {
        tx: tx.clone(),
        inner: inner.clone(),
    };
    let me = inner.clone();
    tokio::spawn(async move {
        let outcome = tools::call_tool(&me.catalog, &peer, &params).await;
        let _ = tx.send(tools::response(&id, outcome));
    });
    if streams {
        return sse(rx);
    }
    match rx.recv().await {
        Some(v) => json_reply(&v),
        None => status(StatusCode::INTERNAL_SERVER_ERROR, "tool vanished"),
    }
}

async fn get(State(inner): State<Arc<Inner>>, h: HeaderMap) -> Response {
    let resp = if !inner.opts.get_sse {
        let mut r = status(StatusCode::METHOD_NOT_ALLOWED, "no GET stream");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        r
    } else {
        match session_of(&inner, &h) {
            Err(code) => status(code, "no such session"),
            Ok((sid, _)) => open_get(&inner, &sid, &h),
        }
    };
    record(&inner, "GET", &h, None, resp.status());
    resp
}

/// A GET stream on session `sid`; 409 with [`FakeHttpOptions::single_get`]
/// while one is open.
fn open_get(inner: &Inner, sid: &str, h: &HeaderMap) -> Response {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut s = inner.sessions.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sess) = s.get_mut(sid) else {
        return sse(rx);
    };
    if inner.opts.single_get && sess.gets.values().any(|t| !t.is_closed()) {
        return status(StatusCode::CONFLICT, "Conflict: one SSE stream per session");
    }
    sess.gets.insert(client_of(h), tx);
    sse(rx)
}

async fn delete(State(inner): State<Arc<Inner>>, h: HeaderMap) -> Response {
    let resp = match session_of(&inner, &h) {
        Err(code) => status(code, "no such session"),
        Ok((sid, _)) => {
            if let Ok(mut s) = inner.sessions.lock() {
                s.remove(&sid);
            }
            StatusCode::OK.into_response()
        }
    };
    record(&inner, "DELETE", &h, None, resp.status());
    resp
}

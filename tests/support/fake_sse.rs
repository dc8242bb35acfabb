//! `fx-sse`: an in-process legacy (2024-11-05) HTTP+SSE MCP server for the
//! integration tests. `GET {prefix}/sse` opens an event stream whose first event,
//! `endpoint`, carries a configurable text (`{sid}` is replaced by the stream's
//! session id); `POST {prefix}/messages?sessionId=…` answers 202 and the response
//! arrives on the stream. A POST to the stream URL (a Streamable HTTP `initialize`)
//! gets 405. Every request is recorded (method, path with query, status).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use mcpgate::streamable_http::EVENT_STREAM;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::tools::{self, Catalog, Peer};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct SseRecorded {
    /// `GET` or `POST`.
    pub http_method: String,
    /// Path and query, as received.
    pub target: String,
    /// The JSON-RPC method of a POSTed message, if any.
    pub rpc_method: Option<String>,
    /// The status answered.
    pub status: u16,
}

struct Inner {
    endpoint: String,
    catalog: Arc<Catalog>,
    streams: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
    next: AtomicU64,
    log: Mutex<Vec<SseRecorded>>,
}

/// A running legacy server; stops when dropped.
pub struct FakeSse {
    /// `http://127.0.0.1:PORT` (the origin).
    pub base: String,
    /// The event stream URL, `{base}{prefix}/sse`.
    pub url: String,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSse {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeSse {
    /// Serves the stream at `{prefix}/sse` and messages at `{prefix}/messages`;
    /// `endpoint` is the text of the `endpoint` event (`{sid}` = session id).
    pub async fn start(prefix: &str, endpoint: &str) -> FakeSse {
        let inner = Arc::new(Inner {
            endpoint: endpoint.to_owned(),
            catalog: Catalog::new("fx-sse", Vec::new()),
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            log: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .route(
                &format!("{prefix}/sse"),
                axum::routing::get(stream).post(refuse_post),
            )
            .route(&format!("{prefix}/messages"), axum::routing::post(message))
            .fallback(not_found)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSse {
            url: format!("{base}{prefix}/sse"),
            base,
            inner,
            task,
        }
    }

    /// Every request received so far.
    pub fn log(&self) -> Vec<SseRecorded> {
        self.inner.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

fn record(inner: &Inner, method: &str, uri: &Uri, rpc: Option<&Value>, status: StatusCode) {
    if let Ok(mut l) = inner.log.lock() {
        l.push(SseRecorded {
            http_method: method.into(),
            target: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned()),
            rpc_method: rpc
                .and_then(|m| m.get("method"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            status: status.as_u16(),
        });
    }
}

async fn not_found(
    State(inner): State<Arc<Inner>>,
    method: axum::http::Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let msg: Option<Value> = serde_json::from_slice(&body).ok();
    record(
        &inner,
        method.as_str(),
        &uri,
        msg.as_ref(),
        StatusCode::NOT_FOUND,
    );
    (StatusCode::NOT_FOUND, "no such endpoint").into_response()
}

async fn refuse_post(State(inner): State<Arc<Inner>>, uri: Uri, body: Bytes) -> Response {
    let msg: Option<Value> = serde_json::from_slice(&body).ok();
    record(
        &inner,
        "POST",
        &uri,
        msg.as_ref(),
        StatusCode::METHOD_NOT_ALLOWED,
    );
    let mut r = (StatusCode::METHOD_NOT_ALLOWED, "GET only").into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    r
}

async fn stream(State(inner): State<Arc<Inner>>, uri: Uri) -> Response {
    let sid = format!("abc{}", inner.next.fetch_add(1, Ordering::Relaxed));
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(format!(
        "event: endpoint\ndata: {}\n\n",
        inner.endpoint.replace("{sid}", &sid)
    ));
    if let Ok(mut s) = inner.streams.lock() {
        s.insert(sid, tx);
    }
    record(&inner, "GET", &uri, None, StatusCode::OK);
    let body = UnboundedReceiverStream::new(rx).map(|s| Ok::<_, Infallible>(Bytes::from(s)));
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    resp
}

struct StreamPeer(mpsc::UnboundedSender<String>);

impl Peer for StreamPeer {
    fn notify(&self, method: &str, params: Value) {
        let msg = tools::message(None, method, params);
        let _ = self.0.send(format!("event: message\ndata: {msg}\n\n"));
    }

    async fn ask(&self, _method: &str, _params: Value) -> Result<Value, Value> {
        Err(json!({"code": -32601, "message": "fx-sse does not ask clients"}))
    }
}

async fn message(
    State(inner): State<Arc<Inner>>,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let msg: Option<Value> = serde_json::from_slice(&body).ok();
    let tx = q
        .get("sessionId")
        .and_then(|sid| inner.streams.lock().ok()?.get(sid).cloned());
    let (Some(msg), Some(tx)) = (msg.clone(), tx) else {
        record(&inner, "POST", &uri, msg.as_ref(), StatusCode::NOT_FOUND);
        return (StatusCode::NOT_FOUND, "unknown session").into_response();
    };
    record(&inner, "POST", &uri, Some(&msg), StatusCode::ACCEPTED);
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    if let (Some(method), Some(id)) = (method, msg.get("id").cloned()) {
        let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
        let catalog = inner.catalog.clone();
        tokio::spawn(async move {
            let peer = StreamPeer(tx.clone());
            let outcome = match method.as_str() {
                "initialize" => Ok(json!({"protocolVersion": "2024-11-05",
                    "capabilities": {"tools": {}, "resources": {}},
                    "serverInfo": {"name": "fx-sse", "version": "0"}})),
                "ping" => Ok(json!({})),
                "tools/list" => Ok(json!({ "tools": catalog.tools() })),
                "resources/list" => Ok(json!({ "resources": tools::resources() })),
                "resources/templates/list" => {
                    Ok(json!({ "resourceTemplates": tools::templates() }))
                }
                "resources/read" => tools::read_resource(
                    params
                        .get("uri")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
                "tools/call" => tools::call_tool(&catalog, &peer, &params).await,
                other => Err((-32601, format!("Method not found: {other}"))),
            };
            let answer = tools::response(&id, outcome);
            let _ = tx.send(format!("event: message\ndata: {answer}\n\n"));
        });
    }
    StatusCode::ACCEPTED.into_response()
}

//! The benchmark backend: a minimal, fast MCP server over Streamable HTTP and
//! stdio, so the gateway's own cost is visible and not hidden behind a slow server.
//!
//! Tools: `echo {message}` returns the message as text; `payload {bytes}` returns
//! a text of that many bytes; `filler_N` (listed only, `--extra-tools`) make the
//! catalogue look like a real server's. One static resource, `bench://static`.
//! Sessions are handed out but not checked: the backend is a measuring device.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::client::{EVENT_STREAM, JSON, SESSION_ID};

/// What the backend answers with; shared by both transports.
pub struct Server {
    tools_list: String,
    sse: bool,
    sessions: AtomicU64,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(default)]
    arguments: Option<Value>,
}

impl Server {
    /// A server listing `extra_tools` filler tools besides `echo` and `payload`;
    /// with `sse`, HTTP answers are SSE streams instead of JSON bodies.
    pub fn new(extra_tools: usize, sse: bool) -> Self {
        let mut tools = vec![
            json!({"name": "echo", "description": "Returns its message.",
                   "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}),
            json!({"name": "payload", "description": "Returns a text of `bytes` bytes.",
                   "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}}),
        ];
        for i in 0..extra_tools {
            tools.push(
                json!({"name": format!("filler_{i}"), "description": "Does nothing.",
                              "inputSchema": {"type": "object", "properties": {}}}),
            );
        }
        Server {
            tools_list: json!({ "tools": tools }).to_string(),
            sse,
            sessions: AtomicU64::new(1),
        }
    }

    /// Answers one JSON-RPC message; `None` for notifications and responses.
    pub fn handle(&self, text: &[u8]) -> Option<Vec<u8>> {
        let msg: Message<'_> = match serde_json::from_slice(text) {
            Ok(m) => m,
            Err(_) => {
                return Some(
                    br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
                        .to_vec(),
                );
            }
        };
        let (Some(id), Some(method)) = (msg.id, msg.method) else {
            return None;
        };
        let id = id.get();
        let params = msg.params.map_or("{}", RawValue::get);
        let result = match method {
            "tools/call" => return Some(self.call(id, params)),
            "initialize" => {
                let requested: Value = serde_json::from_str(params).unwrap_or(Value::Null);
                let version = requested
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .filter(|v| ["2025-03-26", "2025-06-18", "2025-11-25"].contains(v))
                    .unwrap_or("2025-06-18");
                json!({"protocolVersion": version,
                       "capabilities": {"tools": {}, "resources": {}},
                       "serverInfo": {"name": "mcpgate-bench", "version": env!("CARGO_PKG_VERSION")}})
                .to_string()
            }
            "tools/list" => self.tools_list.clone(),
            "resources/list" => {
                r#"{"resources":[{"uri":"bench://static","name":"static","mimeType":"text/plain"}]}"#
                    .to_owned()
            }
            "resources/templates/list" => r#"{"resourceTemplates":[]}"#.to_owned(),
            "resources/read" => {
                r#"{"contents":[{"uri":"bench://static","mimeType":"text/plain","text":"hello"}]}"#
                    .to_owned()
            }
            "ping" => "{}".to_owned(),
            _ => {
                return Some(
                    format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
                    )
                    .into_bytes(),
                );
            }
        };
        Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#).into_bytes())
    }

    fn call(&self, id: &str, params: &str) -> Vec<u8> {
        let Ok(p) = serde_json::from_str::<CallParams<'_>>(params) else {
            return error(id, -32602, "bad params");
        };
        let arg = |k: &str| p.arguments.as_ref().and_then(|a| a.get(k));
        match p.name {
            "echo" => {
                let text = arg("message").cloned().unwrap_or_else(|| json!(""));
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":{text}}}]}}}}"#
                )
                .into_bytes()
            }
            "payload" => {
                let n = arg("bytes").and_then(Value::as_u64).unwrap_or(0) as usize;
                let head = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
                );
                let mut out = Vec::with_capacity(head.len() + n + 8);
                out.extend_from_slice(head.as_bytes());
                out.resize(head.len() + n, b'x');
                out.extend_from_slice(br#""}]}}"#);
                out
            }
            _ => error(id, -32602, "Unknown tool"),
        }
    }
}

fn error(id: &str, code: i64, message: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#)
        .into_bytes()
}

/// Serves newline-delimited JSON-RPC on stdin/stdout until stdin closes. Output is
/// flushed whenever no further input is already buffered, so pipelined requests
/// are answered in batches.
pub fn run_stdio(server: &Server) -> std::io::Result<()> {
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut output = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return output.flush();
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        if let Some(out) = server.handle(&line) {
            output.write_all(&out)?;
            output.write_all(b"\n")?;
        }
        if input.buffer().is_empty() {
            output.flush()?;
        }
    }
}

/// Serves Streamable HTTP on `addr` (any path) until the process is killed.
pub async fn run_http(server: Arc<Server>, addr: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let server = server.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| answer(server.clone(), req));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn answer(
    server: Arc<Server>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let empty = |status| {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = status;
        Ok(r)
    };
    match *req.method() {
        Method::POST => {}
        Method::DELETE => return empty(StatusCode::OK),
        _ => return empty(StatusCode::METHOD_NOT_ALLOWED),
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return empty(StatusCode::BAD_REQUEST),
    };
    let initialize = body.windows(12).any(|w| w == b"\"initialize\"");
    let Some(out) = server.handle(&body) else {
        return empty(StatusCode::ACCEPTED);
    };
    let (content_type, out) = if server.sse {
        let mut framed = Vec::with_capacity(out.len() + 24);
        framed.extend_from_slice(b"event: message\ndata: ");
        framed.extend_from_slice(&out);
        framed.extend_from_slice(b"\n\n");
        (EVENT_STREAM, framed)
    } else {
        (JSON, out)
    };
    let mut resp = Response::new(Full::new(Bytes::from(out)));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if initialize {
        let n = server.sessions.fetch_add(1, Ordering::Relaxed);
        if let Ok(v) = HeaderValue::from_str(&format!("bench-{n:016x}")) {
            resp.headers_mut().insert(SESSION_ID, v);
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_and_sizes_payloads() {
        let s = Server::new(1, false);
        let out = s
            .handle(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}"#)
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#
        );
        let out = s
            .handle(br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"payload","arguments":{"bytes":1000}}}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["result"]["content"][0]["text"].as_str().unwrap().len(),
            1000
        );
        let out = s
            .handle(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
            .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 3);
        assert!(
            s.handle(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .is_none()
        );
    }
}

//! MCP clients of the load generator: one HTTP/1.1 keep-alive connection per
//! worker (Streamable HTTP, JSON or SSE answers) and a pipe to a stdio server
//! shared by all workers (answers matched by id).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

/// The revision the load generator asks for.
pub const VERSION: &str = "2025-11-25";

// Streamable HTTP names (MCP 2025-11-25 basic/transports), written once for the
// bench's client and backend: the same as `mcpgate::streamable_http`'s, which the
// bench does not link (its own workspace, so that the product builds without it).
/// `Mcp-Session-Id`.
pub const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// A JSON body.
pub const JSON: &str = "application/json";
/// An SSE body.
pub const EVENT_STREAM: &str = "text/event-stream";

/// A JSON-RPC request as bytes.
pub fn request_body(id: u64, method: &str, params: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
    ))
}

/// Whether a JSON-RPC response carries a result (not an error). Looks only for the
/// first of the two member names, which is cheap even for a 1 MiB result.
pub fn is_result(msg: &[u8]) -> bool {
    let find = |needle: &[u8]| msg.windows(needle.len()).position(|w| w == needle);
    match (find(b"\"result\""), find(b"\"error\"")) {
        (Some(r), Some(e)) => r < e,
        (Some(_), None) => true,
        _ => false,
    }
}

/// `http://host:port/path` split into authority and path.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port`.
    pub authority: String,
    /// Path with leading `/`.
    pub path: String,
}

impl Endpoint {
    /// Parses a plain `http://` URL.
    pub fn parse(url: &str) -> anyhow::Result<Endpoint> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("only http:// URLs are supported: {url}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        Ok(Endpoint {
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// One HTTP/1.1 connection with keep-alive; reconnects once after a failure.
pub struct HttpConn {
    endpoint: Endpoint,
    sender: SendRequest<Full<Bytes>>,
}

/// A JSON-RPC answer received over HTTP.
pub struct Answer {
    /// HTTP status.
    pub status: StatusCode,
    /// `Mcp-Session-Id`, if any.
    pub session: Option<String>,
    /// The JSON-RPC response (the body, or the response event of an SSE stream).
    pub message: Bytes,
}

impl HttpConn {
    /// Connects to `endpoint`.
    pub async fn connect(endpoint: &Endpoint) -> anyhow::Result<HttpConn> {
        let sender = handshake(&endpoint.authority).await?;
        Ok(HttpConn {
            endpoint: endpoint.clone(),
            sender,
        })
    }

    fn request(
        &self,
        method: Method,
        session: Option<&str>,
        accept: &'static str,
    ) -> hyper::http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(self.endpoint.path.as_str())
            .header(HOST, self.endpoint.authority.as_str())
            .header(ACCEPT, accept)
            .header(PROTOCOL_VERSION, VERSION);
        if let Some(s) = session {
            b = b.header(SESSION_ID, s);
        }
        b
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> anyhow::Result<Response<Incoming>> {
        if self.sender.ready().await.is_err() {
            self.sender = handshake(&self.endpoint.authority).await?;
        }
        Ok(self.sender.send_request(req).await?)
    }

    /// POSTs one JSON-RPC message and reads the whole answer (JSON body, or SSE
    /// stream up to its end).
    pub async fn post(&mut self, session: Option<&str>, body: Bytes) -> anyhow::Result<Answer> {
        let req = self
            .request(Method::POST, session, "application/json, text/event-stream")
            .header(CONTENT_TYPE, JSON)
            .body(Full::new(body))?;
        let resp = self.send(req).await?;
        let status = resp.status();
        let session = resp
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let sse = is_event_stream(resp.headers());
        let body = resp.into_body().collect().await?.to_bytes();
        let message = if sse { sse_response(&body) } else { body };
        Ok(Answer {
            status,
            session,
            message,
        })
    }

    /// Opens the standalone GET stream of `session`; the caller reads the body.
    pub async fn get_stream(&mut self, session: &str) -> anyhow::Result<Response<Incoming>> {
        let req = self
            .request(Method::GET, Some(session), EVENT_STREAM)
            .body(Full::new(Bytes::new()))?;
        let resp = self.send(req).await?;
        if resp.status() != StatusCode::OK || !is_event_stream(resp.headers()) {
            bail!("GET stream refused: HTTP {}", resp.status());
        }
        Ok(resp)
    }

    /// Ends `session` with DELETE (errors ignored: cleanup only).
    pub async fn delete(&mut self, session: &str) {
        if let Ok(req) = self
            .request(
                Method::DELETE,
                Some(session),
                "application/json, text/event-stream",
            )
            .body(Full::new(Bytes::new()))
            && let Ok(resp) = self.send(req).await
        {
            let _ = resp.into_body().collect().await;
        }
    }

    /// `initialize` + `notifications/initialized`; returns the session id (`None`
    /// for a stateless server).
    pub async fn open_session(&mut self) -> anyhow::Result<Option<String>> {
        let params = format!(
            r#"{{"protocolVersion":"{VERSION}","capabilities":{{}},"clientInfo":{{"name":"mcpgate-bench","version":"0.1.0"}}}}"#
        );
        let a = self
            .post(None, request_body(0, "initialize", &params))
            .await?;
        if a.status != StatusCode::OK || !is_result(&a.message) {
            bail!(
                "initialize failed: HTTP {}: {}",
                a.status,
                String::from_utf8_lossy(&a.message[..a.message.len().min(300)])
            );
        }
        let note = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let n = self.post(a.session.as_deref(), note).await?;
        if !n.status.is_success() {
            bail!("notifications/initialized refused: HTTP {}", n.status);
        }
        Ok(a.session)
    }
}

async fn handshake(authority: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority)
        .await
        .with_context(|| format!("connecting to {authority}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(EVENT_STREAM))
}

/// The JSON-RPC response in an SSE body: the last `data` of an event that is a
/// response (has a result or an error); related notifications before it are skipped.
pub fn sse_response(body: &[u8]) -> Bytes {
    let mut found: &[u8] = b"";
    for event in body
        .split(|&b| b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
    {
        let data = event.trim_ascii();
        if data.starts_with(b"{") && !data.windows(9).any(|w| w == b"\"method\":") {
            found = data;
        }
    }
    Bytes::copy_from_slice(found)
}

type Waiters = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// A stdio MCP server driven over its pipes; calls from many workers are
/// interleaved and matched by id, like a gateway's shared stdio connection.
pub struct StdioClient {
    tx: mpsc::Sender<Bytes>,
    waiters: Waiters,
    next_id: AtomicU64,
    child: Mutex<Option<Child>>,
    /// The child's process id (for CPU accounting).
    pub pid: u32,
}

impl StdioClient {
    /// Starts `command args` and performs the initialize handshake.
    pub async fn spawn(command: &str, args: &[String]) -> anyhow::Result<Arc<StdioClient>> {
        let mut child = Command::new(command)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        let pid = child.id().unwrap_or(0);
        let mut stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, mut rx) = mpsc::channel::<Bytes>(4096);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = first.to_vec();
                batch.push(b'\n');
                while let Ok(more) = rx.try_recv() {
                    batch.extend_from_slice(&more);
                    batch.push(b'\n');
                }
                if stdin.write_all(&batch).await.is_err() || stdin.flush().await.is_err() {
                    return;
                }
            }
        });
        let waiters: Waiters = Arc::default();
        let w = waiters.clone();
        tokio::spawn(async move {
            let mut out = BufReader::with_capacity(1 << 16, stdout);
            loop {
                let mut line = Vec::with_capacity(256);
                match out.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let Some(id) = response_id(&line) else {
                    continue;
                };
                let waiter = w.lock().ok().and_then(|mut m| m.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Bytes::from(line));
                }
            }
            if let Ok(mut m) = w.lock() {
                m.clear();
            }
        });
        let client = Arc::new(StdioClient {
            tx,
            waiters,
            next_id: AtomicU64::new(1),
            child: Mutex::new(Some(child)),
            pid,
        });
        let params = format!(
            r#"{{"protocolVersion":"{VERSION}","capabilities":{{}},"clientInfo":{{"name":"mcpgate-bench","version":"0.1.0"}}}}"#
        );
        let init = client.call("initialize", &params).await?;
        if !is_result(&init) {
            bail!("initialize failed: {}", String::from_utf8_lossy(&init));
        }
        client
            .tx
            .send(Bytes::from_static(
                br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            ))
            .await
            .map_err(|_| anyhow!("stdio server exited"))?;
        Ok(client)
    }

    /// Sends one request and waits for its response line.
    pub async fn call(&self, method: &str, params: &str) -> anyhow::Result<Bytes> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.waiters.lock() {
            m.insert(id, tx);
        }
        self.tx
            .send(request_body(id, method, params))
            .await
            .map_err(|_| anyhow!("stdio server exited"))?;
        rx.await.map_err(|_| anyhow!("stdio server exited"))
    }

    /// Stops the child.
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().ok().and_then(|mut c| c.take()) {
            let _ = c.start_kill();
        }
    }
}

/// The numeric id of a response line (`"id":N` before the result).
fn response_id(line: &[u8]) -> Option<u64> {
    let at = line.windows(5).position(|w| w == b"\"id\":")? + 5;
    let mut digits = line[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .peekable();
    digits.peek().filter(|b| b.is_ascii_digit())?;
    Some(
        digits
            .take_while(|b| b.is_ascii_digit())
            .fold(0u64, |n, b| n * 10 + u64::from(b - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_answers() {
        assert!(is_result(
            br#"{"jsonrpc":"2.0","id":1,"result":{"error":1}}"#
        ));
        assert!(!is_result(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#
        ));
        let sse = b"id: 0-0\ndata: \n\nid: 0-1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\nid: 0-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n";
        assert_eq!(
            &sse_response(sse)[..],
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#
        );
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":42,"result":{}}"#),
            Some(42)
        );
        let e = Endpoint::parse("http://127.0.0.1:9/b/mcp").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:9", "/b/mcp")
        );
    }
}

//! Connection-level guards of the listener: a client that stalls while sending
//! headers or a body, or announces a body over the limit, is answered or cut off
//! promptly instead of holding a socket forever.

mod common;

use std::time::Duration;

use common::{TestGateway, metric, scrape};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = r#"
[server]
metrics_listen = "127.0.0.1:0"
header_read_timeout = "500ms"
body_read_timeout = "500ms"
max_body_bytes = 4096

[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
"#;

/// Writes `request` and reads until the server closes the connection (or 5 s
/// pass); returns what was read and whether the server closed it.
async fn exchange(gw: &TestGateway, request: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(gw.addr).await.expect("connect");
    s.write_all(request).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

/// A raw POST on a new session announcing `content_length` bytes, of which only
/// `sent` follow.
async fn session_post(gw: &TestGateway, content_length: usize, sent: &str) -> Vec<u8> {
    let sid = gw.session().await.session.expect("session id");
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\n\
         Content-Length: {content_length}\r\n\r\n{sent}",
        gw.addr
    )
    .into_bytes()
}

#[tokio::test]
async fn stalled_headers_and_idle_connections_are_closed() {
    let gw = TestGateway::start(CONFIG).await;
    // Nothing at all, then half a request head: both closed by the header timeout.
    let (_, closed) = exchange(&gw, b"").await;
    assert!(closed, "an idle connection is closed");
    let head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", gw.addr);
    let (_, closed) = exchange(&gw, head.as_bytes()).await;
    assert!(closed, "a connection stalled inside its headers is closed");
    // A stalled HTTP/2 preface (an automatic HTTP/1-or-2 server waits for all
    // 24 bytes of it without a timer).
    let (_, closed) = exchange(&gw, b"PRI").await;
    assert!(
        closed,
        "a connection stalled inside the HTTP/2 preface is closed"
    );
    // The gateway still serves.
    let s = gw.session().await;
    let r = s.request("ping", serde_json::json!({})).await;
    assert_eq!(r.response["result"], serde_json::json!({}));
}

#[tokio::test]
async fn a_stalled_body_gets_408() {
    let gw = TestGateway::start(CONFIG).await;
    let (answer, _) = exchange(&gw, &session_post(&gw, 100, "{\"").await).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_read_timeout"), "{answer}");
    let text = scrape(&gw).await;
    assert_eq!(
        metric(
            &text,
            "mcpgate_rejections_total",
            &[("reason", "body_timeout")]
        ),
        Some(1.0)
    );
}

/// `body_read_timeout` bounds the whole body, not each wait: a body trickled a
/// byte every 150 ms (each wait far below the 500 ms timeout) still gets 408
/// once 500 ms have passed since it first kept the gateway waiting.
#[tokio::test]
async fn a_trickled_body_gets_408_at_the_timeout() {
    let gw = TestGateway::start(CONFIG).await;
    let mut s = TcpStream::connect(gw.addr).await.expect("connect");
    s.write_all(&session_post(&gw, 1000, "{").await)
        .await
        .expect("write");
    let started = tokio::time::Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(5) {
        match tokio::time::timeout(Duration::from_millis(150), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            // Nothing to read: one more byte of the body.
            Err(_) => {
                if s.write_all(b" ").await.is_err() {
                    break;
                }
            }
        }
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let answer = String::from_utf8_lossy(&got);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "after {:?}: {answer}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_announced_oversized_body_gets_413_before_it_is_sent() {
    // With a long body timeout, only the announced length can trigger the answer
    // within `exchange`'s 5 s: the 2 bytes sent are far below the limit.
    let gw = TestGateway::start(&CONFIG.replace(
        "body_read_timeout = \"500ms\"",
        "body_read_timeout = \"60s\"",
    ))
    .await;
    let (answer, _) = exchange(&gw, &session_post(&gw, 5_000_000, "{}").await).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("-32600"), "a JSON-RPC error body: {answer}");
}

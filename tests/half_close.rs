//! Half-closed client connections: HTTP/1.1 lets a client shut down its sending
//! side (`shutdown(SHUT_WR)`) once its request is complete and still read the
//! answer. Every such request must be answered — as JSON or as an SSE stream —
//! and the number of answers must equal the number of executions the backend
//! saw: a call that runs at the backend while its host never hears of it is the
//! failure this guards against.

mod common;

use std::time::Duration;

use common::{FX_LOGGED, TestGateway, logged_calls, wait_for};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one complete POST on a fresh connection, half-closes it, and reads
/// until the gateway closes. Returns the raw bytes it answered.
async fn post_then_half_close(addr: std::net::SocketAddr, session: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap(); // SHUT_WR: the request is complete
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    answer
}

/// The JSON-RPC messages in an HTTP/1.1 answer: a JSON body, or the `data:` lines
/// of an SSE body (chunked transfer coding removed).
fn messages(answer: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Vec::new();
    };
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    if head.contains("content-type: text/event-stream") {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(&body).into_iter().collect()
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[tokio::test]
async fn every_half_closed_request_is_answered_and_answers_equal_executions() {
    let gw = TestGateway::start(FX_LOGGED).await;
    let log = gw.dir.path("fx.log");
    let s = gw.session().await;
    let session = s.session.clone().unwrap();
    const N: u64 = 20;
    // Even calls answer at once (a JSON answer), odd ones after 300 ms (an SSE
    // stream, past the JSON response window).
    let calls = (0..N).map(|i| {
        let (addr, session) = (gw.addr, session.clone());
        async move {
            let ms = if i % 2 == 0 { 0 } else { 300 };
            let call = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
                "params": {"name": "fx__delay_echo", "arguments": {"ms": ms, "tag": format!("t{i}")}}});
            (i, post_then_half_close(addr, &session, &call).await)
        }
    });
    let answers = futures_util::future::join_all(calls).await;

    let mut answered = Vec::new();
    for (i, raw) in &answers {
        let answer = messages(raw)
            .into_iter()
            .find(|m| m["id"] == json!(1000 + i) && m.get("result").is_some());
        match answer {
            Some(m) => {
                assert_eq!(m["result"]["content"][0]["text"], format!("t{i}"), "{m}");
                answered.push(*i);
            }
            None => eprintln!("call {i} got no answer: {:?}", String::from_utf8_lossy(raw)),
        }
    }
    // Give executions that lost their answer time to show up in the log.
    let executed = || logged_calls(&log, "delay_echo").len() as u64;
    wait_for(Duration::from_secs(2), || executed() >= N).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        (answered.len() as u64, executed()),
        (N, N),
        "answers and executions of {N} half-closed tools/calls (answered: {answered:?})"
    );
}

#[tokio::test]
async fn a_half_closed_initialize_gets_its_session() {
    let gw = TestGateway::start("").await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "half-close", "version": "0"}}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        gw.addr,
        body.len()
    );
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("mcp-session-id:"), "{text}");
    let m = messages(&answer);
    assert_eq!(m.len(), 1, "{text}");
    assert_eq!(m[0]["result"]["protocolVersion"], "2025-11-25");
}

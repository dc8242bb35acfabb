//! Streamable HTTP transport rules of the server face: content negotiation (406
//! without an acceptable `Accept`), CORS and Origin (browser hosts can read the
//! session id and send MCP headers; foreign origins are refused), method and status
//! semantics (GET is SSE or 405, never 400), Content-Type (415) and body size
//! (413); keep-alive comments so idle streams are not cut during long calls, and
//! events flushed as they come, not held back by a buffering proxy.

mod common;

use std::time::Duration;

use std::io::Write;

use common::{FakeHttp, TestGateway};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const FX: &str = r#"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
"#;

fn init_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "it", "version": "0"}}})
    .to_string()
}

fn assert_error_without_id(body: &Value) {
    assert!(body.get("error").is_some(), "JSON-RPC error body: {body}");
    assert!(
        body.get("id").is_none(),
        "no id in a transport error: {body}"
    );
}

#[tokio::test]
async fn unacceptable_accept_is_406_with_an_id_less_error_and_no_session() {
    let gw = TestGateway::start(FX).await;
    let c = gw.client();
    for accept in ["application/json", "text/html", "text/event-stream;q=0"] {
        let r = c.post(&[("accept", accept)], init_body()).await;
        assert_eq!(r.status, 406, "Accept: {accept}");
        assert_error_without_id(&r.json());
        assert!(r.header("mcp-session-id").is_none());
    }
    assert_eq!(gw.gateway().session_count(), 0, "no session created");

    let s = gw.session().await;
    let mut h = s.headers();
    h.remove("content-type");
    h.insert("accept", HeaderValue::from_static("application/json"));
    let r = s.send_raw(Method::GET, h, "".into()).await;
    assert_eq!(r.status, 406, "GET that does not accept text/event-stream");
    assert_error_without_id(&r.json());
}

#[tokio::test]
async fn cors_allows_mcp_headers_exposes_session_id_and_refuses_hostile_origins() {
    let fx = FakeHttp::default_started().await;
    let gw = TestGateway::start(&format!(
        r#"
        [server]
        allowed_origins = ["https://app.allowed.test"]
        [backends.web]
        type = "http"
        url = "{}"
        "#,
        fx.url
    ))
    .await;
    let c = gw.client();
    let mut h = HeaderMap::new();
    h.insert(
        "origin",
        HeaderValue::from_static("https://app.allowed.test"),
    );
    h.insert(
        "access-control-request-method",
        HeaderValue::from_static("POST"),
    );
    h.insert(
        "access-control-request-headers",
        HeaderValue::from_static(
            "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id, \
             mcp-method, mcp-name, mcp-param-region",
        ),
    );
    let pre = c.send_raw(Method::OPTIONS, h, "".into()).await;
    assert!(pre.status.is_success(), "preflight: {pre:?}");
    // What a CORS answer depends on, for caches: on preflights, CORS answers and
    // answers to requests without Origin alike.
    let vary = ["origin, access-control-request-method, access-control-request-headers"];
    let varies = |h: &HeaderMap| -> Vec<String> {
        let all = h.get_all("vary").iter();
        all.map(|v| v.to_str().unwrap().to_owned()).collect()
    };
    assert_eq!(varies(&pre.headers), vary);
    let methods = pre
        .header("access-control-allow-methods")
        .unwrap_or_default()
        .to_ascii_uppercase();
    for m in ["GET", "POST", "DELETE"] {
        assert!(methods.contains(m), "allow-methods {methods:?} lacks {m}");
    }
    let allowed = pre
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for name in [
        "authorization",
        "content-type",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        // A browser 2026-07-28 host sends these on every request (and
        // `Mcp-Param-*` named by the tools it calls).
        "mcp-method",
        "mcp-name",
        "mcp-param-region",
    ] {
        assert!(
            allowed.contains(name),
            "allow-headers {allowed:?} lacks {name}"
        );
    }

    let r = c
        .post(&[("origin", "https://app.allowed.test")], init_body())
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.allowed.test")
    );
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(exposed.contains("mcp-session-id"), "expose: {exposed:?}");
    assert_eq!(varies(&r.headers), vary);

    let s = gw.session().await;
    let before = fx.calls("tools/call").len();
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "web__echo", "arguments": {"text": "x"}}});
    let r = s
        .post(&[("origin", "https://evil.example.test")], call.to_string())
        .await;
    assert_eq!(r.status, 403);
    assert_error_without_id(&r.json());
    assert_eq!(
        fx.calls("tools/call").len(),
        before,
        "backend not contacted"
    );
    // No Origin at all (CLI clients) is unaffected.
    let r = s.post(&[], call.to_string()).await;
    assert_eq!(r.status, 200);
    assert_eq!(fx.calls("tools/call").len(), before + 1);
    assert_eq!(varies(&r.headers), vary);
}

#[tokio::test]
async fn get_streams_notifications_and_responses_get_202_and_put_gets_405() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let stream = s.get_stream().await;
    assert_eq!(stream.status, 200);
    assert!(stream.is_sse(), "GET answers text/event-stream");
    drop(stream);

    let r = s.notify("notifications/roots/list_changed", None).await;
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty(), "202 has no body: {:?}", r.body);
    let r = s
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": "srv-1", "result": {}}).to_string(),
        )
        .await;
    assert_eq!(r.status, 202, "a response to an unknown request");
    assert!(r.body.is_empty());

    let r = s.send_raw(Method::PUT, s.headers(), "{}".into()).await;
    assert_eq!(r.status, 405);
    let allow = r.header("allow").unwrap_or_default().to_ascii_uppercase();
    for m in ["GET", "POST", "DELETE"] {
        assert!(allow.contains(m), "Allow {allow:?} lacks {m}");
    }

    let mut no_session = gw.client().headers();
    no_session.remove("content-type");
    no_session.insert("accept", HeaderValue::from_static("text/event-stream"));
    let r = s.send_raw(Method::GET, no_session, "".into()).await;
    assert_eq!(
        r.status, 400,
        "GET without a session id on a stateful gateway"
    );
}

#[tokio::test]
async fn wrong_content_type_is_415_and_oversized_body_is_413() {
    let gw = TestGateway::start(&format!("[server]\nmax_body_bytes = 2048\n{FX}")).await;
    let s = gw.session().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let r = s
        .post(&[("content-type", "text/plain")], ping.clone())
        .await;
    assert_eq!(r.status, 415);
    let r = s.post(&[("content-type", "")], ping.clone()).await;
    assert_eq!(r.status, 415, "missing Content-Type");

    let big = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {"text": "y".repeat(4096)}}});
    let r = s.post(&[], big.to_string()).await;
    assert_eq!(r.status, 413);
    // The session survives both.
    let r = s.post(&[], ping).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn quick_answers_are_json_slow_ones_switch_to_primed_sse() {
    let gw = TestGateway::start(&format!("[server]\njson_response_window = \"100ms\"\n{FX}")).await;
    let s = gw.session().await;
    let quick = s.call_tool("fx__echo", json!({"text": "q"})).await;
    assert!(
        quick.content_type.starts_with("application/json"),
        "{}",
        quick.content_type
    );
    let call = json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
        "params": {"name": "fx__delay_echo", "arguments": {"ms": 400, "tag": "s"}}});
    let mut stream = s.open(&call).await;
    assert!(stream.is_sse());
    assert_eq!(stream.header_str("cache-control"), Some("no-cache"));
    assert_eq!(stream.header_str("x-accel-buffering"), Some("no"));
    let done = stream
        .next(std::time::Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(done["id"], "slow");
    assert_eq!(done["result"]["content"][0]["text"], "s");
    assert!(
        stream.event_ids.len() >= 2,
        "priming event, then the response: {:?}",
        stream.event_ids
    );
    assert!(
        stream.ends_within(std::time::Duration::from_secs(1)).await,
        "stream ends after the response"
    );
}

#[tokio::test]
async fn a_foreign_host_header_is_refused() {
    let gw = TestGateway::start(FX).await;
    let r = gw
        .client()
        .post(&[("host", "attacker.example.test")], init_body())
        .await;
    assert_eq!(r.status, 403, "DNS-rebinding guard on a loopback bind");
    assert_eq!(gw.gateway().session_count(), 0);
}

/// Reads a raw response body for `within`, with the arrival time of each chunk.
async fn raw_chunks(resp: reqwest::Response, within: Duration) -> Vec<(Duration, String)> {
    use futures_util::StreamExt;
    let started = tokio::time::Instant::now();
    let mut body = resp.bytes_stream();
    let mut out = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(started + within, body.next()).await {
        out.push((
            started.elapsed(),
            String::from_utf8_lossy(&chunk).into_owned(),
        ));
    }
    out
}

#[tokio::test]
async fn idle_streams_get_keep_alives_and_events_are_not_held_back() {
    let gw = TestGateway::start(
        "[server]\nmetrics_listen = \"off\"\nsse_keep_alive = \"100ms\"\n[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n",
    )
    .await;
    let s = gw.session().await;
    let http = reqwest::Client::new();
    // A long silent call: keep-alive comments while the backend works.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 0.8}}});
    let resp = http
        .post(&s.url)
        .headers(s.headers())
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let chunks = raw_chunks(resp, Duration::from_secs(3)).await;
    let text: String = chunks.iter().map(|c| c.1.as_str()).collect();
    let keep_alives = text.matches(": keep-alive").count();
    assert!(keep_alives >= 4, "{keep_alives} keep-alives in {text:?}");
    assert!(text.contains("\"slept\""), "{text:?}");
    // The idle GET stream too.
    let mut h = s.headers();
    h.remove("content-type");
    h.insert("accept", "text/event-stream".parse().unwrap());
    let resp = http.get(&s.url).headers(h).send().await.unwrap();
    let chunks = raw_chunks(resp, Duration::from_millis(550)).await;
    let text: String = chunks.iter().map(|c| c.1.as_str()).collect();
    assert!(text.matches(": keep-alive").count() >= 3, "{text:?}");
    // Progress events leave as they come, not all at the end.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "fx__slow_progress", "arguments": {"n": 4, "interval_ms": 250},
        "_meta": {"progressToken": "t"}}});
    let resp = http
        .post(&s.url)
        .headers(s.headers())
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    let chunks = raw_chunks(resp, Duration::from_secs(3)).await;
    let first = chunks
        .iter()
        .find(|c| c.1.contains("notifications/progress"))
        .expect("progress");
    let last = chunks
        .iter()
        .find(|c| c.1.contains("\"result\""))
        .expect("result");
    assert!(
        last.0 - first.0 >= Duration::from_millis(600),
        "first progress at {:?}, result at {:?}",
        first.0,
        last.0
    );
}

/// An `Mcp-Session-Id` that is present but not visible ASCII
/// names no session (404, re-initialize), rather than "header is required" (400);
/// two of them are 400 (the first was used); a foreign Host is refused naming the
/// Host, not the Origin.
#[tokio::test]
async fn unreadable_session_ids_are_unknown_and_foreign_hosts_are_named() {
    let gw = TestGateway::start(FX).await;
    let s = gw.session().await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let mut h = gw.client().headers();
    h.insert(
        "mcp-session-id",
        HeaderValue::from_bytes(b"caf\xe9").expect("obs-text is a valid header value"),
    );
    let r = s.send_raw(Method::POST, h, ping.clone().into()).await;
    assert_eq!(r.status, 404, "{:?}", r.body);

    // Two session headers (the gateway must not pick one).
    let mut h = s.headers();
    h.append("mcp-session-id", HeaderValue::from_static("another"));
    let r = s.send_raw(Method::POST, h, ping.clone().into()).await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(String::from_utf8_lossy(&r.body).contains("more than one"));

    let r = s.post(&[("host", "evil.example")], ping).await;
    assert_eq!(r.status, 403);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(body.contains("Host not allowed"), "{body}");
}

/// Sends one raw HTTP/1.1 request and returns the response head (status line and
/// headers, lower-cased) and whether the server then closed the connection.
async fn raw_exchange(url: &str, request: &str) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    tcp.write_all(request.replace("{host}", &authority).as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf)).await {
            Ok(Ok(0)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => break true,
            Err(_) => break false,
        }
    };
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
    (head, closed)
}

#[tokio::test]
async fn a_refusal_before_the_body_is_read_announces_that_the_connection_closes() {
    // A host that reuses its keep-alive connection after a refusal whose body was never
    // read loses its next request ("server disconnected without a response") unless the
    // refusal says `Connection: close` (RFC 9112 section 9.6).
    let gw = TestGateway::start(FX).await;
    let body = init_body();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: {{host}}\r\norigin: http://evil.example\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (head, closed) = raw_exchange(&gw.url, &request).await;
    assert!(head.starts_with("http/1.1 403"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        closed,
        "the server closes the connection it announced closing"
    );
    assert_eq!(gw.gateway().session_count(), 0);
}

/// The client MUST list both media types (2025-11-25 transports), but some
/// hosts (claude.ai, per the spec notes) send only `text/event-stream`: that
/// host gets every answer as SSE, `initialize` and a quick one included.
#[tokio::test]
async fn an_accept_of_only_event_stream_gets_sse_answers() {
    let gw = TestGateway::start(FX).await;
    let mut c = gw.client();
    let sse_only = [("accept", "text/event-stream")];
    let init: Value = serde_json::from_str(&init_body()).unwrap();
    let mut stream = c.open_with(&sse_only, &init).await;
    assert_eq!(stream.status, 200);
    assert!(stream.is_sse(), "initialize answered as SSE");
    let session = stream.header_str("mcp-session-id").map(str::to_owned);
    let answer = stream.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
    c.session = session;
    c.version = Some("2025-11-25".into());
    assert_eq!(
        c.notify("notifications/initialized", None).await.status,
        202
    );
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let mut stream = c.open_with(&sse_only, &ping).await;
    assert!(stream.is_sse(), "a quick answer is SSE too");
    assert_eq!(stream.header_str("content-type"), Some("text/event-stream"));
    let answer = stream.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(answer["id"], 2);
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(stream.ends_within(Duration::from_secs(1)).await);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `Content-Encoding` (RFC 9110 §8.4): gzip and deflate bodies are decoded,
/// the size limit applies to the decoded body (a zip bomb is 413); a coding
/// the gateway does not decode is 415 with `Accept-Encoding` naming those it
/// does (RFC 7694); an encoded body is never parsed as JSON.
#[tokio::test]
async fn encoded_bodies_are_decoded_or_refused_never_parsed_as_json() {
    let gw = TestGateway::start(&format!("[server]\nmax_body_bytes = 2048\n{FX}")).await;
    let s = gw.session().await;
    let echo = |id: i64, text: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "fx__echo", "arguments": {"text": text}}})
        .to_string()
    };
    for (coding, body) in [
        ("gzip", gzip(echo(1, "zipped").as_bytes())),
        ("x-gzip", gzip(echo(2, "zipped").as_bytes())),
        ("deflate", zlib(echo(3, "zipped").as_bytes())),
        ("identity", echo(4, "zipped").into_bytes()),
        ("GZIP", gzip(echo(5, "zipped").as_bytes())),
    ] {
        let r = s.post(&[("content-encoding", coding)], body).await;
        assert_eq!(r.status, 200, "{coding}: {r:?}");
        assert_eq!(
            r.json()["result"]["content"][0]["text"],
            "zipped",
            "{coding}"
        );
    }
    // Decoded, the body is over the limit though its encoding is not.
    let bomb = gzip(echo(6, &"y".repeat(64 * 1024)).as_bytes());
    assert!(bomb.len() < 2048, "{}", bomb.len());
    let r = s.post(&[("content-encoding", "gzip")], bomb).await;
    assert_eq!(r.status, 413, "{r:?}");
    // Codings not decoded here: 415, naming what is.
    for coding in ["br", "zstd", "gzip, br"] {
        let r = s
            .post(&[("content-encoding", coding)], echo(7, "plain"))
            .await;
        assert_eq!(r.status, 415, "{coding}: {r:?}");
        let body = r.json();
        assert_eq!(body["error"]["code"], -32000, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("Content-Encoding"), "{message}");
        let accepted = r.header("accept-encoding").unwrap_or_default();
        assert!(accepted.contains("gzip"), "{accepted:?}");
    }
    // Declared gzip, sent plain: not gzip, refused, not parsed as JSON.
    let r = s
        .post(&[("content-encoding", "gzip")], echo(8, "plain"))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32700);
    // The session survives all of them.
    let r = s.post(&[], echo(9, "after")).await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "after");
}

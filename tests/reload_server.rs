//! Hot reload of `[server]`: a real `mcpgate serve` whose config file is
//! rewritten and sent SIGHUP. Each class of setting takes effect for what
//! starts after the reload (request limits, origin/host/proxy rules, session
//! and catalogue settings, connection timeouts, the admin endpoints, shutdown
//! timing) while the session opened before keeps working; a changed listen
//! address is kept as it runs, logged by name, and the rest still applies.

mod common;

use std::time::Duration;

use common::McpClient;
use common::served::Served;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BASE: &str = r#"
[server]
listen = "127.0.0.1:0"
metrics_listen = "off"
[backends.keep]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--label", "keep"]
"#;

/// `BASE` with `lines` added to `[server]` (tables such as
/// `[server.rate_limit]` last).
fn with(lines: &str) -> String {
    BASE.replace(
        "metrics_listen = \"off\"\n",
        &format!("metrics_listen = \"off\"\n{lines}\n"),
    )
}

async fn started() -> (Served, McpClient) {
    let gw = Served::start(BASE).await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    (gw, s)
}

async fn ping_status(s: &McpClient, extra: &[(&str, &str)]) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": s.next_id(), "method": "ping"});
    s.post(extra, body.to_string()).await.status.as_u16()
}

/// Sends `request` on a fresh connection and returns what arrived within
/// `within` (empty: nothing, or the connection closed without an answer).
async fn raw(base: &str, request: &[u8], within: Duration) -> (String, bool) {
    let addr = base.trim_start_matches("http://");
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(request).await.unwrap();
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, c.read(&mut buf)).await {
        Ok(Ok(n)) => (String::from_utf8_lossy(&buf[..n]).into_owned(), true),
        Ok(Err(_)) => (String::new(), true),
        Err(_) => (String::new(), false),
    }
}

#[tokio::test]
async fn request_limits_apply_at_reload_to_the_open_session() {
    let (gw, s) = started().await;
    let mut stream = s.get_stream().await;
    assert_eq!(ping_status(&s, &[]).await, 200);
    let padded = json!({"jsonrpc": "2.0", "id": 7, "method": "ping",
                        "params": {"pad": "x".repeat(4000)}})
    .to_string();
    assert_eq!(s.post(&[], padded.clone()).await.status.as_u16(), 200);

    // A rate limit: the same client is refused with 429 + Retry-After.
    gw.reload(&with("[server.rate_limit]\nper_second = 1\nburst = 2"))
        .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(ping_status(&s, &[]).await);
    }
    assert!(statuses.contains(&429), "{statuses:?}");

    // A lower body limit: 413 for what passed before.
    gw.reload(&with("max_body_bytes = 2048")).await;
    assert_eq!(s.post(&[], padded).await.status.as_u16(), 413);
    assert_eq!(ping_status(&s, &[]).await, 200, "the rate limit is gone");

    // One stream per session: the GET stream holds it, a POST gets 429.
    gw.reload(&with("max_streams_per_session = 1")).await;
    assert_eq!(ping_status(&s, &[]).await, 429);

    // A shorter body read timeout: 408 for a body that stalls.
    let stalled = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
        Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"";
    let (before, _) = raw(&gw.base, stalled, Duration::from_millis(1500)).await;
    assert!(before.is_empty(), "30 s by default: {before}");
    gw.reload(&with("body_read_timeout = \"1s\"")).await;
    let (after, _) = raw(&gw.base, stalled, Duration::from_secs(5)).await;
    assert!(after.starts_with("HTTP/1.1 408"), "{after}");

    // Back to the defaults: the session and its stream went on throughout.
    gw.reload(BASE).await;
    assert_eq!(ping_status(&s, &[]).await, 200);
    assert!(!stream.ends_within(Duration::from_millis(200)).await);
}

#[tokio::test]
async fn origin_host_and_proxy_rules_apply_at_reload() {
    let (gw, s) = started().await;
    let origin = [("origin", "https://app.example.test")];
    assert_eq!(ping_status(&s, &origin).await, 403);
    let host_request =
        b"POST /mcp HTTP/1.1\r\nHost: gw.example.test\r\nContent-Type: application/json\r\n\
        Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}";
    let (before, _) = raw(&gw.base, host_request, Duration::from_secs(5)).await;
    assert!(before.starts_with("HTTP/1.1 403"), "{before}");
    let forwarded = [("x-forwarded-for", "203.0.113.7")];
    assert_eq!(ping_status(&s, &forwarded).await, 200);
    assert!(!gw.log().contains("203.0.113.7"), "not a trusted proxy yet");

    gw.reload(&with(
        "allowed_origins = [\"https://app.example.test\"]\n\
         allowed_hosts = [\"gw.example.test\"]\n\
         trusted_proxies = [\"127.0.0.1\"]",
    ))
    .await;
    assert_eq!(ping_status(&s, &origin).await, 200);
    let (after, _) = raw(&gw.base, host_request, Duration::from_secs(5)).await;
    assert!(!after.starts_with("HTTP/1.1 403"), "{after}");
    assert_eq!(ping_status(&s, &forwarded).await, 200);
    let seen = common::wait_for(Duration::from_secs(5), || {
        gw.log()
            .lines()
            .any(|l| l.contains("\"client\":\"203.0.113.7\""))
    })
    .await;
    assert!(seen, "the access line names the forwarded client");
}

#[tokio::test]
async fn session_and_catalogue_settings_apply_at_reload() {
    let (gw, s) = started().await;
    let mut idle = McpClient::new(&gw.url);
    idle.initialize(json!({})).await;
    let mut stream = s.get_stream().await;
    let tools = s.request("tools/list", json!({})).await;
    assert_eq!(tools.result()["tools"].as_array().unwrap().len(), 14);
    let slow = |c: &McpClient| {
        let c = c.clone();
        async move {
            c.call_tool("keep__delay_echo", json!({"ms": 400, "tag": "t"}))
                .await
        }
    };
    assert!(slow(&s).await.content_type.contains("event-stream"));

    gw.reload(&with(
        "max_sessions = 2\npage_size = 5\njson_response_window = \"3s\"\nrequest_timeout = \"1s\"\nmodern = \"off\"",
    ))
    .await;
    // The session cap: the two open sessions stay, a third is refused.
    let third = McpClient::new(&gw.url)
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}})
            .to_string(),
        )
        .await;
    assert_eq!(third.status.as_u16(), 503, "{third:?}");
    // The page size: the host was told, and pages are shorter.
    let mut changed = false;
    while let Some(m) = stream.next(Duration::from_secs(3)).await {
        if m["method"] == "notifications/tools/list_changed" {
            changed = true;
            break;
        }
    }
    assert!(changed, "list_changed after the page size changed");
    let page = s.request("tools/list", json!({})).await;
    assert_eq!(page.result()["tools"].as_array().unwrap().len(), 5);
    assert!(page.result()["nextCursor"].is_string());
    // The JSON window: the same call now answers in JSON.
    assert!(slow(&s).await.content_type.contains("application/json"));
    // The call timeout, for a backend without its own.
    let started = tokio::time::Instant::now();
    let r = s.call_tool("keep__sleep", json!({"s": 5})).await;
    let message = r.response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("within 1s"), "{}", r.response);
    assert!(started.elapsed() < Duration::from_secs(4));
    // The 2026-07-28 face, off: a probe is told to use initialize.
    let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
    let r = McpClient::new(&gw.url)
        .post(&[("mcp-method", "server/discover")], probe.to_string())
        .await;
    assert_eq!(r.status.as_u16(), 400, "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32000);

    // A shorter idle timeout ends the idle session; the one in use stays.
    gw.reload(&with("session_idle_timeout = \"1s\"")).await;
    for _ in 0..12 {
        assert_eq!(ping_status(&s, &[]).await, 200);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(ping_status(&idle, &[]).await, 404, "expired");
    assert_eq!(ping_status(&s, &[]).await, 200);
}

/// The value of the sample `series` in a Prometheus scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn listener_settings_and_what_needs_a_restart() {
    let base = BASE.replace(
        "metrics_listen = \"off\"",
        "metrics_listen = \"127.0.0.1:0\"",
    );
    let gw = Served::start(&base).await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    let metrics = format!("http://{}", gw.logged("metrics listening", "addr").unwrap());
    let get = |path: &str| reqwest::get(format!("{metrics}{path}"));
    assert_eq!(get("/admin/backends").await.unwrap().status(), 404);
    let (idle, answered) = raw(&gw.base, b"", Duration::from_millis(1500)).await;
    assert!(
        idle.is_empty() && !answered,
        "30 s header timeout by default"
    );

    let server = |lines: &str| base.replace("[server]\n", &format!("[server]\n{lines}\n"));
    gw.reload(&server(
        "admin_endpoints = true\nheader_read_timeout = \"1s\"",
    ))
    .await;
    let backends = get("/admin/backends").await.unwrap();
    assert_eq!(backends.status(), 200);
    let (idle, closed) = raw(&gw.base, b"", Duration::from_secs(4)).await;
    assert!(idle.is_empty() && closed, "a silent connection is closed");

    // A new listen address (and metrics address) needs a restart: both are
    // named, the gateway keeps its sockets, and the rest of the file applies.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let moved = server("admin_endpoints = false")
        .replace(
            "127.0.0.1:0\"\nmetrics",
            &format!("127.0.0.1:{port}\"\nmetrics"),
        )
        .replace(
            "metrics_listen = \"127.0.0.1:0\"",
            "metrics_listen = \"off\"",
        );
    assert!(
        moved.contains(&format!("listen = \"127.0.0.1:{port}\"")),
        "{moved}"
    );
    gw.reload(&moved).await;
    let named = |setting: &str| {
        gw.log().lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            v["fields"]["setting"] == setting
                && v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("needs a restart"))
        })
    };
    assert!(named("server.listen"), "{}", gw.log());
    assert!(named("server.metrics_listen"));
    assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
    assert_eq!(
        ping_status(&s, &[]).await,
        200,
        "same address, same session"
    );
    assert_eq!(
        get("/admin/backends").await.unwrap().status(),
        404,
        "the rest applied"
    );
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    assert_eq!(sample(&text, "mcpgate_config_restart_required"), Some(1.0));
    let ok = r#"mcpgate_config_reloads_total{result="success"}"#;
    assert!(sample(&text, ok).unwrap() >= 2.0, "{text}");

    gw.reload(&base).await;
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    assert_eq!(sample(&text, "mcpgate_config_restart_required"), Some(0.0));
}

#[tokio::test]
async fn shutdown_timing_applies_at_reload() {
    let (gw, s) = started().await;
    gw.reload(&with("drain_delay = \"2s\"\nshutdown_grace = \"5s\""))
        .await;
    gw.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = reqwest::get(format!("{}/readyz", gw.base)).await.unwrap();
    assert_eq!(ready.status(), 503, "draining");
    assert_eq!(
        ping_status(&s, &[]).await,
        200,
        "still serving its sessions"
    );
    let mut gw = gw;
    assert_eq!(gw.exit_code(Duration::from_secs(8)).await, Some(0));
}

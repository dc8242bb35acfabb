//! Sealed session ids and portable cursors with real gateways: a tampered id is
//! 404 and a cached session opens nothing; a process restarted with the same
//! keys keeps its sessions (kill -9 and SIGTERM), another key does not; an id
//! ended here stays ended; two processes with the same keys serve one list
//! across pages; the rotation old → old+new → new+old → new; the binding to
//! issuer and subject survives a token refresh and refuses another principal.

mod auth_support;
mod common;

use common::served::Served;
use common::{McpClient, TestDir, TestGateway, metric, names, scrape, text_of};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const MCPGATE: &str = env!("CARGO_BIN_EXE_mcpgate");
/// `base64` of 32 bytes 0x01 and 0x02.
const OLD: &str = "old:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const NEW: &str = "new:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
const OTHER: &str = "old:AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";

const FX: &str = r#"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
"#;

/// An in-process gateway sealing with `keys` (written to `${TEST_DIR}/keys`).
async fn gateway_with_keys(keys: &str, extra: &str) -> TestGateway {
    let dir = TestDir::new();
    std::fs::write(dir.path("keys"), keys).unwrap();
    let toml = format!(
        "[server]\nmetrics_listen = \"127.0.0.1:0\"\n{extra}\n[cluster]\nsession_keys_file = \"${{TEST_DIR}}/keys\"\n{FX}"
    );
    TestGateway::start_in(dir, &toml).await
}

fn echo(r: &common::Rpc) -> &str {
    text_of(&r.response)
}

/// `client` on another endpoint with the same session id.
fn at(client: &McpClient, url: &str) -> McpClient {
    let mut c = McpClient::new(url);
    c.session = client.session.clone();
    c.version = client.version.clone();
    c
}

async fn status_of_call(c: &McpClient) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    c.post(&[], body).await.status.as_u16()
}

fn flip(id: &str, at: usize) -> String {
    let mut b = id.as_bytes().to_vec();
    b[at] = if b[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(b).unwrap()
}

#[tokio::test]
async fn a_cached_session_opens_nothing_and_a_tampered_id_is_404() {
    let gw = gateway_with_keys(OLD, "").await;
    let s = gw.session().await;
    let id = s.session.clone().unwrap();
    assert!(id.starts_with("old.") && id.len() <= 128, "{id}");
    assert!(id.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{id}");
    for i in 0..20 {
        let text = format!("n{i}");
        assert_eq!(
            echo(&s.call_tool("fx__echo", json!({ "text": text })).await),
            text
        );
    }
    let text = scrape(&gw).await;
    assert_eq!(
        metric(&text, "mcpgate_session_restores_total", &[]),
        None,
        "the hot path never opens an id"
    );

    for at_char in [0, 4, id.len() / 2, id.len() - 1] {
        let mut bad = at(&s, &gw.url);
        bad.session = Some(flip(&id, at_char));
        assert_eq!(status_of_call(&bad).await, 404, "char {at_char}");
    }
    let mut bad = at(&s, &gw.url);
    bad.session = Some(flip(&id, id.len() / 2));
    assert_eq!(bad.delete().await.status, 404);
    assert_eq!(bad.get_stream().await.status, 404);
    let text = scrape(&gw).await;
    assert_eq!(
        metric(
            &text,
            "mcpgate_session_restores_total",
            &[("result", "forged")]
        ),
        Some(6.0)
    );
    assert_eq!(
        metric(
            &text,
            "mcpgate_session_restores_total",
            &[("result", "restored")]
        ),
        None
    );
    assert_eq!(
        echo(&s.call_tool("fx__echo", json!({"text": "still"})).await),
        "still"
    );
}

#[tokio::test]
async fn an_id_ended_here_stays_ended_and_another_key_never_opens_it() {
    let a = gateway_with_keys(OLD, "").await;
    let b = gateway_with_keys(OLD, "").await;
    let other = gateway_with_keys(OTHER, "").await;
    let s = a.session().await;
    let on_b = at(&s, &b.url);
    assert_eq!(
        echo(&on_b.call_tool("fx__echo", json!({"text": "b"})).await),
        "b"
    );
    let restored = metric(
        &scrape(&b).await,
        "mcpgate_session_restores_total",
        &[("result", "restored")],
    );
    assert_eq!(restored, Some(1.0));
    assert_eq!(
        status_of_call(&at(&s, &other.url)).await,
        404,
        "same kid, other key"
    );

    // DELETE where it was restored: that process never takes it back.
    assert_eq!(on_b.delete().await.status, 200);
    assert_eq!(status_of_call(&on_b).await, 404);
    let ended = metric(
        &scrape(&b).await,
        "mcpgate_session_restores_total",
        &[("result", "ended")],
    );
    assert_eq!(ended, Some(1.0));
    // DELETE where it was minted: the same.
    assert_eq!(s.delete().await.status, 200);
    assert_eq!(status_of_call(&s).await, 404);
}

/// `mcpgate serve` with the fx backend, `server` lines in `[server]`, and
/// `keys` in `MCPGATE_SESSION_KEYS`.
async fn serve(keys: Option<&str>, server: &str) -> Served {
    let env: Vec<(&str, &str)> = keys
        .map(|k| ("MCPGATE_SESSION_KEYS", k))
        .into_iter()
        .collect();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\nshutdown_grace = \"2s\"\n{server}\n{FX}"
    );
    Served::start_with_env(&config, &env).await
}

#[tokio::test]
async fn a_restarted_gateway_keeps_its_sessions_with_the_same_keys_only() {
    let first = serve(Some(OLD), "").await;
    assert!(
        first.logged_message("session keys loaded"),
        "{}",
        first.log()
    );
    let mut s = McpClient::new(&first.url);
    s.initialize(json!({"sampling": {}, "roots": {"listChanged": true}}))
        .await;
    assert_eq!(
        echo(&s.call_tool("fx__echo", json!({"text": "before"})).await),
        "before"
    );
    first.stop(Signal::SIGKILL).await;

    let second = serve(Some(OLD), "").await;
    let s = at(&s, &second.url);
    assert_eq!(
        echo(&s.call_tool("fx__echo", json!({"text": "after kill"})).await),
        "after kill"
    );
    let listed = s.list_all("tools/list", "tools").await;
    assert!(names(&listed).contains(&"fx__echo".to_owned()));
    second.stop(Signal::SIGTERM).await;

    let third = serve(Some(OLD), "").await;
    let s = at(&s, &third.url);
    assert_eq!(
        echo(&s.call_tool("fx__echo", json!({"text": "after term"})).await),
        "after term"
    );
    third.stop(Signal::SIGTERM).await;

    let other = serve(Some(OTHER), "").await;
    assert_eq!(status_of_call(&at(&s, &other.url)).await, 404);
    other.stop(Signal::SIGTERM).await;

    let keyless = serve(None, "").await;
    assert!(
        keyless.logged_message("sessions do not survive a restart"),
        "{}",
        keyless.log()
    );
    assert_eq!(status_of_call(&at(&s, &keyless.url)).await, 404);
}

/// Every page of `tools/list`, page `i` asked of `clients[i % len]`.
async fn list_across(clients: &[&McpClient]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for i in 0..100 {
        let params = cursor
            .as_ref()
            .map_or(json!({}), |c| json!({ "cursor": c }));
        let r = clients[i % clients.len()]
            .request("tools/list", params)
            .await;
        let page = r.result().clone();
        out.extend(page["tools"].as_array().cloned().unwrap_or_default());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
    panic!("more than 100 pages");
}

#[tokio::test]
async fn two_processes_with_the_same_keys_serve_one_list_across_pages() {
    let paged = "page_size = 2";
    let a = serve(Some(OLD), paged).await;
    let b = serve(Some(OLD), paged).await;
    let mut on_a = McpClient::new(&a.url);
    on_a.initialize(json!({})).await;
    let on_b = at(&on_a, &b.url);
    let alone = on_a.list_all("tools/list", "tools").await;
    assert!(alone.len() > 4, "several pages: {}", alone.len());
    assert_eq!(list_across(&[&on_a, &on_b]).await, alone, "A, B, A, ...");
    assert_eq!(list_across(&[&on_b, &on_a]).await, alone, "B, A, B, ...");

    let other = serve(Some(OTHER), paged).await;
    let mut on_other = McpClient::new(&other.url);
    on_other.initialize(json!({})).await;
    let first = on_a.request("tools/list", json!({})).await;
    let cursor = first.result()["nextCursor"].as_str().unwrap().to_owned();
    let r = on_other
        .request("tools/list", json!({ "cursor": cursor }))
        .await;
    assert_eq!(r.error_code(), Some(-32602), "another key: {}", r.response);
}

#[tokio::test]
async fn rotation_old_then_old_new_then_new_old_then_new() {
    let paged = "page_size = 2";
    let p1 = serve(Some(OLD), paged).await;
    let mut s1 = McpClient::new(&p1.url);
    s1.initialize(json!({})).await;
    p1.stop(Signal::SIGTERM).await;

    // Step 1: old+new everywhere; old still seals.
    let p2 = serve(Some(&format!("{OLD}\n{NEW}")), paged).await;
    let s1 = at(&s1, &p2.url);
    assert_eq!(
        echo(&s1.call_tool("fx__echo", json!({"text": "1"})).await),
        "1"
    );
    let mut s2 = McpClient::new(&p2.url);
    s2.initialize(json!({})).await;
    assert!(s2.session.as_ref().unwrap().starts_with("old."));

    // Step 2, rolling: new+old comes up while old+new still serves.
    let p3 = serve(Some(&format!("{NEW}\n{OLD}")), paged).await;
    let mut s3 = McpClient::new(&p3.url);
    s3.initialize(json!({})).await;
    assert!(s3.session.as_ref().unwrap().starts_with("new."));
    for s in [&s1, &s2, &s3] {
        for url in [&p2.url, &p3.url] {
            let c = at(s, url);
            assert_eq!(
                echo(&c.call_tool("fx__echo", json!({"text": "x"})).await),
                "x"
            );
        }
    }
    let alone = s3.list_all("tools/list", "tools").await;
    let (s3_on_p2, s3_on_p3) = (at(&s3, &p2.url), at(&s3, &p3.url));
    assert_eq!(list_across(&[&s3_on_p3, &s3_on_p2]).await, alone);
    assert_eq!(list_across(&[&s3_on_p2, &s3_on_p3]).await, alone);
    p2.stop(Signal::SIGTERM).await;
    p3.stop(Signal::SIGTERM).await;

    // Step 3, after the lifetime of old ids: new only.
    let p4 = serve(Some(NEW), paged).await;
    let s3 = at(&s3, &p4.url);
    assert_eq!(
        echo(&s3.call_tool("fx__echo", json!({"text": "3"})).await),
        "3"
    );
    assert_eq!(
        status_of_call(&at(&s1, &p4.url)).await,
        404,
        "sealed with old"
    );
    assert_eq!(
        status_of_call(&at(&s2, &p4.url)).await,
        404,
        "sealed with old"
    );
}

#[tokio::test]
async fn the_binding_survives_a_token_refresh_and_refuses_another_principal() {
    use auth_support::{Backend, Host, Issuer, gateway};
    const RESOURCE: &str = "https://gw.example.test/mcp";
    let issuer = Issuer::start().await;
    let backend = Backend::start().await;
    let dir = TestDir::new();
    std::fs::write(dir.path("keys"), OLD).unwrap();
    let toml = format!(
        "[auth]\nresource = \"{RESOURCE}\"\nissuers = [\"{}\"]\n[cluster]\nsession_keys_file = \"{}\"\n[backends.rec]\ntype = \"http\"\nurl = \"{}\"\n",
        issuer.url,
        dir.path("keys").display(),
        backend.url
    );
    let (gw1, gw2) = (gateway(&toml).await, gateway(&toml).await);
    let (h1, h2) = (Host::new(&gw1), Host::new(&gw2));
    let token = |sub: &str, exp_shift: i64| {
        let mut c = issuer.claims(sub, "mcp:tools", RESOURCE);
        c["exp"] = json!(c["exp"].as_i64().unwrap() + exp_shift);
        issuer.mint(&c)
    };
    let alice = token("alice", 0);
    let id = h1.initialize(Some(&alice)).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    let bob = token("bob", 0);
    assert_eq!(
        h2.post(Some(&bob), Some(&id), &ping).await.status,
        404,
        "another subject"
    );
    let refreshed = token("alice", 60);
    assert_ne!(refreshed, alice);
    let a = h2.post(Some(&refreshed), Some(&id), &ping).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        h2.post(Some(&bob), Some(&id), &ping).await.status,
        404,
        "restored, still bound"
    );
    assert_eq!(
        h1.post(Some(&refreshed), Some(&id), &ping).await.status,
        200
    );
}

/// Runs `mcpgate ARGS --config CONFIG` with `env`; its exit status and stderr
/// (and stdout), or a panic if it still runs after 10 s (then it is killed).
async fn run_to_exit(
    args: &[&str],
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (i32, String) {
    let mut cmd = std::process::Command::new(MCPGATE);
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env_remove("MCPGATE_SESSION_KEYS")
        .env("FAKE_STDIO", common::fake_stdio())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let end = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::time::Instant::now() < end {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return (out.status.code().unwrap_or(-1), text);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("mcpgate {args:?} still running after 10 s with bad keys");
}

#[tokio::test]
async fn bad_or_missing_keys_refuse_to_start_with_the_field_path() {
    let dir = TestDir::new();
    let keys = dir.path("keys");
    let config = dir.path("gw.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n[cluster]\nsession_keys_file = \"{}\"\n{FX}",
            keys.display()
        ),
    )
    .unwrap();
    let short = "k1:AQEBAQEBAQEBAQEBAQEBAQ=="; // 16 bytes
    let cases: [(Option<&str>, &str); 4] = [
        (None, "cluster.session_keys_file: cannot read"),
        (
            Some(short),
            "cluster.session_keys_file: line 1 (kid \"k1\"): the key is 16 bytes, expected 32",
        ),
        (
            Some("\n# nothing\n"),
            "cluster.session_keys_file: no key: expected at least one KID:BASE64 line",
        ),
        (
            Some(&format!("{OLD}\n{OTHER}")),
            "cluster.session_keys_file: line 2 (kid \"old\"): duplicate key id",
        ),
    ];
    for (text, expected) in cases {
        match text {
            Some(t) => std::fs::write(&keys, t).unwrap(),
            None => {
                let _ = std::fs::remove_file(&keys);
            }
        }
        for args in [&["serve"][..], &["check-config"][..]] {
            let (code, out) = run_to_exit(args, &config, &[]).await;
            assert_ne!(code, 0, "{args:?} {text:?}: {out}");
            assert!(out.contains(expected), "{args:?} {text:?}: {out}");
            assert!(!out.contains("AQEBAQEB"), "no key material: {out}");
            assert!(!out.contains("mcpgate listening"), "{out}");
        }
    }

    // The same lines in the environment: the variable is named.
    std::fs::write(
        &config,
        format!("[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{FX}"),
    )
    .unwrap();
    let (code, out) = run_to_exit(&["serve"], &config, &[("MCPGATE_SESSION_KEYS", short)]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("MCPGATE_SESSION_KEYS: line 1 (kid \"k1\"): the key is 16 bytes, expected 32"),
        "{out}"
    );
}

/// A draining replica does not rebuild sessions it does not hold: the session
/// would die with it at the end of the grace period. 503 + `Retry-After` sends
/// the host back through the balancer to a replica that stays; the sessions it
/// holds are still served while it drains.
#[tokio::test]
async fn a_draining_replica_refuses_to_restore_a_session_and_keeps_serving_its_own() {
    let first = serve(Some(OLD), "").await;
    let mut s = McpClient::new(&first.url);
    s.initialize(json!({})).await;
    let draining = serve(Some(OLD), "drain_delay = \"5s\"").await;
    let mut own = McpClient::new(&draining.url);
    own.initialize(json!({})).await;
    draining.signal(Signal::SIGTERM);
    let mut readyz = 200;
    for _ in 0..50 {
        readyz = reqwest::get(format!("{}/readyz", draining.base))
            .await
            .map_or(0, |r| r.status().as_u16());
        if readyz == 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(readyz, 503, "draining");

    let moved = at(&s, &draining.url);
    let r = moved
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert_eq!(
        echo(
            &own.call_tool("fx__echo", json!({"text": "still mine"}))
                .await
        ),
        "still mine"
    );
    // The replica that stays restores it.
    let stays = serve(Some(OLD), "").await;
    assert_eq!(
        echo(
            &at(&s, &stays.url)
                .call_tool("fx__echo", json!({"text": "moved"}))
                .await
        ),
        "moved"
    );
    drop(first);
}

/// A session restored on a process that has just started waits (boundedly) for
/// the backends' catalogues, as `initialize` does, instead of answering its
/// first call "Unknown tool".
#[tokio::test]
async fn a_restored_sessions_first_call_waits_for_the_catalogue() {
    let first = serve(Some(OLD), "").await;
    let mut s = McpClient::new(&first.url);
    s.initialize(json!({})).await;
    first.stop(Signal::SIGKILL).await;
    let config = "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n\
        [backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
        args = [\"--start-delay-ms\", \"700\"]\n";
    let slow = Served::start_with_env(config, &[("MCPGATE_SESSION_KEYS", OLD)]).await;
    let r = at(&s, &slow.url)
        .call_tool("fx__echo", json!({"text": "right after start"}))
        .await;
    assert_eq!(echo(&r), "right after start", "{}", r.response);
}

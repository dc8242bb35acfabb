//! Hot reload: backends added, removed and changed at runtime without disturbing
//! sessions on untouched backends; an invalid file is refused and the running
//! configuration keeps serving; SIGHUP storms are harmless.

mod common;

use std::time::Duration;

use common::{TestGateway, gone, logged_pids, names, parse_config, text_of, wait_for};
use serde_json::json;

const ONE: &str = r#"
[server]
metrics_listen = "off"
[backends.keep]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--label", "keep", "--log", "${TEST_DIR}/keep.log"]
"#;

#[tokio::test]
async fn a_backend_added_at_runtime_appears_after_list_changed() {
    let gw = TestGateway::start(ONE).await;
    let s = gw.session().await;
    let mut listen = s.get_stream().await;
    let before = names(&s.list_all("tools/list", "tools").await);
    assert!(before.iter().all(|n| n.starts_with("keep__")), "{before:?}");

    let two = format!(
        "{ONE}\n[backends.added]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--label\", \"added\"]\n"
    );
    let report = gw.gateway().reload(&parse_config(&two, &gw.dir.0)).await;
    assert_eq!(report.added, ["added"]);
    assert!(report.removed.is_empty() && report.changed.is_empty());

    let note = listen
        .next(Duration::from_secs(5))
        .await
        .expect("list_changed");
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let after = names(&s.list_all("tools/list", "tools").await);
    assert!(after.contains(&"added__echo".to_string()), "{after:?}");
    let r = s.call_tool("added__echo", json!({"text": "new"})).await;
    assert_eq!(text_of(&r.response), "new");
    // The untouched backend kept its process and keeps working.
    let r = s.call_tool("keep__echo", json!({"text": "still"})).await;
    assert_eq!(text_of(&r.response), "still");
    assert_eq!(logged_pids(&gw.dir.path("keep.log")).len(), 1);
}

#[tokio::test]
async fn removing_a_backend_a_session_uses_fails_its_calls_cleanly() {
    let two = format!(
        "{ONE}\n[backends.gone]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--log\", \"${{TEST_DIR}}/gone.log\"]\n"
    );
    let gw = TestGateway::start(&two).await;
    let s = gw.session().await;
    let r = s.call_tool("gone__echo", json!({"text": "x"})).await;
    assert_eq!(text_of(&r.response), "x");
    let pid = *logged_pids(&gw.dir.path("gone.log")).iter().next().unwrap();
    // A slow call is in flight on the backend when it is removed.
    let slow = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                      "params": {"name": "gone__sleep", "arguments": {"s": 30}}});
    let mut stream = s.open(&slow).await;

    let report = gw.gateway().reload(&parse_config(ONE, &gw.dir.0)).await;
    assert_eq!(report.removed, ["gone"]);
    let done = stream
        .next(Duration::from_secs(10))
        .await
        .expect("an answer");
    let done = if done.get("id").is_none() {
        stream
            .next(Duration::from_secs(10))
            .await
            .expect("an answer")
    } else {
        done
    };
    assert_eq!(done["id"], 99);
    assert!(
        done["error"]["message"].as_str().unwrap().contains("gone"),
        "{done}"
    );
    assert!(
        wait_for(Duration::from_secs(8), || gone(pid)).await,
        "child stopped"
    );
    let r = s.call_tool("gone__echo", json!({})).await;
    assert_eq!(
        r.error_code(),
        Some(-32602),
        "now an unknown tool: {:?}",
        r.response
    );
    let r = s.call_tool("keep__echo", json!({"text": "ok"})).await;
    assert_eq!(text_of(&r.response), "ok");
}

#[tokio::test]
async fn a_changed_backend_restarts_and_others_are_untouched() {
    let gw = TestGateway::start(&format!(
        "{ONE}\n[backends.ch]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--label\", \"v1\"]\n"
    ))
    .await;
    let s = gw.session().await;
    let before = s.call_tool("ch__whoami", json!({})).await;
    assert!(
        text_of(&before.response).contains("v1"),
        "{:?}",
        before.response
    );
    let changed = format!(
        "{ONE}\n[backends.ch]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--label\", \"v2\"]\n"
    );
    let report = gw
        .gateway()
        .reload(&parse_config(&changed, &gw.dir.0))
        .await;
    assert_eq!(report.changed, ["ch"]);
    // reload() returns once the new backend is connected.
    let r = s.call_tool("ch__whoami", json!({})).await;
    assert!(text_of(&r.response).contains("v2"), "{:?}", r.response);
    assert_eq!(
        logged_pids(&gw.dir.path("keep.log")).len(),
        1,
        "keep was not restarted"
    );
}

#[tokio::test]
async fn sighup_storm_and_a_broken_file_leave_the_gateway_serving() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let dir = common::TestDir::new();
    let cfg = dir.path("gw.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let body = ONE
        .replace("${FAKE_STDIO}", common::fake_stdio())
        .replace("${TEST_DIR}", &dir.0.to_string_lossy());
    std::fs::write(&cfg, format!("{body}\n")).unwrap();
    let mut child = spawn_serve(&cfg, port);
    let pid = Pid::from_raw(child.id().unwrap() as i32);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut s = common::McpClient::new(&url);
    let mut up = false;
    for _ in 0..100 {
        if reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "gateway started");
    s.initialize(json!({})).await;
    for _ in 0..50 {
        kill(pid, Signal::SIGHUP).unwrap();
    }
    // A file truncated for rewriting reads empty: taking it would drop every backend
    // (CI saw the storm's reload read the broken file's truncation: Unknown tool).
    std::fs::write(&cfg, " \n").unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = s.call_tool("keep__echo", json!({"text": "kept"})).await;
    assert_eq!(text_of(&r.response), "kept");
    std::fs::write(&cfg, "this is [not toml").unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = s.call_tool("keep__echo", json!({"text": "alive"})).await;
    assert_eq!(text_of(&r.response), "alive");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    kill(pid, Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// The value of the sample `series` (name with its labels, as rendered) in a scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn reload_results_build_info_and_session_cap_are_exported() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (port, metrics_port) = (free_port(), free_port());
    let dir = common::TestDir::new();
    let cfg = dir.path("gw.toml");
    let body = ONE
        .replace("${FAKE_STDIO}", common::fake_stdio())
        .replace("${TEST_DIR}", &dir.0.to_string_lossy())
        .replace(
            "metrics_listen = \"off\"",
            &format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\nmax_sessions = 7"),
        );
    std::fs::write(&cfg, &body).unwrap();
    let mut child = spawn_serve(&cfg, port);
    let pid = Pid::from_raw(child.id().unwrap() as i32);
    let scrape = || async move {
        let r = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics")).await;
        match r {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    // Polls until `series` has the value `want` (the watcher acts asynchronously).
    let until = |series: &'static str, want: f64| async move {
        let mut text = String::new();
        for _ in 0..100 {
            text = scrape().await;
            if sample(&text, series) == Some(want) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{series} never became {want}:\n{text}");
    };

    let text = until("mcpgate_config_last_reload_successful", 1.0).await;
    let info = format!(
        r#"mcpgate_build_info{{revision="{}",version="{}"}}"#,
        option_env!("MCPGATE_REVISION").unwrap_or("unknown"),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sample(&text, &info), Some(1.0), "{text}");
    assert_eq!(sample(&text, "mcpgate_sessions_max"), Some(7.0));
    let ok = r#"mcpgate_config_reloads_total{result="success"}"#;
    let failed = r#"mcpgate_config_reloads_total{result="failure"}"#;
    assert_eq!(sample(&text, ok), Some(0.0));
    assert_eq!(sample(&text, failed), Some(0.0));
    let stamp = "mcpgate_config_last_reload_success_timestamp_seconds";
    let started = sample(&text, stamp).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 60.0..=now + 1.0).contains(&started),
        "{started} vs {now}"
    );

    // A broken file is refused: counted, and the success time stays.
    std::fs::write(&cfg, "this is [not toml").unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    let text = until("mcpgate_config_last_reload_successful", 0.0).await;
    assert_eq!(sample(&text, failed), Some(1.0), "{text}");
    assert_eq!(sample(&text, ok), Some(0.0));
    assert_eq!(sample(&text, stamp), Some(started));

    // A valid file applies: counted, and the success time moves on.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(&cfg, format!("{body}\n# changed\n")).unwrap();
    kill(pid, Signal::SIGHUP).unwrap();
    let text = until("mcpgate_config_last_reload_successful", 1.0).await;
    assert!(sample(&text, ok).unwrap() >= 1.0, "{text}");
    assert_eq!(sample(&text, failed), Some(1.0));
    assert!(sample(&text, stamp).unwrap() > started, "{text}");

    kill(pid, Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// `mcpgate serve --config CFG --listen 127.0.0.1:PORT` as a child process, killed
/// when the handle drops (a failing test leaves no gateway behind).
fn spawn_serve(cfg: &std::path::Path, port: u16) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["serve", "--config"])
        .arg(cfg)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

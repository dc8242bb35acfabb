//! Graceful shutdown of the real `mcpgate serve` process (issue 5 item 4 and
//! acceptance 3; bad input "SIGTERM during a long streamed tool call", "a child
//! that ignores stdin close"; field fault "stdio children orphaned or left as
//! zombies"): on SIGTERM the in-flight call completes within the grace period, the
//! process exits 0 and no child is left, including one that ignores SIGTERM; on
//! SIGKILL of the gateway its stdio children die with it (parent-death signal).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::served::Served;
use common::{McpClient, gone, logged_pids, proc_state, text_of, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::time::Instant;

async fn serve(backends: &str) -> Served {
    Served::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\nshutdown_grace = \"5s\"\n{backends}"
    ))
    .await
}

/// PIDs of processes whose parent is `pid`.
fn children_of(pid: u32) -> BTreeSet<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| proc_state(*p).is_some_and(|(_, ppid)| ppid == pid))
        .collect()
}

fn pids(dir: &Path, logs: &[&str]) -> BTreeSet<u32> {
    logs.iter()
        .flat_map(|l| logged_pids(&dir.join(format!("{l}.log"))))
        .collect()
}

const BACKENDS: &str = r#"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--log", "${TEST_DIR}/fx.log"]
[backends.stubborn]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--ignore-sigterm", "--log", "${TEST_DIR}/stubborn.log"]
[backends.per]
type = "stdio"
command = "${FAKE_STDIO}"
args = ["--log", "${TEST_DIR}/per.log"]
mode = "per_session"
"#;

#[tokio::test]
async fn sigterm_lets_the_streamed_call_finish_then_exits_0_leaving_no_child() {
    let mut gw = serve(BACKENDS).await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    for tool in ["stubborn__echo", "per__echo"] {
        assert_eq!(
            text_of(&s.call_tool(tool, json!({"text": "up"})).await.response),
            "up"
        );
    }
    let children = children_of(gw.pid());
    let logged = pids(&gw.dir.0, &["fx", "stubborn", "per"]);
    assert_eq!(
        logged.len(),
        4,
        "fx, stubborn, per's catalogue and per's session child"
    );
    assert!(logged.is_subset(&children), "{logged:?} ⊆ {children:?}");

    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "fx__slow_progress", "arguments": {"n": 12, "interval_ms": 100},
        "_meta": {"progressToken": "t"}}});
    let mut stream = s.open(&call).await;
    let first = stream.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(first["method"], "notifications/progress");

    let term = Instant::now();
    kill(Pid::from_raw(gw.pid() as i32), Signal::SIGTERM).unwrap();
    let mut progress = 1;
    let response = loop {
        let m = stream
            .next(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("stream ended without the response\n{}", gw.log()));
        if m["method"] == "notifications/progress" {
            progress += 1;
            continue;
        }
        break m;
    };
    assert_eq!(progress, 12);
    assert_eq!(response["id"], 9);
    assert_eq!(text_of(&response), "progressed 12", "{response}");
    assert!(
        term.elapsed() < Duration::from_secs(5),
        "within the grace period"
    );

    let code = gw.exit_code(Duration::from_secs(9)).await;
    assert_eq!(code, Some(0), "exit status after SIGTERM\n{}", gw.log());
    for pid in children {
        assert!(
            wait_for(Duration::from_secs(2), || gone(pid)).await,
            "child {pid} outlived the gateway: {:?}",
            proc_state(pid)
        );
    }
    assert!(
        gw.log().contains("ignored SIGTERM"),
        "the stubborn child needed SIGKILL"
    );
}

#[tokio::test]
async fn sigkill_of_the_gateway_takes_its_children_along() {
    let mut gw = serve(BACKENDS).await;
    let mut s = McpClient::new(&gw.url);
    s.initialize(json!({})).await;
    assert_eq!(
        text_of(
            &s.call_tool("per__echo", json!({"text": "up"}))
                .await
                .response
        ),
        "up"
    );
    let children = children_of(gw.pid());
    assert!(children.len() >= 4, "{children:?}");
    kill(Pid::from_raw(gw.pid() as i32), Signal::SIGKILL).unwrap();
    assert_eq!(
        gw.exit_code(Duration::from_secs(3)).await,
        None,
        "killed, no exit code"
    );
    for pid in children {
        assert!(
            wait_for(Duration::from_secs(3), || gone(pid)).await,
            "child {pid} outlived a SIGKILLed gateway: {:?}",
            proc_state(pid)
        );
    }
}

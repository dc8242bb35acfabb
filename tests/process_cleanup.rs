//! No stdio child outlives its session or the gateway, including a child that
//! ignores SIGTERM and one started through `/bin/sh -c '...; echo done'`, and none
//! is left a zombie of the gateway.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{TestGateway, gone, logged_calls, logged_pids, proc_state, text_of, wait_for};
use serde_json::json;

fn backends(mode: &str) -> String {
    format!(
        r#"
        [backends.plain]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        args = ["--log", "${{TEST_DIR}}/plain.log"]
        mode = "{mode}"
        [backends.shell]
        type = "stdio"
        command = "/bin/sh"
        args = ["-c", "${{FAKE_STDIO}} --log ${{TEST_DIR}}/shell.log; echo done"]
        mode = "{mode}"
        [backends.stubborn]
        type = "stdio"
        command = "${{FAKE_STDIO}}"
        args = ["--ignore-sigterm", "--log", "${{TEST_DIR}}/stubborn.log"]
        mode = "{mode}"
        "#
    )
}

/// Calls echo on every backend; returns the PIDs that served the calls and the
/// shell wrapper's PID (the parent of the shell-started fake).
async fn call_all(gw: &TestGateway) -> (Vec<u32>, u32) {
    let s = gw.session().await;
    let mut pids = Vec::new();
    for b in ["plain", "shell", "stubborn"] {
        let r = s.call_tool(&format!("{b}__echo"), json!({"text": b})).await;
        assert_eq!(text_of(&r.response), b);
        let calls = logged_calls(&gw.dir.path(&format!("{b}.log")), "echo");
        pids.push(calls.last().unwrap()["pid"].as_u64().unwrap() as u32);
    }
    let (_, shell) = proc_state(pids[1]).expect("shell-started fake runs");
    assert_ne!(shell, std::process::id(), "the fake runs under a shell");
    if matches!(s.delete().await.status.as_u16(), 200..=299) {
        return (pids, shell);
    }
    panic!("DELETE failed");
}

#[tokio::test]
async fn per_session_children_are_gone_after_delete() {
    let gw = TestGateway::start(&backends("per_session")).await;
    let (pids, shell) = call_all(&gw).await;
    for pid in pids.iter().chain([&shell]) {
        assert!(
            wait_for(Duration::from_secs(6), || gone(*pid)).await,
            "pid {pid} still there: {:?}",
            proc_state(*pid)
        );
    }
}

#[tokio::test]
async fn every_child_is_gone_after_shutdown() {
    let gw = TestGateway::start(&backends("shared")).await;
    let (_, shell) = call_all(&gw).await;
    let mut all: BTreeSet<u32> = BTreeSet::new();
    for b in ["plain", "shell", "stubborn"] {
        all.extend(logged_pids(&gw.dir.path(&format!("{b}.log"))));
    }
    all.insert(shell);
    let dir = gw.dir.0.clone();
    let gw_dir = gw.shutdown().await;
    assert_eq!(gw_dir.0, dir);
    for pid in &all {
        assert!(
            wait_for(Duration::from_secs(2), || gone(*pid)).await,
            "pid {pid} outlived the gateway: {:?}",
            proc_state(*pid)
        );
    }
}

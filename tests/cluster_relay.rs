//! What a host sends about a request to a replica other than the one that holds
//! the request, with real processes: a real `redis-server` per test, two `mcpgate
//! serve` replicas with the same keys and store, the fake stdio backend per
//! session. A host's answer to a sampling request relayed by A, POSTed to B,
//! completes the call on A (through A's inbox, one Redis command; none when it
//! is POSTed to A); the inbox reader reconnects after its connection is cut and
//! reads what was written meanwhile; an answer for a replica that is gone is
//! dropped with a log line; the same for a request A asked on behalf of a
//! 2026-07-28 backend's `input_required` (the shim); a `notifications/cancelled` POSTed to B
//! reaches the backend of the call running on A, and A's call ends.

mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{FX_LOGGED, TestRedis, at, replica, scrape};
use common::{McpClient, logged, logged_calls, metric, wait_for};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Waits (at most 3 s) until `gw` logged a line containing `text`.
async fn logs(gw: &Served, text: &str) -> bool {
    wait_for(Duration::from_secs(3), || gw.log().contains(text)).await
}

/// Calls `tool` on `caller`, answers the request it relays with `answer`
/// POSTed by `answerer` (the same session, at any replica), and returns the
/// call's result text.
async fn ask_and_answer(
    caller: &McpClient,
    answerer: &McpClient,
    tool: &str,
    answer: Value,
) -> String {
    let call = json!({"jsonrpc": "2.0", "id": tool, "method": "tools/call",
                      "params": {"name": tool, "arguments": {}}});
    let mut stream = caller.open(&call).await;
    let req = stream
        .next(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("{tool}: nothing relayed"));
    assert!(
        req["method"].is_string() && req.get("id").is_some(),
        "{req}"
    );
    let id = req["id"].as_i64().unwrap_or_else(|| panic!("{req}"));
    assert!(
        (1 << 21..1 << 53).contains(&id),
        "a number carrying the relaying replica's tag, exact in JSON: {id}"
    );
    let r = answerer
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": id, "result": answer}).to_string(),
        )
        .await;
    assert_eq!(r.status, 202, "the answer is accepted where it lands");
    let done = stream
        .next(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("{tool}: no result"));
    assert_eq!(done["id"], call["id"], "{done}");
    done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// How many times Redis executed `command` so far (`INFO commandstats`).
fn calls(redis: &TestRedis, command: &str) -> u64 {
    redis.calls(command)
}

fn sampled() -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"})
}

#[tokio::test]
async fn an_answer_posted_to_b_completes_the_call_relayed_by_a() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let b = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({"sampling": {}, "elicitation": {"form": {}}}))
        .await;
    let on_b = at(&s, &b);
    // A owns the session's child from its first use (one claim, one note of
    // the child: `tests/cluster_owner.rs`).
    let r = s.call_tool("fx__echo", json!({"text": "claim"})).await;
    assert_eq!(r.response["result"]["content"][0]["text"], "claim");
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Answered where it was relayed: no Redis command at all.
    let (evals, publishes) = (calls(&redis, "eval"), calls(&redis, "publish"));
    let xadds = calls(&redis, "xadd");
    let text = ask_and_answer(&s, &s, "fx__ask_sampling", sampled()).await;
    assert!(text.contains(r#""text":"4""#), "{text}");
    assert_eq!(calls(&redis, "eval"), evals, "no inbox write");
    // The only publishes: the doorbell rung with each mirrored event.
    let rung = calls(&redis, "xadd") - xadds;
    assert_eq!(calls(&redis, "publish"), publishes + rung, "no broadcast");
    assert!(redis.keys("mcpg:inbox:*").is_empty());

    // Answered on B: one command (the inbox write), and the call on A completes.
    let text = ask_and_answer(&s, &on_b, "fx__ask_sampling", sampled()).await;
    assert!(
        text.contains(r#""text":"4""#),
        "{text}\n{}\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(
        calls(&redis, "eval"),
        evals + 1,
        "one inbox write per answer"
    );
    let answer = json!({"action": "accept", "content": {"x": 1}});
    let text = ask_and_answer(&s, &on_b, "fx__ask_elicit", answer).await;
    assert!(text.contains(r#""x":1"#), "{text}");
    let answers = [("kind", "answer")];
    assert_eq!(
        metric(
            &scrape(&b).await,
            "mcpgate_cluster_forwarded_total",
            &answers
        ),
        Some(2.0)
    );
    assert_eq!(
        redis.keys("mcpg:inbox:*").len(),
        1,
        "only A's inbox was used"
    );

    // Every connection of both replicas cut: A's inbox reader reconnects and
    // still gets what B sends.
    // (The shared connections are subscribed: type pubsub.)
    let killed: u32 = ["normal", "pubsub"]
        .iter()
        .map(|t| {
            redis
                .cli(&["CLIENT", "KILL", "TYPE", t])
                .parse()
                .unwrap_or(0)
        })
        .sum();
    assert!(
        killed >= 4,
        "two shared connections and two inbox readers: {killed}"
    );
    // Heartbeats (every 200 ms) find the cut and reconnect; the reader
    // reconnects 200 ms after its read failed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answer = json!({"action": "accept", "content": {"x": 2}});
    let text = ask_and_answer(&s, &on_b, "fx__ask_elicit", answer).await;
    assert!(text.contains(r#""x":2"#), "{text}");

    // A request id naming a replica that is not alive: B drops the answer
    // (202 all the same: the host cannot do better) and says so.
    let gone = (0x7eed_beef_i64 << 21) | 1;
    let r = on_b
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": gone, "result": {}}).to_string(),
        )
        .await;
    assert_eq!(r.status, 202);
    assert!(
        logs(&b, "relayed by a replica that is gone; dropped").await,
        "{}",
        b.log()
    );
    assert_eq!(
        metric(
            &scrape(&b).await,
            "mcpgate_cluster_forwarded_total",
            &answers
        ),
        Some(3.0),
        "a dropped answer is not counted as forwarded"
    );
}

#[tokio::test]
async fn an_answer_posted_to_b_completes_the_shim_round_held_by_a() {
    // A 2026-07-28 backend's input_required, asked of the session by A: the
    // host's answer lands on B and reaches the round waiting on A.
    let modern = "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
        args = [\"--modern\"]\nera = \"modern\"\n";
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), modern).await;
    let b = replica(Some(&redis), modern).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({"elicitation": {}})).await;
    let on_b = at(&s, &b);
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    let text = ask_and_answer(&s, &on_b, "fx__mrtr_elicit", answer).await;
    assert!(
        text.contains(r#""name":"Ada""#),
        "{text}\n{}\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(redis.keys("mcpg:inbox:*").len(), 1, "through A's inbox");
}

#[tokio::test]
async fn a_cancel_posted_to_b_stops_the_call_running_on_a() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let b = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({})).await;
    let on_b = at(&s, &b);
    // B holds the session before the cancel (its first request restores it).
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(on_b.post(&[], ping).await.status, 200);

    let log = a.dir.path("fx.log");
    let call = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 30}}});
    let started = Instant::now();
    let mut stream = s.open(&call).await;
    assert!(
        wait_for(Duration::from_secs(3), || !logged_calls(&log, "sleep")
            .is_empty())
        .await,
        "the call runs on A's backend"
    );
    let upstream = logged_calls(&log, "sleep")[0]["msg"]["id"].clone();

    let r = on_b
        .notify(
            "notifications/cancelled",
            Some(json!({"requestId": 42, "reason": "user aborted"})),
        )
        .await;
    assert_eq!(r.status, 202);
    let cancelled = || {
        logged(&log, "notifications/cancelled")
            .iter()
            .any(|e| e["msg"]["params"]["requestId"] == upstream)
    };
    assert!(
        wait_for(Duration::from_secs(3), cancelled).await,
        "A's backend saw the cancel for its request:\n{}\n{}",
        a.log(),
        b.log()
    );
    let reason = logged(&log, "notifications/cancelled")[0]["msg"]["params"]["reason"].clone();
    assert_eq!(reason, Value::from("user aborted"));
    assert!(
        stream.ends_within(Duration::from_secs(3)).await,
        "A's stream ends, with no result after the cancel"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "A's call ended long before the backend's 30 s"
    );
    let text = scrape(&b).await;
    assert_eq!(
        metric(
            &text,
            "mcpgate_cluster_forwarded_total",
            &[("kind", "cancel")]
        ),
        Some(1.0)
    );

    // A cancel landing where the call runs is not broadcast.
    let call = json!({"jsonrpc": "2.0", "id": 43, "method": "tools/call",
                      "params": {"name": "fx__sleep", "arguments": {"s": 30}}});
    let _stream = s.open(&call).await;
    assert!(
        wait_for(Duration::from_secs(3), || logged_calls(&log, "sleep").len()
            == 2)
        .await
    );
    let r = s
        .notify("notifications/cancelled", Some(json!({"requestId": 43})))
        .await;
    assert_eq!(r.status, 202);
    assert!(
        wait_for(Duration::from_secs(3), || logged(
            &log,
            "notifications/cancelled"
        )
        .len()
            == 2)
        .await
    );
    let text = scrape(&a).await;
    assert_eq!(
        metric(
            &text,
            "mcpgate_cluster_forwarded_total",
            &[("kind", "cancel")]
        ),
        None
    );
}

#[tokio::test]
async fn an_answer_written_while_the_inbox_reader_is_cut_off_is_still_read() {
    let redis = TestRedis::start().await;
    let a = replica(Some(&redis), FX_LOGGED).await;
    let mut s = McpClient::new(&a.url);
    s.initialize(json!({"sampling": {}})).await;
    let records = redis.keys("mcpg:*:rec");
    assert_eq!(records.len(), 1, "{records:?}");
    let h = records[0]
        .strip_prefix("mcpg:{")
        .and_then(|r| r.strip_suffix("}:rec"))
        .unwrap()
        .to_owned();

    // One answer through the inbox first, so the reader has a last id.
    let relay = |id: &str| {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "fx__ask_sampling", "arguments": {}}});
        let s = &s;
        async move {
            let mut stream = s.open(&call).await;
            let req = stream.next(Duration::from_secs(5)).await.expect("relayed");
            (stream, req["id"].as_i64().expect("numeric id"))
        }
    };
    let write = |id: i64, text: &str| {
        let tag = format!("{:08x}", id >> 21);
        let answer = json!({"jsonrpc": "2.0", "id": id, "result":
            {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}});
        redis.cli(&[
            "XADD",
            &format!("mcpg:inbox:{{{tag}}}"),
            "*",
            "k",
            "answer",
            "h",
            &h,
            "m",
            &answer.to_string(),
        ])
    };
    let result_text = |done: Option<Value>| {
        let done = done.expect("a result");
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let (mut stream, id) = relay("first").await;
    assert!(!write(id, "one").is_empty());
    assert!(result_text(stream.next(Duration::from_secs(5)).await).contains(r#""text":"one""#));

    // Cut the reader (the shared connection is subscribed: type pubsub, left
    // alone) and write at once, before it can reconnect (200 ms later).
    let (mut stream, id) = relay("second").await;
    let killed = redis.cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert_eq!(killed, "1", "the inbox reader");
    assert!(!write(id, "two").is_empty());
    let text = result_text(stream.next(Duration::from_secs(5)).await);
    assert!(text.contains(r#""text":"two""#), "{text}\n{}", a.log());
}

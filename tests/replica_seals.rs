//! The `requestState` the gateway hands to 2026-07-28 hosts, across real
//! processes (`mcpgate serve` replicas with the fake stdio backend, each its own
//! child): sealed with the `[cluster]` keys, a wrapped state (a 2026-07-28
//! backend's, `dispatch/wrap.rs`) minted by one replica is served by another,
//! round after round, and the backend gets its own state byte for byte; a
//! tampered, expired or other principal's state is -32602 wherever it lands;
//! rotated keys open what the old key sealed (first seals, all open) and a
//! replica without the key refuses it. A bridge continuation (a legacy backend's
//! call, `dispatch/bridge.rs`) stays where it was parked: its retry on another
//! replica is -32603 "continuation not on this replica" naming the holder (the
//! shared store's tag, or the process's own id without a store), counted, and
//! the backend call is never run a second time.

mod auth_support;
mod common;

use std::time::Duration;

use common::served::Served;
use common::store::{FX_LOGGED, KEYS, TestRedis, replica, scrape};
use common::{McpClient, logged, metric, text_of};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
/// A second key (32 bytes 0x02), for rotations.
const K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

/// The fake stdio backend in 2026-07-28 mode, logging to `${TEST_DIR}/fx.log`.
const MODERN_FX: &str = "[backends.fx]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
    args = [\"--modern\", \"--log\", \"${TEST_DIR}/fx.log\"]\n";

/// `mcpgate serve` with `keys` (`MCPGATE_SESSION_KEYS` lines), a metrics
/// listener, `server` settings and `rest` (backends, `[auth]`).
async fn start(keys: &str, server: &str, rest: &str) -> Served {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n{server}\n{rest}"
    );
    Served::start_with_env(&config, &[("MCPGATE_SESSION_KEYS", keys)]).await
}

/// A 2026-07-28 `tools/call` of the exposed tool `name` at `gw`, declaring form
/// elicitation, with `extra` params (`inputResponses`, `requestState`) and
/// `token` as bearer; its answer (the last message).
async fn call(gw: &Served, token: Option<&str>, name: &str, args: Value, extra: Value) -> Value {
    let c = McpClient::new(&gw.url);
    let mut params = json!({"name": name, "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"}}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let body =
        json!({"jsonrpc": "2.0", "id": c.next_id(), "method": "tools/call", "params": params});
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    if let Some(b) = &bearer {
        h.push(("authorization", b.as_str()));
    }
    let mut stream = c.open_with(&h, &body).await;
    let mut last = Value::Null;
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        last = m;
    }
    last
}

/// The first round's state and its single key, asserting `input_required`.
fn asked(v: &Value) -> (String, String) {
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required", "{v}");
    let key = r["inputRequests"].as_object().unwrap().keys().next();
    let state = r["requestState"].as_str().unwrap_or_else(|| panic!("{v}"));
    (state.to_owned(), key.unwrap().clone())
}

/// A retry's params: the answer `content` for `key` and `state`.
fn retry(key: &str, content: &Value, state: &str) -> Value {
    json!({"inputResponses": {key: {"action": "accept", "content": content}},
           "requestState": state})
}

/// `state` with one base64 character of its sealed body changed.
fn tampered(state: &str) -> String {
    let mut b = state.as_bytes().to_vec();
    let i = state.find('.').unwrap() + 20;
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(b).unwrap()
}

/// `mcpgate_input_required_retries_total{kind, result}` of `gw`.
async fn retries(gw: &Served, kind: &str, result: &str) -> f64 {
    let text = scrape(gw).await;
    let labels = [("kind", kind), ("result", result)];
    metric(&text, "mcpgate_input_required_retries_total", &labels).unwrap_or(0.0)
}

/// The `requestState`s the backend of `gw` received on `tools/call`.
fn states_received(gw: &Served) -> Vec<Option<String>> {
    logged(&gw.dir.path("fx.log"), "tools/call")
        .iter()
        .map(|m| {
            m["msg"]["params"]["requestState"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn a_wrapped_state_is_served_by_any_replica_with_the_same_keys() {
    let (a, b) = tokio::join!(start(KEYS, "", MODERN_FX), start(KEYS, "", MODERN_FX));
    // One round: asked by A, answered at B; B's backend gets its state back
    // byte for byte (the fake checks its checksum, and the state holds what
    // JSON re-encoding would change).
    let first = call(&a, None, "fx__mrtr_state_exact", json!({}), json!({})).await;
    let (state, key) = asked(&first);
    let done = call(
        &b,
        None,
        "fx__mrtr_state_exact",
        json!({}),
        retry(&key, &json!({"name": "Ada"}), &state),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(text_of(&done).contains(r#""name":"Ada""#), "{done}");
    let inner = states_received(&b);
    assert_eq!(inner.len(), 1, "B's backend saw the retry only: {inner:?}");
    assert!(
        inner[0]
            .as_deref()
            .is_some_and(|s| s.contains(r#"\"quoted\""#))
    );
    assert_eq!(retries(&b, "wrapped", "resumed").await, 1.0);

    // Several rounds, each on the other replica.
    let args = json!({"rounds": 3});
    let mut extra = json!({});
    let mut asked_keys = Vec::new();
    for round in 0..5 {
        let gw = if round % 2 == 0 { &a } else { &b };
        let v = call(gw, None, "fx__mrtr_rounds", args.clone(), extra).await;
        if v["result"]["resultType"] == "complete" {
            assert_eq!(asked_keys, ["r1", "r2", "r3"], "{v}");
            assert!(text_of(&v).contains(r#""r3":"#), "{v}");
            return;
        }
        let (state, key) = asked(&v);
        asked_keys.push(key.clone());
        extra = retry(&key, &json!({"name": format!("n{round}")}), &state);
    }
    panic!("never completed: {asked_keys:?}");
}

#[tokio::test]
async fn tampered_and_expired_states_are_refused_on_another_replica() {
    let server = "input_required_timeout = \"1s\"";
    let (a, b) = tokio::join!(
        start(KEYS, server, MODERN_FX),
        start(KEYS, server, MODERN_FX)
    );
    let first = call(&a, None, "fx__mrtr_elicit", json!({}), json!({})).await;
    let (state, key) = asked(&first);
    let answer = json!({"name": "x"});
    let v = call(
        &b,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &tampered(&state)),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "tampered: {v}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let v = call(
        &b,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "expired: {v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expired"),
        "{v}"
    );
    assert!(
        states_received(&b).is_empty(),
        "B's backend never saw a retry"
    );
    assert_eq!(
        retries(&b, "wrapped", "invalid").await,
        1.0,
        "the expired one"
    );
}

#[tokio::test]
async fn rotated_keys_open_what_the_old_key_sealed_and_a_replica_without_it_refuses() {
    // A: the old key only; B: old seals, new opens (first phase); C: new seals,
    // old opens (second phase); D: the new key only (after one lifetime).
    let (old_first, new_first) = (format!("{KEYS}\n{K2}"), format!("{K2}\n{KEYS}"));
    let (a, b, c, d) = tokio::join!(
        start(KEYS, "", MODERN_FX),
        start(&old_first, "", MODERN_FX),
        start(&new_first, "", MODERN_FX),
        start(K2, "", MODERN_FX),
    );
    let answer = json!({"name": "x"});
    let (old, key) = asked(&call(&a, None, "fx__mrtr_elicit", json!({}), json!({})).await);
    assert!(old.starts_with("k1."), "{old}");
    let v = call(
        &d,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &old),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "no old key: {v}");
    let v = call(
        &c,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &old),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "old key opens: {v}");
    let (new, key) = asked(&call(&c, None, "fx__mrtr_elicit", json!({}), json!({})).await);
    assert!(new.starts_with("k2."), "{new}");
    let v = call(
        &b,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &new),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "new key opens: {v}");
    let v = call(
        &a,
        None,
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &new),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "A never got the new key: {v}");
}

#[tokio::test]
async fn another_principals_state_is_refused_on_any_replica() {
    use auth_support::Issuer;
    const RESOURCE: &str = "https://gw.example.test/mcp";
    let issuer = Issuer::start().await;
    let rest = format!(
        "[auth]\nresource = \"{RESOURCE}\"\nissuers = [\"{}\"]\n{MODERN_FX}\
         [backends.lfx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\n\
         args = [\"--log\", \"${{TEST_DIR}}/lfx.log\"]\nmode = \"per_session\"\n",
        issuer.url
    );
    let (a, b) = tokio::join!(start(KEYS, "", &rest), start(KEYS, "", &rest));
    let token = |sub: &str, shift: i64| {
        let mut c = issuer.claims(sub, "mcp:tools", RESOURCE);
        c["exp"] = json!(c["exp"].as_i64().unwrap() + shift);
        issuer.mint(&c)
    };
    let (alice, bob) = (token("alice", 0), token("bob", 0));
    // Wrapped: bob's retry with alice's state fails on either replica; alice's
    // own, with a refreshed token, completes on the other one.
    let (state, key) =
        asked(&call(&a, Some(&alice), "fx__mrtr_elicit", json!({}), json!({})).await);
    let answer = json!({"name": "x"});
    for gw in [&a, &b] {
        let v = call(
            gw,
            Some(&bob),
            "fx__mrtr_elicit",
            json!({}),
            retry(&key, &answer, &state),
        )
        .await;
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("another caller"),
            "{v}"
        );
    }
    let refreshed = token("alice", 60);
    let v = call(
        &b,
        Some(&refreshed),
        "fx__mrtr_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");

    // Bridged (legacy backend): the principal is checked before the holder.
    let (state, key) =
        asked(&call(&a, Some(&alice), "lfx__ask_elicit", json!({}), json!({})).await);
    let answer = json!({"x": 3});
    for gw in [&a, &b] {
        let v = call(
            gw,
            Some(&bob),
            "lfx__ask_elicit",
            json!({}),
            retry(&key, &answer, &state),
        )
        .await;
        assert_eq!(v["error"]["code"], -32602, "{v}");
    }
    let v = call(
        &b,
        Some(&alice),
        "lfx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(
        v["error"]["code"], -32603,
        "alice, on the other replica: {v}"
    );
    let v = call(
        &a,
        Some(&alice),
        "lfx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
}

/// A bridge continuation parked by `a`, retried at `b`: -32603 naming `holder`
/// (and `b`), counted at `b`, never run at `b`; then completed at `a`, where the
/// backend ran the call once.
async fn a_continuation_stays_on_its_replica(a: &Served, b: &Served, holder: Option<String>) {
    let first = call(a, None, "fx__ask_elicit", json!({}), json!({})).await;
    let (state, key) = asked(&first);
    let answer = json!({"x": 3});
    let v = call(
        b,
        None,
        "fx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    let e = &v["error"];
    assert_eq!(e["code"], -32603, "{v}");
    assert_eq!(e["message"], "continuation not on this replica", "{v}");
    let named = e["data"]["holder"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    assert_ne!(Some(named), e["data"]["replica"].as_str(), "{v}");
    match &holder {
        Some(tag) => assert_eq!(named, tag, "the holder's store tag: {v}"),
        None => assert!(
            named.starts_with('p') && named.len() == 9,
            "a process id: {v}"
        ),
    }
    assert!(
        e["data"]["action"]
            .as_str()
            .unwrap()
            .contains("without requestState"),
        "{v}"
    );
    assert_eq!(retries(b, "continuation", "elsewhere").await, 1.0);
    assert!(
        logged(&b.dir.path("fx.log"), "tools/call").is_empty(),
        "never run at B"
    );
    // The holder completes it; the backend ran the call once.
    let v = call(
        a,
        None,
        "fx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert!(text_of(&v).contains(r#""x":3"#), "{v}");
    assert_eq!(logged(&a.dir.path("fx.log"), "tools/call").len(), 1);
    assert_eq!(retries(a, "continuation", "resumed").await, 1.0);
    // A replay finds nothing, on either replica; at B it is still "elsewhere".
    let v = call(
        a,
        None,
        "fx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(retries(a, "continuation", "gone").await, 1.0);
    let v = call(
        b,
        None,
        "fx__ask_elicit",
        json!({}),
        retry(&key, &answer, &state),
    )
    .await;
    assert_eq!(
        v["error"]["message"], "continuation not on this replica",
        "{v}"
    );
    assert_eq!(logged(&a.dir.path("fx.log"), "tools/call").len(), 1);
}

#[tokio::test]
async fn a_continuation_retried_on_another_replica_is_refused_without_a_store() {
    let (a, b) = tokio::join!(start(KEYS, "", FX_LOGGED), start(KEYS, "", FX_LOGGED));
    a_continuation_stays_on_its_replica(&a, &b, None).await;
}

#[tokio::test]
async fn a_continuation_retried_on_another_replica_names_the_holders_store_tag() {
    let redis = TestRedis::start().await;
    let (a, b) = tokio::join!(
        replica(Some(&redis), FX_LOGGED),
        replica(Some(&redis), FX_LOGGED)
    );
    let tag = a.logged("shared session store reachable", "replica");
    assert!(tag.is_some(), "{}", a.log());
    a_continuation_stays_on_its_replica(&a, &b, tag).await;
}

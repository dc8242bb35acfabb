//! A legacy host session through a 2026-07-28 backend (the MRTR shim): the
//! backend's `input_required` becomes real server→client requests on the call's
//! POST stream, answered by the host like any relayed request; the backend gets
//! retries with that round's `inputResponses` and its exact `requestState`, and
//! the host sees only the final result. Per revision: no elicitation for
//! 2025-03-26, no URL mode for 2025-06-18; nothing the session did not declare;
//! at most 8 rounds; a host that never answers or answers an error gets a clean
//! failure. The backends are the fakes' `--modern` mode (stdio) and a dual-era
//! fake over HTTP.

mod common;

use std::time::Duration;

use common::{FakeHttp, FakeHttpOptions, McpClient, TestGateway, text_of};
use serde_json::{Value, json};

/// A gateway over the fake stdio backend in its 2026-07-28 mode.
async fn gateway(server: &str) -> TestGateway {
    TestGateway::start(&format!(
        "[server]\n{server}\n[backends.fx]\ntype = \"stdio\"\ncommand = \"${{FAKE_STDIO}}\"\nargs = [\"--modern\"]\nera = \"modern\"\n"
    ))
    .await
}

/// What the host saw of one call.
struct Seen {
    /// The call's final response.
    last: Value,
    /// The requests put to the host, in order.
    requests: Vec<Value>,
    /// Notifications on the call's stream.
    notes: Vec<Value>,
}

/// Sends request `method` and answers every request put to the host on its
/// stream with `reply(request)`: `Some(Ok(result))`, `Some(Err(error))`, or
/// `None` (never answered).
async fn drive(
    s: &McpClient,
    method: &str,
    params: Value,
    reply: impl Fn(&Value) -> Option<Result<Value, Value>>,
) -> Seen {
    let id = format!("c-{}", s.next_id());
    let call = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut stream = s.open(&call).await;
    let mut seen = Seen {
        last: Value::Null,
        requests: Vec::new(),
        notes: Vec::new(),
    };
    while let Some(m) = stream.next(Duration::from_secs(10)).await {
        match (m.get("method"), m.get("id")) {
            (Some(_), Some(rid)) => {
                let rid = rid.clone();
                seen.requests.push(m.clone());
                let answer = match reply(&m) {
                    Some(Ok(result)) => json!({"jsonrpc": "2.0", "id": rid, "result": result}),
                    Some(Err(error)) => json!({"jsonrpc": "2.0", "id": rid, "error": error}),
                    None => continue,
                };
                let r = s.post(&[], answer.to_string()).await;
                assert_eq!(r.status, 202, "{r:?}");
            }
            (Some(_), None) => seen.notes.push(m),
            (None, _) => {
                assert_eq!(m["id"], id, "{m}");
                seen.last = m;
                break;
            }
        }
    }
    seen
}

#[allow(clippy::needless_pass_by_value)] // call sites read better with owned args
fn tool(name: &str, args: Value) -> Value {
    json!({"name": format!("fx__{name}"), "arguments": args})
}

fn accept(name: &str) -> Option<Result<Value, Value>> {
    Some(Ok(json!({"action": "accept", "content": {"name": name}})))
}

/// A legacy host never sees the modern-only fields.
fn assert_legacy_shaped(result: &Value) {
    for k in [
        "resultType",
        "inputRequests",
        "requestState",
        "ttlMs",
        "cacheScope",
    ] {
        assert!(
            result.get(k).is_none(),
            "{k} reached a legacy host: {result}"
        );
    }
}

#[tokio::test]
async fn form_elicitation_sampling_and_roots_are_asked_on_the_call_stream() {
    let gw = gateway("").await;
    let s = gw
        .session_with(json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}}))
        .await;
    let seen = drive(&s, "tools/call", tool("mrtr_elicit", json!({})), |_| {
        accept("Ada")
    })
    .await;
    assert_eq!(seen.requests.len(), 1, "{:?}", seen.requests);
    let asked = &seen.requests[0];
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "Your name?", "{asked}");
    assert!(
        asked["id"].is_i64(),
        "a gateway id, not the backend's key: {asked}"
    );
    let text = text_of(&seen.last);
    assert!(text.contains(r#""name":"Ada""#), "{text}");
    assert_legacy_shaped(&seen.last["result"]);

    let sampled =
        json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"});
    let seen = drive(&s, "tools/call", tool("mrtr_sample", json!({})), |r| {
        assert_eq!(r["method"], "sampling/createMessage", "{r}");
        Some(Ok(sampled.clone()))
    })
    .await;
    // The host's result, verbatim, as the backend's inputResponses entry.
    assert!(
        text_of(&seen.last).contains(&format!(r#""llm":{sampled}"#)),
        "{}",
        seen.last
    );

    let seen = drive(&s, "tools/call", tool("mrtr_roots", json!({})), |r| {
        assert_eq!(r["method"], "roots/list", "{r}");
        Some(Ok(json!({"roots": [{"uri": "file:///work", "name": "w"}]})))
    })
    .await;
    assert!(
        text_of(&seen.last).contains("file:///work"),
        "{}",
        seen.last
    );
}

#[tokio::test]
async fn several_rounds_and_parallel_asks_keep_the_hosts_progress_token() {
    let gw = gateway("").await;
    let s = gw
        .session_with(json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}}))
        .await;
    let mut params = tool("mrtr_rounds", json!({"rounds": 3}));
    params["_meta"] = json!({"progressToken": "tok"});
    let seen = drive(&s, "tools/call", params, |r| {
        let round = r["params"]["message"].as_str().unwrap_or("").to_owned();
        accept(&round)
    })
    .await;
    let messages: Vec<&str> = seen
        .requests
        .iter()
        .map(|r| r["params"]["message"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(messages, ["Round 1?", "Round 2?", "Round 3?"]);
    let text = text_of(&seen.last);
    for k in ["r1", "r2", "r3"] {
        assert!(text.contains(&format!(r#""{k}":"#)), "{text}");
    }
    let progress: Vec<(Value, f64)> = seen
        .notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| {
            let p = &n["params"];
            (p["progressToken"].clone(), p["progress"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(
        progress,
        [
            (json!("tok"), 1.0),
            (json!("tok"), 2.0),
            (json!("tok"), 3.0),
            (json!("tok"), 4.0)
        ],
        "one progress per round, with the host's token: {:?}",
        seen.notes
    );

    // Three asks in one round: all three reach the host before any answer.
    let id = json!("par");
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": tool("mrtr_parallel", json!({}))});
    let mut stream = s.open(&call).await;
    let mut asked = Vec::new();
    while asked.len() < 3 {
        let m = stream.next(Duration::from_secs(5)).await.expect("asked");
        asked.push(m);
    }
    let mut methods: Vec<&str> = asked
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        ["elicitation/create", "roots/list", "sampling/createMessage"]
    );
    for m in &asked {
        let result = match m["method"].as_str().unwrap() {
            "elicitation/create" => json!({"action": "accept", "content": {"name": "Bo"}}),
            "roots/list" => json!({"roots": []}),
            _ => {
                json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"})
            }
        };
        let r = s
            .post(
                &[],
                json!({"jsonrpc": "2.0", "id": m["id"], "result": result}).to_string(),
            )
            .await;
        assert_eq!(r.status, 202);
    }
    let done = stream.next(Duration::from_secs(5)).await.expect("result");
    assert_eq!(done["id"], id, "{done}");
    let text = text_of(&done);
    for k in ["name", "llm", "roots"] {
        assert!(text.contains(&format!(r#""{k}":"#)), "{text}");
    }
}

#[tokio::test]
async fn the_request_state_goes_back_exactly_and_state_only_rounds_are_retried() {
    let gw = gateway("").await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let seen = drive(
        &s,
        "tools/call",
        tool("mrtr_state_exact", json!({})),
        |_| accept("Cy"),
    )
    .await;
    let text = text_of(&seen.last);
    assert!(text.contains(r#""name":"Cy""#), "{}", seen.last);
    let seen = drive(&s, "tools/call", tool("mrtr_state_only", json!({})), |r| {
        panic!("nothing to ask: {r}")
    })
    .await;
    assert_eq!(text_of(&seen.last), "waited", "{}", seen.last);
}

#[tokio::test]
async fn prompts_and_resources_are_shimmed_and_fail_as_json_rpc_errors() {
    let gw = gateway("").await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let seen = drive(&s, "prompts/get", json!({"name": "fx__mrtr_greet"}), |_| {
        accept("Di")
    })
    .await;
    assert_eq!(
        seen.last["result"]["messages"][0]["content"]["text"], "Greet Di",
        "{}",
        seen.last
    );
    assert_legacy_shaped(&seen.last["result"]);
    let seen = drive(&s, "resources/read", json!({"uri": "fx+fx://mrtr"}), |_| {
        accept("Ed")
    })
    .await;
    assert_eq!(
        seen.last["result"]["contents"][0]["text"], "for Ed",
        "{}",
        seen.last
    );
    // A host error for the ask: a JSON-RPC error (not a result) for these.
    let seen = drive(&s, "prompts/get", json!({"name": "fx__mrtr_greet"}), |_| {
        Some(Err(json!({"code": -32603, "message": "no UI"})))
    })
    .await;
    assert_eq!(seen.last["error"]["code"], -32603, "{}", seen.last);
    assert!(
        seen.last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no UI"),
        "{}",
        seen.last
    );
}

#[tokio::test]
async fn a_host_error_or_too_many_rounds_end_the_call_cleanly() {
    let gw = gateway("").await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let seen = drive(&s, "tools/call", tool("mrtr_elicit", json!({})), |_| {
        Some(Err(
            json!({"code": -1, "message": "user closed the dialog"}),
        ))
    })
    .await;
    let result = &seen.last["result"];
    assert_eq!(result["isError"], true, "{}", seen.last);
    assert!(text_of(&seen.last).contains("user closed the dialog"));
    let seen = drive(
        &s,
        "tools/call",
        tool("mrtr_rounds", json!({"rounds": 9})),
        |_| accept("x"),
    )
    .await;
    assert_eq!(seen.requests.len(), 8, "8 rounds asked, not a 9th");
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);
    assert!(text_of(&seen.last).contains("8 rounds"), "{}", seen.last);
}

#[tokio::test]
async fn a_host_that_never_answers_gets_a_clean_failure_after_the_timeout() {
    let gw = gateway("input_required_timeout = \"1s\"").await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let started = tokio::time::Instant::now();
    let seen = drive(&s, "tools/call", tool("mrtr_elicit", json!({})), |_| None).await;
    assert_eq!(seen.requests.len(), 1);
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);
    assert!(
        text_of(&seen.last).contains("did not answer"),
        "{}",
        seen.last
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A late answer is ignored.
    let late =
        json!({"jsonrpc": "2.0", "id": seen.requests[0]["id"], "result": {"action": "cancel"}});
    assert_eq!(s.post(&[], late.to_string()).await.status, 202);
}

#[tokio::test]
async fn each_revision_is_asked_only_what_it_has_and_declared() {
    let gw = gateway("").await;
    let everything = json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}},
        "roots": {"listChanged": true}, "experimental": {"x": {}}});
    let caps_seen = |s: McpClient| async move {
        let seen = drive(&s, "tools/call", tool("mrtr_caps", json!({})), |_| None).await;
        let text = text_of(&seen.last).to_owned();
        serde_json::from_str::<Value>(&text).unwrap()["clientCapabilities"].clone()
    };
    let mut old = gw.client();
    old.initialize_version("2025-03-26", everything.clone())
        .await;
    assert_eq!(
        caps_seen(old.clone()).await,
        json!({"sampling": {}, "roots": {}}),
        "2025-03-26: no elicitation"
    );
    // An honest backend then refuses (-32021): a clean failure, nothing asked.
    let seen = drive(&old, "tools/call", tool("mrtr_elicit", json!({})), |r| {
        panic!("a 2025-03-26 host is never asked {r}")
    })
    .await;
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);
    assert!(text_of(&seen.last).contains("elicitation"), "{}", seen.last);
    // A backend that asks anyway is refused by the gateway.
    let seen = drive(&old, "tools/call", tool("mrtr_anyway", json!({})), |r| {
        panic!("a 2025-03-26 host is never asked {r}")
    })
    .await;
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);

    let mut mid = gw.client();
    mid.initialize_version("2025-06-18", everything.clone())
        .await;
    assert_eq!(
        caps_seen(mid.clone()).await,
        json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}}),
        "2025-06-18: no URL mode, no sampling tools"
    );
    let seen = drive(&mid, "tools/call", tool("mrtr_url", json!({})), |r| {
        panic!("no URL elicitation for 2025-06-18: {r}")
    })
    .await;
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);

    let new = gw.session_with(everything).await;
    assert_eq!(
        caps_seen(new.clone()).await,
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}})
    );
    let seen = drive(&new, "tools/call", tool("mrtr_url", json!({})), |_| {
        Some(Ok(json!({"action": "accept"})))
    })
    .await;
    let asked = &seen.requests[0]["params"];
    assert_eq!(asked["mode"], "url", "{asked}");
    assert!(
        asked["elicitationId"].is_string(),
        "2025-11-25 needs one: {asked}"
    );
    assert!(
        text_of(&seen.last).contains(r#""connect":{"action":"accept"}"#),
        "{}",
        seen.last
    );

    let none = gw.session_with(json!({})).await;
    assert_eq!(caps_seen(none.clone()).await, json!({}));
    let seen = drive(&none, "tools/call", tool("mrtr_anyway", json!({})), |r| {
        panic!("nothing declared, nothing asked: {r}")
    })
    .await;
    assert_eq!(seen.last["result"]["isError"], true, "{}", seen.last);
}

#[tokio::test]
async fn a_host_cancel_while_asked_ends_the_call_without_an_answer() {
    let gw = gateway("").await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let call = json!({"jsonrpc": "2.0", "id": "k-1", "method": "tools/call",
        "params": tool("mrtr_elicit", json!({}))});
    let mut stream = s.open(&call).await;
    let asked = stream.next(Duration::from_secs(5)).await.expect("asked");
    assert_eq!(asked["method"], "elicitation/create");
    let r = s
        .notify(
            "notifications/cancelled",
            Some(json!({"requestId": "k-1", "reason": "changed my mind"})),
        )
        .await;
    assert_eq!(r.status, 202);
    assert!(
        stream.ends_within(Duration::from_secs(5)).await,
        "no answer after a cancel"
    );
    // The request is no longer waited for: a late answer changes nothing.
    let late = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": "z"}}});
    assert_eq!(s.post(&[], late.to_string()).await.status, 202);
    let r = s.call_tool("fx__echo", json!({"text": "still here"})).await;
    assert_eq!(text_of(&r.response), "still here");
}

#[tokio::test]
async fn over_http_with_progress_on_the_backends_stream() {
    let fx = FakeHttp::start(FakeHttpOptions {
        modern: true,
        ..FakeHttpOptions::default()
    })
    .await;
    let gw = TestGateway::start(&format!(
        "[backends.fx]\ntype = \"http\"\nurl = \"{}\"\n",
        fx.url
    ))
    .await;
    let s = gw.session_with(json!({"elicitation": {}})).await;
    let mut params = tool("mrtr_rounds", json!({"rounds": 2}));
    params["_meta"] = json!({"progressToken": 7});
    let seen = drive(&s, "tools/call", params, |_| accept("Fi")).await;
    assert_eq!(seen.requests.len(), 2, "{:?}", seen.requests);
    assert!(text_of(&seen.last).contains(r#""r2":"#), "{}", seen.last);
    assert_eq!(
        seen.notes
            .iter()
            .filter(|n| n["params"]["progressToken"] == 7)
            .count(),
        3,
        "{:?}",
        seen.notes
    );
    // Every retry was a new request with the round's answers and the state.
    let calls = fx.calls("tools/call");
    assert_eq!(calls.len(), 3, "first call and two retries");
    let ids: std::collections::BTreeSet<String> = calls
        .iter()
        .map(|c| c.body.as_ref().unwrap()["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 3, "a new id for each retry: {ids:?}");
    for (i, c) in calls.iter().enumerate() {
        let p = &c.body.as_ref().unwrap()["params"];
        assert_eq!(p.get("requestState").is_some(), i > 0, "{p}");
        assert_eq!(p.get("inputResponses").is_some(), i > 0, "{p}");
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {}}),
            "{p}"
        );
    }
    assert_eq!(
        calls[2].body.as_ref().unwrap()["params"]["inputResponses"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["r2"],
        "only that round's answers"
    );
}

//! The access (audit) log: one `mcpgate::access` line per host request, at info,
//! from a real `mcpgate serve` with JSON logs, a real OIDC issuer and the fake
//! stdio backend. Who (issuer, subject, client address), what (method, id, exposed
//! name, backend), how it ended (outcome, JSON-RPC code, HTTP status, reason) and
//! how big — and never the token or an argument.

mod auth_support;
mod common;

use std::time::Duration;

use auth_support::Issuer;
use common::served::Served;
use common::{FX, McpClient};
use serde_json::{Value, json};

const RESOURCE: &str = "https://gw.example.test/mcp";
const SECRET_ARGUMENT: &str = "do-not-log-this-argument";

fn access_lines(served: &Served) -> Vec<Value> {
    served
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "mcpgate::access")
        .map(|v| v["fields"].clone())
        .collect()
}

/// The access line whose `rpc_id` is `id` (waits: lines are written as requests end).
async fn line_for(served: &Served, id: &str) -> Value {
    let mut found = None;
    common::wait_for(Duration::from_secs(5), || {
        found = access_lines(served).into_iter().find(|f| f["rpc_id"] == id);
        found.is_some()
    })
    .await;
    found.unwrap_or_else(|| panic!("no access line for id {id}:\n{}", served.log()))
}

/// `mcpgate serve` on a loopback port without a metrics listener: `server` lines
/// go into `[server]`, `rest` after it.
async fn serve(server: &str, rest: &str) -> Served {
    Served::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{server}\n{rest}"
    ))
    .await
}

/// Initializes `c` with `headers` on every request (a token, X-Forwarded-For).
async fn initialize_with(c: &mut McpClient, headers: &[(&str, &str)]) {
    let init = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "audit-test", "version": "1"}}});
    let r = c.post(headers, init.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    c.session = r.header("mcp-session-id").map(str::to_owned);
    c.version = Some("2025-11-25".into());
}

/// The gateway over `FX` with debug logs, and an initialized session on it.
async fn debug_logged() -> (Served, McpClient) {
    let served = Served::start_with_env(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{FX}"),
        &[("RUST_LOG", "info,mcpgate=debug")],
    )
    .await;
    let mut c = McpClient::new(&served.url);
    c.initialize(json!({})).await;
    (served, c)
}

#[tokio::test]
async fn every_request_gets_one_access_line_with_who_what_and_how_it_ended() {
    let issuer = Issuer::start().await;
    let auth_table = format!(
        "[auth]\nresource = \"{RESOURCE}\"\nissuers = [\"{}\"]\n",
        issuer.url
    );
    let served = serve("", &format!("{auth_table}{FX}")).await;
    let token = issuer.mint(&issuer.claims("alice", "mcp:tools", RESOURCE));
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let mut c = McpClient::new(&served.url);

    initialize_with(&mut c, &auth).await;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(c.post(&auth, note.to_string()).await.status, 202);

    let call = json!({"jsonrpc": "2.0", "id": "call-ok", "method": "tools/call",
        "params": {"name": "fx__echo", "arguments": {"text": SECRET_ARGUMENT}}});
    let call_body = call.to_string();
    let r = c.post(&auth, call_body.clone()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let unknown = json!({"jsonrpc": "2.0", "id": "call-unknown", "method": "tools/call",
        "params": {"name": "fx__nope", "arguments": {}}});
    let r = c.post(&auth, unknown.to_string()).await;
    assert_eq!(r.json()["error"]["code"], -32602, "{r:?}");
    let anonymous = json!({"jsonrpc": "2.0", "id": "no-token", "method": "tools/list"});
    let r = c.post(&[], anonymous.to_string()).await;
    assert_eq!(r.status, 401, "{r:?}");

    let ok = line_for(&served, "\"call-ok\"").await;
    assert_eq!(ok["message"], "request");
    assert_eq!(ok["method"], "tools/call");
    assert_eq!(ok["era"], "legacy");
    assert_eq!(ok["revision"], "2025-11-25");
    assert_eq!(ok["issuer"], issuer.url.as_str());
    assert_eq!(ok["subject"], "alice");
    assert_eq!(ok["client"], "127.0.0.1", "{ok}");
    assert_eq!(ok["backend"], "fx");
    assert_eq!(ok["name"], "fx__echo");
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["bytes_in"], call_body.len() as u64, "{ok}");
    assert!(ok["bytes_out"].as_u64().unwrap() > 20, "{ok}");
    assert!(ok["ms"].is_u64(), "{ok}");
    assert!(ok.get("code").is_none(), "{ok}");
    let session = ok["session"].as_str().unwrap();
    assert!(!session.is_empty());
    assert_ne!(
        Some(session),
        c.session.as_deref(),
        "the log holds a short id, not the session id"
    );

    let init_line = line_for(&served, "\"init-1\"").await;
    assert_eq!(init_line["method"], "initialize");
    assert_eq!(init_line["session"], session, "{init_line}");
    assert_eq!(init_line["revision"], "2025-11-25");

    let failed = line_for(&served, "\"call-unknown\"").await;
    assert_eq!(failed["outcome"], "error", "{failed}");
    assert_eq!(failed["code"], -32602, "{failed}");
    assert_eq!(failed["subject"], "alice");

    // Refused before its body is read: who and why, not what.
    let refused = access_lines(&served)
        .into_iter()
        .find(|f| f["status"] == 401)
        .expect("a line for the 401");
    assert_eq!(refused["status"], 401, "{refused}");
    assert_eq!(refused["reason"], "unauthorized", "{refused}");
    assert_eq!(refused["outcome"], "rejected", "{refused}");
    assert!(refused.get("subject").is_none(), "{refused}");
    assert_eq!(refused["client"], "127.0.0.1", "{refused}");

    let lines = access_lines(&served);
    let notes: Vec<&Value> = lines
        .iter()
        .filter(|f| f["method"] == "notifications/initialized")
        .collect();
    assert_eq!(notes.len(), 1, "{lines:?}");
    assert_eq!(notes[0]["status"], 202);
    for id in ["\"init-1\"", "\"call-ok\"", "\"call-unknown\""] {
        let n = lines.iter().filter(|f| f["rpc_id"] == id).count();
        assert_eq!(n, 1, "one line for {id}: {lines:?}");
    }
    // A DELETE has no JSON-RPC method: its line names the HTTP one.
    let mut req = reqwest::Client::new()
        .delete(&served.url)
        .header("authorization", &bearer);
    for (k, v) in c.headers().iter() {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.unwrap().status(), 200);
    let mut ended = None;
    common::wait_for(Duration::from_secs(5), || {
        ended = access_lines(&served)
            .into_iter()
            .find(|f| f["http"] == "DELETE");
        ended.is_some()
    })
    .await;
    let ended = ended.unwrap_or_else(|| panic!("no DELETE line:\n{}", served.log()));
    assert!(ended.get("method").is_none(), "{ended}");
    assert_eq!(
        (ended["subject"].as_str(), ended["status"].as_u64()),
        (Some("alice"), Some(200)),
        "{ended}"
    );
    assert!(
        lines.iter().all(|f| f.get("http").is_none()),
        "POSTs carry no http field: {lines:?}"
    );

    let log = served.log();
    assert!(!log.contains(&token), "the token is never logged");
    assert!(!log.contains(SECRET_ARGUMENT), "arguments are never logged");
}

#[tokio::test]
async fn modern_requests_and_their_refusals_are_logged_as_the_modern_era() {
    let served = serve("", FX).await;
    let c = McpClient::new(&served.url);
    let h = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let discover = json!({"jsonrpc": "2.0", "id": 41, "method": "server/discover",
        "params": {"_meta": meta}});
    let r = c.post(&h, discover.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let bad = json!({"jsonrpc": "2.0", "id": 42, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let r = c.post(&h, bad.to_string()).await;
    assert_eq!(r.status, 400, "{r:?}");

    let ok = line_for(&served, "41").await;
    assert_eq!(ok["era"], "modern", "{ok}");
    assert_eq!(ok["revision"], "2026-07-28", "{ok}");
    assert_eq!(ok["outcome"], "ok", "{ok}");
    assert!(ok.get("session").is_none(), "stateless: {ok}");
    assert!(ok.get("subject").is_none(), "open endpoint: {ok}");
    let refused = line_for(&served, "42").await;
    assert_eq!(refused["era"], "modern", "{refused}");
    assert_eq!(refused["status"], 400, "{refused}");
    assert_eq!(refused["code"], -32602, "{refused}");
    assert_eq!(refused["reason"], "modern_envelope", "{refused}");
}

#[tokio::test]
async fn a_backend_that_opts_in_gets_argument_keys_or_redacted_values() {
    let keys = "[backends.keys]\ntype = \"stdio\"\ncommand = \"${FAKE_STDIO}\"\n\
        [backends.keys.audit]\narguments = \"keys\"\n";
    let served = serve(
        "",
        &format!("{FX}[backends.fx.audit]\narguments = \"values\"\n{keys}"),
    )
    .await;
    let mut c = McpClient::new(&served.url);
    c.initialize(json!({})).await;
    let args = json!({"text": "hello", "password": "p4ssw0rd",
        "nested": [{"Api_Key": "k-123", "depth": 2}]});
    let r = c
        .request_id(
            json!("with-values"),
            "tools/call",
            json!({"name": "fx__echo", "arguments": args}),
        )
        .await;
    assert_eq!(common::text_of(&r.response), "hello");
    let r = c
        .request_id(
            json!("with-keys"),
            "tools/call",
            json!({"name": "keys__echo", "arguments": args}),
        )
        .await;
    assert_eq!(common::text_of(&r.response), "hello");

    let values = line_for(&served, "\"with-values\"").await;
    let shown: Value = serde_json::from_str(values["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        shown,
        json!({"text": "hello", "password": "[redacted]",
            "nested": [{"Api_Key": "[redacted]", "depth": 2}]})
    );
    let keys = line_for(&served, "\"with-keys\"").await;
    assert_eq!(
        keys["arguments"], r#"["text","password","nested"]"#,
        "{keys}"
    );
    let log = served.log();
    assert!(!log.contains("p4ssw0rd") && !log.contains("k-123"), "{log}");
}

/// Behind a trusted balancer the client is the rightmost untrusted
/// `X-Forwarded-For` entry: the per-IP rate limit counts each client apart, and
/// the access line names it; a header from anyone else is not believed.
#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_limited_and_logged() {
    let served = serve(
        "trusted_proxies = [\"127.0.0.0/8\"]\n[server.rate_limit]\nper_second = 1\nburst = 2",
        "",
    )
    .await;
    let mut c = McpClient::new(&served.url);
    let ping = |id: &str| json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string();
    let alice = [("x-forwarded-for", "203.0.113.50, 198.51.100.1")];
    let bob = [("x-forwarded-for", "198.51.100.2")];
    // initialize as alice: her first token.
    initialize_with(&mut c, &alice).await;
    assert_eq!(c.post(&alice, ping("a1")).await.status, 200);
    assert_eq!(
        c.post(&alice, ping("a2")).await.status,
        429,
        "alice's burst is spent"
    );
    assert_eq!(
        c.post(&bob, ping("b1")).await.status,
        200,
        "bob is another client"
    );

    let a1 = line_for(&served, "\"a1\"").await;
    assert_eq!(a1["client"], "198.51.100.1", "{a1}");
    let b1 = line_for(&served, "\"b1\"").await;
    assert_eq!(b1["client"], "198.51.100.2", "{b1}");
    let limited = access_lines(&served)
        .into_iter()
        .find(|f| f["status"] == 429)
        .expect("a line for the 429");
    assert_eq!(limited["client"], "198.51.100.1", "{limited}");
    assert_eq!(limited["reason"], "rate_limited", "{limited}");
}

/// Without `trusted_proxies` an `X-Forwarded-For` changes nothing: every request
/// from this peer shares its bucket.
#[tokio::test]
async fn an_untrusted_forwarded_header_is_ignored() {
    let served = serve("[server.rate_limit]\nper_second = 1\nburst = 1", "").await;
    let c = McpClient::new(&served.url);
    let discover = |id: i64, xff: &str| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
        let h = vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "server/discover".to_owned()),
            ("x-forwarded-for", xff.to_owned()),
        ];
        (body.to_string(), h)
    };
    let send = |(body, h): (String, Vec<(&'static str, String)>)| {
        let c = &c;
        async move {
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            c.post(&h, body).await.status
        }
    };
    assert_eq!(send(discover(1, "198.51.100.1")).await, 200);
    assert_eq!(
        send(discover(2, "198.51.100.2")).await,
        429,
        "same peer, same bucket"
    );
    let first = line_for(&served, "1").await;
    assert_eq!(first["client"], "127.0.0.1", "{first}");
}

/// Per-tool metrics, opt-in per backend: routed calls by backend, exposed tool
/// and outcome, with a duration histogram; a name that routes nowhere adds no
/// series (the tool label stays bounded by the catalogue).
#[tokio::test]
async fn tool_calls_are_counted_per_exposed_tool_and_outcome() {
    let gw = common::TestGateway::start(
        r#"
[server]
metrics_listen = "127.0.0.1:0"
[backends.fx]
type = "stdio"
command = "${FAKE_STDIO}"
timeout = "300ms"
tool_metrics = true
[backends.quiet]
type = "stdio"
command = "${FAKE_STDIO}"
"#,
    )
    .await;
    let s = gw.session().await;
    for _ in 0..3 {
        s.call_tool("fx__echo", json!({"text": "x"})).await;
    }
    let slow = s.call_tool("fx__sleep", json!({"s": 2})).await;
    assert!(slow.error_code().is_some(), "{}", slow.response);
    let unknown = s.call_tool("fx__no_such_tool_anywhere", json!({})).await;
    assert_eq!(unknown.error_code(), Some(-32602));
    let text = common::scrape(&gw).await;
    let calls = |tool: &str, outcome: &str| {
        common::metric(
            &text,
            "mcpgate_tool_calls_total",
            &[("backend", "fx"), ("tool", tool), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("fx__echo", "ok"), Some(3.0), "{text}");
    assert_eq!(calls("fx__sleep", "timeout"), Some(1.0), "{text}");
    assert_eq!(
        common::metric(
            &text,
            "mcpgate_tool_call_duration_seconds_count",
            &[("backend", "fx"), ("tool", "fx__echo")]
        ),
        Some(3.0),
        "{text}"
    );
    assert!(!text.contains("no_such_tool_anywhere"), "{text}");
    s.call_tool("quiet__echo", json!({"text": "x"})).await;
    let text = common::scrape(&gw).await;
    assert!(!text.contains("quiet__echo"), "opt-in per backend: {text}");
}

/// The `request` span names what a request is about under the field of its kind,
/// as the OpenTelemetry span does: `prompt` for `prompts/get` (it was `tool`),
/// `tool` for `tools/call`, `uri` for `resources/read`.
#[tokio::test]
async fn the_request_span_names_prompts_tools_and_uris_under_their_own_fields() {
    let (served, c) = debug_logged().await;
    let listed = c.request("resources/list", json!({})).await;
    let uri = listed.result()["resources"][0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let asks = [
        (
            "prompts/get",
            json!({"name": "fx__greet", "arguments": {"name": "n"}}),
            "prompt",
            "fx__greet",
        ),
        (
            "tools/call",
            json!({"name": "fx__echo", "arguments": {"text": "t"}}),
            "tool",
            "fx__echo",
        ),
        ("resources/read", json!({"uri": uri}), "uri", uri.as_str()),
    ];
    for (method, params, field, want) in asks {
        let r = c.request(method, params).await;
        assert!(
            r.response.get("result").is_some(),
            "{method}: {}",
            r.response
        );
        let spans = request_spans(&served, method);
        assert!(
            !spans.is_empty(),
            "no event in a {method} span:\n{}",
            served.log()
        );
        for s in spans {
            assert_eq!(s[field], want, "{method}: {s}");
            for other in ["tool", "prompt", "uri"]
                .into_iter()
                .filter(|f| *f != field)
            {
                assert!(s.get(other).is_none(), "{method} names a {other}: {s}");
            }
        }
    }
}

/// Every `request` span of `method` that an event of the log was in.
fn request_spans(served: &Served, method: &str) -> Vec<Value> {
    served
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("spans").cloned())
        .flat_map(|s| s.as_array().cloned().unwrap_or_default())
        .filter(|s| s["name"] == "request" && s["method"] == method)
        .collect()
}

/// A 2026-07-28 request has its `request` span too (it had none): id, method,
/// backend and tool, and no session (the revision has none).
#[tokio::test]
async fn a_modern_request_has_a_request_span_without_a_session() {
    use common::modern_host::{answer, modern};
    let served = Served::start_with_env(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{FX}"),
        &[("RUST_LOG", "info,mcpgate=debug")],
    )
    .await;
    let c = McpClient::new(&served.url);
    let (body, h) = modern(
        json!("m-1"),
        "tools/call",
        json!({"name": "fx__echo", "arguments": {"text": "t"}}),
    );
    let r = answer(&c, &body, &h).await;
    assert_eq!(r["result"]["content"][0]["text"], "t", "{r}");
    let spans = request_spans(&served, "tools/call");
    assert!(!spans.is_empty(), "no event in a span:\n{}", served.log());
    for s in spans {
        assert_eq!(s["tool"], "fx__echo", "{s}");
        assert_eq!(s["backend"], "fx", "{s}");
        assert_eq!(s["id"], "\"m-1\"", "{s}");
        assert!(s.get("session").is_none(), "{s}");
    }
}

/// A routed `tools/call`'s `request` span names its tool once (it was recorded at
/// the lookup and again with the route, and the text log showed `tool=` twice:
/// `request{… tool="fx__echo" backend="fx" tool="fx__echo"}`); an unknown tool is
/// still named.
#[tokio::test]
async fn the_request_span_names_the_tool_once() {
    let served = Served::start_with_env(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"off\"\n{FX}"),
        &[
            ("RUST_LOG", "info,mcpgate=debug"),
            ("MCPGATE_LOG_FORMAT", "text"),
        ],
    )
    .await;
    let mut c = McpClient::new(&served.url);
    c.initialize(json!({})).await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "fx__echo", "arguments": {"text": "t"}}),
        )
        .await;
    assert!(r.response.get("result").is_some(), "{}", r.response);
    let r = c
        .request("tools/call", json!({"name": "fx__nope", "arguments": {}}))
        .await;
    assert!(r.response.get("error").is_some(), "{}", r.response);
    let log = served.log();
    let spans: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("request{").nth(1))
        .filter_map(|s| s.split('}').next())
        .filter(|s| s.contains("method=tools/call"))
        .collect();
    assert!(
        spans.iter().any(|s| s.contains("tool=\"fx__echo\"")),
        "{log}"
    );
    assert!(
        spans.iter().any(|s| s.contains("tool=\"fx__nope\"")),
        "{log}"
    );
    for s in &spans {
        assert_eq!(s.matches("tool=").count(), 1, "{s}");
    }
    // The fields in the order they are written: created with the id, the
    // method and the session, then routing's backend and tool.
    let routed = spans
        .iter()
        .find(|s| s.contains("fx__echo"))
        .expect("the routed call's span");
    let rest = routed.strip_prefix("id=").expect(routed);
    let (_, rest) = rest
        .split_once(" method=tools/call session=")
        .expect(routed);
    let (session, rest) = rest.split_once(' ').expect(routed);
    assert_eq!(session.len(), 8, "{routed}");
    assert_eq!(rest, "backend=\"fx\" tool=\"fx__echo\"", "{routed}");
}

/// Every log line so far is at most 4 KiB.
fn assert_no_line_over_4_kib(served: &Served) {
    let long: Vec<usize> = served
        .log()
        .lines()
        .map(str::len)
        .filter(|n| *n > 4096)
        .collect();
    assert!(long.is_empty(), "log lines over 4 KiB: {long:?}");
}

/// A huge request id is not copied whole into the log: each line stays small
/// (it was written twice per access line, `request{id=…}` and `rpc_id=`: a
/// 1 MB id gave a 2 MB line), and the answer still echoes it exactly.
#[tokio::test]
async fn a_huge_request_id_is_bounded_in_the_log() {
    let (served, c) = debug_logged().await;
    let id = "x".repeat(200_000);
    let r = c
        .post(
            &[],
            json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string(),
        )
        .await;
    assert_eq!(r.json()["id"], json!(id), "the answer echoes the id");
    assert_no_line_over_4_kib(&served);
}

/// An unknown tool name or a routed URI as long as the body is not copied
/// whole into the log either (the access line's `name`, the span's `tool` /
/// `uri`): cut at 128 characters with its length.
#[tokio::test]
async fn a_huge_name_or_uri_is_bounded_in_the_log() {
    let (served, c) = debug_logged().await;
    let name = "n".repeat(300_000);
    let call = json!({"jsonrpc": "2.0", "id": "big-name", "method": "tools/call",
        "params": {"name": name, "arguments": {}}});
    let r = c.post(&[], call.to_string()).await;
    assert!(r.json()["error"].is_object(), "{:?}", r.json());
    let listed = c.request("resources/list", json!({})).await;
    let routed = listed.result()["resources"][0]["uri"].as_str().unwrap();
    let uri = format!("{routed}{}", "u".repeat(300_000));
    let read = json!({"jsonrpc": "2.0", "id": "big-uri", "method": "resources/read",
        "params": {"uri": uri}});
    c.post(&[], read.to_string()).await;
    line_for(&served, "\"big-name\"").await;
    line_for(&served, "\"big-uri\"").await;
    assert_no_line_over_4_kib(&served);
    let told = served.log().matches("bytes)").count();
    assert!(
        told >= 2,
        "the lengths are told:\n{}",
        &served.log()[..4096]
    );
}

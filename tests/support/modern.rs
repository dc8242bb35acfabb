//! The fakes' 2026-07-28 ("modern", stateless) mode: `server/discover` instead of
//! `initialize`, the per-request `_meta` envelope required on every request
//! (-32602 without it), `resultType` on every result, and tools, a prompt and a
//! resource that ask their client for input with `input_required` (MRTR) instead
//! of server→client requests. Transport-neutral: [`answer`] turns one request
//! into the notifications that go before its response and the response.
//!
//! MRTR tools (each honest: it asks only for what the request's
//! `clientCapabilities` declare, else -32021 with `requiredCapabilities`):
//! `mrtr_elicit` (form), `mrtr_url` (URL mode), `mrtr_sample`, `mrtr_roots` (one
//! round each); `mrtr_rounds {rounds}` (one elicitation per round, default 2;
//! progress `k` of `rounds + 1` at round `k` when a token was given);
//! `mrtr_parallel` (elicitation, sampling and roots in one round);
//! `mrtr_state_only` (a first round with only `requestState`);
//! `mrtr_state_exact` (a state full of characters JSON re-encoding would change);
//! `mrtr_anyway` (asks form elicitation whatever was declared: a misbehaving
//! server); `mrtr_caps` (answers the `clientCapabilities` and `logLevel` it got).
//! Prompt `mrtr_greet` and resource `fx://mrtr` elicit a name. Every state
//! carries a checksum: a retry whose `requestState` is not the one issued,
//! byte for byte, gets -32602 "requestState altered".

use std::sync::Mutex;

use serde_json::{Map, Value, json};

use super::tools::{self, Catalog, Peer};

/// The revision this mode speaks.
pub const VERSION: &str = "2026-07-28";

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// What one request gets: notifications first (progress), then the response.
pub struct Reply {
    /// Notifications related to the request, in order.
    pub related: Vec<Value>,
    /// The JSON-RPC response.
    pub response: Value,
}

/// A JSON-RPC error: code, message, data.
type Failure = (i64, String, Option<Value>);

type Outcome = Result<Value, Failure>;

/// Whether `msg` claims a 2026-07-28 revision in `params._meta`.
#[allow(dead_code)] // the stdio fake serves nothing else
pub fn is_modern(msg: &Value) -> bool {
    msg.get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_VERSION))
        .is_some()
}

/// The MRTR tools, with the fakes' others.
pub fn tools(catalog: &Catalog) -> Vec<Value> {
    let mut out = catalog.tools();
    for name in [
        "mrtr_elicit",
        "mrtr_url",
        "mrtr_sample",
        "mrtr_roots",
        "mrtr_rounds",
        "mrtr_parallel",
        "mrtr_state_only",
        "mrtr_state_exact",
        "mrtr_anyway",
        "mrtr_caps",
    ] {
        out.push(json!({"name": name, "inputSchema": {"type": "object",
            "properties": {"rounds": {"type": "number"}}}}));
    }
    out
}

/// Answers request `msg` (a notification gets `None`).
pub async fn answer(catalog: &Catalog, msg: &Value) -> Option<Reply> {
    let id = msg.get("id")?.clone();
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    let mut related = Vec::new();
    let outcome = match envelope(&params) {
        Err(why) => Err((-32602, why.to_owned(), None)),
        Ok(()) => serve(catalog, method, &params, &mut related).await,
    };
    let response = match outcome {
        Ok(mut r) => {
            if r.get("resultType").is_none() {
                r["resultType"] = "complete".into();
            }
            tools::response_with(&id, Ok(r))
        }
        Err((code, message, data)) => {
            let mut e = json!({"code": code, "message": message});
            if let Some(d) = data {
                e["data"] = d;
            }
            tools::response_with(&id, Err(e))
        }
    };
    Some(Reply { related, response })
}

/// The required per-request fields (MCP 2026-07-28 basic/index).
fn envelope(params: &Value) -> Result<(), &'static str> {
    let meta = params.get("_meta").ok_or("missing _meta")?;
    if meta.get(META_VERSION).and_then(Value::as_str) != Some(VERSION) {
        return Err("missing or unsupported io.modelcontextprotocol/protocolVersion");
    }
    if !meta.get(META_CAPS).is_some_and(Value::is_object) {
        return Err("missing io.modelcontextprotocol/clientCapabilities");
    }
    Ok(())
}

async fn serve(
    catalog: &Catalog,
    method: &str,
    params: &Value,
    related: &mut Vec<Value>,
) -> Outcome {
    let listed = |key: &str, items: Vec<Value>| {
        Ok(json!({ key: items, "ttlMs": 0, "cacheScope": "public" }))
    };
    match method {
        "server/discover" => Ok(json!({"supportedVersions": [VERSION],
            "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
            "serverInfo": {"name": "fx-modern", "version": "0"}, "ttlMs": 0, "cacheScope": "public"})),
        "tools/list" => listed("tools", tools(catalog)),
        "prompts/list" => {
            let mut p = tools::prompts();
            p.push(json!({"name": "mrtr_greet"}));
            listed("prompts", p)
        }
        "resources/list" => {
            let mut r = tools::resources();
            r.push(json!({"uri": "fx://mrtr", "name": "mrtr", "mimeType": "text/plain"}));
            listed("resources", r)
        }
        "resources/templates/list" => listed("resourceTemplates", tools::templates()),
        "resources/read" if params.get("uri").and_then(Value::as_str) == Some("fx://mrtr") => {
            mrtr(params, "resource", related)
        }
        "resources/read" => plain(tools::read_resource(
            params.get("uri").and_then(Value::as_str).unwrap_or(""),
        )),
        "prompts/get" if params.get("name").and_then(Value::as_str) == Some("mrtr_greet") => {
            mrtr(params, "prompt", related)
        }
        "prompts/get" => plain(tools::get_prompt(params)),
        "tools/call" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name.starts_with("mrtr_") {
                return mrtr(params, name, related);
            }
            let peer = NoAsk(Mutex::default());
            let outcome = tools::call_tool(catalog, &peer, params).await;
            related.extend(peer.0.into_inner().unwrap_or_default());
            plain(outcome)
        }
        other => Err((-32601, format!("Method not found: {other}"), None)),
    }
}

fn plain(r: Result<Value, (i64, String)>) -> Outcome {
    r.map_err(|(c, m)| (c, m, None))
}

/// A 2026-07-28 server sends no requests: the fakes' asking tools fail here.
struct NoAsk(Mutex<Vec<Value>>);

impl Peer for NoAsk {
    fn notify(&self, method: &str, params: Value) {
        if let Ok(mut n) = self.0.lock() {
            n.push(tools::message(None, method, params));
        }
    }

    async fn ask(&self, _method: &str, _params: Value) -> Result<Value, Value> {
        Err(json!({"code": -32601, "message": "a 2026-07-28 server sends no requests"}))
    }
}

fn text(t: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": t.into()}]})
}

fn elicit(message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}})
}

fn sample() -> Value {
    json!({"method": "sampling/createMessage", "params": {"maxTokens": 10,
        "messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}]}})
}

fn roots() -> Value {
    json!({"method": "roots/list"})
}

/// The capability `ask` needs, if the request did not declare it.
fn missing(caps: &Value, ask: &Value) -> Option<Value> {
    let mode = ask.pointer("/params/mode").and_then(Value::as_str);
    let (path, needed) = match ask["method"].as_str() {
        Some("elicitation/create") if mode == Some("url") => {
            ("/elicitation/url", json!({"elicitation": {"url": {}}}))
        }
        Some("elicitation/create") => {
            let e = caps.get("elicitation");
            let form = e.is_some_and(|e| {
                e.get("form").is_some() || e.as_object().is_some_and(|o| o.is_empty())
            });
            return (!form).then(|| json!({"elicitation": {"form": {}}}));
        }
        Some("sampling/createMessage") => ("/sampling", json!({"sampling": {}})),
        _ => ("/roots", json!({"roots": {}})),
    };
    caps.pointer(path).is_none().then_some(needed)
}

/// A checksum over a state (FNV-1a, 64 bits): the fake's integrity check.
fn checksum(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A state for round `round` of `what`, with the answers so far.
fn seal(what: &str, round: u64, answers: &Map<String, Value>) -> String {
    let payload = json!({"what": what, "round": round, "answers": answers,
        "odd": "ünï \"quoted\" \\ / +=?base64?x?= \u{1F600}\t\n \u{2028}"})
    .to_string();
    let payload = if what == "mrtr_state_exact" {
        format!("{payload} {}", "~".repeat(2000))
    } else {
        payload
    };
    format!("{payload}#{}", checksum(&payload))
}

/// The state of a retry: round and answers so far; `Err` when altered.
fn open(state: &str) -> Result<(u64, Map<String, Value>), Failure> {
    let altered = || (-32602, "requestState altered".to_owned(), None);
    let (payload, sum) = state.rsplit_once('#').ok_or_else(altered)?;
    if checksum(payload) != sum {
        return Err(altered());
    }
    let json_part = payload.split(" ~").next().unwrap_or(payload);
    let v: Value = serde_json::from_str(json_part).map_err(|_| altered())?;
    let round = v["round"].as_u64().unwrap_or(0);
    Ok((round, v["answers"].as_object().cloned().unwrap_or_default()))
}

/// What `what` asks at round `round` (1-based), by key; empty: done.
fn asks(what: &str, round: u64, rounds: u64) -> Map<String, Value> {
    let mut m = Map::new();
    match (what, round) {
        ("mrtr_elicit" | "mrtr_anyway" | "mrtr_state_exact" | "prompt" | "resource", 1) => {
            m.insert("name".into(), elicit("Your name?"));
        }
        ("mrtr_url", 1) => {
            m.insert(
                "connect".into(),
                json!({"method": "elicitation/create", "params": {"mode": "url",
                "message": "Connect your account", "url": "https://fx.example/connect"}}),
            );
        }
        ("mrtr_sample", 1) => {
            m.insert("llm".into(), sample());
        }
        ("mrtr_roots", 1) => {
            m.insert("roots".into(), roots());
        }
        ("mrtr_parallel", 1) => {
            m.insert("name".into(), elicit("Your name?"));
            m.insert("llm".into(), sample());
            m.insert("roots".into(), roots());
        }
        ("mrtr_rounds", k) if k <= rounds => {
            m.insert(format!("r{k}"), elicit(&format!("Round {k}?")));
        }
        _ => {}
    }
    m
}

/// One round of an MRTR tool, prompt or resource.
fn mrtr(params: &Value, what: &str, related: &mut Vec<Value>) -> Outcome {
    let caps = params
        .pointer("/_meta")
        .and_then(|m| m.get(META_CAPS))
        .cloned()
        .unwrap_or_default();
    if what == "mrtr_caps" {
        let level = params
            .pointer("/_meta")
            .and_then(|m| m.get(META_LEVEL))
            .cloned();
        return Ok(text(
            json!({"clientCapabilities": caps, "logLevel": level}).to_string(),
        ));
    }
    let rounds = params
        .pointer("/arguments/rounds")
        .and_then(Value::as_u64)
        .unwrap_or(2);
    let (round, mut answers) = match params.get("requestState").and_then(Value::as_str) {
        None => (0, Map::new()),
        Some(s) => open(s)?,
    };
    // The answers this round asked for; any missing: asked again.
    let wanted = asks(what, round, rounds);
    let responses = params.get("inputResponses").and_then(Value::as_object);
    if round > 0 && !wanted.is_empty() {
        let got: Vec<(&String, &Value)> = wanted
            .keys()
            .filter_map(|k| responses.and_then(|r| r.get_key_value(k)))
            .collect();
        if got.len() < wanted.len() {
            return Ok(input_required(what, round, &answers, wanted));
        }
        for (k, v) in got {
            answers.insert(k.clone(), v.clone());
        }
    }
    if what == "mrtr_state_only" && round == 0 {
        return Ok(
            json!({"resultType": "input_required", "requestState": seal(what, 1, &answers)}),
        );
    }
    let next = asks(what, round + 1, rounds);
    if let Some(token) = params.pointer("/_meta/progressToken") {
        let progress = json!({"progressToken": token, "progress": round + 1, "total": rounds + 1});
        related.push(tools::message(None, "notifications/progress", progress));
    }
    if next.is_empty() {
        return Ok(done(what, &answers));
    }
    if what != "mrtr_anyway"
        && let Some(needed) = next.values().find_map(|a| missing(&caps, a))
    {
        return Err((
            -32021,
            "Missing required client capability".into(),
            Some(json!({"requiredCapabilities": needed})),
        ));
    }
    Ok(input_required(what, round + 1, &answers, next))
}

fn input_required(
    what: &str,
    round: u64,
    answers: &Map<String, Value>,
    asks: Map<String, Value>,
) -> Value {
    let mut v = json!({"resultType": "input_required", "requestState": seal(what, round, answers)});
    v["inputRequests"] = Value::Object(asks);
    v
}

/// The final answer: what the client answered, by key.
fn done(what: &str, answers: &Map<String, Value>) -> Value {
    let name = answers
        .get("name")
        .map(|a| match a.get("action").and_then(Value::as_str) {
            Some("accept") => a
                .pointer("/content/name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
            other => other.unwrap_or("?").to_owned(),
        });
    match what {
        "prompt" => json!({"messages": [{"role": "user", "content": {"type": "text",
            "text": format!("Greet {}", name.unwrap_or_default())}}]}),
        "resource" => json!({"contents": [{"uri": "fx://mrtr", "mimeType": "text/plain",
            "text": format!("for {}", name.unwrap_or_default())}]}),
        "mrtr_state_only" => text("waited"),
        _ => text(format!("answers: {}", Value::Object(answers.clone()))),
    }
}

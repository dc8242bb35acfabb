//! Multi-round tool requests for 2026-07-28 clients (MCP 2026-07-28
//! basic/patterns/mrtr): a handler asks for client input, and instead of a
//! server→client request the client gets an `input_required` result and retries.
//!
//! A handler asks through its [`CallContext`](super::context::CallContext) as it
//! does on a session; on a stateless request the ask becomes a [`Round`] entry. If
//! this round's `inputResponses` (or the answers carried in `requestState`) hold
//! the answer, the ask returns it at once; otherwise it is recorded and never
//! returns, and [`run`] stops the handler once it waits on nothing but asks (all
//! the asks a handler makes concurrently land in the same round). The result is
//! then `input_required` with the asks and a `requestState` carrying every answer
//! used so far, so the retried handler replays its earlier asks from the state and
//! gets one step further: handlers must do nothing irreversible before their last
//! ask (every demo handler only reads before it asks).
//!
//! `requestState` is `base64url(state) "." base64url(HMAC-SHA256(state))` under a
//! per-process random key: the answers, a digest of the call it belongs to (method,
//! name or URI, arguments), the round and an expiry (10 minutes). A state that does
//! not verify, expired or belongs to another call is refused with `-32602`
//! ("requestState is attacker-controlled": MRTR server requirements). A retry must
//! reach the process that issued it, as with the official SDKs' default.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcpgate::jsonrpc::{ErrorObject, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY};
use mcpgate::mcp::Method;
use ring::hmac;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::demo::catalog::HandlerResult;
use crate::demo::server::lock;

/// How long an issued `requestState` can be retried with.
const STATE_LIFETIME: Duration = Duration::from_secs(600);

/// One round of a stateless `tools/call`, `prompts/get` or `resources/read`: the
/// answers it came with and the asks its handler makes.
pub(crate) struct Round {
    /// Binds a `requestState` to the call it was issued for.
    call: String,
    /// Answers by key: carried in the state, then this round's `inputResponses`.
    answers: Map<String, Value>,
    /// The round number: 0 without a state.
    number: u64,
    /// A `requestState` came and verified.
    verified: bool,
    asked: Mutex<Asked>,
}

#[derive(Default)]
struct Asked {
    /// What the handler asked for and nobody answered yet, by key.
    requests: Map<String, Value>,
    /// Capabilities an ask needs that the request did not declare.
    missing: Map<String, Value>,
    /// Answers the handler used, carried into the next state.
    used: Map<String, Value>,
    /// Keys for handlers that do not name their asks (`input_1`, `input_2`, …).
    next: u64,
}

/// The process's `requestState` key (random, never leaves the process).
fn key() -> &'static hmac::Key {
    static KEY: OnceLock<hmac::Key> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut bytes = [0u8; 32];
        if getrandom::fill(&mut bytes).is_err() {
            // No OS randomness: a key from the clock and an address is still
            // unknown to clients in practice, and better than not starting.
            let seed = format!("{:?}{:p}", SystemTime::now(), &bytes);
            bytes.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        hmac::Key::new(hmac::HMAC_SHA256, &bytes)
    })
}

fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, message)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A digest naming one call: method, name or URI, and arguments as sent.
pub(crate) fn call_digest(method: &Method, params: &Value) -> String {
    let mut h = Sha256::new();
    h.update(method.as_str());
    for member in ["name", "uri"] {
        h.update([0]);
        h.update(params.get(member).and_then(Value::as_str).unwrap_or(""));
    }
    h.update([0]);
    h.update(
        params
            .get("arguments")
            .map(Value::to_string)
            .unwrap_or_default(),
    );
    URL_SAFE_NO_PAD.encode(h.finalize())
}

fn seal(state: &Value) -> String {
    let body = URL_SAFE_NO_PAD.encode(state.to_string());
    let tag = hmac::sign(key(), body.as_bytes());
    format!("{body}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// The state inside a `requestState`, if its tag verifies.
fn open(sealed: &str) -> Option<Value> {
    let (body, tag) = sealed.split_once('.')?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    hmac::verify(key(), body.as_bytes(), &tag).ok()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).ok()?).ok()
}

impl Round {
    /// The round a request's `params` describe (`requestState`, `inputResponses`),
    /// for the call `digest` names ([`call_digest`]).
    ///
    /// Errors (`-32602`): `inputResponses` present but not an object (`null`
    /// included), `requestState` not a string, not verifying, expired, or issued for
    /// another call.
    pub(crate) fn from_params(params: &Value, digest: String) -> Result<Round, ErrorObject> {
        let mut round = Round {
            call: digest,
            answers: Map::new(),
            number: 0,
            verified: false,
            asked: Mutex::default(),
        };
        match params.get("requestState") {
            None => {}
            Some(Value::String(sealed)) => {
                let state = open(sealed)
                    .ok_or_else(|| invalid("requestState failed its integrity check"))?;
                if state["exp"].as_u64().is_none_or(|exp| exp < now()) {
                    return Err(invalid("requestState expired: call again without it"));
                }
                if state["call"].as_str() != Some(round.call.as_str()) {
                    return Err(invalid("requestState was issued for another call"));
                }
                round.answers = state["answers"].as_object().cloned().unwrap_or_default();
                round.number = state["round"].as_u64().unwrap_or_default();
                round.verified = true;
            }
            Some(_) => return Err(invalid("requestState must be a string")),
        }
        match params.get("inputResponses") {
            None => {}
            Some(Value::Object(responses)) => {
                for (k, v) in responses {
                    round.answers.insert(k.clone(), v.clone());
                }
            }
            Some(_) => return Err(invalid("inputResponses must be an object")),
        }
        Ok(round)
    }

    /// Whether the request carried a `requestState` that verified.
    pub(crate) fn verified(&self) -> bool {
        self.verified
    }

    /// The key for an ask its handler did not name.
    pub(crate) fn next_key(&self) -> String {
        let mut asked = lock(&self.asked);
        asked.next += 1;
        format!("input_{}", asked.next)
    }

    /// Asks the client for `method` (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`) under `key`, given the request's declared `capabilities`.
    /// Returns this round's answer (an `ElicitResult`, `CreateMessageResult` or
    /// `ListRootsResult`); `-32602` if it has not that shape. Unanswered, or asking
    /// for a capability the request did not declare, it never returns: [`run`] then
    /// ends the handler with `input_required` or `-32021`.
    pub(crate) async fn ask(
        &self,
        key: &str,
        method: &Method,
        params: Value,
        capabilities: &Value,
    ) -> Result<Value, ErrorObject> {
        if let Some(answer) = self.answers.get(key) {
            check_answer(key, method, answer)?;
            lock(&self.asked)
                .used
                .insert(key.to_owned(), answer.clone());
            return Ok(answer.clone());
        }
        {
            let mut asked = lock(&self.asked);
            match missing_capability(method, capabilities) {
                Some(cap) => {
                    asked.missing.insert(cap.into(), json!({}));
                }
                None => {
                    let request = json!({ "method": method.as_str(), "params": params });
                    asked.requests.insert(key.to_owned(), request);
                }
            }
        }
        std::future::pending().await
    }

    /// Whether the handler asked for something this round cannot give.
    fn stalled(&self) -> bool {
        let asked = lock(&self.asked);
        !asked.requests.is_empty() || !asked.missing.is_empty()
    }

    /// What a stalled round answers: `-32021` naming the undeclared capabilities
    /// (`data.requiredCapabilities`, a `ClientCapabilities` object), else the
    /// `input_required` result with the asks and the next `requestState`.
    fn outcome(&self) -> HandlerResult {
        let asked = lock(&self.asked);
        if !asked.missing.is_empty() {
            let names: Vec<&str> = asked.missing.keys().map(String::as_str).collect();
            return Err(ErrorObject::new(
                MISSING_CLIENT_CAPABILITY,
                format!(
                    "Missing required client capability: {} (declare it in io.modelcontextprotocol/clientCapabilities)",
                    names.join(", ")
                ),
            )
            .with_data(json!({ "requiredCapabilities": asked.missing })));
        }
        let state = json!({
            "call": self.call,
            "round": self.number + 1,
            "exp": now() + STATE_LIFETIME.as_secs(),
            "answers": asked.used,
        });
        Ok(json!({
            "resultType": "input_required",
            "inputRequests": asked.requests,
            "requestState": seal(&state),
        }))
    }
}

/// Runs a handler for one round: its result, or, once it waits on nothing but
/// asks this round cannot answer, [`Round::outcome`]. Dropping the handler's
/// future there is its cancellation.
pub(crate) async fn run(round: &Round, work: impl Future<Output = HandlerResult>) -> HandlerResult {
    let mut work = std::pin::pin!(work);
    let finished = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending if round.stalled() => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
    .await;
    finished.unwrap_or_else(|| round.outcome())
}

/// The client capability `method` needs that `capabilities` lacks, if any
/// (MCP 2026-07-28 client/elicitation: `elicitation: {}` means form mode).
fn missing_capability(method: &Method, capabilities: &Value) -> Option<&'static str> {
    let cap = method.client_capability()?;
    let declared = &capabilities[cap];
    let ok = match method {
        Method::ElicitationCreate => declared
            .as_object()
            .is_some_and(|modes| modes.is_empty() || modes.contains_key("form")),
        _ => declared.is_object(),
    };
    (!ok).then_some(cap)
}

/// An answer must have the shape of the result its request asks for (MCP
/// 2026-07-28 schema: `ElicitResult`, `CreateMessageResult`, `ListRootsResult`).
fn check_answer(key: &str, method: &Method, answer: &Value) -> Result<(), ErrorObject> {
    let ok = match method {
        Method::ElicitationCreate => matches!(
            answer["action"].as_str(),
            Some("accept" | "decline" | "cancel")
        ),
        Method::SamplingCreateMessage => answer["role"].is_string() && !answer["content"].is_null(),
        Method::RootsList => answer["roots"].is_array(),
        _ => answer.is_object(),
    };
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "inputResponses[{key:?}] is not a result of {method}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elicit() -> Value {
        json!({ "message": "name?", "requestedSchema": { "type": "object" } })
    }

    fn caps() -> Value {
        json!({ "elicitation": {}, "sampling": {} })
    }

    async fn handler(round: &Round) -> HandlerResult {
        let c = caps();
        let a = round
            .ask("a", &Method::ElicitationCreate, elicit(), &c)
            .await?;
        let b = round
            .ask("b", &Method::ElicitationCreate, elicit(), &c)
            .await?;
        Ok(json!({ "a": a["content"], "b": b["content"] }))
    }

    #[tokio::test]
    async fn asks_then_replays_answers_from_the_state() {
        let params = json!({ "name": "t", "arguments": {} });
        let digest = call_digest(&Method::ToolsCall, &params);
        let r1 = Round::from_params(&params, digest.clone()).unwrap();
        let first = run(&r1, handler(&r1)).await.unwrap();
        assert_eq!(first["resultType"], "input_required");
        assert!(first["inputRequests"]["a"]["method"] == "elicitation/create");
        let answer = json!({ "action": "accept", "content": { "x": 1 } });
        let mut retry = params.clone();
        retry["requestState"] = first["requestState"].clone();
        retry["inputResponses"] = json!({ "a": answer, "junk": 5 });
        let r2 = Round::from_params(&retry, digest.clone()).unwrap();
        assert!(r2.verified());
        let second = run(&r2, handler(&r2)).await.unwrap();
        assert_eq!(second["inputRequests"].as_object().unwrap().len(), 1);
        assert!(second["requestState"] != first["requestState"]);
        let mut last = params.clone();
        last["requestState"] = second["requestState"].clone();
        last["inputResponses"] = json!({ "b": { "action": "accept", "content": 2 } });
        let r3 = Round::from_params(&last, digest).unwrap();
        let done = run(&r3, handler(&r3)).await.unwrap();
        assert_eq!(done, json!({ "a": { "x": 1 }, "b": 2 }));
    }

    #[tokio::test]
    async fn refuses_bad_state_and_undeclared_capabilities() {
        let params = json!({ "name": "t" });
        let digest = call_digest(&Method::ToolsCall, &params);
        let round = Round::from_params(&params, digest.clone()).unwrap();
        let asked = run(&round, async {
            round.ask("a", &Method::RootsList, json!({}), &caps()).await
        })
        .await;
        let e = asked.unwrap_err();
        assert_eq!(e.code, MISSING_CLIENT_CAPABILITY);
        assert_eq!(
            e.data.unwrap()["requiredCapabilities"],
            json!({ "roots": {} })
        );
        let bad = |p: Value| Round::from_params(&p, digest.clone()).err().map(|e| e.code);
        assert_eq!(bad(json!({ "requestState": "x.y" })), Some(INVALID_PARAMS));
        assert_eq!(bad(json!({ "requestState": 5 })), Some(INVALID_PARAMS));
        assert_eq!(bad(json!({ "inputResponses": null })), Some(INVALID_PARAMS));
        let other = seal(&json!({ "call": "other", "exp": now() + 60 }));
        assert_eq!(bad(json!({ "requestState": other })), Some(INVALID_PARAMS));
        let old = seal(&json!({ "call": digest, "exp": 1 }));
        assert_eq!(bad(json!({ "requestState": old })), Some(INVALID_PARAMS));
        let with_number = json!({ "inputResponses": { "a": 12345 } });
        let round = Round::from_params(&with_number, digest.clone()).unwrap();
        let e = round
            .ask("a", &Method::ElicitationCreate, elicit(), &caps())
            .await
            .unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
    }
}

//! A legacy host session through a 2026-07-28 backend: the MRTR shim (MCP
//! 2026-07-28 basic/patterns/mrtr; dual-era.md R27, R28; the TypeScript SDK's
//! legacy shim behaves the same).
//!
//! A modern backend never sends a legacy session a request: it answers
//! `input_required`. For a session's `tools/call`, `resources/read` or
//! `prompts/get`, each `inputRequests` entry becomes a real server→client
//! request to the host on the originating POST's SSE stream
//! (`Relay::ask_host`: the relay's host-facing ids, answers POSTed back and
//! forwarded between replicas like any relayed request's; only what the session
//! declared and its revision has). When every answer is in, the backend gets the
//! retry: a new request (new JSON-RPC id, the session's `_meta` again) with that
//! round's `inputResponses` (key → the host's result, verbatim) and the exact
//! `requestState`. A round with only `requestState` is re-sent after 250 ms. At
//! most [`MAX_ROUNDS`] rounds, each waiting at most `server.input_required_timeout`
//! for the host.
//!
//! Failures (a request the session cannot receive, a host error or no answer in
//! time, too many rounds, a malformed result) end the call cleanly: an `isError`
//! result for `tools/call`, a -32603 error for the others. `input_required`,
//! `resultType`, `ttlMs` and `cacheScope` never reach the host
//! (`mcp::version::result_for_legacy` shapes the final result). Progress keeps
//! the host's token: every round's upstream request is tied to the same host
//! call, and only increasing values pass.

use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::backend::BackendError;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, MISSING_CLIENT_CAPABILITY, RawJson};
use crate::mcp::input;
use crate::mcp::marks::Marks;
use crate::relay::Relay;
use crate::session::{HostCall, Session};

/// The most `input_required` results one call is shimmed through (the TypeScript
/// SDK's shim default).
pub(super) const MAX_ROUNDS: usize = 8;

/// How long a round that carries only `requestState` waits before its retry (the
/// backend asked for time, not input: SEP-2322 load shedding).
const STATE_ONLY_DELAY: Duration = Duration::from_millis(250);

/// Why a shimmed call ended without the backend's final answer.
pub(super) enum ShimError {
    /// The backend failed or answered an error, or the host cancelled
    /// ([`BackendError::Cancelled`]): handled as any upstream outcome.
    Backend(BackendError),
    /// The shim gave up (the message says why): a clean failure for the host.
    Failed(String),
}

/// Runs the rounds of a call whose backend answered `first` (`input_required`)
/// until the backend's final answer. `retry(inputResponses, requestState)` sends
/// the next upstream request and waits for its answer; `leg`: how long the host
/// has to answer one round.
pub(super) async fn rounds<F, Fut>(
    relay: &Relay,
    call: &HostCall,
    first: RawJson,
    leg: Duration,
    mut retry: F,
) -> Result<RawJson, ShimError>
where
    F: FnMut(Map<String, Value>, Option<String>) -> Fut,
    Fut: Future<Output = Result<RawJson, BackendError>>,
{
    let Some(session) = call.host.session() else {
        return Err(ShimError::Failed("not a session".into()));
    };
    let mut raw = first;
    for _ in 0..MAX_ROUNDS {
        let asked = input::parse_input_required(&raw).map_err(|why| {
            ShimError::Failed(format!(
                "the server answered a malformed input_required result: {why}"
            ))
        })?;
        let responses = if asked.requests.is_empty() {
            tokio::select! {
                () = tokio::time::sleep(STATE_ONLY_DELAY) => Map::new(),
                () = call.cancelled() => return Err(ShimError::Backend(BackendError::Cancelled)),
            }
        } else {
            ask_round(relay, call, session, &asked.requests, leg).await?
        };
        raw = retry(responses, asked.state)
            .await
            .map_err(ShimError::Backend)?;
        if !input::is_input_required(&raw, Marks::of(raw.as_bytes())) {
            return Ok(raw);
        }
    }
    Err(ShimError::Failed(format!(
        "the server still asked for input after {MAX_ROUNDS} rounds"
    )))
}

/// The params of a retry: the call's own params with this round's
/// `inputResponses` (none when empty) and `requestState` (none when the backend
/// gave none), replacing the previous round's.
pub(super) fn retry_params(
    params: &Value,
    responses: Map<String, Value>,
    state: Option<String>,
) -> Value {
    let mut params = params.clone();
    if let Some(p) = params.as_object_mut() {
        match responses.is_empty() {
            true => p.remove("inputResponses"),
            false => p.insert("inputResponses".into(), Value::Object(responses)),
        };
        match state {
            Some(s) => p.insert("requestState".into(), s.into()),
            None => p.remove("requestState"),
        };
    }
    params
}

/// A shim failure as the host sees it: an `isError` result for `tools/call`
/// (`tool_call`), a -32603 error for the others.
pub(super) fn failed(why: &str, tool_call: bool) -> Result<RawJson, BackendError> {
    if !tool_call {
        return Err(BackendError::Rpc(ErrorObject::new(INTERNAL_ERROR, why)));
    }
    let shown = json!({"content": [{"type": "text", "text": why}], "isError": true});
    RawJson::from_value(&shown)
        .ok_or_else(|| BackendError::Rpc(ErrorObject::new(INTERNAL_ERROR, why)))
}

/// A 2026-07-28 backend's -32021 (a client capability the request did not
/// declare) for a legacy host, which has no such code: the same clean failure as
/// the shim's ([`failed`]), naming what the backend needs. Other outcomes pass.
pub(super) fn for_legacy(
    outcome: Result<RawJson, BackendError>,
    tool_call: bool,
) -> Result<RawJson, BackendError> {
    match outcome {
        Err(BackendError::Rpc(e)) if e.code == MISSING_CLIENT_CAPABILITY => {
            let needed = e
                .data
                .as_ref()
                .and_then(|d| d.get("requiredCapabilities"))
                .map_or_else(|| "?".to_owned(), Value::to_string);
            failed(
                &format!(
                    "The server needs a client capability this session did not declare or cannot receive: {needed}"
                ),
                tool_call,
            )
        }
        other => other,
    }
}

/// The requests of one round put to the host and its answers, by key.
async fn ask_round(
    relay: &Relay,
    call: &HostCall,
    session: &Session,
    requests: &Map<String, Value>,
    leg: Duration,
) -> Result<Map<String, Value>, ShimError> {
    let mut asked = Outstanding {
        relay,
        session,
        ids: Vec::new(),
        why: Some("the request it belonged to ended"),
    };
    let mut waits = Vec::with_capacity(requests.len());
    for (key, entry) in requests {
        let Some((method, params)) = input::input_request(entry) else {
            return Err(ShimError::Failed(format!(
                "input request {key} is malformed"
            )));
        };
        let (id, rx) = relay.ask_host(call, &method, params).map_err(|why| {
            ShimError::Failed(format!("mcpgate cannot ask the client for {method}: {why}"))
        })?;
        asked.ids.push(id);
        waits.push((key.clone(), method, rx));
    }
    let deadline = tokio::time::Instant::now() + leg;
    let mut responses = Map::new();
    for (key, method, rx) in waits {
        tokio::select! {
            got = rx => match got {
                Ok(Ok(result)) => {
                    responses.insert(key, result);
                }
                Ok(Err(e)) => {
                    return Err(ShimError::Failed(format!(
                        "the client answered {method} with an error: {} ({})",
                        e.message, e.code
                    )));
                }
                Err(_) => {
                    return Err(ShimError::Failed("the session ended before the client answered".into()));
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                asked.why = Some("timed out");
                return Err(ShimError::Failed(format!(
                    "the client did not answer {method} within {} s",
                    leg.as_secs_f64()
                )));
            }
            () = call.cancelled() => {
                asked.why = None;
                return Err(ShimError::Backend(BackendError::Cancelled));
            }
        }
    }
    Ok(responses)
}

/// Requests put to the host in one round: those still unanswered when the round
/// ends (failure, cancel, or the task dropped) are forgotten, and the host told
/// why.
struct Outstanding<'a> {
    relay: &'a Relay,
    session: &'a Session,
    ids: Vec<Id>,
    why: Option<&'static str>,
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.relay.forget_host_request(self.session, &id, self.why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_carries_only_this_rounds_answers_and_state() {
        let params = json!({"name": "t", "arguments": {"a": 1},
            "inputResponses": {"old": {}}, "requestState": "old"});
        let mut responses = Map::new();
        responses.insert("k".into(), json!({"action": "accept"}));
        let p = retry_params(&params, responses, Some("s\"1".into()));
        assert_eq!(p["inputResponses"], json!({"k": {"action": "accept"}}));
        assert_eq!(p["requestState"], "s\"1");
        assert_eq!(p["arguments"], json!({"a": 1}));
        let p = retry_params(&params, Map::new(), None);
        assert!(p.get("inputResponses").is_none() && p.get("requestState").is_none());
    }

    #[test]
    fn failures_are_tool_errors_or_rpc_errors() {
        let tool: Value = serde_json::from_str(failed("why", true).unwrap().get()).unwrap();
        assert_eq!(tool["isError"], true);
        assert_eq!(tool["content"][0]["text"], "why");
        match failed("why", false) {
            Err(BackendError::Rpc(e)) => assert_eq!(e.code, -32603),
            _ => panic!("an error"),
        }
        let needs = ErrorObject::new(-32021, "x")
            .with_data(json!({"requiredCapabilities": {"elicitation": {}}}));
        let shown = for_legacy(Err(BackendError::Rpc(needs)), true).unwrap();
        assert!(shown.get().contains("elicitation"), "{}", shown.get());
        assert!(for_legacy(Err(BackendError::Cancelled), true).is_err());
    }
}

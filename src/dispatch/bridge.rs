//! The bridge from a 2026-07-28 host to a legacy backend (MCP 2026-07-28
//! basic/patterns/mrtr). When a legacy backend sends
//! `elicitation/create`, `sampling/createMessage` or `roots/list` during a modern
//! host's `tools/call`, `resources/read` or `prompts/get`, the backend call is kept
//! open — a [`Continuation`] parked here — and the host is answered
//! `input_required` with gateway-minted keys and a sealed `requestState`. The
//! host's retry (a new request carrying `inputResponses` and that state) opens
//! the seal, checks principal, expiry and the digest of the call, answers the
//! pending backend requests verbatim and resumes the call. Nothing assumes the
//! retry comes: a continuation not resumed within its time is cancelled upstream.
//!
//! `requestState` is `base64url(state) "." base64url(tag)`, `tag` =
//! HMAC-SHA256 under a per-process key (truncated to 16 bytes), `state` = the
//! continuation id, round, expiry, a digest of the caller and one of the call.
//! A continuation lives in the process that parked it: a retry that reaches
//! another process gets a clear error, never a silent second execution.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use crate::auth::PrincipalId;
use crate::backend::{BackendError, Connection};
use crate::error::RpcError;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id};
use crate::mcp::{META_SERVER_INFO, Method, implementation};
use crate::session::{Ask, HostCall};

/// The MAC domain of a continuation's `requestState`.
const CONTINUATION: &[u8] = b"mcpgate requestState v1\0";

/// The upstream request of a continuation, running in its own task.
pub(super) type UpstreamTask = JoinHandle<Result<Box<RawValue>, BackendError>>;

/// A backend call waiting for its host's next round.
pub(super) struct Continuation {
    pub call: Arc<HostCall>,
    pub task: UpstreamTask,
    /// What the result is shaped with, and what a retry must match.
    pub upstream: Arc<super::Upstream>,
    /// Backend requests put to the host and not answered yet, by the key the host
    /// saw: the backend connection, its id, and the request as the host saw it.
    pub pending: HashMap<String, (Weak<Connection>, Id, Value)>,
    pub round: u32,
    next_key: u32,
    digest: String,
    caller: String,
}

/// The sealed part of `requestState`.
#[derive(Serialize, Deserialize)]
struct State {
    /// Continuation id.
    c: u64,
    /// Round.
    r: u32,
    /// Expiry, seconds since the Unix epoch.
    e: u64,
    /// Digest of the caller.
    p: String,
    /// Digest of the call.
    d: String,
}

/// Parked continuations and the key their states are sealed with.
pub(super) struct Bridge {
    parked: Mutex<HashMap<u64, Continuation>>,
    next: AtomicU64,
    key: hmac::Key,
    /// How long a parked continuation waits for its retry, in milliseconds
    /// (`server.input_required_timeout`; a reload may change it).
    ttl_ms: AtomicU64,
}

impl Bridge {
    /// A bridge whose continuations wait at most `ttl` for a retry.
    pub fn new(ttl: Duration) -> Bridge {
        let mut key = [0u8; 32];
        let _ = getrandom::fill(&mut key);
        let mut start = [0u8; 8];
        let _ = getrandom::fill(&mut start);
        Bridge {
            parked: Mutex::default(),
            next: AtomicU64::new(u64::from_le_bytes(start) >> 1),
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
            ttl_ms: AtomicU64::new(millis(ttl)),
        }
    }

    /// Sets how long continuations parked from now on wait for their retry.
    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(millis(ttl), Ordering::Relaxed);
    }

    /// How long a continuation waits for its retry (`server.input_required_timeout`).
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    /// A new continuation of `call`, before its first round.
    pub fn continuation(
        &self,
        call: Arc<HostCall>,
        task: UpstreamTask,
        upstream: Arc<super::Upstream>,
        principal: Option<&PrincipalId>,
    ) -> Continuation {
        let digest = upstream.digest.clone();
        Continuation {
            call,
            task,
            upstream,
            pending: HashMap::new(),
            round: 0,
            next_key: 0,
            digest,
            caller: caller_digest(principal),
        }
    }

    /// Parks `cont` with the backend requests `asks` put to its host, and returns
    /// the `input_required` result for the host (MCP 2026-07-28 mrtr: keys unique
    /// within the request, each value a `{method, params}` request). Requests of
    /// earlier rounds still unanswered are asked again.
    pub fn park(self: &Arc<Self>, mut cont: Continuation, asks: Vec<Ask>) -> Value {
        for ask in asks {
            cont.next_key += 1;
            let key = format!("mcpgate-{}", cont.next_key);
            let mut request = json!({ "method": ask.method.as_str() });
            if let Some(p) = ask.params {
                request["params"] = p;
            }
            cont.pending
                .insert(key, (ask.conn, ask.upstream_id, request));
        }
        let requests: Map<String, Value> = cont
            .pending
            .iter()
            .map(|(k, (_, _, r))| (k.clone(), r.clone()))
            .collect();
        cont.round += 1;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ttl = self.ttl();
        let state = State {
            c: id,
            r: cont.round,
            e: now_secs() + ttl.as_secs(),
            p: cont.caller.clone(),
            d: cont.digest.clone(),
        };
        let sealed = self.seal(&state);
        let round = cont.round;
        if let Ok(mut p) = self.parked.lock() {
            p.insert(id, cont);
        }
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(b) = me.upgrade() {
                b.expire(id, round);
            }
        });
        json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": sealed,
            "_meta": { META_SERVER_INFO: implementation() },
        })
    }

    /// The continuation a retry names, checked: the seal, the caller, the expiry
    /// and the call must match (else -32602); one that is not parked here (never,
    /// or no more: resumed, expired) is -32603.
    pub fn resume(
        &self,
        request_state: &str,
        method: &Method,
        params: &Value,
        principal: Option<&PrincipalId>,
    ) -> Result<Continuation, RpcError> {
        let bad = |why: &str| RpcError::invalid_params(format!("Invalid requestState: {why}"));
        let state = self
            .open(request_state)
            .ok_or_else(|| bad("not issued here or altered"))?;
        if state.p != caller_digest(principal) {
            return Err(bad("issued to another caller"));
        }
        if state.e < now_secs() {
            return Err(bad("expired"));
        }
        if state.d != call_digest(method, params) {
            return Err(bad("issued for another call"));
        }
        let mut parked = self.parked.lock().map_err(|_| bad("unavailable"))?;
        match parked.remove(&state.c) {
            Some(c) if c.round == state.r => Ok(c),
            Some(c) => {
                parked.insert(state.c, c);
                Err(bad("of an earlier round"))
            }
            None => Err(RpcError::Backend(BackendError::Unavailable {
                backend: "mcpgate".into(),
                reason: "the continuation of this requestState is not on this replica \
                         (already resumed, expired, or parked by another replica)"
                    .into(),
            })),
        }
    }

    /// A continuation not resumed in time: its backend requests are refused and its
    /// call cancelled upstream (MCP 2026-07-28 mrtr: never assume the retry comes).
    fn expire(&self, id: u64, round: u32) {
        let cont = match self.parked.lock() {
            Ok(mut p) if p.get(&id).is_some_and(|c| c.round == round) => p.remove(&id),
            _ => None,
        };
        if let Some(cont) = cont {
            tracing::info!(
                round,
                "input_required continuation expired; cancelling the backend call"
            );
            abandon(cont, "the client did not retry in time");
        }
    }

    fn tag(&self, domain: &[u8], body: &[u8]) -> Vec<u8> {
        let mut mac = hmac::Context::with_key(&self.key);
        mac.update(domain);
        mac.update(body);
        mac.sign().as_ref()[..16].to_vec()
    }

    fn seal(&self, state: &State) -> String {
        self.seal_as(CONTINUATION, state)
    }

    fn open(&self, sealed: &str) -> Option<State> {
        self.open_as(CONTINUATION, sealed)
    }

    /// `value` as a `requestState` of kind `domain`: `base64url(json) "."
    /// base64url(tag)`; it opens only with [`Bridge::open_as`] of the same kind,
    /// in this process.
    pub fn seal_as<T: Serialize>(&self, domain: &[u8], value: &T) -> String {
        let body = serde_json::to_vec(value).unwrap_or_default();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&body),
            URL_SAFE_NO_PAD.encode(self.tag(domain, &body))
        )
    }

    /// What [`Bridge::seal_as`] sealed as kind `domain`; `None` when it was not
    /// (another kind, another process, altered, garbage).
    pub fn open_as<T: serde::de::DeserializeOwned>(
        &self,
        domain: &[u8],
        sealed: &str,
    ) -> Option<T> {
        let (body, tag) = sealed.split_once('.')?;
        let body = URL_SAFE_NO_PAD.decode(body).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let want = self.tag(domain, &body);
        // Constant time is not needed for a MAC checked only here, but cheap.
        let equal = want.len() == tag.len()
            && want.iter().zip(&tag).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0;
        equal.then(|| serde_json::from_slice(&body).ok()).flatten()
    }
}

impl Continuation {
    /// Answers the pending backend requests the host answered in `responses`
    /// (`ElicitResult`, `CreateMessageResult`, `ListRootsResult`, verbatim);
    /// unknown keys are ignored. Returns how many stay unanswered.
    pub fn answer(&mut self, responses: Option<&Map<String, Value>>) -> usize {
        if let Some(responses) = responses {
            for (key, result) in responses {
                if let Some((conn, id, _)) = self.pending.remove(key)
                    && let Some(conn) = conn.upgrade()
                {
                    conn.respond(&id, Ok(result));
                }
            }
        }
        self.pending.len()
    }
}

/// Gives up a continuation: pending backend requests get an error, the backend
/// call is cancelled.
pub(super) fn abandon(cont: Continuation, why: &str) {
    let Continuation {
        call,
        task,
        pending,
        ..
    } = cont;
    let refusal = ErrorObject::new(INTERNAL_ERROR, why);
    for (conn, id, _) in pending.into_values() {
        if let Some(conn) = conn.upgrade() {
            conn.respond(&id, Err(&refusal));
        }
    }
    if let Some((conn, id)) = call.mark_cancelled() {
        conn.cancel(id, Some(why));
    }
    task.abort();
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A digest of who calls (issuer and subject), bound into every `requestState`.
pub(super) fn caller_digest(principal: Option<&PrincipalId>) -> String {
    let who = principal.map_or(String::new(), |p| format!("{}\0{}", p.issuer, p.subject));
    hex(&Sha256::digest(who.as_bytes())[..12])
}

/// A digest of what identifies a call: the method, the name or URI, and the
/// arguments in a canonical form (keys sorted), without the round's
/// `inputResponses`/`requestState` and the envelope.
pub(super) fn call_digest(method: &Method, params: &Value) -> String {
    let mut h = Sha256::new();
    h.update(method.as_str().as_bytes());
    for key in ["name", "uri", "arguments"] {
        h.update([0]);
        if let Some(v) = params.get(key) {
            h.update(canonical(v).as_bytes());
        }
    }
    hex(&h.finalize()[..16])
}

fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => {
            let inner: Vec<String> = a.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_ignores_key_order_and_the_round() {
        let a = json!({"name": "t", "arguments": {"x": 1, "y": [1, {"b": 2, "a": 1}]}});
        let b = json!({"arguments": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "name": "t",
                       "inputResponses": {"k": {}}, "requestState": "s", "_meta": {}});
        assert_eq!(
            call_digest(&Method::ToolsCall, &a),
            call_digest(&Method::ToolsCall, &b)
        );
        let c = json!({"name": "t", "arguments": {"x": 2}});
        assert_ne!(
            call_digest(&Method::ToolsCall, &a),
            call_digest(&Method::ToolsCall, &c)
        );
        assert_ne!(
            call_digest(&Method::ToolsCall, &a),
            call_digest(&Method::PromptsGet, &a)
        );
    }

    #[tokio::test]
    async fn states_open_only_unaltered_and_from_this_process() {
        let b = Bridge::new(Duration::from_secs(60));
        let s = State {
            c: 7,
            r: 1,
            e: now_secs() + 60,
            p: "p".into(),
            d: "d".into(),
        };
        let sealed = b.seal(&s);
        let opened = b.open(&sealed).expect("opens");
        assert_eq!((opened.c, opened.r), (7, 1));
        let mut altered = sealed.clone().into_bytes();
        altered[3] ^= 1;
        assert!(b.open(&String::from_utf8_lossy(&altered)).is_none());
        assert!(
            Bridge::new(Duration::from_secs(60)).open(&sealed).is_none(),
            "another key"
        );
        assert!(b.open("garbage").is_none());
    }
}

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
//! `requestState` is sealed by the `[cluster]` keys (`cluster::Sealer`,
//! `Purpose::Value`, AAD [`CONTINUATION`]: `KID.base64url(nonce | ChaCha20-Poly1305
//! (state) | tag)`); `state` = the replica that parked the continuation, its id,
//! the round, the expiry, a digest of the caller and one of the call. Every
//! replica with the same keys opens it, so a retry is checked the same way
//! wherever it lands; but the continuation itself (a live backend call) lives
//! only in the process that parked it. A retry that reaches another replica is
//! -32603 "continuation not on this replica" ([`RpcError::ContinuationElsewhere`],
//! counted in `mcpgate_input_required_retries_total{result="elsewhere"}`), never
//! a silent second execution; it is not forwarded to the holder (dual-era.md
//! R33's forwarding would need a reply path between replicas, which the shared
//! store's inbox does not have).
//!
//! The replica is named by the shared store's tag (`[cluster] redis`, the tag of
//! relayed request ids) or, without a store, by a random id drawn at start
//! (never the OS process id: every container's gateway may be pid 1).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use crate::auth::PrincipalId;
use crate::backend::{BackendError, Connection};
use crate::cluster::{Purpose, Sealer, random_bytes};
use crate::error::RpcError;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, Id, RawJson};
use crate::mcp::{META_SERVER_INFO, Method, implementation};
use crate::session::{Ask, HostCall};

/// The AAD of a continuation's `requestState` (each kind of sealed value has its
/// own, so one never opens as another).
pub(super) const CONTINUATION: &[u8] = b"mcpgate/requestState/continuation/v1";

/// The upstream request of a continuation, running in its own task.
pub(super) type UpstreamTask = JoinHandle<Result<RawJson, BackendError>>;

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
    /// The replica holding the continuation ([`Bridge::replica`]).
    h: String,
    /// Continuation id, unique within its replica.
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

/// Parked continuations, and the sealer of every `requestState` the gateway
/// issues (continuations here, wrapped states in `wrap.rs`).
pub(super) struct Bridge {
    parked: Mutex<HashMap<u64, Continuation>>,
    next: AtomicU64,
    sealer: Arc<Sealer>,
    /// This replica's name in the states it seals.
    replica: String,
    /// How long a parked continuation waits for its retry, in milliseconds
    /// (`server.input_required_timeout`; a reload may change it).
    ttl_ms: AtomicU64,
    /// `mcpgate_input_required_retries_total{kind, result}`.
    retries: IntCounterVec,
}

/// The kind of a retried `requestState`: the `kind` label of
/// `mcpgate_input_required_retries_total`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// Of a continuation parked by the bridge (legacy backend).
    Continuation,
    /// A 2026-07-28 backend's state wrapped in ours (`wrap.rs`).
    Wrapped,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Continuation => "continuation",
            Kind::Wrapped => "wrapped",
        }
    }
}

impl Bridge {
    /// A bridge whose continuations wait at most `ttl` for a retry, sealing
    /// with `sealer` (the `[cluster]` keys) and naming itself `replica` in what
    /// it seals (`None`: a random id of this process). `retries` is
    /// `mcpgate_input_required_retries_total`.
    pub fn new(
        ttl: Duration,
        sealer: Arc<Sealer>,
        replica: Option<&str>,
        retries: IntCounterVec,
    ) -> Bridge {
        let replica = replica.map_or_else(
            || format!("p{:08x}", u32::from_be_bytes(random_bytes::<4>())),
            str::to_owned,
        );
        Bridge {
            parked: Mutex::default(),
            next: AtomicU64::new(u64::from_le_bytes(random_bytes::<8>()) >> 1),
            sealer,
            replica,
            ttl_ms: AtomicU64::new(millis(ttl)),
            retries,
        }
    }

    /// This replica's name in the continuations it parks: the shared store's
    /// tag, or `p` + 8 hex digits drawn at start.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Counts one retry of `kind` by `result` (`resumed`, `invalid`,
    /// `elsewhere`, `gone`).
    pub fn count(&self, kind: Kind, result: &str) {
        self.retries
            .with_label_values(&[kind.label(), result])
            .inc();
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
            h: self.replica.clone(),
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
    /// and the call must match (else -32602); one parked by another replica is
    /// -32603 [`RpcError::ContinuationElsewhere`]; one that is not parked here
    /// (no more: resumed, expired) is -32603 [`RpcError::ContinuationGone`].
    /// Each outcome is counted.
    pub fn resume(
        &self,
        request_state: &str,
        method: &Method,
        params: &Value,
        principal: Option<&PrincipalId>,
    ) -> Result<Continuation, RpcError> {
        let found = self.find(request_state, method, params, principal);
        let result = match &found {
            Ok(_) => "resumed",
            Err(RpcError::ContinuationElsewhere { holder, .. }) => {
                tracing::info!(holder = %holder, replica = %self.replica, "input_required retry for a continuation parked by another replica; refused");
                "elsewhere"
            }
            Err(RpcError::ContinuationGone) => "gone",
            Err(_) => "invalid",
        };
        self.count(Kind::Continuation, result);
        found
    }

    fn find(
        &self,
        request_state: &str,
        method: &Method,
        params: &Value,
        principal: Option<&PrincipalId>,
    ) -> Result<Continuation, RpcError> {
        let bad = |why: &str| RpcError::invalid_params(format!("Invalid requestState: {why}"));
        let state: State = self
            .open_as(CONTINUATION, request_state)
            .ok_or_else(|| bad("not issued by this gateway, or altered"))?;
        if state.p != caller_digest(principal) {
            return Err(bad("issued to another caller"));
        }
        if state.e < now_secs() {
            return Err(bad("expired"));
        }
        if state.d != call_digest(method, params) {
            return Err(bad("issued for another call"));
        }
        if state.h != self.replica {
            return Err(RpcError::ContinuationElsewhere {
                holder: state.h,
                replica: self.replica.clone(),
            });
        }
        let mut parked = self.parked.lock().map_err(|_| bad("unavailable"))?;
        match parked.remove(&state.c) {
            Some(c) if c.round == state.r => Ok(c),
            Some(c) => {
                parked.insert(state.c, c);
                Err(bad("of an earlier round"))
            }
            None => Err(RpcError::ContinuationGone),
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

    fn seal(&self, state: &State) -> String {
        self.seal_as(CONTINUATION, state)
    }

    /// `value` (as JSON) sealed as a `requestState` of the kind `aad` names, under
    /// the `[cluster]` sealing key: it opens with [`Bridge::open_as`] of the same
    /// kind on every replica holding that key.
    pub fn seal_as<T: Serialize>(&self, aad: &[u8], value: &T) -> String {
        let body = serde_json::to_vec(value).unwrap_or_default();
        self.sealer.seal(Purpose::Value, aad, &body)
    }

    /// What [`Bridge::seal_as`] sealed as kind `aad`; `None` when it was not
    /// (another kind, a key not configured here, altered, garbage).
    pub fn open_as<T: serde::de::DeserializeOwned>(&self, aad: &[u8], sealed: &str) -> Option<T> {
        let body = self.sealer.open(Purpose::Value, aad, sealed)?;
        serde_json::from_slice(&body).ok()
    }
}

impl Continuation {
    /// Answers the pending backend requests the host answered in `responses`
    /// (`ElicitResult`, `CreateMessageResult`, `ListRootsResult`, verbatim);
    /// unknown keys are ignored. Returns how many stay unanswered.
    pub fn answer(&mut self, responses: Option<&Map<String, Value>>) -> usize {
        if let Some(responses) = responses {
            for (key, result) in responses {
                if let Some((conn, id, request)) = self.pending.remove(key)
                    && let Some(conn) = conn.upgrade()
                {
                    if request["method"] == Method::RootsList.as_str() {
                        // The backend now holds this host's roots.
                        conn.retire();
                    }
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
pub(super) mod tests {
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

    /// A bridge sealing with `keys` (kid, byte), named `replica`.
    pub(in crate::dispatch) fn bridge(keys: &[(&str, u8)], replica: &str) -> Bridge {
        let retries =
            IntCounterVec::new(prometheus::Opts::new("t", "t"), &["kind", "result"]).unwrap();
        Bridge::new(
            Duration::from_secs(60),
            Arc::new(crate::cluster::seal_tests::sealer(keys)),
            Some(replica),
            retries,
        )
    }

    fn state(h: &str, d: &str) -> State {
        State {
            h: h.into(),
            c: 7,
            r: 1,
            e: now_secs() + 60,
            p: caller_digest(None),
            d: d.into(),
        }
    }

    #[test]
    fn states_open_unaltered_wherever_the_keys_are() {
        let a = bridge(&[("k1", 1)], "a");
        let sealed = a.seal(&state("a", "d"));
        assert!(sealed.starts_with("k1."), "{sealed}");
        let opened: State = a.open_as(CONTINUATION, &sealed).expect("opens");
        assert_eq!((opened.h.as_str(), opened.c, opened.r), ("a", 7, 1));
        let b = bridge(&[("k1", 1)], "b");
        assert!(
            b.open_as::<State>(CONTINUATION, &sealed).is_some(),
            "another replica, same keys"
        );
        let rotated = bridge(&[("k2", 2), ("k1", 1)], "c");
        assert!(
            rotated.open_as::<State>(CONTINUATION, &sealed).is_some(),
            "an old key still opens"
        );
        assert!(
            bridge(&[("k2", 2)], "a")
                .open_as::<State>(CONTINUATION, &sealed)
                .is_none()
        );
        assert!(
            bridge(&[("k1", 9)], "a")
                .open_as::<State>(CONTINUATION, &sealed)
                .is_none()
        );
        assert!(
            a.open_as::<State>(b"mcpgate/requestState/wrapped/v1", &sealed)
                .is_none(),
            "another kind"
        );
        let mut altered = sealed.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert!(a.open_as::<State>(CONTINUATION, &altered).is_none());
        assert!(a.open_as::<State>(CONTINUATION, "garbage").is_none());
    }

    #[test]
    fn a_retry_for_another_replica_is_refused_and_counted_after_the_checks() {
        let params = json!({"name": "t"});
        let digest = call_digest(&Method::ToolsCall, &params);
        let a = bridge(&[("k1", 1)], "a");
        let b = bridge(&[("k1", 1)], "b");
        let sealed = a.seal(&state("a", &digest));
        let resume = |br: &Bridge, p: &Value| br.resume(&sealed, &Method::ToolsCall, p, None);
        match resume(&b, &params) {
            Err(RpcError::ContinuationElsewhere { holder, replica }) => {
                assert_eq!((holder.as_str(), replica.as_str()), ("a", "b"));
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("resumed elsewhere"),
        }
        // A state for another call is -32602 on any replica, before the holder.
        let other = json!({"name": "u"});
        assert_eq!(resume(&b, &other).err().map(|e| e.code()), Some(-32602));
        // On its own replica, nothing is parked under it (never was): gone.
        assert!(matches!(
            resume(&a, &params),
            Err(RpcError::ContinuationGone)
        ));
        let count = |br: &Bridge, r: &str| br.retries.with_label_values(&["continuation", r]).get();
        assert_eq!((count(&b, "elsewhere"), count(&b, "invalid")), (1, 1));
        assert_eq!((count(&a, "gone"), count(&a, "elsewhere")), (1, 0));
    }
}

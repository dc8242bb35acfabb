//! A 2026-07-28 host through a 2026-07-28 backend (MCP 2026-07-28
//! basic/patterns/mrtr; dual-era.md R30): the backend's `input_required` passes
//! to the host after the capability gate, with the backend's `requestState`
//! wrapped inside mcpgate's own, and the host's retry is unwrapped on its way
//! back to the same backend.
//!
//! - **Gate.** Every `inputRequests` entry must be a kind this host request
//!   declared (`mcp::input::may_ask`); otherwise the host gets -32021 with
//!   `data.requiredCapabilities` and nothing is asked (MCP 2026-07-28 mrtr: never
//!   an input request the client did not declare; the backend was only told what
//!   the host declared, so an honest backend never trips it).
//! - **Wrap.** mcpgate's state = the sealed `{backend, caller digest, call digest,
//!   expiry, the backend's state verbatim (or none)}` (`Bridge::seal_as`: the
//!   `[cluster]` keys, `Purpose::Value`, AAD [`WRAPPED`]). It binds the state to the principal — behind one shared backend
//!   credential the backend cannot tell users apart, so one user could otherwise
//!   replay another's state — and to the call and the backend. It is always
//!   issued, also when the backend gave no state of its own. The backend's state
//!   is opaque to the gateway and reaches the backend byte for byte.
//! - **Keys** pass unchanged. One host call is routed to exactly one backend and
//!   its retry goes back there (the tool name routes it, the seal confirms it), so
//!   keys from different backends never meet in one `inputRequests`; the
//!   gateway's own asks (the bridge to legacy backends, `mcpgate-N` keys) are
//!   never mixed with a backend's either. Should mcpgate ever add asks of its own
//!   to a relayed round, they get a prefix of their own and are taken out of
//!   `inputResponses` before the retry goes upstream.
//!
//! - **Replay** (a 2025-11-25 backend's -32042 URLElicitationRequired; dual-era.md
//!   R24). 2026-07-28 has no -32042: each of its URL elicitations becomes a URL
//!   input request (`mcpgate-url-N`, without its `elicitationId`), under a wrapped
//!   state without backend state, marked replay. The retry re-issues the original
//!   call to the backend, without `inputResponses` or `requestState` (the backend
//!   asked to be called again once the URLs were visited). A host that did not
//!   declare URL elicitation gets -32021 instead, naming it.
//!
//! **Any replica.** The wrap holds nothing in the process: the sealed state
//! carries all the gateway needs, and it is sealed with the `[cluster]` keys, so
//! a retry is served by whichever replica it reaches (every replica with the same
//! keys opens it; old keys open, the first seals). The backend must then accept
//! its own state wherever the retry reaches it: an HTTP backend is one server
//! anyway; a stdio backend runs one child per replica, which holds only if its
//! state does not depend on that child (sealed with a key of its own
//! configuration, not one drawn at its start). Without `[cluster]` keys the
//! gateway's key is drawn at start, and a wrapped state opens only in the
//! process that issued it (another one answers -32602, never a second execution).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::Upstream;
use super::bridge::{Bridge, Kind, call_digest, caller_digest};
use crate::auth::PrincipalId;
use crate::backend::BackendError;
use crate::error::RpcError;
use crate::jsonrpc::{ErrorObject, INTERNAL_ERROR, MISSING_CLIENT_CAPABILITY, RawJson};
use crate::mcp::{Method, input};
use crate::session::ModernHost;

/// The AAD of a wrapped `requestState` (never opens as a continuation's).
pub(super) const WRAPPED: &[u8] = b"mcpgate/requestState/wrapped/v1";

/// The sealed part of a wrapped `requestState`.
#[derive(Serialize, Deserialize)]
struct Wrapped {
    /// The configured name of the backend that answered `input_required`.
    b: String,
    /// Digest of the caller.
    p: String,
    /// Digest of the call (method, name or URI, arguments).
    d: String,
    /// Expiry, seconds since the Unix epoch.
    e: u64,
    /// The backend's own `requestState`, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    /// A replay: the retry re-issues the call without the 2026-07-28 fields (a
    /// legacy backend's -32042, [`url_required`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    r: bool,
}

/// A retry's wrapped state, opened and checked against the caller and the call;
/// the backend is checked once the retry is routed ([`Unwrapped::apply`]).
pub(super) struct Unwrapped(Wrapped);

/// A 2026-07-28 backend's `input_required` for the modern host `host`, gated and
/// with its state wrapped (`backend`: the backend's configured name).
///
/// Errors: -32021 with `data.requiredCapabilities` for an input request the host
/// request did not declare; -32603 for a malformed result, or one answered to a
/// method that cannot return it (MCP 2026-07-28 mrtr: only `tools/call`,
/// `resources/read`, `prompts/get`).
pub(super) fn pass(
    bridge: &Bridge,
    host: &ModernHost,
    up: &Upstream,
    backend: &str,
    raw: &RawJson,
) -> Result<RawJson, BackendError> {
    let refuse = |why: String| BackendError::Rpc(ErrorObject::new(INTERNAL_ERROR, why));
    if !up.may_ask() {
        return Err(refuse(format!(
            "backend {backend} answered input_required to {}, which cannot have one",
            up.method
        )));
    }
    let asked = input::parse_input_required(raw).map_err(|why| {
        refuse(format!(
            "backend {backend} answered a malformed input_required result: {why}"
        ))
    })?;
    for entry in asked.requests.values() {
        let Some((method, params)) = input::input_request(entry) else {
            continue;
        };
        if !input::may_ask(host.version, &host.capabilities, &method, params) {
            tracing::info!(backend, %method, "backend asked for input the client did not declare; refused");
            let error = ErrorObject::new(
                MISSING_CLIENT_CAPABILITY,
                format!(
                    "The server needs a client capability this request did not declare ({method})"
                ),
            )
            .with_data(json!({
                "requiredCapabilities": input::required_capability(&method, params)
            }));
            return Err(BackendError::Rpc(error));
        }
    }
    let mut v: Map<String, Value> = raw.parse().unwrap_or_default();
    let state = Wrapped {
        b: backend.to_owned(),
        p: caller_digest(host.principal.as_ref()),
        d: up.digest.clone(),
        e: super::bridge::now_secs() + bridge.ttl().as_secs(),
        s: asked.state,
        r: false,
    };
    v.insert(
        "requestState".into(),
        bridge.seal_as(WRAPPED, &state).into(),
    );
    RawJson::from_value(&v).ok_or_else(|| refuse("the result could not be serialized".into()))
}

/// A legacy backend's URLElicitationRequiredError `error` (-32042, MCP 2025-11-25
/// client/elicitation) for the modern host `host`, which must never see -32042
/// (MCP 2026-07-28 removed it): an `input_required` result asking each of its
/// `data.elicitations[]` as a URL elicitation without its `elicitationId`, with a
/// replay state ([`Unwrapped::apply`] re-issues the call). `backend`: the
/// backend's configured name.
///
/// Errors: -32021 with `data.requiredCapabilities` `{elicitation: {url: {}}}`
/// when the host request did not declare URL elicitation; -32603 when `error`
/// names no elicitation, or answers a method that cannot return `input_required`.
pub(super) fn url_required(
    bridge: &Bridge,
    host: &ModernHost,
    up: &Upstream,
    backend: &str,
    error: &ErrorObject,
) -> Result<RawJson, BackendError> {
    let refuse = |why: String| BackendError::Rpc(ErrorObject::new(INTERNAL_ERROR, why));
    let listed = error
        .data
        .as_ref()
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array);
    let mut requests = Map::new();
    for (n, e) in listed.into_iter().flatten().enumerate() {
        let (Some(url), Some(message)) = (
            e.get("url").and_then(Value::as_str),
            e.get("message").and_then(Value::as_str),
        ) else {
            continue;
        };
        let params = json!({"mode": "url", "url": url, "message": message});
        let method = Method::ElicitationCreate;
        if !input::may_ask(host.version, &host.capabilities, &method, Some(&params)) {
            tracing::info!(
                backend,
                "backend requires URL elicitation the client did not declare; refused"
            );
            let error = ErrorObject::new(
                MISSING_CLIENT_CAPABILITY,
                "The server needs a client capability this request did not declare (elicitation/create)",
            )
            .with_data(json!({
                "requiredCapabilities": input::required_capability(&method, Some(&params))
            }));
            return Err(BackendError::Rpc(error));
        }
        let key = format!("mcpgate-url-{}", n + 1);
        requests.insert(key, json!({"method": method.as_str(), "params": params}));
    }
    if requests.is_empty() || !up.may_ask() {
        return Err(refuse(format!(
            "backend {backend} requires URL elicitation for {}, which the gateway cannot ask: {}",
            up.method, error.message
        )));
    }
    let state = Wrapped {
        b: backend.to_owned(),
        p: caller_digest(host.principal.as_ref()),
        d: up.digest.clone(),
        e: super::bridge::now_secs() + bridge.ttl().as_secs(),
        s: None,
        r: true,
    };
    let result = json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": bridge.seal_as(WRAPPED, &state),
    });
    RawJson::from_value(&result).ok_or_else(|| refuse("the result could not be serialized".into()))
}

/// Opens `request_state` if it is a wrapped one: `None` when it is not (a
/// continuation's state, or garbage: the bridge decides); `Some(Err)` (-32602)
/// when it is but was issued to another caller or for another call, or expired.
pub(super) fn open(
    bridge: &Bridge,
    request_state: &str,
    method: &Method,
    params: &Value,
    principal: Option<&PrincipalId>,
) -> Option<Result<Unwrapped, RpcError>> {
    let state: Wrapped = bridge.open_as(WRAPPED, request_state)?;
    let bad = |why: &str| {
        bridge.count(Kind::Wrapped, "invalid");
        Some(Err(RpcError::invalid_params(format!(
            "Invalid requestState: {why}"
        ))))
    };
    if state.p != caller_digest(principal) {
        return bad("issued to another caller");
    }
    if state.e < super::bridge::now_secs() {
        return bad("expired");
    }
    if state.d != call_digest(method, params) {
        return bad("issued for another call");
    }
    Some(Ok(Unwrapped(state)))
}

impl Unwrapped {
    /// Puts the backend's own state (or none) in place of mcpgate's in the
    /// params of the routed retry, after checking that it goes to the backend
    /// that issued it (`backend`: the routed backend's configured name). The
    /// host's `inputResponses` go on unchanged, but for a replay, which goes
    /// without them. Errors: -32602 for another backend. Counted in `bridge`'s
    /// retries either way.
    pub(super) fn apply(
        self,
        bridge: &Bridge,
        backend: &str,
        params: &mut Value,
    ) -> Result<(), RpcError> {
        if self.0.b != backend {
            bridge.count(Kind::Wrapped, "invalid");
            return Err(RpcError::invalid_params(
                "Invalid requestState: issued by another server",
            ));
        }
        bridge.count(Kind::Wrapped, "resumed");
        if let Some(p) = params.as_object_mut() {
            match self.0.s {
                Some(s) => p.insert("requestState".into(), s.into()),
                None => p.remove("requestState"),
            };
            if self.0.r {
                p.remove("inputResponses");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_wrapped_state_opens_only_for_its_caller_call_and_backend() {
        let bridge = super::super::bridge::tests::bridge(&[("k1", 1)], "a");
        let params = json!({"name": "t", "arguments": {"x": 1}});
        let state = Wrapped {
            b: "up".into(),
            p: caller_digest(None),
            d: call_digest(&Method::ToolsCall, &params),
            e: super::super::bridge::now_secs() + 60,
            s: Some("inner \"state\" é".into()),
            r: false,
        };
        let sealed = bridge.seal_as(WRAPPED, &state);
        let open = |s: &str, p: &Value| open(&bridge, s, &Method::ToolsCall, p, None);
        let mut retry = json!({"name": "t", "arguments": {"x": 1}, "requestState": sealed,
            "inputResponses": {"k": {"action": "accept"}}});
        let unwrapped = open(&sealed, &retry).expect("wrapped").expect("valid");
        unwrapped.apply(&bridge, "up", &mut retry).unwrap();
        assert_eq!(retry["requestState"], "inner \"state\" é");
        assert_eq!(retry["inputResponses"]["k"]["action"], "accept");
        let other_call = json!({"name": "t", "arguments": {"x": 2}});
        assert!(open(&sealed, &other_call).unwrap().is_err());
        let someone = PrincipalId {
            issuer: "i".into(),
            subject: "s".into(),
        };
        let by_other = super::open(
            &bridge,
            &sealed,
            &Method::ToolsCall,
            &params,
            Some(&someone),
        );
        assert!(by_other.unwrap().is_err());
        let unwrapped = open(&sealed, &params).unwrap().expect("valid");
        assert!(unwrapped.apply(&bridge, "other", &mut json!({})).is_err());
        assert!(open("garbage", &params).is_none(), "not a wrapped state");
        let expired = Wrapped { e: 1, ..state };
        let expired = bridge.seal_as(WRAPPED, &expired);
        assert!(open(&expired, &params).unwrap().is_err());
        // Another replica with the same keys opens it; other keys do not, and a
        // wrapped state is never taken for a continuation's.
        let elsewhere = super::super::bridge::tests::bridge(&[("k2", 2), ("k1", 1)], "b");
        let there = super::open(&elsewhere, &sealed, &Method::ToolsCall, &params, None);
        assert!(there.expect("wrapped").is_ok());
        let other_keys = super::super::bridge::tests::bridge(&[("k2", 2)], "b");
        assert!(super::open(&other_keys, &sealed, &Method::ToolsCall, &params, None).is_none());
        let as_continuation: Option<Value> =
            bridge.open_as(super::super::bridge::CONTINUATION, &sealed);
        assert!(as_continuation.is_none());
    }

    #[test]
    fn url_elicitation_required_asks_the_urls_and_replays_the_call() {
        use crate::mcp::version::ProtocolVersion;
        let bridge = super::super::bridge::tests::bridge(&[("k1", 1)], "a");
        let params = json!({"name": "t", "arguments": {"x": 1}});
        let up = Upstream {
            backend: 0,
            method: Method::ToolsCall,
            params: params.clone().into(),
            plain: false,
            kind: super::super::ResultKind::ToolCall,
            task: None,
            digest: call_digest(&Method::ToolsCall, &params),
            headers: None,
        };
        let host = |caps: Value| ModernHost {
            version: ProtocolVersion::MODERN,
            capabilities: caps,
            log_level: None,
            principal: None,
            view_key: Default::default(),
            client: None,
        };
        let error = ErrorObject::new(-32042, "go there first").with_data(json!({"elicitations": [
            {"mode": "url", "url": "https://a.example/", "message": "A", "elicitationId": "up:1"},
            {"mode": "url", "url": "https://b.example/", "message": "B", "elicitationId": "up:2"}]}));
        let url = host(json!({"elicitation": {"url": {}}}));
        let raw = url_required(&bridge, &url, &up, "up", &error).expect("asked");
        let v: Value = serde_json::from_str(raw.get()).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(
            v["inputRequests"],
            json!({
            "mcpgate-url-1": {"method": "elicitation/create",
                "params": {"mode": "url", "url": "https://a.example/", "message": "A"}},
            "mcpgate-url-2": {"method": "elicitation/create",
                "params": {"mode": "url", "url": "https://b.example/", "message": "B"}}})
        );
        // The retry goes to the backend as the original call.
        let state = v["requestState"].as_str().unwrap();
        let mut retry = json!({"name": "t", "arguments": {"x": 1}, "requestState": state,
            "inputResponses": {"mcpgate-url-1": {"action": "accept"}}});
        let unwrapped = open(&bridge, state, &Method::ToolsCall, &retry, None)
            .expect("wrapped")
            .expect("valid");
        unwrapped.apply(&bridge, "up", &mut retry).unwrap();
        assert_eq!(retry, params);
        // Form only: -32021 naming URL mode; nothing to ask: -32603, never -32042.
        let form = host(json!({"elicitation": {"form": {}}}));
        let Err(BackendError::Rpc(e)) = url_required(&bridge, &form, &up, "up", &error) else {
            panic!("asked a host that did not declare URL elicitation");
        };
        assert_eq!(e.code, MISSING_CLIENT_CAPABILITY);
        assert_eq!(
            e.data.unwrap(),
            json!({"requiredCapabilities": {"elicitation": {"url": {}}}})
        );
        let empty = ErrorObject::new(-32042, "nothing listed");
        let Err(BackendError::Rpc(e)) = url_required(&bridge, &url, &up, "up", &empty) else {
            panic!("an input_required without requests");
        };
        assert_eq!(e.code, INTERNAL_ERROR);
    }
}

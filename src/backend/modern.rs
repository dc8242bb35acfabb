//! The client face's era: which revision a backend is spoken to in, how `auto`
//! finds out, and what a 2026-07-28 ("modern", stateless) request to a backend
//! carries (MCP 2026-07-28 basic/versioning, basic/index per-request fields,
//! basic/transports/streamable-http request metadata and backward compatibility).
//!
//! A modern backend gets no `initialize` and no session: `server/discover` takes
//! the handshake's place, and every request carries `params._meta` with the
//! backend's revision, the client capabilities the caller can carry, mcpgate's
//! client info and the caller's log level; over HTTP also `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use super::BackendError;
use super::conn::InitInfo;
use crate::jsonrpc::{Params, RawJson};
use crate::mcp::{self, LogLevel, Method, ProtocolVersion};

/// The longest an era probe (`server/discover`) waits, bounded by the backend's
/// own timeout. Over HTTP no answer in time means "unavailable" (a timeout is no
/// era evidence); on stdio it means "legacy" (MCP 2026-07-28 basic/transports/stdio).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `UnsupportedProtocolVersion` (MCP 2026-07-28 basic/versioning).
const UNSUPPORTED_VERSION: i64 = -32022;

/// The era a backend was found (or configured) to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` and sessions (2025-11-25 and older).
    Legacy,
    /// Stateless, at this revision.
    Modern(ProtocolVersion),
}

/// The era last found for one backend, so later connections skip the probe; forgotten
/// when a failure says it is wrong (MCP 2026-07-28 basic/versioning: clients SHOULD
/// cache the result and re-probe when it fails).
#[derive(Debug, Default)]
pub(crate) struct EraCache(AtomicU8);

impl EraCache {
    pub(crate) fn get(&self) -> Option<Era> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Era::Legacy),
            2 => Some(Era::Modern(ProtocolVersion::MODERN)),
            _ => None,
        }
    }

    pub(crate) fn set(&self, era: Era) {
        let v = match era {
            Era::Legacy => 1,
            Era::Modern(_) => 2,
        };
        self.0.store(v, Ordering::Relaxed);
    }

    pub(crate) fn forget(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// What an HTTP `server/discover` probe's failure says about the backend's era.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not modern: connect with `initialize`.
    Legacy,
    /// A modern server that wants another modern revision: probe again at it.
    Retry(ProtocolVersion),
    /// No era evidence (401/403, 5xx, reset, timeout): the error stands.
    NoEvidence,
}

/// Classifies a failed HTTP probe (MCP 2026-07-28 basic/transports/streamable-http,
/// backward compatibility): -32022 naming a modern revision we speak is a modern
/// server; any other JSON-RPC error, 4xx (but 401/403), or garbage is a legacy
/// one; authentication refusals, server errors and transport failures are no
/// evidence at all.
pub(crate) fn classify_probe_failure(e: &BackendError, sent: ProtocolVersion) -> Verdict {
    match e {
        BackendError::Rpc(err) if err.code == UNSUPPORTED_VERSION => err
            .data
            .as_ref()
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(ProtocolVersion::parse)
            .find(|v| v.is_modern() && *v != sent)
            .map_or(Verdict::Legacy, Verdict::Retry),
        BackendError::Rpc(_) | BackendError::Protocol { .. } => Verdict::Legacy,
        BackendError::HttpStatus { status, .. } => match status {
            401 | 403 | 408 | 429 | 500..=599 => Verdict::NoEvidence,
            _ => Verdict::Legacy,
        },
        BackendError::Timeout { .. }
        | BackendError::Unavailable { .. }
        | BackendError::Busy { .. }
        | BackendError::Cancelled => Verdict::NoEvidence,
    }
}

/// Whether a JSON-RPC error from a modern backend says it no longer serves our
/// revision (-32022 without it in `data.supported`): the cached era is wrong.
pub(crate) fn says_not_modern(code: i64, data: Option<&Value>, ours: ProtocolVersion) -> bool {
    code == UNSUPPORTED_VERSION
        && !data
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|v| v.as_str() == Some(ours.as_str())))
}

/// What a non-2xx answer to a stateless HTTP request means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The body is the JSON-RPC error for our request: the answer.
    Answer,
    /// The body is a -32022 for our request that does not list our revision: on
    /// an established connection the cached era is wrong; to a probe, the answer
    /// (it may name another modern revision).
    Unsupported,
    /// The backend answered as a legacy server would (a 400/404/405 without an
    /// error for our id, as when a session is missing): the cached era is wrong.
    WrongEra,
    /// Only the status (401, 5xx, ...).
    Status,
}

/// Classifies a non-2xx answer to stateless request `id` sent at `ours` (MCP
/// 2026-07-28 basic/transports/streamable-http: modern servers answer 400/404
/// with the JSON-RPC error in the body).
pub(crate) fn refusal(status: u16, body: &[u8], id: u64, ours: ProtocolVersion) -> Refusal {
    let error = serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|v| v.get("id").and_then(Value::as_u64) == Some(id))
        .and_then(|mut v| v.get_mut("error").map(Value::take));
    match error {
        Some(e) => {
            let code = e.get("code").and_then(Value::as_i64).unwrap_or_default();
            if says_not_modern(code, e.get("data"), ours) {
                Refusal::Unsupported
            } else {
                Refusal::Answer
            }
        }
        None if matches!(status, 400 | 404 | 405) => Refusal::WrongEra,
        None => Refusal::Status,
    }
}

/// Puts the per-request envelope into `params._meta` (MCP 2026-07-28 basic/index,
/// per-request fields): revision, client capabilities (`capabilities`, what the
/// caller can carry back to its host; `None`: `{}`, so the backend answers
/// -32021 rather than asking for input that would go nowhere), client info and,
/// when the caller asked for logs, the level.
pub(crate) fn stamp_envelope(
    params: &mut Option<Cow<'_, Params>>,
    version: ProtocolVersion,
    capabilities: Option<Value>,
    log_level: Option<LogLevel>,
) {
    let Some(meta) = meta_mut(params) else {
        return;
    };
    meta.insert(mcp::META_PROTOCOL_VERSION.into(), version.as_str().into());
    meta.insert(
        mcp::META_CLIENT_CAPABILITIES.into(),
        capabilities.unwrap_or_else(|| json!({})),
    );
    meta.insert(mcp::META_CLIENT_INFO.into(), mcp::implementation());
    match log_level {
        Some(l) => meta.insert(mcp::META_LOG_LEVEL.into(), l.as_str().into()),
        None => meta.remove(mcp::META_LOG_LEVEL),
    };
}

/// Sets `params._meta.progressToken` to the upstream id (MCP
/// basic/utilities/progress).
pub(crate) fn set_progress_token(params: &mut Option<Cow<'_, Params>>, id: u64) {
    if let Some(meta) = meta_mut(params) {
        meta.insert("progressToken".into(), Value::from(id));
    }
}

/// `params._meta` as an object, created when missing (`None`: params or `_meta`
/// are not objects); borrowed params are cloned here.
fn meta_mut<'p>(
    params: &'p mut Option<Cow<'_, Params>>,
) -> Option<&'p mut serde_json::Map<String, Value>> {
    let obj = params
        .get_or_insert_with(|| Cow::Owned(json!({}).into()))
        .to_mut()
        .value_mut()?
        .as_object_mut()?;
    obj.entry("_meta")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// What becomes of a request whose method the stateless era removed (MCP
/// 2026-07-28 changelog).
pub(crate) enum Stateless<'a> {
    /// Send it as this method.
    Send(&'a Method),
    /// Answer it locally with this result.
    Answer(RawJson),
    /// `resources/subscribe` (`true`) or `unsubscribe`: the URI joins or leaves
    /// the connection's listen (`backend::listen`).
    Watch(bool),
}

/// `ping` becomes `server/discover` (the health check of a stateless server);
/// `logging/setLevel` is answered locally (the level travels in each request's
/// `_meta`); `resources/subscribe`/`unsubscribe` change what the connection's
/// `subscriptions/listen` asks for; the rest is sent.
pub(crate) fn stateless(method: &Method) -> Stateless<'_> {
    match method {
        Method::Ping => Stateless::Send(&Method::ServerDiscover),
        Method::LoggingSetLevel => Stateless::Answer(RawJson::empty_object()),
        Method::ResourcesSubscribe => Stateless::Watch(true),
        Method::ResourcesUnsubscribe => Stateless::Watch(false),
        _ => Stateless::Send(method),
    }
}

/// What `Mcp-Name` mirrors for `method`: `params.name` (`tools/call`,
/// `prompts/get`), `params.uri` (`resources/read`), `params.taskId` (`tasks/*`).
pub(crate) fn mcp_name(method: &Method, params: Option<&Value>) -> Option<String> {
    let key = match method {
        Method::ToolsCall | Method::PromptsGet => "name",
        Method::ResourcesRead => "uri",
        Method::TasksGet | Method::TasksCancel => "taskId",
        _ => return None,
    };
    Some(params?.get(key)?.as_str()?.to_owned())
}

/// A header value for `s` by the 2026-07-28 value encoding
/// ([`encode_header_value`](crate::streamable_http::encode_header_value)).
pub(crate) fn header_value(s: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&crate::streamable_http::encode_header_value(s)).ok()
}

/// The handshake's equivalent from a `DiscoverResult` (MCP 2026-07-28
/// server/discover). Errors: [`BackendError::Protocol`] when it is not one, or
/// when `supportedVersions` does not name `version`.
pub(crate) fn discover_info(
    backend: &str,
    raw: &RawJson,
    version: ProtocolVersion,
) -> Result<InitInfo, BackendError> {
    let result: Value = raw
        .parse()
        .map_err(|e| BackendError::protocol(backend, format!("server/discover: {e}")))?;
    let names_ours = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|s| s.iter().any(|v| v.as_str() == Some(version.as_str())));
    if !names_ours {
        return Err(BackendError::protocol(
            backend,
            format!("server/discover does not list {version}"),
        ));
    }
    Ok(InitInfo {
        version,
        capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::ErrorObject;

    fn rpc(code: i64, data: Value) -> BackendError {
        BackendError::Rpc(ErrorObject::new(code, "x").with_data(data))
    }

    fn status(status: u16) -> BackendError {
        BackendError::HttpStatus {
            backend: "b".into(),
            status,
        }
    }

    #[test]
    fn probe_failures_by_evidence() {
        let m = ProtocolVersion::MODERN;
        let legacy_only = rpc(-32022, json!({"supported": ["2025-11-25"]}));
        assert_eq!(classify_probe_failure(&legacy_only, m), Verdict::Legacy);
        let ours = rpc(-32022, json!({"supported": ["2026-07-28"]}));
        assert_eq!(classify_probe_failure(&ours, m), Verdict::Legacy);
        assert_eq!(
            classify_probe_failure(&rpc(-32601, json!(null)), m),
            Verdict::Legacy
        );
        for s in [400, 404, 405] {
            assert_eq!(classify_probe_failure(&status(s), m), Verdict::Legacy);
        }
        for s in [401, 403, 500, 503] {
            assert_eq!(classify_probe_failure(&status(s), m), Verdict::NoEvidence);
        }
        let reset = BackendError::closed("b", "connection reset");
        assert_eq!(classify_probe_failure(&reset, m), Verdict::NoEvidence);
        let garbage = BackendError::protocol("b", "not json");
        assert_eq!(classify_probe_failure(&garbage, m), Verdict::Legacy);
    }

    #[test]
    fn refusals_by_body() {
        let m = ProtocolVersion::MODERN;
        let err = |id: Value, code: i64, data: Value| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "x", "data": data}})
                .to_string()
        };
        for code in [-32600, -32601, -32602, -32603, -32020, -32021] {
            let body = err(json!(4), code, json!(null));
            assert_eq!(
                refusal(400, body.as_bytes(), 4, m),
                Refusal::Answer,
                "{code}"
            );
        }
        let ours = err(json!(4), -32022, json!({"supported": ["2026-07-28"]}));
        assert_eq!(refusal(400, ours.as_bytes(), 4, m), Refusal::Answer);
        let gone = err(json!(4), -32022, json!({"supported": ["2025-11-25"]}));
        assert_eq!(refusal(400, gone.as_bytes(), 4, m), Refusal::Unsupported);
        let no_session = err(Value::Null, -32000, json!(null));
        assert_eq!(refusal(400, no_session.as_bytes(), 4, m), Refusal::WrongEra);
        assert_eq!(refusal(405, b"", 4, m), Refusal::WrongEra);
        assert_eq!(refusal(401, b"", 4, m), Refusal::Status);
        assert_eq!(refusal(503, no_session.as_bytes(), 4, m), Refusal::Status);
    }

    #[test]
    fn envelope_and_headers() {
        let given: Params = json!({"name": "t", "_meta": {"progressToken": 3}}).into();
        let mut p = Some(Cow::Borrowed(&given));
        stamp_envelope(&mut p, ProtocolVersion::MODERN, None, Some(LogLevel::Info));
        let meta = &p.as_ref().unwrap()["_meta"];
        assert_eq!(meta["progressToken"], 3);
        assert_eq!(meta[mcp::META_PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(meta[mcp::META_CLIENT_CAPABILITIES], json!({}));
        assert_eq!(meta[mcp::META_CLIENT_INFO]["name"], "mcpgate");
        assert_eq!(meta[mcp::META_LOG_LEVEL], "info");
        // Borrowed params are cloned for the change, never changed in place.
        assert!(matches!(p, Some(Cow::Owned(_))));
        assert_eq!(given["_meta"], json!({"progressToken": 3}));
        assert_eq!(
            mcp_name(&Method::ToolsCall, p.as_deref().map(|p| &**p)).as_deref(),
            Some("t")
        );
        assert_eq!(header_value("get_time").unwrap(), "get_time");
        assert_eq!(header_value("é").unwrap(), "=?base64?w6k=?=");
        assert!(says_not_modern(
            -32022,
            Some(&json!({"supported": ["2025-11-25"]})),
            ProtocolVersion::MODERN
        ));
        assert!(!says_not_modern(-32601, None, ProtocolVersion::MODERN));
    }
}

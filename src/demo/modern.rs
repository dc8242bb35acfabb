//! The demo server's 2026-07-28 ("modern", stateless) requests, next to its
//! sessions (MCP 2026-07-28 basic/versioning: a dual-era server picks the era from
//! how the client opens).
//!
//! A request whose `params._meta` claims a protocol version is stateless, on stdio
//! and over HTTP, whatever else the connection did: it climbs the validation
//! ladder, first failure wins (`_meta` fields → -32602, over HTTP the headers →
//! -32020 (`streamable_http::check_metadata`), the revision → -32022 with
//! `data.supported`, the method → -32601), and is then served with only what it
//! declares ([`Stateless`]): its client capabilities, its log level (no logs
//! without one), and for `tools/call`, `prompts/get` and `resources/read` an MRTR
//! [`Round`] in place of server→client requests. Every result gets `resultType`
//! and the server's identity in `_meta`; the cacheable ones `ttlMs` and
//! `cacheScope` ([`complete`]).

use axum::http::StatusCode;
use mcpgate::jsonrpc::{
    ErrorObject, HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY,
    RESOURCE_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION,
};
use mcpgate::mcp::{
    LogLevel, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION, META_SERVER_INFO,
    Method, ProtocolVersion, Request,
};
use serde_json::{Map, Value, json};

use crate::demo::mrtr::{Round, call_digest};
use crate::demo::server::Server;

/// What a stateless request declared, for its handlers.
pub(crate) struct Stateless {
    /// `io.modelcontextprotocol/clientCapabilities` of this request.
    pub(crate) capabilities: Value,
    /// `io.modelcontextprotocol/logLevel`; `None`: no log notifications at all
    /// (MCP 2026-07-28 server/utilities/logging).
    pub(crate) log_level: Option<LogLevel>,
    /// The MRTR round of a `tools/call`, `prompts/get` or `resources/read`.
    pub(crate) round: Option<Round>,
}

/// Whether `params._meta` claims a protocol version: the message is modern.
pub(crate) fn claims(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .is_some()
}

/// The first rung: `_meta` carries `protocolVersion` (a string) and
/// `clientCapabilities` (an object) (MCP 2026-07-28 basic/index, per-request
/// fields). Returns the claimed version; `-32602` otherwise.
pub(crate) fn claimed_version(req: &Request) -> Result<&str, ErrorObject> {
    let meta = req.params.as_ref().and_then(|p| p.get("_meta"));
    let field = |key: &str| meta.and_then(|m| m.get(key)).filter(|v| !v.is_null());
    let missing = |key: &str, kind: &str| {
        let problem = if field(key).is_some() {
            format!("must be {kind}")
        } else {
            "is required".to_owned()
        };
        ErrorObject::new(
            INVALID_PARAMS,
            format!("Invalid params: params._meta[\"{key}\"] {problem}"),
        )
    };
    let version = field(META_PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| missing(META_PROTOCOL_VERSION, "a string"))?;
    if !field(META_CLIENT_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(missing(META_CLIENT_CAPABILITIES, "an object"));
    }
    Ok(version)
}

/// The rungs after the headers: the revision is one this server speaks
/// statelessly (else -32022 naming every revision it serves, MCP 2026-07-28
/// basic/versioning), the method exists on this revision (else -32601: the
/// removed `initialize`, `ping`, `logging/setLevel`, `resources/(un)subscribe`
/// and unknown ones), and a log level is valid (else -32602).
pub(crate) fn admit(req: &Request, version: &str) -> Result<Stateless, ErrorObject> {
    if !ProtocolVersion::parse(version).is_some_and(ProtocolVersion::is_modern) {
        let supported: Vec<&str> = ProtocolVersion::SERVED.iter().map(|v| v.as_str()).collect();
        return Err(ErrorObject::new(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("Unsupported protocol version: {version}"),
        )
        .with_data(json!({ "supported": supported, "requested": version })));
    }
    if !served(&req.method) {
        return Err(ErrorObject::new(
            METHOD_NOT_FOUND,
            format!("Method not found: {}", req.method),
        ));
    }
    let params = req.params.as_deref().cloned().unwrap_or_else(|| json!({}));
    let meta = &params["_meta"];
    let log_level = match &meta[META_LOG_LEVEL] {
        Value::Null => None,
        v => Some(v.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            ErrorObject::new(
                INVALID_PARAMS,
                format!("Invalid params: unknown log level {v}"),
            )
        })?),
    };
    let round = match req.method {
        Method::ToolsCall | Method::PromptsGet | Method::ResourcesRead => Some(Round::from_params(
            &params,
            call_digest(&req.method, &params),
        )?),
        _ => None,
    };
    Ok(Stateless {
        capabilities: meta[META_CLIENT_CAPABILITIES].clone(),
        log_level,
        round,
    })
}

/// The whole ladder where there are no headers to check (stdio).
pub(crate) fn validate(req: &Request) -> Result<Stateless, ErrorObject> {
    let version = claimed_version(req)?;
    admit(req, version)
}

/// The client→server requests of 2026-07-28 this server serves.
fn served(method: &Method) -> bool {
    matches!(
        method,
        Method::ServerDiscover
            | Method::ToolsList
            | Method::ToolsCall
            | Method::PromptsList
            | Method::PromptsGet
            | Method::ResourcesList
            | Method::ResourcesTemplatesList
            | Method::ResourcesRead
            | Method::CompletionComplete
            | Method::SubscriptionsListen
    )
}

/// The HTTP status of a stateless error answer (MCP 2026-07-28
/// basic/transports/streamable-http and basic/index, error codes): 404 for
/// -32601, 400 for -32020, -32021 and -32022, 200 for the in-band others.
/// Envelope failures (-32602 before the method runs) are 400 where they are
/// found, not here.
pub(crate) fn status_of(code: i64) -> StatusCode {
    match code {
        METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// `server/discover` (MCP 2026-07-28 server/discover): every revision served,
/// the capabilities, the instructions; [`complete`] adds the rest.
pub(crate) fn discover(server: &Server) -> Value {
    let supported: Vec<&str> = ProtocolVersion::SERVED.iter().map(|v| v.as_str()).collect();
    let mut result = json!({
        "supportedVersions": supported,
        "capabilities": server.capabilities(),
    });
    if let Some(instructions) = &server.info().instructions {
        result["instructions"] = json!(instructions);
    }
    result
}

/// Makes a handler's result a 2026-07-28 one: `resultType: "complete"` unless it
/// names its type, the server's identity in `_meta`
/// (`io.modelcontextprotocol/serverInfo`), and on the cacheable results
/// (`server/discover`, the four lists, a complete `resources/read`) `ttlMs: 0`
/// (the demo's lists and counter change at run time) and `cacheScope: "public"`
/// (nothing here depends on who asks) (MCP 2026-07-28 basic/index §ResultType,
/// server/utilities/caching).
pub(crate) fn complete(method: &Method, result: Value, server: &Server) -> Value {
    let mut result = match result {
        Value::Object(m) => m,
        other => return other,
    };
    let kind = result
        .entry("resultType")
        .or_insert_with(|| "complete".into())
        .clone();
    let cacheable = method.list_kind().is_some()
        || matches!(method, Method::ServerDiscover | Method::ResourcesRead);
    if cacheable && kind == "complete" {
        result.entry("ttlMs").or_insert_with(|| 0.into());
        result
            .entry("cacheScope")
            .or_insert_with(|| "public".into());
    }
    let info = server.info();
    let mut identity = json!({ "name": info.name, "version": info.version });
    if let Some(title) = &info.title {
        identity["title"] = json!(title);
    }
    if let Value::Object(meta) = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        meta.insert(META_SERVER_INFO.into(), identity);
    }
    Value::Object(result)
}

/// A handler's error shaped for 2026-07-28: a missing resource is -32602 (with
/// `data.uri`), not -32002 (MCP 2026-07-28 server/resources, error handling).
pub(crate) fn shape_error(mut e: ErrorObject) -> ErrorObject {
    if e.code == RESOURCE_NOT_FOUND {
        e.code = INVALID_PARAMS;
    }
    e
}

#[cfg(test)]
mod tests {
    use mcpgate::jsonrpc::Id;

    use super::*;

    fn req(method: &str, meta: Value) -> Request {
        let mut params = Map::new();
        params.insert("_meta".into(), meta);
        Request {
            id: Id::Num(1),
            method: Method::parse(method),
            params: Some(Value::Object(params).into()),
        }
    }

    fn envelope() -> Value {
        json!({ META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {} })
    }

    #[test]
    fn the_ladder_in_order() {
        assert!(claims(
            req("x", json!({ META_PROTOCOL_VERSION: 1 }))
                .params
                .as_deref()
        ));
        let code = |r: Request| validate(&r).err().map(|e| e.code);
        assert_eq!(
            code(req("server/discover", json!({}))),
            Some(INVALID_PARAMS)
        );
        let no_caps = json!({ META_PROTOCOL_VERSION: "2026-07-28" });
        assert_eq!(code(req("server/discover", no_caps)), Some(INVALID_PARAMS));
        let old = json!({ META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {} });
        let e = validate(&req("initialize", old)).err().unwrap();
        assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e.data.unwrap()["supported"][0], "2026-07-28");
        for removed in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "x/y",
        ] {
            assert_eq!(
                code(req(removed, envelope())),
                Some(METHOD_NOT_FOUND),
                "{removed}"
            );
        }
        let mut loud = envelope();
        loud[META_LOG_LEVEL] = json!("loud");
        assert_eq!(code(req("tools/list", loud)), Some(INVALID_PARAMS));
        let ok = validate(&req("tools/call", envelope())).ok().unwrap();
        assert!(ok.round.is_some() && ok.log_level.is_none());
        assert_eq!(status_of(METHOD_NOT_FOUND), StatusCode::NOT_FOUND);
        assert_eq!(
            status_of(MISSING_CLIENT_CAPABILITY),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status_of(INVALID_PARAMS), StatusCode::OK);
    }

    #[test]
    fn results_get_their_type_and_cache_hints() {
        let server = crate::demo::demo_server();
        let list = complete(&Method::ToolsList, json!({ "tools": [] }), &server);
        assert_eq!(list["resultType"], "complete");
        assert_eq!(list["ttlMs"], 0);
        assert_eq!(list["cacheScope"], "public");
        assert_eq!(list["_meta"][META_SERVER_INFO]["name"], "mcpgate-demo");
        let asked = json!({ "resultType": "input_required", "requestState": "s" });
        let asked = complete(&Method::ResourcesRead, asked, &server);
        assert!(asked.get("ttlMs").is_none());
        let call = complete(&Method::ToolsCall, json!({ "content": [] }), &server);
        assert!(call.get("cacheScope").is_none());
        let e = shape_error(ErrorObject::new(RESOURCE_NOT_FOUND, "gone"));
        assert_eq!(e.code, INVALID_PARAMS);
    }
}

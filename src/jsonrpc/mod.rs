//! JSON-RPC 2.0 envelope: message classification, ids and standard error objects.
//!
//! MCP (2025-11-25 basic/index) carries every message as a JSON-RPC 2.0 request,
//! notification or response. This module only classifies the envelope and knows no
//! MCP vocabulary: a method name is parsed into whatever [`MethodName`] the caller
//! asks for (the gateway's is `mcp::Method`, see `mcp::Message`); a request's
//! `params` are a `serde_json::Value` or, where the method asks, the text they
//! arrived in, parsed when read ([`Params`]); a response's `result` stays raw text
//! ([`RawJson`], sharing the bytes it arrived in) so that large results pass
//! through without being parsed unless the router has to rewrite something inside them.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod id;
mod params;
mod parse;
mod raw;
mod surrogates;
pub use id::{Id, LoggedId};
pub use params::Params;
pub use parse::{classify_raw, classify_raw_in, parse_message, parse_message_in, string_member};
pub use raw::{Encoded, RawJson, result_encoded};

/// Parse error: the body is not JSON (JSON-RPC 2.0 §5.1).
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid JSON-RPC message.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available (also: capability not offered).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (MCP: unknown tool, bad cursor, unsupported version …).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2025-11-25 server/resources: resource not found.
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// SDK convention (not spec) for transport-level rejections (400/403/406/415).
pub const TRANSPORT_ERROR: i64 = -32000;
/// SDK convention (not spec) for "session not found" (404).
pub const SESSION_NOT_FOUND: i64 = -32001;
/// MCP 2026-07-28: unsupported protocol version, `data: {supported, requested}`.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// A header disagrees with the body (MCP 2026-07-28 streamable-http, server validation).
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability it did not declare (MCP 2026-07-28 basic/index).
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2025-11-25 client/elicitation: the request needs URL elicitations first,
/// `data.elicitations[]`. Removed in 2026-07-28 (never sent to a modern host).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// A JSON-RPC error object (`{code, message, data?}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Integer error code.
    pub code: i64,
    /// Short human-readable description.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// What a message's method name becomes when the message is classified: parsed
/// once, by the vocabulary above the envelope (`mcp::Method`). Parsing never fails:
/// a vocabulary keeps names it does not know (JSON-RPC 2.0 §4: any string is a
/// method name).
pub trait MethodName {
    /// The method named `name` on the wire, e.g. `"tools/call"`.
    fn from_name(name: &str) -> Self;

    /// Whether a request of this method keeps its params as the JSON text it
    /// arrived with ([`Params`], parsed when read) rather than parsed at once:
    /// for requests usually forwarded with one member replaced. `false` by default.
    fn keeps_params_text(&self) -> bool {
        false
    }
}

/// The name verbatim, for code that needs no vocabulary.
impl MethodName for String {
    fn from_name(name: &str) -> Self {
        name.to_owned()
    }
}

/// A request: has a method (parsed into `M`) and a non-null id.
#[derive(Debug, Clone)]
pub struct Request<M> {
    /// Request id, unique per requestor within a session.
    pub id: Id,
    /// Method, e.g. `tools/call` (parsed once, when the message is framed).
    pub method: M,
    /// Parameters (an object when present): text or a value, see [`Params`].
    pub params: Option<Params>,
}

/// A notification: has a method (parsed into `M`) and no id.
#[derive(Debug, Clone)]
pub struct Notification<M> {
    /// Method, e.g. `notifications/progress`.
    pub method: M,
    /// Parameters (an object when present).
    pub params: Option<Value>,
}

/// A response: a result or an error for the request with the same id.
#[derive(Debug)]
pub struct Response {
    /// The id of the request answered; `None` only for errors about unreadable ids.
    pub id: Option<Id>,
    /// The result (kept raw, sharing the bytes it arrived in) or the error.
    pub outcome: Result<RawJson, ErrorObject>,
}

/// One JSON-RPC message of any kind, its method parsed into `M`.
#[derive(Debug)]
pub enum Message<M> {
    /// A request.
    Request(Request<M>),
    /// A notification.
    Notification(Notification<M>),
    /// A response (result or error).
    Response(Response),
}

/// Why a JSON value is not a JSON-RPC message; maps to `-32700` or `-32600`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvelopeError {
    /// The text is not JSON (`-32700`).
    #[error("parse error: {0}")]
    Parse(String),
    /// JSON, but not a valid JSON-RPC 2.0 message (`-32600`).
    #[error("invalid request: {reason}")]
    Invalid {
        /// The id when it could be read, so the error can echo it.
        id: Option<Id>,
        /// What is wrong.
        reason: Cow<'static, str>,
    },
    /// JSON without a `method` (so meant as a response) that is not a valid
    /// JSON-RPC 2.0 response (`-32600`). Never answered with a response tied
    /// to its id: a response is not answered (JSON-RPC 2.0 §5); over HTTP the
    /// refusal's body is an error with no id (MCP 2025-11-25 basic/transports).
    #[error("invalid response: {0}")]
    Response(Cow<'static, str>),
}

impl EnvelopeError {
    /// The JSON-RPC error object for this failure.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            EnvelopeError::Parse(m) => ErrorObject::new(PARSE_ERROR, format!("Parse error: {m}")),
            EnvelopeError::Invalid { reason, .. } | EnvelopeError::Response(reason) => {
                ErrorObject::new(INVALID_REQUEST, format!("Invalid Request: {reason}"))
            }
        }
    }

    /// The id to echo in the error response, if one could be read.
    pub fn id(&self) -> Option<&Id> {
        match self {
            EnvelopeError::Parse(_) | EnvelopeError::Response(_) => None,
            EnvelopeError::Invalid { id, .. } => id.as_ref(),
        }
    }

    /// Whether the message was meant as a response (it has no `method`): its
    /// refusal has no id at all, not a `null` one.
    pub fn is_response(&self) -> bool {
        matches!(self, EnvelopeError::Response(_))
    }
}

/// Most characters of a host-sent name repeated in an error message.
const ECHO_MAX: usize = 128;

/// `name` as an error message or a log line repeats it: whole up to
/// [`ECHO_MAX`] characters, else cut there with its length in bytes (a host that
/// sends a 500 KB name is not sent 500 KB back, nor logged whole).
pub fn clip(name: &str) -> Cow<'_, str> {
    if name.len() <= ECHO_MAX {
        return Cow::Borrowed(name);
    }
    match name.char_indices().nth(ECHO_MAX) {
        None => Cow::Borrowed(name),
        Some((at, _)) => Cow::Owned(format!("{}… ({} bytes)", &name[..at], name.len())),
    }
}

/// Serializes a request whose params may be text ([`Params::text`], written
/// as it is) or a value.
pub fn request_params_bytes(id: &Id, method: &str, params: Option<&Params>) -> Vec<u8> {
    let Some(text) = params.and_then(Params::text) else {
        return request_bytes(id, method, params.map(|p| &**p));
    };
    let mut out = Vec::with_capacity(text.len() + method.len() + 64);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let head = serde_json::to_writer(&mut out, id).and_then(|()| {
        out.extend_from_slice(b",\"method\":");
        serde_json::to_writer(&mut out, method)
    });
    if head.is_err() {
        return Vec::new();
    }
    out.extend_from_slice(b",\"params\":");
    out.extend_from_slice(text.as_bytes());
    out.push(b'}');
    out
}

/// Serializes a request.
pub fn request_bytes(id: &Id, method: &str, params: Option<&Value>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: &'a Id,
        method: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<&'a Value>,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
    .unwrap_or_default()
}

/// Serializes a notification.
pub fn notification_bytes(method: &str, params: Option<&Value>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        method: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<&'a Value>,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        method,
        params,
    })
    .unwrap_or_default()
}

/// Whether the JSON text `raw` contains `needle`, byte for byte: the filter
/// that lets a result nothing needs to touch pass without a parse. Long texts
/// get a SIMD substring search (`memchr::memmem`, ~0.5 instructions per byte on
/// a 1 MiB result against ~3 for `str::contains`); short ones a `memchr` of the
/// needle's first byte, whose set-up is cheaper than building a `memmem` finder.
pub fn raw_contains(raw: &[u8], needle: &str) -> bool {
    /// Below this many bytes looking for the first byte costs less than
    /// building a `memmem` finder (callgrind).
    const SIMD_FROM: usize = 4096;
    let needle = needle.as_bytes();
    match needle.first() {
        None => true,
        Some(&first) if raw.len() < SIMD_FROM => {
            memchr::memchr_iter(first, raw).any(|i| raw[i..].starts_with(needle))
        }
        Some(_) => memchr::memmem::find(raw, needle).is_some(),
    }
}

/// Serializes a success response whose result is already JSON text (`result`:
/// its bytes).
pub fn result_bytes(id: &Id, result: &[u8]) -> Vec<u8> {
    let id = serde_json::to_string(id).unwrap_or_default();
    let mut out = Vec::with_capacity(result.len() + id.len() + 32);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result);
    out.push(b'}');
    out
}

/// Serializes a success response from a JSON value.
pub fn result_value_bytes(id: &Id, result: &Value) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: &'a Id,
        result: &'a Value,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        result,
    })
    .unwrap_or_default()
}

/// Serializes an error response; `id: None` is written as `null`.
pub fn error_bytes(id: Option<&Id>, error: &ErrorObject) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: Option<&'a Id>,
        error: &'a ErrorObject,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        error,
    })
    .unwrap_or_default()
}

/// Serializes an error with no `id` member at all (HTTP-plane rejections, MCP
/// 2025-11-25 transports: "a JSON-RPC error response that has no id").
pub fn error_bytes_without_id(error: &ErrorObject) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        error: &'a ErrorObject,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        error,
    })
    .unwrap_or_default()
}

/// Reads `params._meta.progressToken` (a string or an integer) if present.
pub fn progress_token(params: Option<&Value>) -> Option<&Value> {
    params?
        .get("_meta")?
        .get("progressToken")
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Message<String>, EnvelopeError> {
        parse_message(s.as_bytes())
    }

    /// JSON the skimming first pass accepts but a full parse
    /// rejects is a parse error, and an object's own defects are named.
    #[test]
    fn syntax_found_late_is_a_parse_error_and_data_defects_are_named() {
        // A lone surrogate escape is read as U+FFFD, except in the id, which
        // could not be echoed back as sent.
        let surrogate = r#"{"jsonrpc":"2.0","id":"\ud800","method":"ping"}"#;
        assert!(
            matches!(
                parse(surrogate),
                Err(EnvelopeError::Invalid { id: None, .. })
            ),
            "{surrogate}"
        );
        let both = r#"{"jsonrpc":"2.0","id":"\ud800","method":"m","params":{"a":"\udc00"}}"#;
        assert!(
            matches!(parse(both), Err(EnvelopeError::Invalid { id: None, .. })),
            "{both}"
        );
        let surrogate = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"\ud800"}}"#;
        match parse(surrogate) {
            Ok(Message::Request(r)) => assert_eq!(r.params.unwrap()["a"], "\u{FFFD}"),
            other => panic!("unexpected {other:?}"),
        }
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}{}}}}}"#,
            "[".repeat(1000),
            "]".repeat(1000)
        );
        assert!(matches!(parse(&deep), Err(EnvelopeError::Parse(_))));
        match parse(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#) {
            Err(EnvelopeError::Invalid { reason, .. }) => {
                assert!(reason.contains("duplicate field `id`"), "{reason}")
            }
            other => panic!("unexpected {other:?}"),
        }
        // A defect found before a syntax error further on: not JSON, so -32700.
        let unterminated = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping""#;
        assert!(
            matches!(parse(unterminated), Err(EnvelopeError::Parse(_))),
            "{unterminated}"
        );
        assert!(matches!(parse("[1"), Err(EnvelopeError::Parse(_))));
        for not_object in [r#"["2.0", 1, "ping"]"#, "7"] {
            match parse(not_object) {
                Err(EnvelopeError::Invalid { reason, .. }) => {
                    assert_eq!(reason, "a JSON-RPC message must be a JSON object")
                }
                other => panic!("{not_object}: unexpected {other:?}"),
            }
        }
        match parse("[1]") {
            Err(EnvelopeError::Invalid { reason, .. }) => {
                assert_eq!(reason, "a JSON-RPC message must be a JSON object")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn classifies_the_three_kinds() {
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Message::Request(Request { id: Id::Num(1), .. }))
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification(_))
        ));
        match parse(r#"{"jsonrpc":"2.0","id":"a","result":{"x":[1,2]}}"#) {
            Ok(Message::Response(Response {
                id: Some(Id::Str(s)),
                outcome: Ok(r),
            })) => {
                assert_eq!(&*s, "a");
                assert_eq!(r.get(), r#"{"x":[1,2]}"#);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#),
            Ok(Message::Response(Response {
                id: None,
                outcome: Err(_)
            }))
        ));
    }

    #[test]
    fn reads_escaped_method_names() {
        let escaped = parse(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#).unwrap();
        let Message::Request(r) = escaped else {
            panic!("not a request")
        };
        assert_eq!(r.method, "tools/call", "unescaped");
    }

    #[test]
    fn keeps_id_types_apart() {
        let a = parse(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).unwrap();
        let b = parse(r#"{"jsonrpc":"2.0","id":"1","method":"m"}"#).unwrap();
        let (Message::Request(a), Message::Request(b)) = (a, b) else {
            panic!("not requests")
        };
        assert_ne!(a.id, b.id);
        assert_eq!(serde_json::to_string(&a.id).unwrap(), "1");
        assert_eq!(serde_json::to_string(&b.id).unwrap(), "\"1\"");
    }

    #[test]
    fn rejects_bad_envelopes() {
        let cases = [
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"[1]"#,
            r#""text""#,
        ];
        for c in cases {
            match parse(c) {
                Err(EnvelopeError::Invalid { .. }) => {}
                // No method: meant as a response, refused without an id.
                Err(EnvelopeError::Response(_)) if !c.contains("method") => {}
                other => panic!("{c}: expected invalid, got {other:?}"),
            }
        }
        assert!(matches!(parse("{nope"), Err(EnvelopeError::Parse(_))));
        assert!(matches!(parse(""), Err(EnvelopeError::Parse(_))));
    }

    #[test]
    fn invalid_keeps_readable_id() {
        let e = parse(r#"{"jsonrpc":"1.0","id":"x","method":"m"}"#).unwrap_err();
        assert_eq!(e.id(), Some(&Id::Str("x".into())));
    }

    #[test]
    fn serializes_responses() {
        let raw = serde_json::value::RawValue::from_string(r#"{"ok":true}"#.into()).unwrap();
        assert_eq!(
            String::from_utf8(result_bytes(&Id::Str("7".into()), raw.get().as_bytes())).unwrap(),
            r#"{"jsonrpc":"2.0","id":"7","result":{"ok":true}}"#
        );
        let e = ErrorObject::new(METHOD_NOT_FOUND, "Method not found");
        assert_eq!(
            String::from_utf8(error_bytes(None, &e)).unwrap(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}"#
        );
    }

    #[test]
    fn reads_progress_tokens() {
        let p = serde_json::json!({"_meta": {"progressToken": 7}});
        assert_eq!(progress_token(Some(&p)), Some(&Value::from(7)));
        let p = serde_json::json!({"_meta": {"progressToken": null}});
        assert_eq!(progress_token(Some(&p)), None);
    }
}

//! The 2026-07-28 request metadata headers checked against the body (MCP 2026-07-28
//! basic/transports/streamable-http, "Request Metadata" and "Server Validation"):
//! one rule for every server of the transport, the gateway's modern face and the
//! demo server alike. A failure is answered with HTTP 400 and JSON-RPC `-32020`
//! (`HeaderMismatch`) by the caller.

use axum::http::HeaderMap;
use base64::Engine;
use serde_json::Value;

use super::{MCP_METHOD, MCP_NAME, PROTOCOL_VERSION};
use crate::jsonrpc::clip;
use crate::mcp::Method;

/// The `params` member `Mcp-Name` mirrors for `method`, if it has one: `name`
/// (`tools/call`, `prompts/get`), `uri` (`resources/read`) or `taskId`
/// (`tasks/get`, `tasks/cancel`; tasks extension, routing headers).
pub fn name_param(method: &Method) -> Option<&'static str> {
    match method {
        Method::ToolsCall | Method::PromptsGet => Some("name"),
        Method::ResourcesRead => Some("uri"),
        Method::TasksGet | Method::TasksCancel => Some("taskId"),
        _ => None,
    }
}

/// A header value with the `=?base64?…?=` form decoded (values that are not plain
/// visible ASCII travel that way, standard alphabet, UTF-8 inside). `None`: the
/// form is malformed.
pub fn decode_header_value(v: &str) -> Option<String> {
    let Some(inner) = v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    else {
        return Some(v.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Checks the standard headers of a 2026-07-28 request against its body:
/// `MCP-Protocol-Version` present and equal to `version` (the `_meta` claim),
/// `Mcp-Method` present and equal to `method`, and `Mcp-Name` present and equal
/// (after decoding) to the [`name_param`] member where the method has one. Each
/// header at most once. `Err` says what disagrees, for the `-32020` message.
pub fn check_metadata(
    h: &HeaderMap,
    method: &Method,
    params: Option<&Value>,
    version: &str,
) -> Result<(), String> {
    let one = |name: &str| -> Result<Option<String>, String> {
        let mut values = h.get_all(name).iter();
        let Some(v) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(format!("more than one {name} header"));
        }
        let v = v
            .to_str()
            .map_err(|_| format!("{name} is not visible ASCII"))?;
        decode_header_value(v.trim())
            .map(Some)
            .ok_or_else(|| format!("{name} has a malformed =?base64?…?= value"))
    };
    match one(PROTOCOL_VERSION)? {
        Some(v) if v == version => {}
        Some(v) => {
            return Err(format!(
                "MCP-Protocol-Version {:?} but params._meta names {:?}",
                clip(&v),
                clip(version)
            ));
        }
        None => return Err("MCP-Protocol-Version is required".into()),
    }
    match one(MCP_METHOD)? {
        Some(m) if m == method.as_str() => {}
        Some(m) => {
            return Err(format!(
                "Mcp-Method {:?} but the body's method is {:?}",
                clip(&m),
                clip(method.as_str())
            ));
        }
        None => return Err("Mcp-Method is required".into()),
    }
    let Some(key) = name_param(method) else {
        return Ok(());
    };
    let want = params.and_then(|p| p.get(key)).and_then(Value::as_str);
    match (one(MCP_NAME)?, want) {
        (Some(n), Some(w)) if n == w => Ok(()),
        (None, _) => Err("Mcp-Name is required".into()),
        (Some(n), Some(w)) => Err(format!(
            "Mcp-Name {:?} but params.{key} is {:?}",
            clip(&n),
            clip(w)
        )),
        (Some(n), None) => Err(format!(
            "Mcp-Name {:?} but the body has no params.{key}",
            clip(&n)
        )),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    #[test]
    fn decodes_base64_header_values() {
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        let enc = base64::engine::general_purpose::STANDARD.encode("wetter-übersicht");
        assert_eq!(
            decode_header_value(&format!("=?base64?{enc}?=")).as_deref(),
            Some("wetter-übersicht")
        );
        assert_eq!(decode_header_value("=?base64?!!!?="), None);
    }

    #[test]
    fn headers_must_mirror_the_body() {
        let mut h = HeaderMap::new();
        let params = json!({"name": "echo"});
        let check =
            |h: &HeaderMap| check_metadata(h, &Method::ToolsCall, Some(&params), "2026-07-28");
        assert!(check(&h).unwrap_err().contains("MCP-Protocol-Version"));
        h.insert(PROTOCOL_VERSION, HeaderValue::from_static("2026-07-28"));
        h.insert(MCP_METHOD, HeaderValue::from_static("tools/call"));
        assert!(check(&h).unwrap_err().contains("Mcp-Name is required"));
        h.insert(MCP_NAME, HeaderValue::from_static("=?base64?ZWNobw==?="));
        assert_eq!(check(&h), Ok(()));
        h.insert(MCP_NAME, HeaderValue::from_static("other"));
        assert!(check(&h).unwrap_err().contains("params.name"));
        h.append(MCP_METHOD, HeaderValue::from_static("tools/call"));
        assert!(check(&h).unwrap_err().contains("more than one"));
        let discover = check_metadata(&h, &Method::ServerDiscover, None, "2026-07-28");
        assert!(discover.unwrap_err().contains("more than one"));
    }
}

//! Request header checks of the demo's Streamable HTTP endpoint that the library's
//! [`mcpgate::streamable_http`] rules do not make for it: its `Host`/`Origin` policy
//! and the `MCP-Protocol-Version` header (MCP 2025-11-25 basic/transports).

use axum::http::{HeaderMap, header};
use mcpgate::streamable_http::{is_loopback_name, is_loopback_origin, strip_port};

use crate::demo::http::HostPolicy;

/// DNS-rebinding protection: `Err` names what is not allowed (answered with 403).
pub(crate) fn check_host(policy: HostPolicy, headers: &HeaderMap) -> Result<(), &'static str> {
    let host = header_str(headers, header::HOST.as_str());
    let origin = header_str(headers, header::ORIGIN.as_str());
    match policy {
        HostPolicy::Localhost => {
            if host.is_some_and(|h| !is_loopback_name(strip_port(&h.to_ascii_lowercase()))) {
                return Err("Host header is not a loopback host");
            }
            if origin.is_some_and(|o| !is_loopback_origin(o)) {
                return Err("Origin is not a loopback origin");
            }
        }
        HostPolicy::SameOrigin => {
            if let Some(o) = origin {
                let same = match (origin_authority(o), host) {
                    (Some(a), Some(h)) => a.eq_ignore_ascii_case(h),
                    _ => false,
                };
                if !same {
                    return Err("Origin does not match Host");
                }
            }
        }
    }
    Ok(())
}

/// A header's value, if present and visible ASCII.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `host[:port]` part of an origin such as `http://localhost:3000`.
fn origin_authority(origin: &str) -> Option<&str> {
    let (_, rest) = origin.split_once("://")?;
    Some(rest.split('/').next().unwrap_or(rest))
}

/// `true` unless the `MCP-Protocol-Version` header names a revision we do not speak
/// (MCP 2025-11-25 basic/transports "Protocol Version Header": → 400).
pub(crate) fn supported_version(headers: &HeaderMap) -> bool {
    mcpgate::streamable_http::protocol_version(headers).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_authorities() {
        assert_eq!(
            origin_authority("http://127.0.0.1:5/x"),
            Some("127.0.0.1:5")
        );
        assert_eq!(origin_authority("null"), None);
    }
}

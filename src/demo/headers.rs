//! Request header checks for Streamable HTTP: Host/Origin, Accept, Content-Type and
//! `MCP-Protocol-Version` (MCP 2025-11-25 basic/transports).

use std::net::Ipv4Addr;

use axum::http::{HeaderMap, header};

use crate::demo::http::HostPolicy;
use crate::demo::server::SUPPORTED_VERSIONS;

/// The JSON media type.
pub(crate) const JSON: &str = "application/json";
/// The SSE media type.
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// DNS-rebinding protection: `Err` names what is not allowed (answered with 403).
pub(crate) fn check_host(policy: HostPolicy, headers: &HeaderMap) -> Result<(), &'static str> {
    let host = header_str(headers, header::HOST.as_str());
    let origin = header_str(headers, header::ORIGIN.as_str());
    match policy {
        HostPolicy::Localhost => {
            if host.is_some_and(|h| !is_loopback_authority(h)) {
                return Err("Host header is not a loopback host");
            }
            if origin.is_some_and(|o| !origin_authority(o).is_some_and(is_loopback_authority)) {
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

fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next() == Some("::1");
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// What an `Accept` header allows.
pub(crate) struct Accept {
    /// `application/json` is acceptable (literally or by wildcard).
    pub(crate) json: bool,
    /// `text/event-stream` is acceptable.
    pub(crate) sse: bool,
    /// `application/json` is listed literally.
    pub(crate) json_literal: bool,
    /// `text/event-stream` is listed literally.
    pub(crate) sse_literal: bool,
}

impl Accept {
    /// Reads `Accept`; a missing header accepts everything. `q=0` ranges are refused.
    pub(crate) fn parse(headers: &HeaderMap) -> Accept {
        let Some(value) = header_str(headers, header::ACCEPT.as_str()) else {
            return Accept {
                json: true,
                sse: true,
                json_literal: false,
                sse_literal: false,
            };
        };
        let mut a = Accept {
            json: false,
            sse: false,
            json_literal: false,
            sse_literal: false,
        };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let mime = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            if refused {
                continue;
            }
            match mime.as_str() {
                JSON => (a.json, a.json_literal) = (true, true),
                EVENT_STREAM => (a.sse, a.sse_literal) = (true, true),
                "application/*" => a.json = true,
                "text/*" => a.sse = true,
                "*/*" => (a.json, a.sse) = (true, true),
                _ => {}
            }
        }
        a
    }
}

/// `true` unless an `MCP-Protocol-Version` header names a revision we do not speak
/// (MCP 2025-11-25 basic/transports "Protocol Version Header": → 400).
pub(crate) fn supported_version(headers: &HeaderMap) -> bool {
    headers
        .get_all(VERSION_HEADER)
        .iter()
        .all(|v| v.to_str().is_ok_and(|v| SUPPORTED_VERSIONS.contains(&v)))
}

/// `true` if `Content-Type` is `application/json` (parameters allowed).
pub(crate) fn is_json_content(headers: &HeaderMap) -> bool {
    header_str(headers, header::CONTENT_TYPE.as_str()).is_some_and(|ct| {
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case(JSON)
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn recognises_loopback_authorities() {
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]",
            "[::1]:3000",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:80",
            "10.0.0.1",
            "[::2]",
            "localhost.evil.com",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
        assert_eq!(
            origin_authority("http://127.0.0.1:5/x"),
            Some("127.0.0.1:5")
        );
        assert_eq!(origin_authority("null"), None);
    }

    #[test]
    fn parses_accept() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let a = Accept::parse(&h);
        assert!(a.json_literal && a.sse_literal);
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*;q=0.8"));
        let a = Accept::parse(&h);
        assert!(a.json && a.sse && !a.json_literal);
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html, application/json;q=0"),
        );
        let a = Accept::parse(&h);
        assert!(!a.json && !a.sse);
    }
}

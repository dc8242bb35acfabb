//! Pieces of MCP's Streamable HTTP transport (MCP 2025-11-25 basic/transports) that
//! any server of it needs, whatever answers behind the endpoint: header names, the
//! Accept and Content-Type rules, the loopback rules of DNS-rebinding protection,
//! the session id format, and the per-session event log behind resumable SSE
//! streams ([`EventLog`]), and the 2026-07-28 request metadata headers checked
//! against the body ([`check_metadata`]). The gateway's server face and the demo
//! server of the `mcpgate` binary both use them; nothing here knows about backends.

mod events;
mod metadata;
mod params;

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use base64::Engine;

use crate::mcp::ProtocolVersion;

pub use events::{
    Attached, EventLog, Frame, KEEP_ALIVE, RETRY_MS, ResumeError, StandaloneMirror, next_stream_id,
    parse_id,
};
pub use metadata::{check_metadata, decode_header_value, name_param};
pub use params::{ParamHeader, ParamHeaders, encode_header_value};

/// `Mcp-Session-Id` (spelled `MCP-Session-Id` in 2025-11-25; header names are
/// case-insensitive).
pub const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`: the negotiated revision, on every request after
/// `initialize`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Last-Event-ID` (WHATWG HTML, server-sent events): resumes an SSE stream after
/// that event.
pub const LAST_EVENT_ID: &str = "last-event-id";
/// The JSON media type (request bodies, single answers).
pub const JSON: &str = "application/json";
/// The SSE media type (streamed answers, the GET stream).
pub const EVENT_STREAM: &str = "text/event-stream";
/// `Mcp-Method`: the request's method, mirrored for intermediaries (MCP 2026-07-28
/// basic/transports/streamable-http, request metadata).
pub const MCP_METHOD: &str = "mcp-method";
/// `Mcp-Name`: `params.name`, `params.uri` or `params.taskId`, mirrored (MCP
/// 2026-07-28, request metadata).
pub const MCP_NAME: &str = "mcp-name";
/// The prefix of the `Mcp-Param-*` headers that mirror a tool's designated
/// arguments (MCP 2026-07-28, custom headers).
pub const MCP_PARAM_PREFIX: &str = "mcp-param-";

/// Whether header `name` (any case) belongs to the transport: a client of this
/// transport sets these itself, so a configured value must never stand in for one
/// (a fixed `Mcp-Session-Id` on `initialize`, an `Mcp-Name` that disagrees with
/// the body and gets the request refused with -32020).
pub fn is_transport_header(name: &str) -> bool {
    const NAMES: [&str; 7] = [
        "accept",
        "content-type",
        SESSION_ID,
        PROTOCOL_VERSION,
        LAST_EVENT_ID,
        MCP_METHOD,
        MCP_NAME,
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
        || name
            .get(..MCP_PARAM_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(MCP_PARAM_PREFIX))
}

/// The `MCP-Protocol-Version` header (MCP 2025-11-25 basic/transports, protocol
/// version header): `Ok(None)` when absent, `Ok(Some(revision))` when every value
/// names the same revision a host may use after `initialize`, else `Err` with the
/// offending value (the server answers 400). Several values that disagree are
/// refused rather than reading only the first.
pub fn protocol_version(h: &HeaderMap) -> Result<Option<ProtocolVersion>, String> {
    let mut found = None;
    for v in h.get_all(PROTOCOL_VERSION) {
        let text = v
            .to_str()
            .map_err(|_| String::from_utf8_lossy(v.as_bytes()).into_owned())?;
        let version = ProtocolVersion::parse_host(text).ok_or_else(|| text.to_owned())?;
        if found.is_some_and(|f| f != version) {
            return Err(text.to_owned());
        }
        found = Some(version);
    }
    Ok(found)
}

/// Generates a session id: 128 random bits, base64url (22 visible ASCII chars,
/// MCP 2025-11-25 transports: cryptographically secure, 0x21–0x7E only). For
/// servers that keep sessions in memory (the demo); the gateway's own ids are
/// sealed tokens (`session::SessionToken`).
pub fn new_session_id() -> Arc<str> {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS RNG failing is not recoverable in a meaningful way; fall back to a
        // hash of time and address entropy rather than panicking.
        let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &bytes);
        let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
        bytes.copy_from_slice(&digest[..16]);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(bytes)
        .into()
}

/// Whether an `Accept` header admits `wanted` (`type/subtype`), counting `*/*`
/// and `type/*` and ignoring `q=0` entries (RFC 9110 §12.5.1); media ranges
/// compare case-insensitively. An absent header admits everything.
pub fn accepts(h: &HeaderMap, wanted: &str) -> bool {
    accepts_each(h, [wanted])[0]
}

/// [`accepts`] for several media types in one pass over the `Accept` values:
/// element `i` says whether `wanted[i]` is admitted. A POST checks both
/// [`JSON`] and [`EVENT_STREAM`] this way. Values that are not visible ASCII
/// are ignored (an `Accept` made only of such values counts as absent).
pub fn accepts_each<const N: usize>(h: &HeaderMap, wanted: [&str; N]) -> [bool; N] {
    let wanted = wanted.map(|w| match w.split_once('/') {
        Some((t, sub)) => (t.as_bytes(), sub.as_bytes()),
        None => (w.as_bytes(), &b""[..]),
    });
    let mut admitted = [false; N];
    let mut present = false;
    for value in h.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        present = true;
        for item in value.as_bytes().split(|&b| b == b',') {
            let (range, params) = match item.iter().position(|&b| b == b';') {
                Some(i) => (&item[..i], &item[i + 1..]),
                None => (item, &b""[..]),
            };
            let range = range.trim_ascii();
            let mut refused = None;
            for (i, (t, sub)) in wanted.iter().enumerate() {
                if !admitted[i]
                    && media_range_admits(range, t, sub)
                    && !*refused.get_or_insert_with(|| q_is_zero(params))
                {
                    admitted[i] = true;
                }
            }
        }
    }
    if present { admitted } else { [true; N] }
}

/// Whether the media range `range` (`*/*`, `type/*` or `type/subtype`) covers
/// `t/sub`; types and subtypes compare case-insensitively.
fn media_range_admits(range: &[u8], t: &[u8], sub: &[u8]) -> bool {
    if range == b"*/*" {
        return true;
    }
    let Some(slash) = range.iter().position(|&b| b == b'/') else {
        return false;
    };
    let (rt, rsub) = (&range[..slash], &range[slash + 1..]);
    rt.eq_ignore_ascii_case(t) && (rsub == b"*" || rsub.eq_ignore_ascii_case(sub))
}

/// The `charset` parameter of a JSON `Content-Type` when it names anything but
/// UTF-8 (`utf-8` or `utf8`, any case, quoted or not): JSON exchanged between
/// systems is UTF-8 (RFC 8259 §8.1), so such a body is refused (HTTP 415).
/// `None` without a `charset` parameter or with a UTF-8 one.
pub fn foreign_charset(h: &HeaderMap) -> Option<&str> {
    let v = h.get(header::CONTENT_TYPE)?.to_str().ok()?;
    v.split(';').skip(1).find_map(|p| {
        let (name, value) = p.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim().trim_matches('"');
        let utf8 = value.eq_ignore_ascii_case("utf-8") || value.eq_ignore_ascii_case("utf8");
        (!utf8).then_some(value)
    })
}

/// Whether a media range's parameters (after its first `;`) carry `q=0`
/// (also `0.0`, `0.000`): the range is refused (RFC 9110 §12.4.2).
fn q_is_zero(params: &[u8]) -> bool {
    params.split(|&b| b == b';').any(|p| {
        p.trim_ascii().strip_prefix(b"q=").is_some_and(|q| {
            std::str::from_utf8(q).is_ok_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q == 0.0))
        })
    })
}

/// Whether `Content-Type` declares JSON (`application/json`, parameters allowed,
/// case-insensitive); a POST body must be JSON (else HTTP 415).
pub fn is_json(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(JSON))
        })
}

/// The host of a `Host` header value without its port and IPv6 brackets:
/// `"[::1]:8080"` → `"::1"`, `"localhost:3000"` → `"localhost"`. Case is kept.
pub fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

/// Whether a lower-case host name (as [`strip_port`] leaves it) is a loopback
/// name: `localhost`, a `*.localhost` name (RFC 6761 §6.3) or a loopback address
/// (`127.0.0.0/8`, `::1`). DNS-rebinding protection (MCP 2025-11-25
/// basic/transports, security warning) refuses other names on a loopback server.
pub fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether an `Origin` is an `http` or `https` origin on a loopback name
/// ([`is_loopback_name`]); `null` and other schemes are not.
pub fn is_loopback_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    matches!(url.scheme(), "http" | "https")
        && url
            .host_str()
            .is_some_and(|h| is_loopback_name(h.trim_start_matches('[').trim_end_matches(']')))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn ids_are_random_visible_ascii() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert!(a.len() >= 22);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
    }

    #[test]
    fn loopback_names_and_origins() {
        let loopback = |host: &str| is_loopback_name(strip_port(&host.to_ascii_lowercase()));
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.1.2.3:9",
            "[::1]",
            "[::1]:3000",
            "app.localhost",
        ] {
            assert!(loopback(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:80",
            "10.0.0.1",
            "[::2]",
            "localhost.evil.com",
        ] {
            assert!(!loopback(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://127.0.0.1:5"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("ftp://localhost"));
    }

    #[test]
    fn accept_counts_wildcards_and_refusals() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(v));
            h
        };
        let with_bytes = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_bytes(v).unwrap());
            h
        };
        let both = with("application/json, text/event-stream");
        assert!(accepts(&both, JSON) && accepts(&both, EVENT_STREAM));
        let any = with("*/*;q=0.8");
        assert!(accepts(&any, JSON) && accepts(&any, EVENT_STREAM));
        let neither = with("text/html, application/json;q=0");
        assert!(!accepts(&neither, JSON) && !accepts(&neither, EVENT_STREAM));
        let cased = with("Application/JSON, TEXT/*");
        assert!(accepts(&cased, JSON) && accepts(&cased, EVENT_STREAM));
        let refused_then_any = with("application/json;q=0, */*");
        assert!(accepts(&refused_then_any, JSON));
        assert!(accepts(&HeaderMap::new(), EVENT_STREAM));
        let one_refused = with("application/json;q=0, text/event-stream;q=0.5");
        assert_eq!(
            accepts_each(&one_refused, [JSON, EVENT_STREAM]),
            [false, true]
        );
        let mut two_lines = with("text/html;level=1;q=0.0");
        two_lines.append(
            header::ACCEPT,
            HeaderValue::from_static(" TEXT/EVENT-STREAM "),
        );
        two_lines.append(
            header::ACCEPT,
            HeaderValue::from_static("application/*;q=1"),
        );
        assert_eq!(accepts_each(&two_lines, [JSON, EVENT_STREAM]), [true, true]);
        let not_ascii = with_bytes(b"application/json\xff");
        assert_eq!(accepts_each(&not_ascii, [JSON, "image/png"]), [true, true]);
        assert_eq!(accepts_each(&with("application/json"), ["text"]), [false]);
    }

    #[test]
    fn content_type_is_json_with_parameters() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(is_json(&h));
        assert_eq!(foreign_charset(&h), None);
        for (ct, foreign) in [
            ("application/json", None),
            ("application/json;charset=\"UTF8\"", None),
            ("application/json; charset=latin1", Some("latin1")),
            ("application/json; q=1; Charset=\"utf-16\"", Some("utf-16")),
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(foreign_charset(&h), foreign, "{ct}");
        }
    }
}

//! Request header checks of the Streamable HTTP transport: Accept, Content-Type,
//! `MCP-Protocol-Version`, `Mcp-Session-Id` and Origin/Host.

use axum::http::{HeaderMap, StatusCode, header};

use super::{HttpError, OriginPolicy};
use crate::jsonrpc;
use crate::mcp::ProtocolVersion;
use crate::request::Rejection;
use crate::streamable_http::{
    self, EVENT_STREAM, JSON, SESSION_ID, accepts, accepts_each, is_json,
};

/// 403 unless Origin (if any) and Host are acceptable.
pub fn check_origin(h: &HeaderMap, policy: &OriginPolicy) -> Result<(), HttpError> {
    if let Some(origin) = h.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| policy.origin_allowed(o));
        if !ok {
            return Err(HttpError::forbidden_origin());
        }
    }
    if let Some(host) = h.get(header::HOST)
        && !host.to_str().is_ok_and(|v| policy.host_allowed(v))
    {
        return Err(HttpError::forbidden_host());
    }
    Ok(())
}

/// What a POST's `Accept` admits of the two answers the gateway gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostAccept {
    /// Both `application/json` and `text/event-stream` (or no `Accept`).
    Both,
    /// Only `text/event-stream`: every answer is sent as SSE.
    EventStreamOnly,
}

/// A POST's `Accept` (MCP 2025-11-25 transports, sending messages: the client
/// MUST list both `application/json` and `text/event-stream`; the spec says
/// nothing of how a server reacts). Both admitted: [`PostAccept::Both`]. Only
/// `text/event-stream` (some hosts, claude.ai among them, send just that):
/// [`PostAccept::EventStreamOnly`], answered with SSE, which the gateway can
/// always give. 406 otherwise, also for `application/json` alone: a call may
/// need its stream (server→client requests, progress) before its answer.
pub fn check_post_accept(h: &HeaderMap) -> Result<PostAccept, HttpError> {
    let listed = h
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| BOTH_LISTED.contains(&v.as_bytes()));
    if listed {
        return Ok(PostAccept::Both);
    }
    match accepts_each(h, [JSON, EVENT_STREAM]) {
        [true, true] => Ok(PostAccept::Both),
        [false, true] => Ok(PostAccept::EventStreamOnly),
        _ => Err(HttpError::new(
            Rejection::Accept,
            StatusCode::NOT_ACCEPTABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Not Acceptable: Accept must include text/event-stream (and should include \
             application/json: clients list both)",
        )),
    }
}

/// `Accept` values that list exactly the two media types a POST needs, as the
/// SDKs send them: one of them, byte for byte, is answered without parsing
/// (`accepts_each` admits both for it too: a range once admitted stays so).
const BOTH_LISTED: [&[u8]; 4] = [
    b"application/json, text/event-stream",
    b"application/json,text/event-stream",
    b"text/event-stream, application/json",
    b"text/event-stream,application/json",
];

/// GET needs `text/event-stream` acceptable.
pub fn check_get_accept(h: &HeaderMap) -> Result<(), HttpError> {
    if accepts(h, EVENT_STREAM) {
        Ok(())
    } else {
        Err(HttpError::new(
            Rejection::Accept,
            StatusCode::NOT_ACCEPTABLE,
            jsonrpc::TRANSPORT_ERROR,
            "Not Acceptable: Accept must include text/event-stream",
        ))
    }
}

/// 415 unless the body is declared `application/json`, in UTF-8 when a
/// `charset` is given (RFC 8259 §8.1; [`streamable_http::foreign_charset`]).
pub fn check_content_type(h: &HeaderMap) -> Result<(), HttpError> {
    let refused = |message: String| {
        HttpError::new(
            Rejection::ContentType,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            jsonrpc::TRANSPORT_ERROR,
            message,
        )
    };
    if !is_json(h) {
        return Err(refused(
            "Unsupported Media Type: Content-Type must be application/json".into(),
        ));
    }
    match streamable_http::foreign_charset(h) {
        None => Ok(()),
        Some(charset) => Err(refused(format!(
            "Unsupported Media Type: JSON is UTF-8 (RFC 8259), not charset={:?}",
            jsonrpc::clip(charset)
        ))),
    }
}

/// The `MCP-Protocol-Version` header: `Ok(None)` when absent, 400 when a value
/// names a revision the gateway does not serve, or two values disagree
/// ([`streamable_http::protocol_version`], MCP 2025-11-25 transports).
pub fn protocol_version(h: &HeaderMap) -> Result<Option<ProtocolVersion>, HttpError> {
    streamable_http::protocol_version(h).map_err(|v| {
        let v = jsonrpc::clip(&v);
        // A served revision refused: it disagrees with an earlier value.
        let message = if ProtocolVersion::parse_host(&v).is_some() {
            format!("Bad Request: MCP-Protocol-Version given more than once, with different revisions ({v:?} is one)")
        } else {
            format!("Bad Request: unsupported MCP-Protocol-Version {v:?}")
        };
        HttpError::new(
            Rejection::Version,
            StatusCode::BAD_REQUEST,
            jsonrpc::TRANSPORT_ERROR,
            message,
        )
    })
}

/// `MCP-Protocol-Version` on `initialize`: the header names the revision a
/// client uses after initialization (MCP 2025-11-25 transports), so on
/// `initialize` a well-formed revision, served or not, is left to the
/// negotiation in the body (as the TypeScript and Python SDK servers do); a
/// value that is no revision at all (not `YYYY-MM-DD`) is invalid: 400.
pub fn initialize_protocol_version(h: &HeaderMap) -> Result<(), HttpError> {
    let revision = |v: &[u8]| {
        v.len() == 10
            && v.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            })
    };
    match h
        .get_all(streamable_http::PROTOCOL_VERSION)
        .iter()
        .find(|v| !revision(v.as_bytes()))
    {
        None => Ok(()),
        Some(v) => Err(HttpError::new(
            Rejection::Version,
            StatusCode::BAD_REQUEST,
            jsonrpc::TRANSPORT_ERROR,
            format!(
                "Bad Request: invalid MCP-Protocol-Version {:?} (a revision is YYYY-MM-DD)",
                String::from_utf8_lossy(v.as_bytes())
            ),
        )),
    }
}

/// The `Mcp-Session-Id` header value, if present and readable.
pub fn session_id(h: &HeaderMap) -> Option<&str> {
    h.get(SESSION_ID).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::streamable_http::PROTOCOL_VERSION;

    fn with_accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accept_rules() {
        assert!(check_post_accept(&with_accept("application/json, text/event-stream")).is_ok());
        assert!(check_post_accept(&with_accept("*/*")).is_ok());
        assert!(check_post_accept(&with_accept("application/*, text/*")).is_ok());
        assert!(check_post_accept(&with_accept("application/json")).is_err());
        assert_eq!(
            check_post_accept(&with_accept("text/event-stream")).unwrap(),
            PostAccept::EventStreamOnly
        );
        assert_eq!(
            check_post_accept(&with_accept("*/*")).unwrap(),
            PostAccept::Both
        );
        assert!(
            check_post_accept(&with_accept("application/json, text/event-stream;q=0")).is_err()
        );
        assert!(check_post_accept(&HeaderMap::new()).is_ok());
        assert!(check_get_accept(&with_accept("text/event-stream")).is_ok());
        assert!(check_get_accept(&with_accept("application/json")).is_err());
    }

    #[test]
    fn the_listed_values_are_what_parsing_admits() {
        for v in BOTH_LISTED {
            let h = with_accept(std::str::from_utf8(v).unwrap());
            assert_eq!(accepts_each(&h, [JSON, EVENT_STREAM]), [true, true]);
            assert!(check_post_accept(&h).is_ok());
        }
        // Listed beside a refusing line: still admitted, as parsing says.
        let mut h = with_accept("application/json;q=0");
        h.append(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        assert_eq!(accepts_each(&h, [JSON, EVENT_STREAM]), [true, true]);
        assert!(check_post_accept(&h).is_ok());
        // Near misses take the parsing path.
        assert!(
            check_post_accept(&with_accept("application/json, text/event-stream;q=0")).is_err()
        );
        assert!(check_post_accept(&with_accept("application/json, text/plain")).is_err());
    }

    #[test]
    fn the_version_header_on_initialize_needs_only_to_be_a_revision() {
        let mut h = HeaderMap::new();
        assert!(initialize_protocol_version(&h).is_ok());
        for fine in ["2025-06-18", "2099-01-01", "2024-11-05"] {
            h.insert(PROTOCOL_VERSION, HeaderValue::from_static(fine));
            assert!(initialize_protocol_version(&h).is_ok(), "{fine}");
        }
        for bad in ["banana", "2025-06-18x", "2025/06/18", "latest"] {
            h.insert(PROTOCOL_VERSION, HeaderValue::from_static(bad));
            let e = initialize_protocol_version(&h).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn content_type_rules() {
        let mut h = HeaderMap::new();
        assert!(check_content_type(&h).is_err());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        assert!(check_content_type(&h).is_ok());
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(check_content_type(&h).is_err());
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=latin1"),
        );
        let e = check_content_type(&h).unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }

    #[test]
    fn version_header_rules() {
        let mut h = HeaderMap::new();
        assert!(protocol_version(&h).unwrap().is_none());
        h.insert(PROTOCOL_VERSION, HeaderValue::from_static("2025-06-18"));
        assert_eq!(
            protocol_version(&h).unwrap(),
            Some(ProtocolVersion::V2025_06_18)
        );
        for bad in ["2099-01-01", "banana", "2024-11-05"] {
            h.insert(PROTOCOL_VERSION, HeaderValue::from_static(bad));
            assert_eq!(
                protocol_version(&h).unwrap_err().status,
                StatusCode::BAD_REQUEST
            );
        }
        // Two values: the same revision twice is that revision; two revisions
        // (or a bad second value, which reading only the first let through) are 400.
        for (second, ok) in [
            ("2025-06-18", true),
            ("2025-11-25", false),
            ("banana", false),
        ] {
            let mut h = HeaderMap::new();
            h.append(PROTOCOL_VERSION, HeaderValue::from_static("2025-06-18"));
            h.append(PROTOCOL_VERSION, HeaderValue::from_static(second));
            assert_eq!(protocol_version(&h).is_ok(), ok, "{second}");
        }
    }
}

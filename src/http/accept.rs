//! The accept and authenticate phases of every request to the MCP endpoint, in
//! this order: Origin/Host (403, the DNS-rebinding guard), the bearer token
//! (401 / 403 / 400 with an RFC 6750 `WWW-Authenticate` challenge naming the RFC
//! 9728 metadata URL, MCP 2025-11-25 basic/authorization), the client's rate
//! limit (429 with `Retry-After`), then the body within its size (413) and time
//! (408) limits, decoded when it has a `Content-Encoding` (gzip, deflate; 415
//! for others); a client that closes the connection mid-body is recorded as
//! `client_closed` (499, nothing sent). `Authorization` is taken out of the request here, so nothing
//! after this point can log or forward it.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};

use super::{AppState, HttpError, headers};
use crate::auth::{AuthError, Authenticator, Principal};
use crate::jsonrpc;
use crate::request::{Rejection, RequestContext};

/// A request that passed the accept and authenticate phases.
pub struct Accepted {
    /// The request head, without `Authorization`.
    pub parts: Parts,
    /// The body, not read yet.
    pub body: Body,
    /// The authenticated caller (`None`: the endpoint is open).
    pub principal: Option<Arc<Principal>>,
}

/// The context of a host request that arrived now, with the peer's address and
/// the endpoint it came in at.
pub fn context(st: &AppState, req: &Request) -> RequestContext {
    let mut ctx = RequestContext::new(&st.metrics);
    ctx.set_client(client(st, req.extensions(), req.headers()));
    if let Some(e) = req.extensions().get::<super::Endpoint>() {
        ctx.set_endpoint(e.0.clone());
    }
    ctx
}

/// The client's address: the TCP peer, or what trusted proxies forwarded.
fn client(
    st: &AppState,
    ext: &axum::http::Extensions,
    headers: &axum::http::HeaderMap,
) -> Option<std::net::IpAddr> {
    let peer = ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    st.proxies.client(peer, headers)
}

/// Runs the Origin check, authentication and the rate limit.
///
/// Errors: the [`HttpError`] to answer; refusals that leave the body unread say
/// `Connection: close`. A request refused by authentication has
/// its body read first (bounded): hyper closes a connection whose request body
/// was not read, and a host that sends its first request without a token (every
/// OAuth client does) has often reused that connection already for the retry.
pub async fn accept(st: &AppState, req: Request) -> Result<Accepted, HttpError> {
    let (mut parts, body) = req.into_parts();
    let presented = parts.headers.remove(header::AUTHORIZATION);
    headers::check_origin(&parts.headers, &st.origins).map_err(closing)?;
    let endpoint = parts
        .extensions
        .get::<super::Endpoint>()
        .map_or_else(|| Arc::from(""), |e| e.0.clone());
    let principal = match &st.auth {
        None => None,
        Some(auth) => {
            // Boxed: the validation future (JWKS and introspection fetches) is
            // large, and an open endpoint should not carry it.
            let result = Box::pin(auth.authenticate_at(
                &endpoint,
                presented.as_ref().map(HeaderValue::as_bytes),
                parts.uri.query(),
            ))
            .await;
            match result {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    tracing::debug!(cause = %e, method = %parts.method, "request not authenticated");
                    let limit = st.server.max_body_bytes;
                    let drained = axum::body::to_bytes(body, limit).await.is_ok();
                    let mut refused = auth_error(auth, &endpoint, &e);
                    if !drained {
                        refused = closing(refused);
                    }
                    return Err(refused);
                }
            }
        }
    };
    if let Some(limiter) = &st.limiter {
        let ip = client(st, &parts.extensions, &parts.headers);
        limiter.check(principal.as_deref(), ip).map_err(closing)?;
    }
    Ok(Accepted {
        parts,
        body,
        principal,
    })
}

/// A refusal sent before the request body is read: the unread body makes the
/// connection unusable, and a host that has already queued its next request on it
/// would lose that request unless told the connection closes (RFC 9112 section 9.6).
fn closing(refused: HttpError) -> HttpError {
    refused.with_header(header::CONNECTION, HeaderValue::from_static("close"))
}

/// The one place an [`AuthError`] becomes an HTTP rejection (at `endpoint`: its
/// metadata document and scopes in the challenge).
pub fn auth_error(auth: &Authenticator, endpoint: &str, e: &AuthError) -> HttpError {
    let (reason, status, message) = match e {
        AuthError::Missing | AuthError::Invalid(_) => (
            Rejection::Unauthorized,
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
        ),
        AuthError::QueryToken => (
            Rejection::QueryToken,
            StatusCode::BAD_REQUEST,
            "Bad Request: access tokens are accepted only in the Authorization header",
        ),
        AuthError::InsufficientScope(_) => (
            Rejection::InsufficientScope,
            StatusCode::FORBIDDEN,
            "Forbidden: insufficient scope",
        ),
    };
    let refused = HttpError::new(reason, status, jsonrpc::TRANSPORT_ERROR, message);
    match HeaderValue::try_from(auth.metadata.challenge_at(endpoint, e)) {
        Ok(v) => refused.with_header(header::WWW_AUTHENTICATE, v),
        Err(_) => refused,
    }
}

/// Reads the body: 413 at once for a `Content-Length` above `server.max_body_bytes`
/// (a client that announces 5 MB and sends 2 bytes would otherwise wait for the
/// body read timeout); bodies without a length are cut off at the limit while
/// they are read (`DefaultBodyLimit`); 408 when the body does not arrive within
/// `server.body_read_timeout`.
pub async fn read_body(st: &AppState, head: &HeaderMap, body: Body) -> Result<Bytes, HttpError> {
    let limit = st.server.max_body_bytes;
    let announced = head
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(closing(HttpError::new(
            Rejection::BodyTooLarge,
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::INVALID_REQUEST,
            format!("request body larger than {limit} bytes (server.max_body_bytes)"),
        )));
    }
    let refused = match axum::body::to_bytes(body, limit).await {
        Ok(b) => {
            st.metrics.bytes_in.inc_by(b.len() as u64);
            return Ok(b);
        }
        Err(e) if caused_by::<super::body_timeout::BodyTimedOut>(&e) => HttpError::new(
            Rejection::BodyTimeout,
            StatusCode::REQUEST_TIMEOUT,
            jsonrpc::INVALID_REQUEST,
            "the request body did not arrive within server.body_read_timeout",
        ),
        Err(e) if caused_by::<http_body_util::LengthLimitError>(&e) => HttpError::new(
            Rejection::BodyTooLarge,
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::INVALID_REQUEST,
            format!("request body larger than {limit} bytes (server.max_body_bytes)"),
        ),
        // No answer can reach it: recorded as the client's doing, 499 (the
        // status nginx logs for it), not as a bad request.
        Err(e) if client_gone(&e) => HttpError::new(
            Rejection::ClientClosed,
            StatusCode::from_u16(CLIENT_CLOSED).unwrap_or(StatusCode::BAD_REQUEST),
            jsonrpc::INVALID_REQUEST,
            "the client closed the connection before the whole body arrived",
        ),
        Err(e) => HttpError::new(
            Rejection::Other,
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            format!("cannot read the request body: {e}"),
        ),
    };
    // The rest of the body was not read.
    Err(closing(refused))
}

/// The codings [`decode_body`] decodes, as `Accept-Encoding` names them on a 415
/// (RFC 7694 §3).
const DECODED: &str = "gzip, deflate";

/// The body as sent, decoded per `Content-Encoding` (RFC 9110 §8.4): `gzip`
/// (or `x-gzip`) and `deflate` (the zlib format, RFC 9110 §8.4.1.2) are
/// decoded, `identity` is the body itself. `server.max_body_bytes` applies to
/// the decoded body too, so a small body that inflates beyond it is 413 (read
/// no further than the limit). An encoded body is never parsed as it came.
///
/// Errors: 415 with `Accept-Encoding: gzip, deflate` for any other coding or
/// more than one; 413 decoded beyond the limit; 400 (-32700) for a body that is
/// not valid data of its coding.
pub fn decode_body(st: &AppState, head: &HeaderMap, body: Bytes) -> Result<Bytes, HttpError> {
    // No allocation without the header: an empty `collect` allocates nothing.
    let codings: Vec<&[u8]> = head
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"))
        .collect();
    let coding = match codings[..] {
        [] => return Ok(body),
        [one] => one,
        _ => return Err(unsupported_coding("with more than one coding")),
    };
    let limit = st.server.max_body_bytes;
    let mut decoded = Vec::new();
    let read = if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
        flate2::read::MultiGzDecoder::new(&body[..])
            .take(limit as u64 + 1)
            .read_to_end(&mut decoded)
    } else if coding.eq_ignore_ascii_case(b"deflate") {
        flate2::read::ZlibDecoder::new(&body[..])
            .take(limit as u64 + 1)
            .read_to_end(&mut decoded)
    } else {
        let name = String::from_utf8_lossy(coding);
        return Err(unsupported_coding(&format!("{name:?}")));
    };
    let name = String::from_utf8_lossy(coding).to_ascii_lowercase();
    match read {
        Ok(n) if n > limit => Err(HttpError::new(
            Rejection::BodyTooLarge,
            StatusCode::PAYLOAD_TOO_LARGE,
            jsonrpc::INVALID_REQUEST,
            format!(
                "request body larger than {limit} bytes once {name}-decoded (server.max_body_bytes)"
            ),
        )),
        Ok(_) => Ok(decoded.into()),
        Err(e) => Err(HttpError::new(
            Rejection::InvalidMessage,
            StatusCode::BAD_REQUEST,
            jsonrpc::PARSE_ERROR,
            format!("Parse error: the body is not valid {name} data ({e})"),
        )),
    }
}

/// 415 for a `Content-Encoding` not decoded here, naming those that are.
fn unsupported_coding(what: &str) -> HttpError {
    HttpError::new(
        Rejection::ContentType,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        jsonrpc::TRANSPORT_ERROR,
        format!("Unsupported Media Type: Content-Encoding {what} is not decoded here; send {DECODED} or none"),
    )
    .with_header(header::ACCEPT_ENCODING, HeaderValue::from_static(DECODED))
}

/// The status recorded for a request whose client went away before its body
/// was read (nginx's "client closed request"; never sent).
const CLIENT_CLOSED: u16 = 499;

/// Whether a body read failed because the client closed the connection (or
/// reset it) before the body was complete.
fn client_gone(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether `e` or one of its sources is an `E`.
fn caused_by<E: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<E>() {
            return true;
        }
        cause = c.source();
    }
    false
}

//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz / libFuzzer): each
//! feeds untrusted bytes to one parser the gateway runs on input from hosts,
//! backends or config files, and asserts what must hold for every input (no
//! panic, and round trips where the format allows one). Not an API: hidden, and
//! built only with the `fuzzing` feature and for the crate's own tests, where
//! every input a fuzzer ever crashed on is kept as a regression test.

use std::path::Path;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};

use crate::catalog::cursor::CursorKey;
use crate::cluster::Sealer;
use crate::config::Config;
use crate::dispatch::rewrite::{ResultKind, rewrite_result};
use crate::jsonrpc;
use crate::mcp::version::ProtocolVersion;
use crate::mcp::{Message, names};
use crate::session::{MemoryStore, SessionStore, SessionToken};
use crate::streamable_http::EventLog;

/// A host's POST body: one JSON-RPC message (classified, then serialized again
/// and re-read as the same message) or a batch.
pub fn jsonrpc_body(data: &[u8]) {
    if data.trim_ascii_start().first() == Some(&b'[') {
        let _ = crate::http::batch::parse(data);
        return;
    }
    match jsonrpc::parse_message(data) {
        Ok(Message::Request(r)) => {
            let again = jsonrpc::request_params_bytes(&r.id, r.method.as_str(), r.params.as_ref());
            match jsonrpc::parse_message(&again) {
                Ok(Message::Request(r2)) => {
                    assert_eq!((r2.id, r2.method.as_str()), (r.id, r.method.as_str()));
                    assert_eq!(r2.params.as_deref(), r.params.as_deref());
                }
                other => panic!("re-read request is {other:?}"),
            }
        }
        Ok(Message::Notification(n)) => {
            let again = jsonrpc::notification_bytes(n.method.as_str(), n.params.as_ref());
            match jsonrpc::parse_message(&again) {
                Ok(Message::Notification(n2)) => {
                    assert_eq!(n2.method.as_str(), n.method.as_str());
                    assert_eq!(n2.params, n.params);
                }
                other => panic!("re-read notification is {other:?}"),
            }
        }
        Ok(Message::Response(resp)) => {
            let again = match &resp.outcome {
                Ok(raw) => match &resp.id {
                    Some(id) => jsonrpc::result_bytes(id, raw.as_bytes()),
                    None => return,
                },
                Err(e) => jsonrpc::error_bytes(resp.id.as_ref(), e),
            };
            match jsonrpc::parse_message(&again) {
                Ok(Message::Response(r2)) => assert_eq!(r2.id, resp.id),
                other => panic!("re-read response is {other:?}"),
            }
        }
        Err(e) => {
            let _ = e.to_error_object();
        }
    }
}

/// A backend's SSE response body, delivered in chunks whose sizes the first
/// byte chooses: the events must not depend on where the transport split the
/// bytes, and each event's data goes through the backend-message parser.
pub fn sse_body(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(seed % 17) + 1;
    let whole = sse_events(vec![Bytes::copy_from_slice(body)]);
    let chunked = sse_events(body.chunks(step).map(Bytes::copy_from_slice).collect());
    assert_eq!(whole, chunked, "events depend on chunking (step {step})");
    for (_, event, data, _) in &whole.0 {
        if data.is_empty() || (event != "message" && !event.is_empty()) {
            continue;
        }
        jsonrpc_body(data.as_bytes());
    }
}

type Events = (Vec<(String, String, String, Option<u64>)>, bool);

/// The events of an SSE body (id, event, data, retry ms) up to the first
/// error, and whether there was one.
fn sse_events(chunks: Vec<Bytes>) -> Events {
    let source = futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let mut events = Box::pin(crate::backend::events::sse_events(source));
    let mut out = Vec::new();
    // An iterator-backed stream is always ready: no runtime needed.
    while let Some(Some(ev)) = events.next().now_or_never() {
        match ev {
            Ok(ev) => out.push((
                ev.id,
                ev.event,
                ev.data,
                ev.retry.map(|d| d.as_millis() as u64),
            )),
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

/// The ids a host sends back: `Last-Event-ID` against a session's event log,
/// a pagination cursor and an `Mcp-Session-Id` (only their own seals open, and
/// what opens, re-sealed, opens again to the same values), the id also looked up
/// in the session store.
pub fn host_ids(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let log = EventLog::default();
    let (stream, _rx) = log.open();
    log.push(stream, Bytes::from_static(b"{}"), false);
    log.push(stream, Bytes::from_static(b"{}"), true);
    let _ = log.resume(text);

    // Seals carry a random nonce: the same cursor seals to another text each
    // time, and what opens must open again to the same values.
    let key = CursorKey::fixed(7);
    if let Some((epoch, list, page)) = key.open(text) {
        assert_eq!(
            key.open(&key.seal(epoch, list, page)),
            Some((epoch, list, page)),
            "a cursor that opens re-seals"
        );
    }
    let sealer = Sealer::fixed(7);
    if let Some(token) = SessionToken::open(&sealer, text, "") {
        let again = SessionToken::open(&sealer, &token.seal(&sealer, ""), "");
        assert_eq!(
            again.as_ref(),
            Some(&token),
            "a session id that opens re-seals"
        );
    }
    let store = MemoryStore::new(4, std::time::Duration::from_secs(24 * 3600));
    assert!(store.get(text).is_none());
    if let Ok(v) = axum::http::HeaderValue::from_bytes(data) {
        let mut h = axum::http::HeaderMap::new();
        h.insert("mcp-session-id", v);
        let _ = crate::http::headers::session_id(&h).map(|id| store.get(id));
    }
}

/// Namespacing: exposed names stay valid, `{prefix}+{uri}` splits back into
/// its parts, and a backend result's URIs are rewritten for every revision.
/// The input is `prefix \n name-or-uri \n result-json`.
pub fn names_and_uris(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let (prefix, original, result) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let max = 16 + (prefix.len() % 113);
    let plain_prefix = !prefix.is_empty() && prefix.chars().all(names::allowed_char);
    if plain_prefix && prefix.len() + names::SEPARATOR.len() + 9 < max && !original.is_empty() {
        let exposed = names::expose(prefix, original, max);
        assert!(
            names::is_valid_name(&exposed, max),
            "{exposed:?} (max {max})"
        );
    }
    if plain_prefix && original.contains(':') {
        let exposed = names::expose_uri(prefix, original);
        assert_eq!(names::split_uri(&exposed), Some((prefix, original)));
    }
    let _ = names::split_uri(original);
    if let Ok(raw) = serde_json::value::RawValue::from_string(result.to_owned()) {
        let raw = crate::jsonrpc::RawJson::from_raw(raw);
        for host in ProtocolVersion::HOST_SUPPORTED {
            for kind in [
                ResultKind::ToolCall,
                ResultKind::Prompt,
                ResultKind::Resource,
            ] {
                let marks = crate::mcp::marks::Marks::of(raw.as_bytes());
                let _ = rewrite_result(raw.clone(), kind, prefix, host, marks);
            }
        }
    }
}

/// A config file: TOML, or `mcpServers` JSON when it starts with `{`.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| (name == "HOME").then(|| "/home/fuzz".to_owned());
    for path in ["fuzz.toml", "fuzz.json"] {
        let _ = Config::parse(text, Path::new(path), &env);
    }
}

/// An `Authorization` header: the bearer token, its JWT shape, its unverified
/// issuer and header, and the scopes of its claims.
pub fn bearer(data: &[u8]) {
    let Ok(token) = crate::auth::bearer(Some(data)) else {
        return;
    };
    if crate::auth::jwt::looks_like_jwt(token) {
        let _ = crate::auth::jwt::unverified_issuer(token);
        let _ = jsonwebtoken::decode_header(token);
    }
    if let Ok(serde_json::Value::Object(claims)) = serde_json::from_str(token) {
        let _ = crate::auth::jwt::scopes(&claims);
    }
}

/// A 2026-07-28 request as the modern face sees it: header lines (`name: value`),
/// a blank line, the body. The era classifier and the header ladder
/// (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` with its `=?base64?…?=`
/// form) never panic; a header the ladder accepts mirrors the body; and every
/// value the client face would send as a header decodes back to itself.
pub fn modern_request(data: &[u8]) {
    let split = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(data.len());
    let (head, body) = (&data[..split], data.get(split + 2..).unwrap_or_default());
    let mut h = axum::http::HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(&line[..colon]),
            axum::http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        if let Ok(text) = value.to_str() {
            let sent = crate::backend::modern::header_value(text);
            if let Some(sent) = sent {
                let back = crate::streamable_http::decode_header_value(sent.to_str().unwrap());
                assert_eq!(back.as_deref(), Some(text), "header value round trip");
            }
        }
        h.append(name, value);
    }
    let _ = crate::http::modern::refuse_get_or_delete(&h);
    let Ok(msg) = jsonrpc::parse_message(body) else {
        return;
    };
    let _ = crate::http::modern::era_of(&msg, &h);
    let (Message::Request(req), Some(claim)) = (&msg, crate::http::modern::claim(&msg)) else {
        return;
    };
    let requested = claim.as_str().unwrap_or("2026-07-28");
    if crate::http::modern::check_headers(&h, req, requested).is_ok() {
        let version = h.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
        let decoded = version.and_then(|v| crate::streamable_http::decode_header_value(v.trim()));
        assert_eq!(
            decoded.as_deref(),
            Some(requested),
            "accepted version header"
        );
        let method = h.get("mcp-method").and_then(|v| v.to_str().ok());
        let decoded = method.and_then(|v| crate::streamable_http::decode_header_value(v.trim()));
        assert_eq!(
            decoded.as_deref(),
            Some(req.method.as_str()),
            "accepted method header"
        );
    }
}

#[cfg(test)]
mod tests {
    //! Every committed seed (fuzz/seeds/TARGET), and every input a fuzzer
    //! crashed on (kept there too, named `crash-*`), through its target.

    use std::path::PathBuf;

    fn replay(target: &str, run: fn(&[u8])) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds")
            .join(target);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            run(&std::fs::read(&path).unwrap());
            n += 1;
        }
        assert!(n > 0, "no seeds in {}", dir.display());
    }

    #[test]
    fn seeds_pass_every_target() {
        replay("jsonrpc_body", super::jsonrpc_body);
        replay("sse_body", super::sse_body);
        replay("host_ids", super::host_ids);
        replay("names_and_uris", super::names_and_uris);
        replay("config", super::config);
        replay("bearer", super::bearer);
        replay("modern_request", super::modern_request);
    }
}

//! What a backend's transport received (a stdio line, an HTTP body, an SSE
//! event's data), read as JSON-RPC messages and handed to the connection.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::conn::Connection;
use crate::jsonrpc;

/// Parses a line or body of JSON text from a backend (one message or a batch, which
/// 2025-03-26 servers may send) and dispatches every message. Invalid input is
/// logged with the backend name and skipped. A response's result stays a slice
/// of `text` (`jsonrpc::RawJson`): it reaches the host without a copy.
pub(super) fn dispatch_text(conn: &Arc<Connection>, text: &Bytes, related: Option<u64>) {
    let trimmed = text.trim_ascii();
    if trimmed.is_empty() {
        return;
    }
    if trimmed.first() == Some(&b'[') {
        match serde_json::from_slice::<Vec<&RawValue>>(trimmed) {
            Ok(items) => {
                for item in items {
                    match jsonrpc::classify_raw_in(item, Some(text)) {
                        Ok(m) => conn.on_message(m, related),
                        Err(e) => log_bad(conn, item.get().as_bytes(), &e.to_string()),
                    }
                }
            }
            Err(e) => log_bad(conn, trimmed, &e.to_string()),
        }
        return;
    }
    match jsonrpc::parse_message_in(trimmed, text) {
        Ok(m) => conn.on_message(m, related),
        Err(e) => log_bad(conn, trimmed, &e.to_string()),
    }
}

fn log_bad(conn: &Connection, text: &[u8], why: &str) {
    let shown = String::from_utf8_lossy(&text[..text.len().min(200)]);
    tracing::warn!(backend = %conn.backend, cause = why, text = %shown, "backend sent something that is not JSON-RPC; skipped");
}

//! Opaque list cursors handed to hosts: `epoch | list | page`, sealed for
//! [`Purpose::Cursor`] so a host can neither forge nor alter one (MCP
//! server/utilities/pagination: cursors are opaque; invalid ones → -32602).
//!
//! With `[cluster]` keys every replica (and a restarted process) opens the
//! cursors of the others, and since the epoch is a digest of the view's content
//! (`pages.rs`), a cursor opens wherever the same catalogue is served; without
//! keys, only in the process that sealed it.

use std::sync::Arc;

use crate::cluster::{Purpose, Sealer};

const AAD: &[u8] = b"mcpgate list cursor";
const BODY: usize = 13;

/// The key cursors are sealed with. Cursors are not bound to a session: any
/// caller that presents one gets the page it names from the view it is served
/// (pages hold nothing the caller's own view does not hold).
#[derive(Clone)]
pub struct CursorKey(Arc<Sealer>);

impl CursorKey {
    /// Cursors sealed and opened by `sealer`.
    pub fn new(sealer: Arc<Sealer>) -> Self {
        CursorKey(sealer)
    }

    /// A fixed key (tests and fuzzing).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn fixed(byte: u8) -> Self {
        CursorKey(Arc::new(Sealer::fixed(byte)))
    }

    /// Seals `(epoch, list, page)`: `KID.` + 55 base64url characters.
    pub fn seal(&self, epoch: u64, list: u8, page: u32) -> String {
        let mut body = [0u8; BODY];
        body[..8].copy_from_slice(&epoch.to_be_bytes());
        body[8] = list;
        body[9..].copy_from_slice(&page.to_be_bytes());
        self.0.seal(Purpose::Cursor, AAD, &body)
    }

    /// Opens a cursor; `None` if malformed or forged.
    pub fn open(&self, cursor: &str) -> Option<(u64, u8, u32)> {
        let body = self.0.open(Purpose::Cursor, AAD, cursor)?;
        let body: [u8; BODY] = body.try_into().ok()?;
        let epoch = u64::from_be_bytes(body[..8].try_into().ok()?);
        let page = u32::from_be_bytes(body[9..].try_into().ok()?);
        Some((epoch, body[8], page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_refuses_tampering() {
        let k = CursorKey::fixed(1);
        let c = k.seal(7, 2, 3);
        assert_eq!(c.len(), 2 + 55, "{c}");
        assert_eq!(k.open(&c), Some((7, 2, 3)));
        assert_eq!(CursorKey::fixed(2).open(&c), None, "other key");
        let mut raw = c.clone().into_bytes();
        raw[20] = if raw[20] == b'A' { b'B' } else { b'A' };
        assert_eq!(k.open(&String::from_utf8(raw).unwrap()), None);
        assert_eq!(k.open("garbage"), None);
        assert_eq!(k.open(""), None);
    }

    #[test]
    fn a_cursor_is_no_session_id_and_no_other_value() {
        let sealer = Arc::new(crate::cluster::seal_tests::sealer(&[("t", 1)]));
        let c = CursorKey::new(sealer.clone()).seal(1, 0, 1);
        assert!(sealer.open(Purpose::Cursor, AAD, &c).is_some());
        assert!(sealer.open(Purpose::Session, AAD, &c).is_none());
        assert!(sealer.open(Purpose::Value, AAD, &c).is_none());
    }
}

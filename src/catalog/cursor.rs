//! Opaque list cursors handed to hosts: `epoch | list | page`, sealed with
//! HMAC-SHA256 under a per-process key so a host can neither forge nor alter one
//! (MCP server/utilities/pagination: cursors are opaque; invalid ones → -32602).

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const BODY: usize = 13;
const TAG: usize = 8;

/// The key cursors are sealed with.
#[derive(Clone)]
pub struct CursorKey(Arc<[u8; 32]>);

impl CursorKey {
    /// A fresh random key, per process: a cursor opens only in the process that
    /// sealed it, and only for the catalogue epoch it names. Cursors are not bound
    /// to a session: any caller of this process that presents one gets the page
    /// it names from the view it is served (pages hold nothing the caller's own
    /// view does not hold).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &key);
            key = <Sha256 as sha2::Digest>::digest(seed.as_bytes()).into();
        }
        CursorKey(Arc::new(key))
    }

    /// A fixed key (tests and fuzzing).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn fixed(byte: u8) -> Self {
        CursorKey(Arc::new([byte; 32]))
    }

    fn tag(&self, body: &[u8]) -> [u8; 32] {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0[..]) else {
            return [0; 32];
        };
        mac.update(body);
        mac.finalize().into_bytes().into()
    }

    /// Seals `(epoch, list, page)` into a base64url string.
    pub fn seal(&self, epoch: u64, list: u8, page: u32) -> String {
        let mut body = Vec::with_capacity(BODY + TAG);
        body.extend_from_slice(&epoch.to_be_bytes());
        body.push(list);
        body.extend_from_slice(&page.to_be_bytes());
        let tag = self.tag(&body);
        body.extend_from_slice(&tag[..TAG]);
        URL_SAFE_NO_PAD.encode(body)
    }

    /// Opens a cursor; `None` if malformed or forged.
    pub fn open(&self, cursor: &str) -> Option<(u64, u8, u32)> {
        let raw = URL_SAFE_NO_PAD.decode(cursor).ok()?;
        if raw.len() != BODY + TAG {
            return None;
        }
        let (body, tag) = raw.split_at(BODY);
        if self.tag(body)[..TAG] != *tag {
            return None;
        }
        let epoch = u64::from_be_bytes(body[..8].try_into().ok()?);
        let page = u32::from_be_bytes(body[9..13].try_into().ok()?);
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
        assert_eq!(k.open(&c), Some((7, 2, 3)));
        assert_eq!(CursorKey::fixed(2).open(&c), None, "other key");
        let mut raw = URL_SAFE_NO_PAD.decode(&c).unwrap();
        raw[12] ^= 1;
        assert_eq!(k.open(&URL_SAFE_NO_PAD.encode(raw)), None);
        assert_eq!(k.open("garbage"), None);
        assert_eq!(k.open(""), None);
    }
}

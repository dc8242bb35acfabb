//! Per-session HTTP backends' own sessions in the session record, so that
//! every replica calls a backend on the one backend session the host session
//! has there (issue 11 item 4).
//!
//! One record field per backend: `up:NAME` = `FP SEALED`. `SEALED` is
//! `Sealer::seal(Purpose::Value, "mcpgate/upstream/v1 h NAME", payload)`: the
//! backend's `Mcp-Session-Id` is a bearer-like secret of the backend and never
//! lies in Redis in clear; the payload (what the connection needs to go on
//! without a handshake) is the caller's, opaque here. `FP` is a fingerprint of
//! the id (16 hex digits of an HMAC under the cluster key, so it tells nothing
//! about the id): the compare-and-set a replica makes when it replaces a
//! backend session compares it, so two replicas that both found the old one
//! gone do not each record their own.

use std::sync::Arc;

use super::store::{Link, Unavailable};
use super::{Purpose, Sealer};

/// What [`UpstreamStore::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The field now holds the value given.
    Written,
    /// The record is gone (the session ended): nothing was written.
    NoRecord,
    /// Another replica recorded another backend session first: the field's
    /// value (open it with [`open_upstream`]).
    Taken(String),
}

/// The record field of backend `backend`'s session.
pub fn upstream_field(backend: &str) -> String {
    format!("up:{backend}")
}

/// The fingerprint of backend session id `id` stored in front of the sealed
/// value: 16 hex digits of an HMAC-SHA256 under the cluster key (the
/// principal subkey, with an issuer no identity provider has).
pub fn fingerprint(sealer: &Sealer, id: &str) -> String {
    let mac = sealer.principal_mac("mcpgate/upstream-session/v1", id);
    super::store::hex(&mac[..8])
}

fn aad(h: &str, backend: &str) -> String {
    format!("mcpgate/upstream/v1 {h} {backend}")
}

/// The field value for backend session `id` of session `h` on `backend`,
/// carrying `payload` sealed.
pub fn seal_upstream(sealer: &Sealer, h: &str, backend: &str, id: &str, payload: &[u8]) -> String {
    let sealed = sealer.seal(Purpose::Value, aad(h, backend).as_bytes(), payload);
    format!("{} {sealed}", fingerprint(sealer, id))
}

/// The payload of a field value written by [`seal_upstream`] for the same
/// session and backend; `None` when it does not open (another session's or
/// backend's value, a key no longer configured, tampering).
pub fn open_upstream(sealer: &Sealer, h: &str, backend: &str, value: &str) -> Option<Vec<u8>> {
    let (_, sealed) = value.split_once(' ')?;
    sealer.open(Purpose::Value, aad(h, backend).as_bytes(), sealed)
}

/// Per-session HTTP backends' sessions in the session record (see the
/// module docs); from [`SharedStore::upstream`](super::SharedStore::upstream).
pub struct UpstreamStore {
    link: Arc<Link>,
}

impl UpstreamStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        UpstreamStore { link }
    }

    /// The recorded backend session of session `h` on `backend` (the field
    /// value, `None`: none recorded or no record): one `HGET`.
    pub async fn get(&self, h: &str, backend: &str) -> Result<Option<String>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let field = upstream_field(backend);
        self.link
            .op("get", self.link.redis.get_field(h, &field))
            .await
    }

    /// Records `value` ([`seal_upstream`]) as session `h`'s backend session on
    /// `backend`, only while the record exists and the field holds the
    /// backend session of fingerprint `replaces` (`None`: only when it holds
    /// none): one `EVAL`.
    pub async fn record(
        &self,
        h: &str,
        backend: &str,
        replaces: Option<&str>,
        value: &str,
    ) -> Result<Recorded, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let field = upstream_field(backend);
        let expected = replaces.unwrap_or("");
        let cas = self.link.redis.swap_field(h, &field, expected, value);
        Ok(match self.link.op("put", cas).await? {
            None => Recorded::NoRecord,
            Some(v) if v.is_empty() => Recorded::Written,
            Some(v) => Recorded::Taken(v),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::seal_tests::sealer;

    #[test]
    fn values_open_only_for_their_session_and_backend() {
        let s = sealer(&[("k", 1)]);
        let v = seal_upstream(&s, "h1", "web", "sid-1", b"payload");
        assert!(!v.contains("sid-1"), "{v}");
        assert_eq!(
            open_upstream(&s, "h1", "web", &v).as_deref(),
            Some(&b"payload"[..])
        );
        assert_eq!(open_upstream(&s, "h2", "web", &v), None, "another session");
        assert_eq!(
            open_upstream(&s, "h1", "other", &v),
            None,
            "another backend"
        );
        assert_eq!(open_upstream(&sealer(&[("j", 2)]), "h1", "web", &v), None);
        assert_eq!(open_upstream(&s, "h1", "web", "garbage"), None);
    }

    #[test]
    fn fingerprints_name_the_id_without_showing_it() {
        let s = sealer(&[("k", 1)]);
        let v = seal_upstream(&s, "h1", "web", "sid-1", b"x");
        let fp = fingerprint(&s, "sid-1");
        assert_eq!(fp.len(), 16);
        assert!(v.starts_with(&format!("{fp} ")), "{v}");
        assert_ne!(fp, fingerprint(&s, "sid-2"));
        assert_ne!(fp, fingerprint(&sealer(&[("j", 2)]), "sid-1"), "keyed");
    }
}

//! Who listens on a per-session HTTP backend's shared backend session (issue
//! 11 item 4): one replica at a time opens the standalone GET stream on it.
//! The official SDK servers refuse a second GET on one session (409
//! Conflict), and a message the backend sends goes to the one stream there
//! is; every replica then relays what it hears to the session's standalone
//! stream wherever the host listens (`standalone.rs`).
//!
//! Record field `gl:NAME` = `TAG CONN`, the listening replica's tag and its
//! connection's number. A replica whose connection would open the GET claims
//! it ([`ListenerStore::claim`], one `EVAL`: absent, ours, another
//! connection of ours (replaced), or a tag whose heartbeat key is gone →
//! ours);
//! lost to a live holder, it stands by. A holder that lets go (its connection
//! closed, the session ended here, a drain) deletes the field if it still
//! names that connection (so a late release of a replaced connection frees
//! nothing) and broadcasts `gl H NAME TAG` in the same script
//! ([`ListenerStore::release`]), so a standby claims at once; a dead
//! holder is found by the standbys' liveness check of the holders' tags
//! ([`SharedStore::alive_tags`](super::SharedStore::alive_tags), one pipelined
//! `EXISTS` per distinct tag).
//!
//! The claim reads another key's hash slot (a heartbeat key), so it needs a
//! single Redis (not Redis Cluster), as the owner claim does.

use std::sync::Arc;

use super::inbox::replica_key;
use super::redis::record_key;
use super::store::{Link, Unavailable};

/// KEYS: record; ARGV: field, our value (`TAG CONN`), heartbeat key prefix
/// and suffix, our tag. nil without a record; `{mine}` (ours, or taken from
/// another connection of this replica: it was replaced); `{other, TAG}`
/// (alive holder); `{adopted, TAG}` (swapped from dead holder TAG).
const CLAIM: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], ARGV[1]) \
     if cur == ARGV[2] then return {'mine'} end \
     local holder = cur and string.match(cur, '^[^ ]+') \
     if holder == ARGV[5] then holder = nil end \
     if holder and redis.call('EXISTS', ARGV[3] .. holder .. ARGV[4]) == 1 then return {'other', holder} end \
     redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) \
     if holder then return {'adopted', holder} end return {'mine'}";

/// KEYS: record; ARGV: field, our value, broadcast channel, message. Deletes
/// the field if it is ours (this connection's, not a later one's), and then
/// broadcasts; whether it did.
const RELEASE: &str = "if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end \
     redis.call('HDEL', KEYS[1], ARGV[1]) redis.call('PUBLISH', ARGV[3], ARGV[4]) return 1";

/// The record field naming the replica that listens on backend `backend`.
fn listener_field(backend: &str) -> String {
    format!("gl:{backend}")
}

/// Its value for connection `conn` of this replica: `TAG CONN`.
fn listener_value(tag: &str, conn: u64) -> String {
    format!("{tag} {conn}")
}

/// What [`ListenerStore::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenClaim {
    /// This replica listens (it already did, or claimed it now).
    Mine,
    /// This replica took over from replica `TAG`, whose heartbeat was gone.
    Adopted(String),
    /// Replica `TAG`, alive, listens: stand by.
    Other(String),
    /// The session has no record (ended, or expired).
    NoRecord,
}

/// Which replica opens the GET stream on a per-session HTTP backend's
/// session (see the module docs); from [`SharedStore::listener`](super::SharedStore::listener).
pub struct ListenerStore {
    link: Arc<Link>,
}

impl ListenerStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        ListenerStore { link }
    }

    /// Claims the GET stream of session `h`'s backend session on `backend`
    /// for connection `conn` of this replica (a number unique in this
    /// process; one `EVAL`); see [`ListenClaim`]. Another connection of this
    /// replica holding it is replaced (its later release frees nothing).
    pub async fn claim(
        &self,
        h: &str,
        backend: &str,
        conn: u64,
    ) -> Result<ListenClaim, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (rec, field, frame) = (record_key(h), listener_field(backend), replica_key(""));
        let (open, close) = frame.split_at(frame.len() - 1);
        let value = listener_value(self.link.tag(), conn);
        let args = [field.as_str(), value.as_str(), open, close, self.link.tag()];
        let keys = [rec.as_str()];
        let claim = self
            .link
            .redis
            .eval::<Option<Vec<String>>>(CLAIM, &keys, &args);
        let Some(out) = self.link.op("claim", claim).await? else {
            return Ok(ListenClaim::NoRecord);
        };
        Ok(match (out.first().map(String::as_str), out.get(1)) {
            (Some("other"), Some(tag)) => ListenClaim::Other(tag.clone()),
            (Some("adopted"), Some(tag)) => ListenClaim::Adopted(tag.clone()),
            _ => ListenClaim::Mine,
        })
    }

    /// Lets go of the GET stream of session `h`'s backend session on
    /// `backend` if connection `conn` of this replica holds it, and tells the
    /// standbys (one `EVAL`). Tried even while the store is marked down (a
    /// drain's last word).
    pub async fn release(&self, h: &str, backend: &str, conn: u64) -> Result<(), Unavailable> {
        let (rec, field) = (record_key(h), listener_field(backend));
        let (value, msg) = (
            listener_value(self.link.tag(), conn),
            format!("gl {h} {backend} {}", self.link.tag()),
        );
        let keys = [rec.as_str()];
        let args = [
            field.as_str(),
            value.as_str(),
            super::redis::CTL,
            msg.as_str(),
        ];
        let release = self.link.redis.eval::<i64>(RELEASE, &keys, &args);
        self.link.op("release", release).await.map(|_| ())
    }
}

/// `gl H NAME TAG` from another replica: (h, backend).
pub(super) fn parse_released<'a>(words: &[&'a str], me: &str) -> Option<(&'a str, &'a str)> {
    match words {
        ["gl", h, backend, tag] if *tag != me => Some((h, backend)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_of_others_only() {
        assert_eq!(
            parse_released(&["gl", "h1", "web", "r1"], "r2"),
            Some(("h1", "web"))
        );
        assert_eq!(
            parse_released(&["gl", "h1", "web", "r2"], "r2"),
            None,
            "ours"
        );
        assert_eq!(parse_released(&["gl", "h1", "r1"], "r2"), None);
    }
}

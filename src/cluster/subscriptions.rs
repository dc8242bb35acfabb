//! Which replica holds a session's resource subscription on a backend other
//! than a per-session stdio one (issue 11): a shared connection (or the
//! shared connection of a `mode = "auto"` session), or a per-session HTTP
//! connection. Record field `ss:NAME:URI` = the holding replica's tag, or
//! `""` when the holder let the session go while it lives on (idle there, a
//! drain). (Per-session stdio subscriptions are `sub:NAME:URI`, `owner.rs`:
//! they follow the children's owner.)
//!
//! - `resources/subscribe` ([`SubscriptionStore::hold`], one `EVAL`): the
//!   field is set to this replica unless a live replica holds it already
//!   (then this one does not subscribe: one upstream subscription per
//!   session, URI and backend in the cluster). A new holder is broadcast
//!   (`ss H TAG` on `ctl`), so the replicas caching the session watch it.
//! - `resources/unsubscribe` ([`SubscriptionStore::remove`], one `EVAL`): the
//!   field goes; held by another replica, that one is told in the same
//!   script (`unsub H TAG NAME URI` on `ctl`) and ends its share.
//! - A replica that lets a live session go vacates its fields
//!   ([`SubscriptionStore::vacate`], broadcast as `free H TAG`); the record's
//!   deletion ends them with the session.
//! - Takeover ([`SubscriptionStore::adopt`], one `EVAL`): every field that is
//!   vacant or names a replica whose heartbeat key is gone is swapped to this
//!   one (compare-and-set inside the script: two replicas never both take
//!   one).
//!
//! The scripts read heartbeat keys of other hash slots, so they need a single
//! Redis (not Redis Cluster), as the owner claim does.

use std::sync::Arc;

use super::inbox::replica_key;
use super::redis::{CTL, record_key};
use super::store::{Link, Unavailable};

/// KEYS: record; ARGV: this tag, field, heartbeat key prefix and suffix, h,
/// channel. nil without a record; `{mine}`, `{other, TAG}` (a live holder),
/// `{taken}` (set to this replica now, and broadcast).
const HOLD: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], ARGV[2]) \
     if cur == ARGV[1] then return {'mine'} end \
     if cur and cur ~= '' and redis.call('EXISTS', ARGV[3] .. cur .. ARGV[4]) == 1 then \
       return {'other', cur} end \
     redis.call('HSET', KEYS[1], ARGV[2], ARGV[1]) \
     redis.call('PUBLISH', ARGV[6], 'ss ' .. ARGV[5] .. ' ' .. ARGV[1]) \
     return {'taken'}";

/// KEYS: record; ARGV: this tag, field, channel, message prefix (`unsub H
/// `), message suffix (` NAME URI`). Deletes the field; tells its holder
/// when that is another replica. Returns the holder (`""`: none).
const REMOVE: &str = "local cur = redis.call('HGET', KEYS[1], ARGV[2]) \
     if not cur then return '' end \
     redis.call('HDEL', KEYS[1], ARGV[2]) \
     if cur ~= ARGV[1] and cur ~= '' then \
       redis.call('PUBLISH', ARGV[3], ARGV[4] .. cur .. ARGV[5]) end \
     return cur";

/// KEYS: record; ARGV: this tag, h, channel. Every `ss:` field held by
/// this replica becomes vacant (`""`); if any did, `free H TAG` is
/// broadcast. How many.
const VACATE: &str = "local n = 0 \
     local all = redis.call('HGETALL', KEYS[1]) \
     for i = 1, #all, 2 do \
       if string.sub(all[i], 1, 3) == 'ss:' and all[i + 1] == ARGV[1] then \
         redis.call('HSET', KEYS[1], all[i], '') n = n + 1 end \
     end \
     if n > 0 then redis.call('PUBLISH', ARGV[3], 'free ' .. ARGV[2] .. ' ' .. ARGV[1]) end \
     return n";

/// KEYS: record; ARGV: this tag, heartbeat key prefix and suffix. Swaps to
/// this replica every `ss:` field that is vacant or names a dead replica;
/// returns those fields, and the tags of the live other holders (`@TAG`).
const ADOPT: &str = "local out = {} \
     local all = redis.call('HGETALL', KEYS[1]) \
     for i = 1, #all, 2 do \
       local f, cur = all[i], all[i + 1] \
       if string.sub(f, 1, 3) == 'ss:' and cur ~= ARGV[1] then \
         if cur == '' or redis.call('EXISTS', ARGV[2] .. cur .. ARGV[3]) == 0 then \
           redis.call('HSET', KEYS[1], f, ARGV[1]) table.insert(out, f) \
         else table.insert(out, '@' .. cur) end \
       end \
     end return out";

/// The record field of a subscription to `uri` of backend `backend`.
fn held_field(backend: &str, uri: &str) -> String {
    format!("ss:{backend}:{uri}")
}

/// (backend name, the backend's URI) of record field `field`, if it is one
/// of [`held_field`]'s.
pub fn parse_held_field(field: &str) -> Option<(String, String)> {
    let (name, uri) = field.strip_prefix("ss:")?.split_once(':')?;
    Some((name.to_owned(), uri.to_owned()))
}

/// What [`SubscriptionStore::hold`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// This replica holds it (it did, or it was free or its holder dead).
    Here,
    /// Live replica `TAG` holds it.
    Other(String),
    /// The session has no record.
    NoRecord,
}

/// What [`SubscriptionStore::adopt`] took and left.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Adopted {
    /// Taken over now: (backend name, the backend's URI).
    pub taken: Vec<(String, String)>,
    /// The live replicas holding the session's other subscriptions.
    pub others: Vec<String>,
}

/// The holders of sessions' subscriptions on non-per-session-stdio backends
/// (see the module docs); from [`SharedStore::subscriptions`](super::SharedStore::subscriptions).
pub struct SubscriptionStore {
    link: Arc<Link>,
}

impl SubscriptionStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        SubscriptionStore { link }
    }

    /// The heartbeat key of a tag, as (prefix, suffix) around it.
    fn beat_frame() -> (String, String) {
        let frame = replica_key("");
        let (open, close) = frame.split_at(frame.len() - 1);
        (open.to_owned(), close.to_owned())
    }

    /// Holds session `h`'s subscription to `uri` of `backend` for this
    /// replica unless a live one does (one `EVAL`); see [`Held`].
    pub async fn hold(&self, h: &str, backend: &str, uri: &str) -> Result<Held, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (rec, field) = (record_key(h), held_field(backend, uri));
        let (open, close) = Self::beat_frame();
        let args: [&str; 6] = [self.link.tag(), &field, &open, &close, h, CTL];
        let keys = [rec.as_str()];
        let hold = self
            .link
            .redis
            .eval::<Option<Vec<String>>>(HOLD, &keys, &args);
        let Some(out) = self.link.op("hold", hold).await? else {
            return Ok(Held::NoRecord);
        };
        Ok(match (out.first().map(String::as_str), out.get(1)) {
            (Some("other"), Some(tag)) => Held::Other(tag.clone()),
            _ => Held::Here,
        })
    }

    /// Ends session `h`'s subscription to `uri` of `backend` in the record
    /// (one `EVAL`); a holder other than this replica is told (`unsub`).
    /// The holder it had (`None`: none, or vacant).
    pub async fn remove(
        &self,
        h: &str,
        backend: &str,
        uri: &str,
    ) -> Result<Option<String>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (rec, field) = (record_key(h), held_field(backend, uri));
        let (prefix, suffix) = (format!("unsub {h} "), format!(" {backend} {uri}"));
        let args: [&str; 5] = [self.link.tag(), &field, CTL, &prefix, &suffix];
        let keys = [rec.as_str()];
        let remove = self.link.redis.eval::<String>(REMOVE, &keys, &args);
        let holder = self.link.op("hold", remove).await?;
        Ok(Some(holder).filter(|t| !t.is_empty()))
    }

    /// Vacates every subscription of session `h` this replica holds (one
    /// `EVAL`): it lets the session go while the session lives on. The other
    /// replicas are told (`free H TAG`), so one caching it takes them.
    pub async fn vacate(&self, h: &str) -> Result<(), Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let args = [self.link.tag(), h, CTL];
        let keys = [rec.as_str()];
        let vacate = self.link.redis.eval::<i64>(VACATE, &keys, &args);
        self.link.op("hold", vacate).await.map(|_| ())
    }

    /// Takes over session `h`'s subscriptions that are vacant or held by a
    /// dead replica (one `EVAL`); see [`Adopted`].
    pub async fn adopt(&self, h: &str) -> Result<Adopted, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (rec, (open, close)) = (record_key(h), Self::beat_frame());
        let args: [&str; 3] = [self.link.tag(), &open, &close];
        let keys = [rec.as_str()];
        let adopt = self.link.redis.eval::<Vec<String>>(ADOPT, &keys, &args);
        let mut adopted = Adopted::default();
        for entry in self.link.op("adopt", adopt).await? {
            match entry.strip_prefix('@') {
                Some(tag) => adopted.others.push(tag.to_owned()),
                None => adopted.taken.extend(parse_held_field(&entry)),
            }
        }
        adopted.others.sort_unstable();
        adopted.others.dedup();
        Ok(adopted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_fields_name_backend_and_uri() {
        let f = held_field("web", "file:///a:b");
        assert_eq!(f, "ss:web:file:///a:b");
        assert_eq!(
            parse_held_field(&f),
            Some(("web".to_owned(), "file:///a:b".to_owned()))
        );
        assert_eq!(parse_held_field("sub:web:x"), None);
        assert_eq!(parse_held_field("ss:web"), None);
    }
}

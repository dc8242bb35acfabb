//! The owner of a session's per-session stdio children (issue 11 item 4): one
//! replica runs them, named by the record's `own` field (its tag). The first
//! replica that needs such a child claims the session ([`SharedStore::claim_owner`],
//! one `EVAL`: set if absent, or swapped from a tag whose heartbeat key is
//! gone), another replica hands its owner-bound requests to the owner's inbox
//! ([`SharedStore::send_call`], kind `call`). The owner notes each backend it
//! started a child for (`kid:NAME` fields), so a replica adopting the session
//! from a dead owner knows which children's state was lost. A replica lets go
//! of its sessions ([`SharedStore::release_owner`]) when it drains or drops
//! them.
//!
//! The claim reads the old owner's heartbeat key inside the script: it spans
//! two hash slots, so it needs a single Redis (not Redis Cluster), as the
//! store does today.

use super::inbox::replica_key;
use super::redis::record_key;
use super::store::{SharedStore, Unavailable};

/// Claims the session for ARGV[1]; returns nil without a record, `{mine}`,
/// `{other, TAG}` (a live owner) or `{adopted, TAG, BACKEND…}` (swapped from
/// dead owner TAG, which had started children for BACKEND…; those notes are
/// cleared). ARGV[2]/ARGV[3] frame a tag into its heartbeat key.
const CLAIM: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], 'own') \
     if cur == ARGV[1] then return {'mine'} end \
     if not cur then redis.call('HSET', KEYS[1], 'own', ARGV[1]) return {'mine'} end \
     if redis.call('EXISTS', ARGV[2] .. cur .. ARGV[3]) == 1 then return {'other', cur} end \
     redis.call('HSET', KEYS[1], 'own', ARGV[1]) \
     local out = {'adopted', cur} \
     for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
       if string.sub(f, 1, 4) == 'kid:' then \
         table.insert(out, string.sub(f, 5)) redis.call('HDEL', KEYS[1], f) end \
     end return out";

/// Deletes `own` and the children notes if `own` is ARGV[1]; whether it did.
const RELEASE: &str = "if redis.call('HGET', KEYS[1], 'own') ~= ARGV[1] then return 0 end \
     redis.call('HDEL', KEYS[1], 'own') \
     for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
       if string.sub(f, 1, 4) == 'kid:' then redis.call('HDEL', KEYS[1], f) end \
     end return 1";

/// Notes a child of backend ARGV[2] if `own` is ARGV[1].
const NOTE_CHILD: &str = "if redis.call('HGET', KEYS[1], 'own') ~= ARGV[1] then return 0 end \
     redis.call('HSET', KEYS[1], 'kid:' .. ARGV[2], '1') return 1";

/// What [`SharedStore::claim_owner`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This replica owns the session (it already did, or claimed it now).
    Mine,
    /// Replica `TAG`, alive, owns it.
    Other(String),
    /// This replica took the session over from dead replica `from`, which had
    /// started children of `children` (backend names) for it.
    Adopted {
        /// The dead owner's tag.
        from: String,
        /// The backends it had started a child of.
        children: Vec<String>,
    },
    /// The session has no record (ended, or expired).
    NoRecord,
}

impl SharedStore {
    /// Claims session `h`'s per-session children for this replica (one
    /// `EVAL`); see [`Claim`].
    pub async fn claim_owner(&self, h: &str) -> Result<Claim, Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let (rec, frame) = (record_key(h), replica_key(""));
        let (open, close) = frame.split_at(frame.len() - 1);
        let (keys, args) = ([rec.as_str()], [self.tag(), open, close]);
        let claim = self.redis.eval::<Option<Vec<String>>>(CLAIM, &keys, &args);
        let Some(mut out) = self.op("claim", claim).await? else {
            return Ok(Claim::NoRecord);
        };
        if out.first().map(String::as_str) == Some("mine") {
            return Ok(Claim::Mine);
        }
        if out.len() < 2 {
            return Ok(Claim::NoRecord);
        }
        let mut rest = out.split_off(1);
        let tag = rest.remove(0);
        Ok(match out[0].as_str() {
            "other" => Claim::Other(tag),
            _ => Claim::Adopted {
                from: tag,
                children: rest,
            },
        })
    }

    /// Lets go of session `h` if this replica owns it (one `EVAL`): the next
    /// replica that needs its children claims it.
    pub async fn release_owner(&self, h: &str) -> Result<(), Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let (keys, args) = ([rec.as_str()], [self.tag()]);
        let release = self.redis.eval::<i64>(RELEASE, &keys, &args);
        self.op("release", release).await.map(|_| ())
    }

    /// Notes that this replica, owning session `h`, started a child of
    /// `backend` (one `EVAL`; nothing when another replica owns it).
    pub async fn note_child(&self, h: &str, backend: &str) -> Result<(), Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let (keys, args) = ([rec.as_str()], [self.tag(), backend]);
        let note = self.redis.eval::<i64>(NOTE_CHILD, &keys, &args);
        self.op("claim", note).await.map(|_| ())
    }

    /// Hands an owner-bound request of session `h` (`sealed`: the call, as
    /// the sender sealed it) to replica `tag`'s inbox (one `EVAL`);
    /// `Ok(false)` when that replica is not alive (nothing sent).
    pub async fn send_call(&self, tag: &str, h: &str, sealed: &[u8]) -> Result<bool, Unavailable> {
        if !self.is_up() {
            return Err(Unavailable);
        }
        self.op("send", self.redis.send(tag, "call", h, &[sealed]))
            .await
    }
}

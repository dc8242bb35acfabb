//! The owner of a session's per-session stdio children (issue 11 item 4): one
//! replica runs them, named by the record's `own` field (its tag). The first
//! replica that needs such a child claims the session
//! ([`OwnerStore::claim`], one `EVAL`: set if absent, or swapped from a
//! tag whose heartbeat key is gone), another replica hands its owner-bound
//! requests to the owner's inbox ([`OwnerStore::send_call`], kind `call`).
//! Whether such a request runs is decided by one compare-and-set on its take
//! key (`mcpg:{H}:take:STREAM`, `wait` when sent): the owner's pickup
//! ([`OwnerStore::take_call`], `wait` → `run`, the pickup mark written in
//! the same script) races the sender's give-up ([`OwnerStore::give_up_call`],
//! `wait` → `gone`); whoever writes first wins, so a request runs at most once
//! whatever the replicas' clocks say. The owner notes each backend it started
//! a child for (`kid:NAME` fields), so a replica adopting the session from a
//! dead owner knows which children's state was lost; the session's
//! subscriptions on those backends are noted too (`sub:BACKEND:URI`, by the
//! replica that ran the `resources/subscribe`), so the next owner subscribes
//! its new children again. A replica lets go of its
//! sessions ([`OwnerStore::release`]) when it drains or drops them. While
//! the owner's children list for the session what their backends' catalogues
//! do not (`catalog/own.rs`), the record says which backends (`ol`,
//! [`OwnerStore::mark_lists`]) and `ctl` tells the replicas caching it when
//! the mark appears or goes; a claim that takes the session and a release
//! clear it (those lists live with the children).
//!
//! The claim and the send read another key's hash slot (a heartbeat key)
//! inside the script, so they need a single Redis (not Redis Cluster), as the
//! store does today.

use std::sync::Arc;

use super::events::{EVENT_TTL, EVENTS_KEPT};
use super::inbox::{INBOX_MAXLEN, INBOX_TTL, inbox_key, replica_key};
use super::redis::{CTL, events_key, record_key};
use super::store::{Link, Unavailable};

/// Lua, for [`CLAIM`] and [`RELEASE`] (`h`: the session, `ch`: the `ctl`
/// channel, ARGV[1]: this replica's tag): deletes the own lists mark `ol`
/// (the lists of the children it stood for die with them) and, if there was
/// one, tells the other replicas (`ol H 0 TAG`).
macro_rules! clear_lists {
    () => {
        "if redis.call('HDEL', KEYS[1], 'ol') == 1 then \
           redis.call('PUBLISH', ch, 'ol ' .. h .. ' 0 ' .. ARGV[1]) end "
    };
}

/// Claims the session for ARGV[1]; returns nil without a record, `{mine}`
/// (ours already), `{other, TAG}` (a live owner), `{new, FIELD…}` (no owner
/// before) or `{adopted, TAG, FIELD…}` (swapped from dead owner TAG); FIELD…
/// are the record's `kid:BACKEND` notes (cleared) and `sub:BACKEND:URI`
/// subscriptions (kept). With ARGV[4] = `1` (a draining replica) nothing is
/// taken: `{vacant}` instead of `new` or `adopted`. ARGV[2]/ARGV[3] frame a
/// tag into its heartbeat key; ARGV[5] is the session, ARGV[6] the `ctl`
/// channel (a taken session's own lists mark is cleared).
const CLAIM: &str = concat!(
    "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], 'own') \
     if cur == ARGV[1] then return {'mine'} end \
     local out = {'new'} \
     if cur then \
       if redis.call('EXISTS', ARGV[2] .. cur .. ARGV[3]) == 1 then return {'other', cur} end \
       out = {'adopted', cur} \
     end \
     if ARGV[4] == '1' then return {'vacant'} end \
     redis.call('HSET', KEYS[1], 'own', ARGV[1]) \
     local h, ch = ARGV[5], ARGV[6] ",
    clear_lists!(),
    "for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
       local p = string.sub(f, 1, 4) \
       if p == 'kid:' then table.insert(out, f) redis.call('HDEL', KEYS[1], f) end \
       if p == 'sub:' then table.insert(out, f) end \
     end return out"
);

/// Deletes `own`, the children notes and the own lists mark (not the
/// subscriptions: the next owner's children get them) if `own` is ARGV[1];
/// whether it did. ARGV[2] is the session, ARGV[3] the `ctl` channel.
const RELEASE: &str = concat!(
    "if redis.call('HGET', KEYS[1], 'own') ~= ARGV[1] then return 0 end \
     redis.call('HDEL', KEYS[1], 'own') \
     local h, ch = ARGV[2], ARGV[3] ",
    clear_lists!(),
    "for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
       if string.sub(f, 1, 4) == 'kid:' then redis.call('HDEL', KEYS[1], f) end \
     end return 1"
);

/// Sets the own lists mark `ol` to ARGV[2] (backend names; `""`: deletes it)
/// if `own` is ARGV[1] (ARGV[3] the session, ARGV[4] the `ctl` channel) and,
/// when the mark appears or goes, tells the other replicas (`ol H 1|0 TAG`);
/// whether `own` is ARGV[1].
const MARK_LISTS: &str = "if redis.call('HGET', KEYS[1], 'own') ~= ARGV[1] then return 0 end \
     local on, flip = '1', 0 \
     if ARGV[2] == '' then on = '0' flip = redis.call('HDEL', KEYS[1], 'ol') \
     else flip = redis.call('HSET', KEYS[1], 'ol', ARGV[2]) end \
     if flip == 1 then redis.call('PUBLISH', ARGV[4], 'ol ' .. ARGV[3] .. ' ' .. on .. ' ' .. ARGV[1]) end \
     return 1";

/// Notes a child of backend ARGV[2] if `own` is ARGV[1].
const NOTE_CHILD: &str = "if redis.call('HGET', KEYS[1], 'own') ~= ARGV[1] then return 0 end \
     redis.call('HSET', KEYS[1], 'kid:' .. ARGV[2], '1') return 1";

/// A resource subscription of a session on a per-session stdio backend, as
/// the record keeps it (`sub:BACKEND:URI`): (backend name, the backend's URI).
pub type OwnedSubscription = (String, String);

/// What [`OwnerStore::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This replica owns the session: it already did (no subscriptions
    /// listed), or claimed it now from no owner (the session's recorded
    /// subscriptions, for its new children).
    Mine {
        /// The recorded subscriptions (empty when it was ours already).
        subscriptions: Vec<OwnedSubscription>,
    },
    /// Replica `TAG`, alive, owns it.
    Other(String),
    /// This replica took the session over from dead replica `from`, which had
    /// started children of `children` (backend names) for it.
    Adopted {
        /// The dead owner's tag.
        from: String,
        /// The backends it had started a child of.
        children: Vec<String>,
        /// The recorded subscriptions, for the new children.
        subscriptions: Vec<OwnedSubscription>,
    },
    /// No live replica owns it and this one, draining, took nothing.
    Vacant,
    /// The session has no record (ended, or expired).
    NoRecord,
}

/// The `kid:` notes (backend names) and `sub:` subscriptions among record
/// field names `fields`.
fn owned_fields(fields: &[String]) -> (Vec<String>, Vec<OwnedSubscription>) {
    let mut children = Vec::new();
    let mut subscriptions = Vec::new();
    for f in fields {
        if let Some(name) = f.strip_prefix("kid:") {
            children.push(name.to_owned());
        } else if let Some((name, uri)) = f.strip_prefix("sub:").and_then(|s| s.split_once(':')) {
            subscriptions.push((name.to_owned(), uri.to_owned()));
        }
    }
    (children, subscriptions)
}

/// The record field of subscription (`backend`, `uri`).
fn subscription_field(backend: &str, uri: &str) -> String {
    format!("sub:{backend}:{uri}")
}

/// The owner of sessions' per-session stdio children and the requests handed
/// to it (see the module docs); from [`SharedStore::owner`](super::SharedStore::owner).
pub struct OwnerStore {
    link: Arc<Link>,
}

impl OwnerStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        OwnerStore { link }
    }

    /// Claims session `h`'s per-session children for this replica (one
    /// `EVAL`); see [`Claim`]. With `draining`, a session that no live replica
    /// owns is not taken ([`Claim::Vacant`]): the caller decides (its children
    /// would stop with it).
    pub async fn claim(&self, h: &str, draining: bool) -> Result<Claim, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (rec, frame) = (record_key(h), replica_key(""));
        let (open, close) = frame.split_at(frame.len() - 1);
        let stop = if draining { "1" } else { "0" };
        let args = [self.link.tag(), open, close, stop, h, CTL];
        let keys = [rec.as_str()];
        let claim = self
            .link
            .redis
            .eval::<Option<Vec<String>>>(CLAIM, &keys, &args);
        let Some(out) = self.link.op("claim", claim).await? else {
            return Ok(Claim::NoRecord);
        };
        Ok(match out.first().map(String::as_str) {
            Some("mine") => Claim::Mine {
                subscriptions: Vec::new(),
            },
            Some("new") => Claim::Mine {
                subscriptions: owned_fields(&out[1..]).1,
            },
            Some("vacant") => Claim::Vacant,
            Some("other") if out.len() > 1 => Claim::Other(out[1].clone()),
            Some("adopted") if out.len() > 1 => {
                let (children, subscriptions) = owned_fields(&out[2..]);
                Claim::Adopted {
                    from: out[1].clone(),
                    children,
                    subscriptions,
                }
            }
            _ => Claim::NoRecord,
        })
    }

    /// Records (`on`) or forgets that session `h` subscribed to `uri` of its
    /// per-session stdio backend `backend`, for the replica that owns its
    /// children next (one command: `EVAL` that writes only while the record
    /// exists, or `HDEL`).
    pub async fn record_subscription(
        &self,
        h: &str,
        backend: &str,
        uri: &str,
        on: bool,
    ) -> Result<(), Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let field = subscription_field(backend, uri);
        if on {
            let set = self.link.redis.set_field(h, &field, "1");
            return self.link.op("set", set).await.map(|_| ());
        }
        let mut cmd = ::redis::cmd("HDEL");
        cmd.arg(record_key(h)).arg(field);
        self.link
            .op("set", self.link.redis.query::<i64>(cmd))
            .await
            .map(|_| ())
    }

    /// Lets go of session `h` if this replica owns it (one `EVAL`): the next
    /// replica that needs its children claims it.
    pub async fn release(&self, h: &str) -> Result<(), Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let (keys, args) = ([rec.as_str()], [self.link.tag(), h, CTL]);
        let release = self.link.redis.eval::<i64>(RELEASE, &keys, &args);
        self.link.op("release", release).await.map(|_| ())
    }

    /// Marks session `h`'s record with what this replica's per-session
    /// children list for it alone: `backends`, the names of those whose lists
    /// differ from the backend's catalogue (empty: none does, the mark goes);
    /// the other replicas are told when the mark appears or goes (one `EVAL`,
    /// which writes only while this replica owns the session; `Ok(false)`
    /// when it does not). A replica that sees the mark hands the session's
    /// list requests to the owner.
    pub async fn mark_lists(&self, h: &str, backends: &str) -> Result<bool, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let (keys, args) = ([rec.as_str()], [self.link.tag(), backends, h, CTL]);
        let mark = self.link.redis.eval::<i64>(MARK_LISTS, &keys, &args);
        self.link.op("set", mark).await.map(|mine| mine == 1)
    }

    /// Which replica owns session `h`'s per-session children (one `HGET` of
    /// the record's `own`, claiming nothing): `None` when none does (or the
    /// record is gone). For requests this replica cannot route itself (a
    /// name or task id it does not know), which only the owner may know.
    pub async fn of(&self, h: &str) -> Result<Option<String>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let mut cmd = ::redis::cmd("HGET");
        cmd.arg(record_key(h)).arg("own");
        let got = self.link.redis.query::<Option<String>>(cmd);
        self.link.op("get", got).await
    }

    /// Who owns the per-session children of each of the sessions `hs` (one
    /// pipelined `HGET` each; `None`: nobody, or no record); `None` when the
    /// store did not answer.
    pub async fn of_each(&self, hs: &[String]) -> Option<Vec<Option<String>>> {
        self.link
            .op("owners", self.link.redis.owners(hs))
            .await
            .ok()
    }

    /// Notes that this replica, owning session `h`, started a child of
    /// `backend` (one `EVAL`; nothing when another replica owns it).
    pub async fn note_child(&self, h: &str, backend: &str) -> Result<(), Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let (keys, args) = ([rec.as_str()], [self.link.tag(), backend]);
        let note = self.link.redis.eval::<i64>(NOTE_CHILD, &keys, &args);
        self.link.op("claim", note).await.map(|_| ())
    }

    /// Hands an owner-bound request of session `h` (`sealed`: the call, as
    /// the sender sealed it, to be written to stream `stream`) to replica
    /// `tag`'s inbox and sets its take key to `wait` (one `EVAL`);
    /// `Ok(false)` when that replica is not alive (nothing sent).
    pub async fn send_call(
        &self,
        tag: &str,
        h: &str,
        stream: u64,
        sealed: &[u8],
    ) -> Result<bool, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (inbox, alive, take) = (inbox_key(tag), replica_key(tag), take_key(h, stream));
        let keys = [inbox.as_str(), alive.as_str(), take.as_str()];
        let (maxlen, ttl) = (INBOX_MAXLEN.to_string(), TAKE_TTL.to_string());
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(SEND_CALL).arg(keys.len()).arg(&keys);
        cmd.arg(&maxlen).arg(&ttl).arg(h).arg(sealed);
        let send = self.link.redis.query::<i64>(cmd);
        self.link.op("send", send).await.map(|sent| sent == 1)
    }

    /// The owner's pickup of the request handed to it as stream `stream` of
    /// session `h` (one `EVAL`): if its take key still says `wait` it says
    /// `run` and the pickup mark (seq 0 of the stream, `last` when the owner
    /// refuses the request) is mirrored in the same step. `Ok(false)`: the
    /// sender gave up on it first (or it is too old): not to be run.
    pub async fn take_call(
        &self,
        h: &str,
        stream: u64,
        request_id: &str,
        refuse: bool,
    ) -> Result<bool, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (take, events) = (take_key(h, stream), events_key(h));
        let (kept, ttl) = (EVENTS_KEPT.to_string(), EVENT_TTL.to_string());
        let (st, last) = (stream.to_string(), if refuse { "1" } else { "0" });
        let keys = [take.as_str(), events.as_str()];
        let args = [st.as_str(), self.link.tag(), last, request_id, &kept, &ttl];
        let taken = self.link.redis.eval::<i64>(TAKE_CALL, &keys, &args);
        self.link.op("take", taken).await.map(|won| won == 1)
    }

    /// The sender's give-up on the request it handed as stream `stream` of
    /// session `h`, not picked up in time (one `EVAL`): see [`GiveUp`].
    /// Tried even while the store is marked down (the answer decides whether
    /// the request may run here).
    pub async fn give_up_call(&self, h: &str, stream: u64) -> Result<GiveUp, Unavailable> {
        let (take, ttl) = (take_key(h, stream), TAKE_TTL.to_string());
        let (keys, args) = ([take.as_str()], [ttl.as_str()]);
        let given = self.link.redis.eval::<String>(GIVE_UP, &keys, &args);
        Ok(match self.link.op("take", given).await?.as_str() {
            "gone" => GiveUp::Won,
            "run" => GiveUp::Taken,
            "ref" => GiveUp::Refused,
            _ => GiveUp::Lost,
        })
    }

    /// What the take key of the request handed as stream `stream` of session
    /// `h` says (one `GET`): [`Take::Wait`] until the owner picks it up,
    /// [`Take::Run`] / [`Take::Refused`] after, [`Take::Gone`] when the sender
    /// gave up on it or the key is gone.
    pub async fn take_state(&self, h: &str, stream: u64) -> Result<Take, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let mut cmd = ::redis::cmd("GET");
        cmd.arg(take_key(h, stream));
        let got = self.link.redis.query::<Option<String>>(cmd);
        Ok(match self.link.op("take", got).await?.as_deref() {
            Some("wait") => Take::Wait,
            Some("run") => Take::Run,
            Some("ref") => Take::Refused,
            _ => Take::Gone,
        })
    }
}

/// The state of a handed request's take key ([`OwnerStore::take_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Sent, not picked up yet.
    Wait,
    /// Picked up by the owner: it runs (or ran) there.
    Run,
    /// Picked up by the owner, which refused it (it no longer holds the
    /// session): not run.
    Refused,
    /// Given up on by the sender, or no key (never sent, or expired).
    Gone,
}

/// What became of a handed request the sender gave up on
/// ([`OwnerStore::give_up_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The give-up came first: the owner will never run the request.
    Won,
    /// The owner picked it up first: it runs (or ran) there, its pickup mark
    /// is in the session's event stream.
    Taken,
    /// The owner picked it up first and refused it (it no longer holds the
    /// session): not run.
    Refused,
    /// No take key: never sent (the send did not reach the store), or the
    /// store lost it (then whether the owner picked it up is unknown).
    Lost,
}

/// The take key of the request handed as stream `stream` of session `h`:
/// `wait`, then `run` (the owner picked it up), `ref` (picked up and refused)
/// or `gone` (the sender gave up).
fn take_key(h: &str, stream: u64) -> String {
    format!("mcpg:{{{h}}}:take:{stream}")
}

/// How long a take key lives, seconds: longer than an inbox entry waits
/// unread ([`INBOX_TTL`]); a pickup after that finds no `wait` and does not
/// run the request.
const TAKE_TTL: u64 = INBOX_TTL;

/// KEYS: inbox, heartbeat, take key; ARGV: inbox maxlen, take TTL, h, sealed
/// call. Sends only to a live replica (0 otherwise), the take key at `wait`.
const SEND_CALL: &str = "if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end \
     redis.call('SET', KEYS[3], 'wait', 'EX', ARGV[2]) \
     redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'k', 'call', 'h', ARGV[3], 'm', ARGV[4]) \
     redis.call('EXPIRE', KEYS[1], ARGV[2]) return 1";

/// KEYS: take key, events; ARGV: stream, producer tag, last, request id,
/// events kept, events TTL. `wait` → `run` (`ref` when refused) and the
/// pickup mark (the fields of `MirrorStore::add`, seq 0, no data); 0
/// when not `wait`.
const TAKE_CALL: &str = "if redis.call('GET', KEYS[1]) ~= 'wait' then return 0 end \
     redis.call('SET', KEYS[1], ARGV[3] == '1' and 'ref' or 'run', 'KEEPTTL') \
     redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'st', ARGV[1], 'sq', '0', \
       'pr', ARGV[2], 'last', ARGV[3], 'rid', ARGV[4], 'd', '') \
     redis.call('EXPIRE', KEYS[2], ARGV[6]) return 1";

/// KEYS: take key; ARGV: TTL. `wait` → `gone`; returns what the key says now
/// (`""`: no key).
const GIVE_UP: &str = "local cur = redis.call('GET', KEYS[1]) \
     if cur == 'wait' then redis.call('SET', KEYS[1], 'gone', 'EX', ARGV[1]) return 'gone' end \
     return cur or ''";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claimed_fields_split_into_children_and_subscriptions() {
        let fields = [
            "kid:fx",
            "sub:fx:fx://item/5",
            "sub:fx:a:b",
            "sub:bad",
            "own",
        ]
        .map(str::to_owned);
        let (children, subs) = owned_fields(&fields);
        assert_eq!(children, ["fx"]);
        assert_eq!(
            subs,
            [
                ("fx".to_owned(), "fx://item/5".to_owned()),
                ("fx".to_owned(), "a:b".to_owned())
            ]
        );
        assert_eq!(subscription_field("fx", "a:b"), "sub:fx:a:b");
    }
}

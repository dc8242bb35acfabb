//! The shared store's commands over Redis (the `redis` crate: one
//! `ConnectionManager`, multiplexed, reconnecting by itself, RESP3 so that the
//! `ctl` channel's messages arrive as pushes on the same connection and are
//! resubscribed after a reconnect). Every key of one session carries the hash
//! tag `{h}`, so under Redis Cluster they share a slot.
//!
//! Keys: `mcpg:{h}:rec` (hash: the session record, TTL = the session idle
//! timeout, sliding), `mcpg:replica:{TAG}` (string, TTL = 3 heartbeats),
//! `mcpg:inbox:{TAG}` (stream: what other replicas send this one, read by
//! `inbox.rs`), `mcpg:{h}:ev` (stream: the session's mirrored SSE events,
//! capped, TTL 10 min). Channels: `ctl`, `mcpg:{h}:bell` (`bell.rs`).

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, PushInfo, PushKind, RedisResult, Value};

/// The broadcast channel every replica subscribes to.
pub(super) const CTL: &str = "ctl";

/// Sets `lvl` only while the record exists: a `logging/setLevel` racing a
/// `DELETE` on another replica must not leave a record behind.
const SET_IF_EXISTS: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then \
     redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1 end return 0";

/// Sets field ARGV[1] to ARGV[3] while the record exists, if the field is
/// absent or (ARGV[2] not empty) its value starts with ARGV[2] and a space;
/// returns `""` when written, the field's value when not, nil without a record.
const SWAP_FIELD: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], ARGV[1]) \
     if not cur or (ARGV[2] ~= '' and string.sub(cur, 1, #ARGV[2] + 1) == ARGV[2] .. ' ') then \
       redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) return '' end return cur";

/// Appends messages ARGV[5..] (kind ARGV[3], session ARGV[4]), one entry
/// each, to a replica's inbox only while the replica is alive (its heartbeat
/// key exists); whether it did.
const SEND_IF_ALIVE: &str = "if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end \
     for i = 5, #ARGV do \
       redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'k', ARGV[3], 'h', ARGV[4], 'm', ARGV[i]) \
     end redis.call('EXPIRE', KEYS[1], ARGV[2]) return 1";

/// Claims the session's standalone stream `sa` = "STREAM TAG SEQ" for
/// ARGV[1] (stream) and ARGV[2] (tag): always when ARGV[3] is `any`, else only
/// if `sa` already names that stream (SEQ, its last mirrored event, is kept).
/// Returns the previous value (`""`: none); nil without a record.
const CLAIM_STANDALONE: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return false end \
     local cur = redis.call('HGET', KEYS[1], 'sa') or '' \
     local st = string.match(cur, '^(%S+)') \
     if ARGV[3] == 'any' or st == ARGV[1] then \
       local seq = '0' \
       if st == ARGV[1] then seq = string.match(cur, '(%S+)$') end \
       redis.call('HSET', KEYS[1], 'sa', ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. seq) \
     end return cur";

/// Mirrors standalone event ARGV[3] of stream ARGV[1] by replica ARGV[2]
/// only while `sa` names both: 1 written, 0 `sa` names another stream (or
/// none), -1 another replica continues this stream.
const MIRROR_STANDALONE: &str = "local cur = redis.call('HGET', KEYS[1], 'sa') \
     if not cur then return 0 end \
     local st, tag = string.match(cur, '^(%S+) (%S+)') \
     if st ~= ARGV[1] then return 0 end \
     if tag ~= ARGV[2] then return -1 end \
     redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'st', ARGV[1], 'sq', ARGV[3], \
       'pr', ARGV[2], 'last', '0', 'rid', '', 'd', ARGV[6]) \
     redis.call('EXPIRE', KEYS[2], ARGV[5]) \
     redis.call('HSET', KEYS[1], 'sa', ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]) return 1";

pub(super) fn events_key(h: &str) -> String {
    format!("mcpg:{{{h}}}:ev")
}

pub(super) fn record_key(h: &str) -> String {
    format!("mcpg:{{{h}}}:rec")
}

/// The doorbell channel of session `h`'s mirrored streams (`bell.rs`).
fn bell_channel(h: &str) -> String {
    format!("mcpg:{{{h}}}:bell")
}

/// The session of a doorbell channel (`None`: not one).
fn bell_of(channel: &[u8]) -> Option<String> {
    let h = channel.strip_prefix(b"mcpg:{")?.strip_suffix(b"}:bell")?;
    String::from_utf8(h.to_vec()).ok()
}

/// What arrives on the connection besides answers.
pub(super) enum Push {
    /// A message published on `ctl`.
    Ctl(String),
    /// A session's doorbell rang (its store key).
    Bell(String),
    /// The connection dropped (pub/sub messages may have been lost meanwhile).
    Disconnected,
}

/// One replica's connection to Redis.
#[derive(Clone)]
pub(super) struct Redis {
    conn: ConnectionManager,
    /// For connections of their own (the inbox's blocking read), RESP2.
    client: redis::Client,
}

impl Redis {
    /// A lazily connecting manager for `url` (nothing is sent until the first
    /// command), RESP3, with `deadline` as its response and connect timeout;
    /// pushes go to `on_push`.
    pub(super) fn new(
        url: &str,
        deadline: Duration,
        on_push: impl Fn(Push) + Send + Sync + 'static,
    ) -> RedisResult<Redis> {
        let plain = redis::Client::open(url)?;
        let info = plain.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(deadline))
            .set_connection_timeout(Some(deadline))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(move |info: PushInfo| {
                match info.kind {
                    PushKind::Disconnection => on_push(Push::Disconnected),
                    PushKind::Message => match (info.data.first(), info.data.get(1)) {
                        (Some(Value::BulkString(c)), _) if c.as_slice() != CTL.as_bytes() => {
                            if let Some(h) = bell_of(c) {
                                on_push(Push::Bell(h));
                            }
                        }
                        (_, Some(Value::BulkString(b))) => {
                            on_push(Push::Ctl(String::from_utf8_lossy(b).into_owned()));
                        }
                        _ => {}
                    },
                    _ => {}
                }
                Ok::<(), ()>(())
            })
            .set_automatic_resubscription();
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Redis {
            conn,
            client: plain,
        })
    }

    /// A client for a connection of its own.
    pub(super) fn client(&self) -> redis::Client {
        self.client.clone()
    }

    /// `SUBSCRIBE ctl` (kept across reconnects by the manager).
    pub(super) async fn subscribe(&self) -> RedisResult<()> {
        self.conn.clone().subscribe(CTL).await
    }

    /// `SUBSCRIBE mcpg:{h}:bell` (kept across reconnects by the manager).
    pub(super) async fn subscribe_bell(&self, h: &str) -> RedisResult<()> {
        self.conn.clone().subscribe(bell_channel(h)).await
    }

    /// `UNSUBSCRIBE mcpg:{h}:bell`.
    pub(super) async fn unsubscribe_bell(&self, h: &str) -> RedisResult<()> {
        self.conn.clone().unsubscribe(bell_channel(h)).await
    }

    /// `SET mcpg:replica:{TAG} value PX ttl_ms` pipelined with `PUBSUB
    /// NUMSUB ctl`: how many connections (one per subscribed replica) listen
    /// on `ctl`.
    pub(super) async fn heartbeat(&self, tag: &str, value: &str, ttl_ms: u64) -> RedisResult<u64> {
        let mut p = redis::pipe();
        p.cmd("SET")
            .arg(super::inbox::replica_key(tag))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .ignore();
        p.cmd("PUBSUB").arg("NUMSUB").arg(CTL);
        let (subs,): (HashMap<String, u64>,) = p.query_async(&mut self.conn.clone()).await?;
        Ok(subs.get(CTL).copied().unwrap_or(0))
    }

    /// One pipelined `HGET rec own` per session: who owns each one's
    /// per-session children (`None`: nobody, or no record).
    pub(super) async fn owners(&self, hs: &[String]) -> RedisResult<Vec<Option<String>>> {
        if hs.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for h in hs {
            p.hget(record_key(h), "own");
        }
        p.query_async(&mut self.conn.clone()).await
    }

    /// `HSET rec fields… ; EXPIRE rec ttl` in one transaction.
    pub(super) async fn put_record(
        &self,
        h: &str,
        fields: &[(&str, String)],
        ttl: u64,
    ) -> RedisResult<()> {
        let key = record_key(h);
        redis::pipe()
            .atomic()
            .hset_multiple(&key, fields)
            .ignore()
            .expire(&key, ttl.max(1) as i64)
            .ignore()
            .exec_async(&mut self.conn.clone())
            .await
    }

    /// `HGETALL rec` (empty: no record).
    pub(super) async fn get_record(&self, h: &str) -> RedisResult<HashMap<String, String>> {
        redis::cmd("HGETALL")
            .arg(record_key(h))
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Sets one field of an existing record; whether it existed.
    pub(super) async fn set_field(&self, h: &str, field: &str, value: &str) -> RedisResult<bool> {
        redis::cmd("EVAL")
            .arg(SET_IF_EXISTS)
            .arg(1)
            .arg(record_key(h))
            .arg(field)
            .arg(value)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Compare-and-set of one field of an existing record ([`SWAP_FIELD`]):
    /// `Some("")` written, `Some(value)` the value that stays, `None` no record.
    pub(super) async fn swap_field(
        &self,
        h: &str,
        field: &str,
        expected: &str,
        value: &str,
    ) -> RedisResult<Option<String>> {
        redis::cmd("EVAL")
            .arg(SWAP_FIELD)
            .arg(1)
            .arg(record_key(h))
            .arg(field)
            .arg(expected)
            .arg(value)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `EXPIRE rec ttl` (a no-op when the record is gone).
    pub(super) async fn refresh(&self, h: &str, ttl: u64) -> RedisResult<()> {
        redis::cmd("EXPIRE")
            .arg(record_key(h))
            .arg(ttl.max(1))
            .exec_async(&mut self.conn.clone())
            .await
    }

    /// `DEL rec` (together with the announcement, when one is given).
    pub(super) async fn delete(&self, h: &str, announce: Option<&str>) -> RedisResult<()> {
        let mut p = redis::pipe();
        p.del(record_key(h)).ignore();
        if let Some(msg) = announce {
            p.publish(CTL, msg).ignore();
        }
        p.exec_async(&mut self.conn.clone()).await
    }

    /// `PUBLISH ctl message`.
    pub(super) async fn publish(&self, message: &str) -> RedisResult<()> {
        redis::cmd("PUBLISH")
            .arg(CTL)
            .arg(message)
            .exec_async(&mut self.conn.clone())
            .await
    }

    /// One pipelined `EXISTS rec` per session: which records still exist.
    pub(super) async fn exist(&self, hs: &[String]) -> RedisResult<Vec<bool>> {
        if hs.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for h in hs {
            p.exists(record_key(h));
        }
        p.query_async(&mut self.conn.clone()).await
    }

    /// Appends messages `ms` (in order, one entry each) of kind `k` about
    /// session `h` to replica `tag`'s inbox if that replica is alive; whether
    /// it was.
    pub(super) async fn send(
        &self,
        tag: &str,
        k: &str,
        h: &str,
        ms: &[&[u8]],
    ) -> RedisResult<bool> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SEND_IF_ALIVE)
            .arg(2)
            .arg(super::inbox::inbox_key(tag))
            .arg(super::inbox::replica_key(tag))
            .arg(super::inbox::INBOX_MAXLEN)
            .arg(super::inbox::INBOX_TTL)
            .arg(k)
            .arg(h);
        for m in ms {
            cmd.arg(*m);
        }
        cmd.query_async(&mut self.conn.clone()).await
    }

    /// `HGET rec field` (`None`: no such field, or no record).
    pub(super) async fn get_field(&self, h: &str, field: &str) -> RedisResult<Option<String>> {
        redis::cmd("HGET")
            .arg(record_key(h))
            .arg(field)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `XADD mcpg:{h}:ev MAXLEN ~ maxlen * fields… ; EXPIRE ev ttl ;
    /// PUBLISH mcpg:{h}:bell stream` (the doorbell of its followers),
    /// pipelined.
    pub(super) async fn add_event(
        &self,
        h: &str,
        fields: &[(&str, &[u8])],
        maxlen: usize,
        ttl: u64,
    ) -> RedisResult<()> {
        let key = events_key(h);
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&key).arg("MAXLEN").arg("~").arg(maxlen).arg("*");
        for (f, v) in fields {
            xadd.arg(*f).arg(*v);
        }
        let stream = fields.iter().find(|(f, _)| *f == "st").map(|(_, v)| *v);
        redis::pipe()
            .add_command(xadd)
            .ignore()
            .expire(&key, ttl.max(1) as i64)
            .ignore()
            .publish(bell_channel(h), stream.unwrap_or_default())
            .ignore()
            .exec_async(&mut self.conn.clone())
            .await
    }

    /// The entries of `mcpg:{h}:ev` after entry id `after` (all: `None`; the
    /// stream is capped), with their entry ids, in order.
    pub(super) async fn events(
        &self,
        h: &str,
        after: Option<&str>,
    ) -> RedisResult<Vec<(String, HashMap<String, Value>)>> {
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(events_key(h))
            .arg(start)
            .arg("+")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(reply.ids.into_iter().map(|e| (e.id, e.map)).collect())
    }

    /// [`CLAIM_STANDALONE`] for session `h`.
    pub(super) async fn claim_standalone(
        &self,
        h: &str,
        stream: u64,
        tag: &str,
        any: bool,
    ) -> RedisResult<Option<String>> {
        redis::cmd("EVAL")
            .arg(CLAIM_STANDALONE)
            .arg(1)
            .arg(record_key(h))
            .arg(stream)
            .arg(tag)
            .arg(if any { "any" } else { "same" })
            .query_async(&mut self.conn.clone())
            .await
    }

    /// [`MIRROR_STANDALONE`] for session `h`: event `seq` of `stream`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn mirror_standalone(
        &self,
        h: &str,
        stream: u64,
        tag: &str,
        seq: u64,
        (maxlen, ttl): (usize, u64),
        data: &[u8],
    ) -> RedisResult<i64> {
        redis::cmd("EVAL")
            .arg(MIRROR_STANDALONE)
            .arg(2)
            .arg(record_key(h))
            .arg(events_key(h))
            .arg(stream)
            .arg(tag)
            .arg(seq)
            .arg(maxlen)
            .arg(ttl.max(1))
            .arg(data)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `EVAL script` with `keys` and `args`.
    pub(super) async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &str,
        keys: &[&str],
        args: &[&str],
    ) -> RedisResult<T> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        cmd.query_async(&mut self.conn.clone()).await
    }

    /// Runs `cmd` as it is.
    pub(super) async fn query<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> RedisResult<T> {
        cmd.query_async(&mut self.conn.clone()).await
    }

    /// Runs pipeline `p` as it is.
    pub(super) async fn pipe<T: redis::FromRedisValue>(
        &self,
        p: redis::Pipeline,
    ) -> RedisResult<T> {
        p.query_async(&mut self.conn.clone()).await
    }

    /// Whether replica `tag` is alive (its heartbeat key exists).
    pub(super) async fn alive(&self, tag: &str) -> RedisResult<bool> {
        redis::cmd("EXISTS")
            .arg(super::inbox::replica_key(tag))
            .query_async(&mut self.conn.clone())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bell_channels_name_their_session() {
        assert_eq!(
            bell_of(bell_channel("ab12").as_bytes()).as_deref(),
            Some("ab12")
        );
        assert_eq!(bell_of(CTL.as_bytes()), None);
        assert_eq!(bell_of(b"mcpg:{ab12}:ev"), None);
    }
}

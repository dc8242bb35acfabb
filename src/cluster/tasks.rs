//! A session's tasks (MCP 2025-11-25 basic/utilities/tasks) in its record, so
//! that a task made through one replica is served by every replica (issue
//! 11): the replica that relays a `CreateTaskResult` writes record field
//! `tk:EXPOSED` (the route, opaque here) and the index key
//! `mcpg:task:D` → the session's key `h`, `D` = 32 hex digits of SHA-256 over
//! the backend's name and its task id, so that a `notifications/tasks/status`
//! that reaches another replica's connection to the backend finds its session.
//! Both in one `EVAL`, only while the record exists; the index key expires
//! with the record (its TTL then), and a later write slides it. A record
//! keeps the last [`TASKS_MAX`] tasks (fields `tq`, `tq:N` number them).
//!
//! Reads: one `HGET` of the field when a replica's copy of the session lacks
//! the task (`tasks/get|result|cancel`), one `HGETALL` per `tasks/list`, one
//! `GET` of the index for a status no session here owns. Nothing on other
//! requests. The script touches keys of two hash slots: a single Redis (not
//! Redis Cluster), as the owner scripts.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::redis::record_key;
use super::store::{Link, Unavailable, hex};

/// Most task fields one record keeps ([`TaskStore::record`]): past it, the
/// oldest task's field and index key go.
const TASKS_MAX: usize = 1000;

/// KEYS: record, index key; ARGV: exposed id, value, h, `1` to write the
/// index, the cap. Writes field `tk:EXPOSED` and the index (with the record's
/// TTL) while the record exists; a new task also gets the next number `N`
/// (field `tq`) and field `tq:N` = its index key (or nothing), a newline and
/// its id; past the cap, task `N - cap`'s three go (its index key only while
/// it still names `h`). Whether it wrote.
const RECORD: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end \
     local new = redis.call('HSET', KEYS[1], 'tk:' .. ARGV[1], ARGV[2]) \
     local ix = '' \
     if ARGV[4] == '1' then ix = KEYS[2] \
       local ttl = redis.call('PTTL', KEYS[1]) \
       if ttl > 0 then redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl) \
       else redis.call('SET', KEYS[2], ARGV[3]) end end \
     if new == 0 then return 1 end \
     local n = redis.call('HINCRBY', KEYS[1], 'tq', 1) \
     redis.call('HSET', KEYS[1], 'tq:' .. n, ix .. '\\n' .. ARGV[1]) \
     local cap = tonumber(ARGV[5]) \
     if n <= cap then return 1 end \
     local f = 'tq:' .. (n - cap) \
     local old = redis.call('HGET', KEYS[1], f) \
     if not old then return 1 end \
     local sep = string.find(old, '\\n', 1, true) \
     if not sep then return 1 end \
     local key = string.sub(old, 1, sep - 1) \
     redis.call('HDEL', KEYS[1], f, 'tk:' .. string.sub(old, sep + 1)) \
     if key ~= '' and redis.call('GET', key) == ARGV[3] then redis.call('DEL', key) end \
     return 1";

/// The record field prefix of tasks (as `session::TASK_FIELD`).
const FIELD: &str = "tk:";

/// The index key of task `original` of backend `backend`.
fn index_key(backend: &str, original: &str) -> String {
    let mut d = Sha256::new();
    d.update(backend.as_bytes());
    d.update([0]);
    d.update(original.as_bytes());
    format!("mcpg:task:{}", hex(&d.finalize()[..16]))
}

/// Sessions' tasks in their records (see the module docs); from
/// [`SharedStore::tasks`](super::SharedStore::tasks).
pub struct TaskStore {
    link: Arc<Link>,
}

impl TaskStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        TaskStore { link }
    }

    /// Records task `exposed` of session `h` (`route`: the field's value)
    /// and, with `index` = (backend name, the backend's task id), its index
    /// (one `EVAL`); `Ok(false)`: no record (the session ended), nothing
    /// written. (A task held by one stdio child gets no index: another
    /// child's ids are the same numbers.) A record keeps at most
    /// [`TASKS_MAX`] tasks: a new one past it drops the oldest's field and
    /// index key.
    pub async fn record(
        &self,
        h: &str,
        exposed: &str,
        route: &str,
        index: Option<(&str, &str)>,
    ) -> Result<bool, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let rec = record_key(h);
        let key = index.map_or_else(|| rec.clone(), |(b, o)| index_key(b, o));
        let keys = [rec.as_str(), key.as_str()];
        let flag = if index.is_some() { "1" } else { "0" };
        let cap = TASKS_MAX.to_string();
        let args = [exposed, route, h, flag, cap.as_str()];
        let put = self.link.redis.eval::<i64>(RECORD, &keys, &args);
        Ok(self.link.op("task", put).await? == 1)
    }

    /// The recorded route of session `h`'s task `exposed` (`None`: none, or
    /// no record): one `HGET`.
    pub async fn get(&self, h: &str, exposed: &str) -> Result<Option<String>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let field = format!("{FIELD}{exposed}");
        let get = self.link.redis.get_field(h, &field);
        self.link.op("get", get).await
    }

    /// Every recorded task of session `h`: (exposed id, route). One
    /// `HGETALL` of the record.
    pub async fn all(&self, h: &str) -> Result<Vec<(String, String)>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let fields = self.link.op("get", self.link.redis.get_record(h)).await?;
        Ok(fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(FIELD)?.to_owned(), v)))
            .collect())
    }

    /// The session (its key `h`) that made backend `backend`'s task
    /// `original` (`None`: no session recorded it, or it ended): one `GET`.
    pub async fn session_of(
        &self,
        backend: &str,
        original: &str,
    ) -> Result<Option<String>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let get = ::redis::cmd("GET")
            .arg(index_key(backend, original))
            .to_owned();
        self.link.op("get", self.link.redis.query(get)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_keep_backend_and_id_apart() {
        let k = index_key("a", "b:c");
        assert!(k.starts_with("mcpg:task:"), "{k}");
        assert_eq!(k.len(), "mcpg:task:".len() + 32);
        assert_ne!(k, index_key("a:b", "c"));
        assert_eq!(k, index_key("a", "b:c"));
    }
}

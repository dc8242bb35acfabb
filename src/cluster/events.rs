//! Mirrored events (`mcpg:{h}:ev`): every SSE event of a host-facing stream,
//! written to the store so that the host can resume the stream on any replica
//! (`http/resume.rs`), and the stream a handed request's owner writes for its
//! sender (`http/owner.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use super::store::{Link, Unavailable};

/// Events a session's mirrored stream log keeps (`MAXLEN ~`), as the local log.
pub(super) const EVENTS_KEPT: usize = 256;

/// How long a session's mirrored events live after the last one, seconds.
pub(super) const EVENT_TTL: u64 = 600;

/// One SSE event of a host-facing stream as mirrored in the store
/// (`mcpg:{h}:ev`), so that a host can resume the stream on any replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirroredEvent {
    /// The stream number (`{stream}-{seq}` event ids).
    pub stream: u64,
    /// The sequence number (0: the stream's opening marker, no data).
    pub seq: u64,
    /// Whether it is the stream's last event (the response).
    pub last: bool,
    /// The tag of the replica that produced it.
    pub producer: String,
    /// The JSON-RPC id of the request the stream answers, as JSON text.
    pub request_id: String,
    /// The JSON-RPC message (empty for seq 0).
    pub data: Vec<u8>,
    /// The store's id of the entry (empty until written).
    pub entry: String,
}

/// The mirrored events of sessions' host-facing streams (see the module
/// docs); from [`SharedStore::mirror`](super::SharedStore::mirror).
pub struct MirrorStore {
    link: Arc<Link>,
}

impl MirrorStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        MirrorStore { link }
    }

    /// Mirrors an event this replica produced on stream `stream` of session
    /// `h` (awaited by the caller only for the last one).
    pub async fn add(&self, h: &str, ev: &MirroredEvent) -> Result<(), Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let (st, sq) = (ev.stream.to_string(), ev.seq.to_string());
        let last: &[u8] = if ev.last { b"1" } else { b"0" };
        let fields: [(&str, &[u8]); 6] = [
            ("st", st.as_bytes()),
            ("sq", sq.as_bytes()),
            ("pr", ev.producer.as_bytes()),
            ("last", last),
            ("rid", ev.request_id.as_bytes()),
            ("d", &ev.data),
        ];
        let add = self
            .link
            .redis
            .add_event(h, &fields, EVENTS_KEPT, EVENT_TTL);
        self.link.op("mirror", add).await
    }

    /// The mirrored events of stream `stream` of session `h`, in order; only
    /// those written after entry `after` (an earlier event's `entry`) if given.
    pub async fn events_of(
        &self,
        h: &str,
        stream: u64,
        after: Option<&str>,
    ) -> Result<Vec<MirroredEvent>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let entries = self
            .link
            .op("events", self.link.redis.events(h, after))
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, map)| to_event(id, &map))
            .filter(|e| e.stream == stream)
            .collect())
    }
}

/// A mirrored entry's fields as a [`MirroredEvent`].
fn to_event(entry: String, map: &HashMap<String, ::redis::Value>) -> Option<MirroredEvent> {
    let bytes = |name: &str| match map.get(name)? {
        ::redis::Value::BulkString(b) => Some(b.clone()),
        ::redis::Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    };
    let text = |name: &str| String::from_utf8(bytes(name)?).ok();
    Some(MirroredEvent {
        stream: text("st")?.parse().ok()?,
        seq: text("sq")?.parse().ok()?,
        last: text("last")? == "1",
        producer: text("pr")?,
        request_id: text("rid")?,
        data: bytes("d")?,
        entry,
    })
}

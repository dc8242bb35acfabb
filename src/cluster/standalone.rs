//! The standalone (GET) stream of a session in the shared store: which stream
//! the host is listening to and which replica produces it (the record's `sa`
//! field, `"STREAM TAG SEQ"`, SEQ = its last mirrored event), and its events,
//! mirrored to the session's event stream `mcpg:{h}:ev` with an empty `rid`.
//! A replica claims the stream when a host's `GET` attaches to it; another
//! replica that a `GET` + `Last-Event-ID` of that stream reaches takes it over
//! (same stream number, the next sequence numbers), and the first replica's
//! next mirrored event finds it taken ([`StandaloneWrite::TakenOver`]), so two
//! replicas never number events of one stream (MCP 2025-11-25
//! basic/transports, resumability: ids unique within the session). What
//! another replica's backends send for the session's standalone stream is
//! forwarded to the producer's inbox ([`StandaloneStore::forward`]).

use std::sync::Arc;

use super::events::{EVENT_TTL, EVENTS_KEPT};
use super::store::{Link, Unavailable};

/// A session's standalone stream as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandaloneClaim {
    /// The stream number.
    pub stream: u64,
    /// The tag of the replica producing it.
    pub producer: String,
    /// The sequence number of its last mirrored event (0: none yet).
    pub last_seq: u64,
}

/// What became of a mirrored standalone event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandaloneWrite {
    /// Written.
    Written,
    /// Not written: the host listens to another stream of the session (or to
    /// none through this store): the event stays in the local log only.
    NotCurrent,
    /// Not written: another replica continues this stream.
    TakenOver,
}

impl StandaloneClaim {
    fn parse(text: &str) -> Option<StandaloneClaim> {
        let mut w = text.split(' ');
        let claim = StandaloneClaim {
            stream: w.next()?.parse().ok()?,
            producer: w.next()?.to_owned(),
            last_seq: w.next()?.parse().ok()?,
        };
        w.next().is_none().then_some(claim)
    }
}

/// The claim on sessions' standalone streams, their mirrored events and
/// what is forwarded to their producer (see the module docs); from
/// [`SharedStore::standalone`](super::SharedStore::standalone).
pub struct StandaloneStore {
    link: Arc<Link>,
}

impl StandaloneStore {
    pub(super) fn new(link: Arc<Link>) -> Self {
        StandaloneStore { link }
    }

    /// Claims stream `stream` of session `h` as its standalone stream, for
    /// this replica: always when `any`, otherwise only if the record already
    /// names `stream`. `Ok(None)`: no record (the session ended); otherwise
    /// the claim before this one (`None` inside: none, or unreadable).
    pub async fn claim(
        &self,
        h: &str,
        stream: u64,
        any: bool,
    ) -> Result<Option<Option<StandaloneClaim>>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let claim = self
            .link
            .redis
            .claim_standalone(h, stream, self.link.tag(), any);
        let prev = self.link.op("claim", claim).await?;
        Ok(prev.map(|p| StandaloneClaim::parse(&p)))
    }

    /// Mirrors event `seq` (`sealed`: its data sealed) of standalone stream
    /// `stream` of session `h`, if this replica's claim on it holds.
    pub async fn mirror(
        &self,
        h: &str,
        stream: u64,
        seq: u64,
        sealed: &[u8],
    ) -> Result<StandaloneWrite, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let kept = (EVENTS_KEPT, EVENT_TTL);
        let write =
            self.link
                .redis
                .mirror_standalone(h, stream, self.link.tag(), seq, kept, sealed);
        Ok(match self.link.op("mirror", write).await? {
            1 => StandaloneWrite::Written,
            -1 => StandaloneWrite::TakenOver,
            _ => StandaloneWrite::NotCurrent,
        })
    }

    /// The claim on session `h`'s standalone stream: which replica produces
    /// the stream its host listens to (`None`: none, an unreadable one, or no
    /// record). One `HGET`.
    pub async fn current(&self, h: &str) -> Result<Option<StandaloneClaim>, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        let sa = self
            .link
            .op("claim", self.link.redis.get_field(h, "sa"))
            .await?;
        Ok(sa.as_deref().and_then(StandaloneClaim::parse))
    }

    /// Sends `messages` (JSON-RPC messages, in order) for session `h`'s
    /// standalone stream to replica `tag`, which produces it, through its
    /// inbox (one `EVAL`); `Ok(false)` when that replica is not alive
    /// (nothing sent).
    pub async fn forward(
        &self,
        tag: &str,
        h: &str,
        messages: &[&[u8]],
    ) -> Result<bool, Unavailable> {
        if !self.link.is_up() {
            return Err(Unavailable);
        }
        self.link
            .op("send", self.link.redis.send(tag, "sa", h, messages))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_parse_whole_or_not_at_all() {
        let c = StandaloneClaim::parse("42 r7 3").unwrap();
        assert_eq!((c.stream, c.producer.as_str(), c.last_seq), (42, "r7", 3));
        assert!(StandaloneClaim::parse("").is_none());
        assert!(StandaloneClaim::parse("42 r7").is_none());
        assert!(StandaloneClaim::parse("42 r7 3 x").is_none());
    }
}

//! What one replica sends to another through the shared store, never directly
//! (`mcpg:inbox:{TAG}`, a Redis stream per replica): a host's answer to a
//! server→client request that this replica relayed but another one received
//! (kind `answer`), a message for a session's standalone stream that another
//! replica produces (kind `sa`), a request for a session's per-session child
//! that another replica owns (kind `call`, `owner.rs`); and the ids that tell which replica relayed a
//! request.
//!
//! The id a host sees for a relayed request is a JSON number `tag << 21 | n`:
//! the relaying replica's 32-bit tag and a 21-bit per-session counter, so ids
//! stay below 2^53 (exact in every JSON implementation, MCP 2025-11-25
//! basic: "the request ID MUST NOT have been previously used … within the same
//! session" holds while fewer than 2^21 relayed requests are pending at once).
//! The host treats it as opaque; any replica can read the tag back.
//!
//! The inbox is read by one dedicated connection (`XREAD BLOCK`, never on the
//! shared multiplexed connection, which a blocking read would stall) that
//! resumes from the last id it saw after a reconnect, so a message written
//! while the connection was down is still read.

use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::streams::{StreamReadOptions, StreamReadReply};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ctl::Ctl;

/// Bits of the per-session counter in a relayed request's id.
const COUNTER_BITS: u32 = 21;

/// How long one `XREAD` blocks in the server, in milliseconds.
const BLOCK_MS: usize = 1000;

/// Pause before a new connection after the inbox connection failed.
const RECONNECT_AFTER: Duration = Duration::from_millis(200);

/// At most this many messages are read at once.
const BATCH: usize = 64;

/// Entries an inbox keeps (`MAXLEN ~`) and how long it lives unread, seconds.
pub(super) const INBOX_MAXLEN: usize = 1000;
pub(super) const INBOX_TTL: u64 = 60;

/// The id a host sees for the `n`-th request this replica (`tag`) relayed.
pub fn tagged_id(tag: u32, n: i64) -> i64 {
    (i64::from(tag) << COUNTER_BITS) | (n & ((1 << COUNTER_BITS) - 1))
}

/// The tag of the replica that minted relayed-request id `id` (`None`: a
/// negative id, or one no replica minted this way).
pub fn tag_of(id: i64) -> Option<u32> {
    u32::try_from(id >> COUNTER_BITS).ok().filter(|t| *t != 0)
}

/// The inbox key of replica `tag` (the braces make it share a Redis Cluster
/// slot with the replica's heartbeat key).
pub(super) fn inbox_key(tag: &str) -> String {
    format!("mcpg:inbox:{{{tag}}}")
}

/// The heartbeat key of replica `tag`.
pub(super) fn replica_key(tag: &str) -> String {
    format!("mcpg:replica:{{{tag}}}")
}

/// Reads this replica's inbox (`key`) until `stop`, turning each entry into a
/// [`Ctl`] on `events`. A failed connection is replaced; reading resumes after
/// the last id seen. The inbox of a fresh tag is empty, so reading starts at 0.
pub(super) async fn read(
    client: redis::Client,
    key: String,
    events: mpsc::UnboundedSender<Ctl>,
    stop: CancellationToken,
) {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_millis(BLOCK_MS as u64 + 1000)));
    let opts = StreamReadOptions::default().block(BLOCK_MS).count(BATCH);
    let mut last = "0-0".to_owned();
    while !stop.is_cancelled() {
        let mut conn = match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(cause = %e, "inbox connection failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(RECONNECT_AFTER) => continue,
                    _ = stop.cancelled() => return,
                }
            }
        };
        loop {
            let mut cmd = redis::cmd("XREAD");
            cmd.arg(&opts).arg("STREAMS").arg(&key).arg(&last);
            let reply = tokio::select! {
                r = cmd.query_async::<Option<StreamReadReply>>(&mut conn) => r,
                _ = stop.cancelled() => return,
            };
            match reply {
                Ok(reply) => {
                    for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                        if let Some(ctl) = to_ctl(&entry.map) {
                            let _ = events.send(ctl);
                        }
                        last = entry.id;
                    }
                }
                Err(e) => {
                    tracing::debug!(cause = %e, "inbox read failed; reconnecting");
                    tokio::time::sleep(RECONNECT_AFTER).await;
                    break;
                }
            }
        }
    }
}

/// An inbox entry `{k: "answer" | "sa" | "call", h, m}` as a [`Ctl`].
fn to_ctl(map: &std::collections::HashMap<String, redis::Value>) -> Option<Ctl> {
    let field = |name: &str| match map.get(name)? {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match field("k")?.as_str() {
        "answer" => Some(Ctl::Answer {
            h: field("h")?,
            message: field("m")?,
        }),
        "sa" => Some(Ctl::Standalone {
            h: field("h")?,
            message: field("m")?,
        }),
        "call" => Some(Ctl::Call {
            h: field("h")?,
            message: field("m")?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relayed_ids_carry_the_tag_and_stay_exact_in_json() {
        let tag = u32::MAX;
        let id = tagged_id(tag, 5);
        assert!(id < 1 << 53, "{id}");
        assert_eq!(tag_of(id), Some(tag));
        assert_eq!(
            tag_of(tagged_id(7, (1 << 21) + 3)),
            Some(7),
            "counter wraps"
        );
        assert_eq!(tagged_id(7, (1 << 21) + 3), tagged_id(7, 3));
        assert_eq!(tag_of(5), None, "an id minted without a store");
        assert_eq!(tag_of(-1), None);
    }

    #[test]
    fn inbox_entries_by_kind() {
        let entry = |k: &str| {
            let f = |v: &str| redis::Value::BulkString(v.as_bytes().to_vec());
            [("k", f(k)), ("h", f("abc")), ("m", f("{}"))]
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect()
        };
        let (h, message) = ("abc".to_owned(), "{}".to_owned());
        assert_eq!(
            to_ctl(&entry("sa")),
            Some(Ctl::Standalone {
                h: h.clone(),
                message: message.clone()
            })
        );
        assert_eq!(
            to_ctl(&entry("call")),
            Some(Ctl::Call {
                h: h.clone(),
                message: message.clone()
            })
        );
        assert_eq!(to_ctl(&entry("answer")), Some(Ctl::Answer { h, message }));
        assert_eq!(to_ctl(&entry("other")), None);
    }
}

//! `subscriptions/listen` (MCP 2026-07-28 basic/patterns/subscriptions): a
//! 2026-07-28 host opens a long-lived stream for the notification kinds it asks
//! for — `list_changed` of tools, prompts, resources, and `resources/updated` of
//! given URIs. The first message acknowledges the subset served; every message,
//! and the result that ends the stream when the gateway stops, carries the
//! host's listen id as `_meta["io.modelcontextprotocol/subscriptionId"]`. Over
//! legacy backends, list changes come from the catalogue the supervisor keeps,
//! and resource updates from refcounted `resources/subscribe` on the backends'
//! shared (or catalogue) connections.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::jsonrpc::{self, Id};
use crate::mcp::{Changed, META_SERVER_INFO, META_SUBSCRIPTION_ID, Method, implementation};
use crate::session::Outbound;

/// One open listen stream.
struct Listen {
    /// The host's JSON-RPC id of its `subscriptions/listen` request.
    id: Id,
    sink: mpsc::Sender<Outbound>,
    /// Which `list_changed` kinds it asked for.
    changed: Vec<Changed>,
    /// Subscribed resources: (backend index, the backend's URI) → the URI the
    /// host knows.
    uris: HashMap<(usize, String), String>,
}

/// The open listen streams.
#[derive(Default)]
pub struct Listens {
    open: Mutex<HashMap<u64, Listen>>,
    next: AtomicU64,
}

/// What a listen stream asks for, and what the gateway will honour.
#[derive(Debug, Default)]
pub struct Filter {
    /// `list_changed` kinds asked for.
    pub changed: Vec<Changed>,
    /// Resources whose updates are wanted: (backend index, backend URI, the URI
    /// as the host sent it).
    pub uris: Vec<(usize, String, String)>,
}

impl Filter {
    /// The `notifications` object of the acknowledgement: exactly the subset served.
    pub fn to_notifications(&self) -> Value {
        let mut n = Map::new();
        for c in &self.changed {
            let key = match c {
                Changed::Tools => "toolsListChanged",
                Changed::Prompts => "promptsListChanged",
                Changed::Resources => "resourcesListChanged",
            };
            n.insert(key.into(), true.into());
        }
        if !self.uris.is_empty() {
            let uris: Vec<&str> = self.uris.iter().map(|(_, _, u)| u.as_str()).collect();
            n.insert("resourceSubscriptions".into(), json!(uris));
        }
        Value::Object(n)
    }
}

fn tagged(method: &Method, mut params: Value, id: &Id) -> Bytes {
    if let Some(p) = params.as_object_mut() {
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(META_SUBSCRIPTION_ID.into(), id.to_value());
        }
    }
    jsonrpc::notification_bytes(method.as_str(), Some(&params)).into()
}

impl Listens {
    /// Opens a stream for host listen request `id`: queues the acknowledgement and
    /// returns the stream's key (for [`Listens::close`]).
    pub fn open(&self, id: &Id, filter: &Filter, sink: mpsc::Sender<Outbound>) -> u64 {
        let ack = json!({ "notifications": filter.to_notifications() });
        let _ = sink.try_send(Outbound::Message(tagged(
            &Method::SubscriptionsAcknowledged,
            ack,
            id,
        )));
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let listen = Listen {
            id: id.clone(),
            sink,
            changed: filter.changed.clone(),
            uris: filter
                .uris
                .iter()
                .map(|(b, orig, exposed)| ((*b, orig.clone()), exposed.clone()))
                .collect(),
        };
        if let Ok(mut open) = self.open.lock() {
            open.insert(key, listen);
        }
        key
    }

    /// Forgets stream `key` (its host went away); returns its resource
    /// subscriptions, for the caller to release.
    pub fn close(&self, key: u64) -> Vec<(usize, String)> {
        let gone = self.open.lock().ok().and_then(|mut o| o.remove(&key));
        gone.map(|l| l.uris.into_keys().collect())
            .unwrap_or_default()
    }

    /// The catalogue changed: each stream that asked for a changed kind is told.
    pub fn announce(&self, changed: &[Changed]) {
        let Ok(open) = self.open.lock() else { return };
        for l in open.values() {
            for c in changed.iter().filter(|c| l.changed.contains(c)) {
                let _ = l
                    .sink
                    .try_send(Outbound::Message(tagged(&c.method(), json!({}), &l.id)));
            }
        }
    }

    /// `notifications/resources/updated` of backend `backend`'s `uri`: to the
    /// streams subscribed to it, with the URI they know.
    pub fn updated(&self, backend: usize, uri: &str, params: &Value) {
        let Ok(open) = self.open.lock() else { return };
        let key = (backend, uri.to_owned());
        for l in open.values() {
            if let Some(exposed) = l.uris.get(&key) {
                let mut p = params.clone();
                p["uri"] = exposed.clone().into();
                let _ = l.sink.try_send(Outbound::Message(tagged(
                    &Method::ResourcesUpdated,
                    p,
                    &l.id,
                )));
            }
        }
    }

    /// Ends every stream with its graceful result (the gateway stops; MCP
    /// 2026-07-28 subscriptions: a close without it means "unexpected").
    pub fn end_all(&self) {
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        for (_, l) in open.drain() {
            let result = json!({
                "resultType": "complete",
                "_meta": { META_SUBSCRIPTION_ID: l.id.to_value(), META_SERVER_INFO: implementation() },
            });
            let bytes = jsonrpc::result_value_bytes(&l.id, &result);
            let _ = l.sink.try_send(Outbound::Final(bytes.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn acknowledges_then_tags_only_what_was_asked() {
        let listens = Listens::default();
        let (tx, mut rx) = mpsc::channel(8);
        let filter = Filter {
            changed: vec![Changed::Tools],
            uris: vec![(0, "file:///a".into(), "fs+file:///a".into())],
        };
        let key = listens.open(&Id::Num(9), &filter, tx);
        let Some(Outbound::Message(ack)) = rx.recv().await else {
            panic!("ack")
        };
        let ack: Value = serde_json::from_slice(&ack).unwrap();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION_ID], 9);
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true, "resourceSubscriptions": ["fs+file:///a"]})
        );
        listens.announce(&[Changed::Prompts, Changed::Tools]);
        let Some(Outbound::Message(n)) = rx.recv().await else {
            panic!("tools")
        };
        let n: Value = serde_json::from_slice(&n).unwrap();
        assert_eq!(
            n["method"], "notifications/tools/list_changed",
            "prompts were not asked for"
        );
        listens.updated(0, "file:///a", &json!({"uri": "file:///a"}));
        let Some(Outbound::Message(u)) = rx.recv().await else {
            panic!("updated")
        };
        let u: Value = serde_json::from_slice(&u).unwrap();
        assert_eq!(u["params"]["uri"], "fs+file:///a");
        assert_eq!(u["params"]["_meta"][META_SUBSCRIPTION_ID], 9);
        assert_eq!(listens.close(key), vec![(0, "file:///a".to_owned())]);
    }
}

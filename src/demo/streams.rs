//! The SSE streams of one Streamable HTTP session, kept in the library's
//! [`EventLog`] (the same log the gateway's sessions use).
//!
//! MCP 2025-11-25 basic/transports: each POST answered with SSE gets its own stream,
//! and the GET stream carries what relates to no request. The log numbers the
//! streams, records their events for `Last-Event-ID` resumption (on that stream
//! only) and forwards them to the attached response. What this adapter adds is the
//! engine's side: which stream belongs to which request id (so [`Route::Related`]
//! messages travel before their response), whether priming events are sent, and
//! closing a request's connection mid-call (SEP-1699 polling).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use mcpgate::jsonrpc::Id;
use mcpgate::streamable_http::{Attached, EventLog, ResumeError};

use crate::demo::server::{Route, Sink, lock};

/// The SSE streams of one session; also the session's [`Sink`].
#[derive(Default)]
pub(crate) struct Streams {
    log: EventLog,
    /// The stream of each request answered with SSE, until its response.
    by_request: Mutex<HashMap<Id, u64>>,
    /// Whether streams start with a priming event (negotiated revision
    /// ≥ 2025-11-25: older clients cannot digest an event with empty data).
    priming: AtomicBool,
    /// The session ended: no stream opens any more.
    closed: AtomicBool,
}

impl Streams {
    /// Enables priming events once the session negotiated a revision that has them.
    pub(crate) fn set_priming(&self, on: bool) {
        self.priming.store(on, Ordering::Relaxed);
    }

    /// Whether new streams start with a priming event.
    pub(crate) fn primes(&self) -> bool {
        self.priming.load(Ordering::Relaxed)
    }

    /// Opens the stream that will carry request `id`'s related messages and response.
    /// `None` if a stream for that id is already open (a reused request id) or the
    /// session ended.
    pub(crate) fn open_request(&self, id: &Id) -> Option<Attached> {
        let mut by_request = lock(&self.by_request);
        if self.closed.load(Ordering::Acquire) || by_request.contains_key(id) {
            return None;
        }
        let (stream, live) = self.log.open();
        by_request.insert(id.clone(), stream);
        Some(Attached {
            stream,
            replay: Vec::new(),
            live: Some(live),
            prime_due: true,
        })
    }

    /// Ends request `id`'s stream, after its response if there is one (none when the
    /// request was cancelled). Its connection closes; the log keeps the events for a
    /// late resumption until they are evicted.
    pub(crate) fn finish(&self, id: &Id, response: Option<Vec<u8>>) {
        let Some(stream) = lock(&self.by_request).remove(id) else {
            return;
        };
        match response {
            Some(r) => self.log.push(stream, Bytes::from(r), true),
            None => self.log.finish(stream),
        }
    }

    /// Attaches a GET without `Last-Event-ID` to the standalone stream (a GET
    /// attached before is detached); `prime`: its answer will be primed (see
    /// `EventLog::attach_standalone`). `None` once the session ended.
    pub(crate) fn open_standalone(&self, prime: bool) -> Option<Attached> {
        (!self.closed.load(Ordering::Acquire)).then(|| self.log.attach_standalone(prime))
    }

    /// Resumes the stream named by `last_event_id`: what came after it, then live
    /// events unless the stream is finished.
    pub(crate) fn resume(&self, last_event_id: &str) -> Result<Attached, ResumeError> {
        self.log.resume(last_event_id)
    }

    /// `true` if some connection is attached (the client is listening).
    pub(crate) fn has_live(&self) -> bool {
        self.log.is_attached()
    }

    /// Closes every connection and forgets every stream (session end).
    pub(crate) fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        lock(&self.by_request).clear();
        self.log.close_all();
    }
}

impl Sink for Streams {
    /// A message related to a request answered with SSE goes on that request's
    /// stream; anything else on the standalone stream (queued until a GET attaches).
    fn send(&self, route: &Route, message: Vec<u8>) {
        let stream = match route {
            Route::Related(id) => lock(&self.by_request).get(id).copied(),
            Route::Unrelated => None,
        };
        match stream {
            Some(s) => self.log.push(s, Bytes::from(message), false),
            None => self.log.push_standalone(Bytes::from(message)),
        }
    }

    /// Detaches the connection of `request`'s stream so the client polls back with
    /// `Last-Event-ID`. Only done when the client got a priming event (it has an id to
    /// resume from).
    fn close_stream(&self, request: &Id) {
        if !self.primes() {
            return;
        }
        if let Some(stream) = lock(&self.by_request).get(request).copied() {
            self.log.detach(stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    /// The SSE events a response gets until its stream ends or goes quiet.
    async fn drain(attached: Attached, prime: bool) -> Vec<String> {
        let wait = std::time::Duration::from_millis(100);
        let mut body = std::pin::pin!(attached.into_sse(prime, std::time::Duration::from_secs(60)));
        let mut out = Vec::new();
        while let Ok(Some(b)) = tokio::time::timeout(wait, body.next()).await {
            out.push(String::from_utf8_lossy(&b).into_owned());
        }
        out
    }

    #[tokio::test]
    async fn request_stream_primes_buffers_and_resumes() {
        let s = Streams::default();
        s.set_priming(true);
        let id = Id::Num(7);
        let first = s.open_request(&id).unwrap();
        let n = first.stream;
        assert!(s.open_request(&id).is_none(), "reused id refused");
        s.send(&Route::Related(id.clone()), b"{\"n\":1}".to_vec());
        s.close_stream(&id);
        assert_eq!(
            drain(first, s.primes()).await,
            [
                format!("id: {n}-0\nretry: 1000\ndata: \n\n"),
                format!("id: {n}-1\ndata: {{\"n\":1}}\n\n")
            ]
        );
        // Sent while detached: buffered, then replayed after the given id.
        s.send(&Route::Related(id.clone()), b"{\"n\":2}".to_vec());
        let again = s.resume(&format!("{n}-1")).unwrap();
        s.finish(&id, Some(b"{\"result\":{}}".to_vec()));
        assert_eq!(
            drain(again, false).await,
            [
                format!("id: {n}-2\ndata: {{\"n\":2}}\n\n"),
                format!("id: {n}-3\ndata: {{\"result\":{{}}}}\n\n")
            ]
        );
        // A finished stream replays and closes.
        let late = s.resume(&format!("{n}-2")).unwrap();
        assert_eq!(
            drain(late, false).await,
            [format!("id: {n}-3\ndata: {{\"result\":{{}}}}\n\n")]
        );
        assert_eq!(s.resume("9-0").err(), Some(ResumeError::Gone));
        assert_eq!(s.resume("nonsense").err(), Some(ResumeError::Malformed));
    }

    #[tokio::test]
    async fn unrelated_messages_go_to_the_get_stream() {
        let s = Streams::default();
        s.send(&Route::Unrelated, b"{\"early\":true}".to_vec());
        // Related to a request answered with JSON: no stream of its own.
        s.send(&Route::Related(Id::Num(1)), b"{}".to_vec());
        let get = s.open_standalone(false).unwrap();
        assert!(s.has_live());
        let events = drain(get, false).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(
            events[0].ends_with("data: {\"early\":true}\n\n"),
            "{events:?}"
        );
        s.close_all();
        assert!(!s.has_live());
        assert!(s.open_standalone(false).is_none() && s.open_request(&Id::Num(2)).is_none());
    }
}

//! Transport-independent MCP protocol engine: the shared [`Server`] and the transport [`Sink`].
//!
//! Transports feed client messages into [`Session::handle_request`],
//! [`Session::handle_notification`] and [`Session::handle_response`]; everything the
//! server sends on its own (notifications, server→client requests) leaves through the
//! transport's [`Sink`], tagged with a [`Route`] so that Streamable HTTP can put it on
//! the right SSE stream (MCP 2025-11-25 basic/transports "Sending Messages to the Server").

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use mcpgate::jsonrpc::{self, Id};
use mcpgate::mcp::{Changed, Method};

use crate::demo::catalog::DemoCatalog;
use crate::demo::listen::Listener;
use crate::demo::session::{Session, SessionInner};

/// Where an outgoing message belongs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Route {
    /// Related to the client request with this id: over Streamable HTTP it goes on that
    /// request's SSE stream (MCP 2025-11-25 basic/transports, POST item 6).
    Related(Id),
    /// Unrelated to any request (`list_changed`, `resources/updated`): the GET stream.
    Unrelated,
}

/// The transport's outgoing side. Implementations must not block: queue and return.
pub trait Sink: Send + Sync + 'static {
    /// Sends one serialized JSON-RPC message (request or notification).
    fn send(&self, route: &Route, message: Vec<u8>);

    /// Asks the transport to close the connection carrying the SSE stream of
    /// `request` without ending the stream (SEP-1699 polling). No-op by default.
    fn close_stream(&self, request: &Id) {
        let _ = request;
    }
}

/// Identity the server announces in `initialize` (`serverInfo`, `instructions`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `serverInfo.title` (2025-06-18+ display name).
    pub title: Option<String>,
    /// `InitializeResult.instructions`.
    pub instructions: Option<String>,
}

/// How long a server→client request (sampling, elicitation, roots) may wait for the
/// client's answer before it is cancelled (MCP 2025-11-25 basic/lifecycle "Timeouts").
pub(crate) const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A server: identity, capabilities and a catalogue shared by all its sessions.
///
/// Cheap to clone. Changing the catalogue with [`Server::update_catalog`] notifies every
/// session of the lists that changed.
#[derive(Clone)]
pub struct Server {
    inner: Arc<ServerInner>,
}

struct ServerInner {
    info: ServerInfo,
    capabilities: Value,
    /// Snapshot semantics: readers clone the `Arc` and never hold the lock across `.await`.
    catalog: RwLock<Arc<DemoCatalog>>,
    sessions: Mutex<Vec<Weak<SessionInner>>>,
    /// Open `subscriptions/listen` streams of stateless clients.
    listeners: Mutex<Vec<Weak<Listener>>>,
    /// Cancelled when the server stops: listen streams end gracefully.
    listening: CancellationToken,
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Server {
    /// A server whose capabilities are derived from the catalogue: `tools`/`resources`/
    /// `prompts` with `listChanged: true` (and `resources.subscribe: true`) when present,
    /// `completions` when a completer is set, and always `logging` (MCP 2025-11-25
    /// basic/lifecycle).
    pub fn new(info: ServerInfo, catalog: DemoCatalog) -> Self {
        let capabilities = derive_capabilities(&catalog);
        Server {
            inner: Arc::new(ServerInner {
                info,
                capabilities,
                catalog: RwLock::new(Arc::new(catalog)),
                sessions: Mutex::new(Vec::new()),
                listeners: Mutex::new(Vec::new()),
                listening: CancellationToken::new(),
            }),
        }
    }

    /// The announced identity.
    pub fn info(&self) -> &ServerInfo {
        &self.inner.info
    }

    /// The announced `ServerCapabilities`.
    pub fn capabilities(&self) -> &Value {
        &self.inner.capabilities
    }

    /// The current catalogue snapshot.
    pub fn catalog(&self) -> Arc<DemoCatalog> {
        self.inner
            .catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Changes the catalogue, then sends `notifications/{tools,resources,prompts}/list_changed`
    /// to every session for each list whose definitions changed (and whose capability
    /// declares `listChanged`). Returns the changed lists.
    pub fn update_catalog(&self, f: impl FnOnce(&mut DemoCatalog)) -> Vec<Changed> {
        let kinds = Changed::ALL;
        let changed: Vec<Changed> = {
            let mut guard = self
                .inner
                .catalog
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let before: Vec<Vec<Value>> = kinds.iter().map(|k| guard.definitions(*k)).collect();
            let mut next = DemoCatalog::clone(&guard);
            f(&mut next);
            let changed = kinds
                .iter()
                .zip(before)
                .filter(|(k, b)| next.definitions(**k) != *b)
                .map(|(k, _)| *k)
                .collect();
            *guard = Arc::new(next);
            changed
        };
        for kind in &changed {
            self.notify_list_changed(*kind);
        }
        changed
    }

    /// Sends `notifications/<kind>/list_changed` to every initialized session and
    /// every listen stream that asked for it, if the capability declares
    /// `listChanged`.
    pub fn notify_list_changed(&self, kind: Changed) {
        let cap = match kind {
            Changed::Tools => "tools",
            Changed::Resources => "resources",
            Changed::Prompts => "prompts",
        };
        if self.inner.capabilities[cap]["listChanged"] != Value::Bool(true) {
            return;
        }
        let msg = jsonrpc::notification_bytes(kind.method().as_str(), None);
        for s in self.live_sessions() {
            if s.is_initialized() {
                s.sink.send(&Route::Unrelated, msg.clone());
            }
        }
        for l in self.live_listeners() {
            l.list_changed(kind);
        }
    }

    /// Sends `notifications/resources/updated {uri}` to the sessions subscribed to `uri`
    /// (MCP 2025-11-25 server/resources "Subscriptions") and the listen streams that
    /// subscribed to it. Returns how many were notified.
    pub fn notify_resource_updated(&self, uri: &str) -> usize {
        let msg = jsonrpc::notification_bytes(
            Method::ResourcesUpdated.as_str(),
            Some(&json!({ "uri": uri })),
        );
        let mut n = 0;
        for s in self.live_sessions() {
            if lock(&s.state).subscriptions.contains(uri) {
                s.sink.send(&Route::Unrelated, msg.clone());
                n += 1;
            }
        }
        for l in self.live_listeners() {
            n += usize::from(l.resource_updated(uri));
        }
        n
    }

    /// Registers an open listen stream; it is forgotten when its last `Arc` drops.
    pub(crate) fn add_listener(&self, listener: &Arc<Listener>) {
        let mut listeners = lock(&self.inner.listeners);
        listeners.retain(|w| w.strong_count() > 0);
        listeners.push(Arc::downgrade(listener));
    }

    fn live_listeners(&self) -> Vec<Arc<Listener>> {
        lock(&self.inner.listeners)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Cancelled by [`Server::stop_listening`].
    pub(crate) fn listening(&self) -> &CancellationToken {
        &self.inner.listening
    }

    /// Ends every listen stream with its graceful result (at shutdown).
    pub fn stop_listening(&self) {
        self.inner.listening.cancel();
    }

    /// A session for stateless requests whose messages go to `sink`: never
    /// registered, so nothing unrelated to its requests reaches it.
    pub fn detached(&self, sink: Arc<dyn Sink>) -> Session {
        Session::from_inner(Arc::new(SessionInner::new(self.clone(), sink)))
    }

    /// Starts a session whose outgoing messages go to `sink`.
    pub fn connect(&self, sink: Arc<dyn Sink>) -> Session {
        let inner = Arc::new(SessionInner::new(self.clone(), sink));
        let mut sessions = lock(&self.inner.sessions);
        sessions.retain(|w| w.strong_count() > 0);
        sessions.push(Arc::downgrade(&inner));
        Session::from_inner(inner)
    }

    fn live_sessions(&self) -> Vec<Arc<SessionInner>> {
        let mut sessions = lock(&self.inner.sessions);
        sessions.retain(|w| w.strong_count() > 0);
        sessions
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|s| !s.closed.is_cancelled())
            .collect()
    }
}

fn derive_capabilities(catalog: &DemoCatalog) -> Value {
    let mut caps = Map::new();
    if catalog.has_tools() {
        caps.insert("tools".into(), json!({ "listChanged": true }));
    }
    if catalog.has_resources() {
        caps.insert(
            "resources".into(),
            json!({ "subscribe": true, "listChanged": true }),
        );
    }
    if catalog.has_prompts() {
        caps.insert("prompts".into(), json!({ "listChanged": true }));
    }
    if catalog.has_completer() {
        caps.insert("completions".into(), json!({}));
    }
    caps.insert("logging".into(), json!({}));
    Value::Object(caps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::catalog::{Tool, text_result};

    #[test]
    fn capabilities_follow_the_catalog() {
        let empty = derive_capabilities(&DemoCatalog::new());
        assert_eq!(empty, json!({ "logging": {} }));
        let tool = Tool::new(json!({"name": "t"}), |_, _| async { Ok(text_result("")) });
        let caps = derive_capabilities(&DemoCatalog::new().with_tool(tool));
        assert_eq!(caps["tools"], json!({ "listChanged": true }));
        assert!(caps.get("prompts").is_none() && caps.get("completions").is_none());
    }
}

//! The handshake of a backend connection: `initialize` +
//! `notifications/initialized` for a legacy backend (MCP 2025-11-25
//! basic/lifecycle), `server/discover` for a 2026-07-28 one, and the fallback
//! from the one to the other on the same transport.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::BackendError;
use super::conn::{Connection, InitInfo};
use super::modern;
use crate::jsonrpc;
use crate::mcp::{Method, ProtocolVersion};

impl Connection {
    /// Repeats the handshake on the same transport (the backend ended our session).
    pub(super) async fn rehandshake(self: &Arc<Self>) -> Result<(), BackendError> {
        Box::pin(self.handshake(self.timeout(), false)).await
    }

    /// Performs `initialize` + `notifications/initialized` (MCP basic/lifecycle),
    /// declaring the connection's client capabilities; on a stateless connection
    /// `server/discover` instead (MCP 2026-07-28 server/discover), within
    /// `probe` at most. With `fallback`, a discover that fails while the
    /// transport lives (an error answer, garbage, no answer in time) turns the
    /// connection legacy and `initialize` follows on the same transport (MCP
    /// 2026-07-28 basic/transports/stdio, backward compatibility).
    pub(super) async fn handshake(
        self: &Arc<Self>,
        probe: Duration,
        fallback: bool,
    ) -> Result<(), BackendError> {
        if let Some(version) = self.modern() {
            let limit = probe.min(self.timeout());
            let found = self
                .request(&Method::ServerDiscover, None, None, limit)
                .await
                .and_then(|raw| modern::discover_info(&self.backend, &raw, version));
            match found {
                Ok(info) => {
                    let _ = self.info.set(info);
                    return Ok(());
                }
                Err(e) if !fallback || !self.is_alive() => return Err(e),
                Err(e) => {
                    tracing::info!(backend = %self.backend, cause = %e, "no 2026-07-28 answer to server/discover; initializing");
                    if let Ok(mut m) = self.modern.lock() {
                        *m = None;
                    }
                }
            }
        }
        let timeout = self.timeout();
        let params = json!({
            "protocolVersion": ProtocolVersion::LATEST.as_str(),
            "capabilities": self.capabilities,
            "clientInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")},
        });
        let raw = self
            .request(&Method::Initialize, Some(params), None, timeout)
            .await?;
        let result: Value = raw
            .parse()
            .map_err(|e| BackendError::protocol(&self.backend, format!("initialize: {e}")))?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(version) = ProtocolVersion::parse(version) else {
            return Err(BackendError::protocol(
                &self.backend,
                format!("initialize: unsupported protocolVersion {version:?}"),
            ));
        };
        let info = InitInfo {
            version,
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        let _ = self.info.set(info);
        let bytes = jsonrpc::notification_bytes(Method::Initialized.as_str(), None);
        self.link()?.send_awaited(self, bytes).await
    }
}

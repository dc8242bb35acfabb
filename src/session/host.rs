//! Who a host request comes from: a legacy session (MCP 2025-11-25: `initialize`,
//! `Mcp-Session-Id`), or one stateless 2026-07-28 request that declares its
//! revision, capabilities and log level in its own `params._meta` (MCP 2026-07-28
//! basic/index, per-request fields). The dispatch and the relay work on [`Host`],
//! so one request path serves both eras.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use super::Session;
use crate::auth::policy::ViewKey;
use crate::auth::{ClientKey, PrincipalId};
use crate::mcp::{LogLevel, ProtocolVersion};

/// What a 2026-07-28 request declares about its client, for this request only.
#[derive(Debug)]
pub struct ModernHost {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub version: ProtocolVersion,
    /// `io.modelcontextprotocol/clientCapabilities` (an object; `{}` = none).
    pub capabilities: Value,
    /// `io.modelcontextprotocol/logLevel`: logs reach the host only when set, and
    /// only at or above it (MCP 2026-07-28 server/utilities/logging).
    pub log_level: Option<LogLevel>,
    /// The authenticated caller (`None`: open endpoint).
    pub principal: Option<PrincipalId>,
    /// The caller's authorization view.
    pub view_key: ViewKey,
    /// The client's address (the peer, or behind `server.trusted_proxies` what
    /// they forwarded); `None` when unknown.
    pub client: Option<IpAddr>,
}

/// The originator of a host request.
#[derive(Clone)]
pub enum Host {
    /// A session opened with `initialize`.
    Legacy(Arc<Session>),
    /// One stateless request.
    Modern(Arc<ModernHost>),
}

impl Host {
    /// The revision the answer is shaped for.
    pub fn version(&self) -> ProtocolVersion {
        match self {
            Host::Legacy(s) => s.version(),
            Host::Modern(m) => m.version,
        }
    }

    /// The authorization view the request is served from.
    pub fn view_key(&self) -> ViewKey {
        match self {
            Host::Legacy(s) => s.view_key(),
            Host::Modern(m) => m.view_key.clone(),
        }
    }

    /// The client capabilities declared (at `initialize`, or in this request).
    pub fn client_capabilities(&self) -> &Value {
        match self {
            Host::Legacy(s) => s.client_capabilities(),
            Host::Modern(m) => &m.capabilities,
        }
    }

    /// Whether a `notifications/message` at `level` (wire name) should reach the
    /// host. A legacy session gets everything at or above the level it set (all
    /// when it set none); a modern request gets logs only when it asked for them.
    pub fn wants_log(&self, level: &str) -> bool {
        match self {
            Host::Legacy(s) => s.wants_log(level),
            Host::Modern(m) => match (m.log_level, LogLevel::parse(level)) {
                (Some(min), Some(at)) => at >= min,
                (Some(_), None) => true,
                (None, _) => false,
            },
        }
    }

    /// The level logs were asked for: `logging/setLevel` of a legacy session, the
    /// request's `logLevel` for a modern one; `None`: none asked.
    pub fn log_level(&self) -> Option<LogLevel> {
        match self {
            Host::Legacy(s) => s.log_level(),
            Host::Modern(m) => m.log_level,
        }
    }

    /// Who holds the connections this host's requests open
    /// (`max_connections_per_client`).
    pub fn client_key(&self) -> Option<ClientKey> {
        match self {
            Host::Legacy(s) => ClientKey::of(s.principal(), s.client()),
            Host::Modern(m) => ClientKey::of(m.principal.as_ref(), m.client),
        }
    }

    /// The session, for a legacy host.
    pub fn session(&self) -> Option<&Arc<Session>> {
        match self {
            Host::Legacy(s) => Some(s),
            Host::Modern(_) => None,
        }
    }
}

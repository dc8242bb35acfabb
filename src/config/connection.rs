//! How the gateway talks to one backend: connection sharing and protocol era.

use serde::Deserialize;

/// How backend connections relate to host sessions: one shared connection is
/// cheap, but a stateful backend's server→client requests and logs can only
/// reach the right host on a connection of that host's own
/// (docs/architecture.md, "Connection modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionMode {
    /// One connection serves every host session (cheap; stateless tool servers).
    Shared,
    /// Each host session gets its own connection, created lazily and closed with the
    /// session (needed for sampling, elicitation, roots and per-session state).
    PerSession,
    /// `shared` until the backend shows it keeps state per client (on its shared
    /// connection it sends a server→client request, or a log while not exactly one
    /// call is in flight); sessions created from then on get their own connection,
    /// as with `per_session`. The default for stdio.
    Auto,
}

/// `[backends.NAME] era`: which protocol era the client face speaks to the backend
/// (MCP 2026-07-28 basic/versioning: legacy = initialize-based, modern = stateless).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendEra {
    /// Probe with `server/discover` (http: on the endpoint; stdio: on a disposable
    /// sibling process) and cache the answer; re-probe when a failure says the
    /// cached era is wrong. The default.
    #[default]
    Auto,
    /// Always `initialize` (2025-11-25 and older).
    Legacy,
    /// Always 2026-07-28: per-request `_meta`, no `initialize`, no session.
    Modern,
}

/// `[backends.NAME] on_owner_loss`, with a shared store (`[cluster] redis`):
/// what happens to a session whose per-session stdio child lived on a replica
/// that died (its heartbeat expired) when another replica needs the child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwnerLoss {
    /// The adopting replica starts a new child on first use and sets the
    /// session's log level on it again; whatever else the old child kept is
    /// gone. The default.
    #[default]
    Respawn,
    /// The session ends (its record is deleted, every replica drops it) and the
    /// host gets 404, so it knows the backend's state is gone and
    /// re-initializes.
    EndSession,
}

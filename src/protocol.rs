//! MCP protocol revisions and the facts about them the gateway relies on.

use std::fmt;

/// A legacy-era (initialize-based) MCP revision the gateway speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2024-11-05 (HTTP+SSE era; accepted from backends only).
    V2024_11_05,
    /// 2025-03-26 (Streamable HTTP, batches).
    V2025_03_26,
    /// 2025-06-18 (no batches, structured output, elicitation).
    V2025_06_18,
    /// 2025-11-25 (tasks, URL elicitation, icons).
    V2025_11_25,
}

impl ProtocolVersion {
    /// The newest revision; offered to backends and answered to hosts that ask for
    /// something unknown (MCP 2025-11-25 basic/lifecycle, version negotiation).
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// Revisions accepted from hosts, newest first.
    pub const HOST_SUPPORTED: [ProtocolVersion; 3] = [
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ];

    /// Assumed when a host sends no `MCP-Protocol-Version` header and nothing else
    /// tells (MCP 2025-11-25 basic/transports, protocol version header).
    pub const DEFAULT_HTTP: ProtocolVersion = ProtocolVersion::V2025_03_26;

    /// The wire string, e.g. `"2025-11-25"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
        }
    }

    /// Parses a wire string; `None` for anything the gateway does not speak.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        Some(match s {
            "2024-11-05" => ProtocolVersion::V2024_11_05,
            "2025-03-26" => ProtocolVersion::V2025_03_26,
            "2025-06-18" => ProtocolVersion::V2025_06_18,
            "2025-11-25" => ProtocolVersion::V2025_11_25,
            _ => return None,
        })
    }

    /// Whether JSON-RPC batches are allowed (removed in 2025-06-18).
    pub fn allows_batches(self) -> bool {
        self <= ProtocolVersion::V2025_03_26
    }

    /// Whether SSE streams should start with a priming event (2025-11-25, SEP-1699).
    pub fn primes_streams(self) -> bool {
        self >= ProtocolVersion::V2025_11_25
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The stateless 2026-07-28 revision, which the gateway recognises in order to
/// answer its probes with a well-formed error (MCP 2026-07-28 basic/versioning).
pub const MODERN_VERSION: &str = "2026-07-28";

/// `_meta` key that marks a 2026-07-28 ("modern") request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_orders() {
        for v in ProtocolVersion::HOST_SUPPORTED {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
        assert!(ProtocolVersion::V2025_03_26.allows_batches());
        assert!(!ProtocolVersion::V2025_06_18.allows_batches());
        assert_eq!(ProtocolVersion::parse("2026-07-28"), None);
        assert_eq!(ProtocolVersion::parse("banana"), None);
    }
}

//! `[backends.NAME.audit]`: what the access log line says about the arguments of a
//! `tools/call` routed to the backend. Nothing by default.

use serde::Deserialize;

/// `[backends.NAME.audit]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ArgumentAudit {
    /// `none` (default): arguments are not logged; `keys`: the top-level argument
    /// names; `values`: the arguments as JSON, every value under a `redact` key
    /// (at any depth) replaced by `"[redacted]"`, cut at 1 KiB.
    pub arguments: ArgumentLogging,
    /// Argument keys whose values are never logged (case-insensitive, at any depth).
    /// Default: `password`, `secret`, `token`, `api_key`, `apikey`, `authorization`,
    /// `cookie`; setting it replaces the default.
    pub redact: Vec<String>,
}

impl Default for ArgumentAudit {
    fn default() -> Self {
        ArgumentAudit {
            arguments: ArgumentLogging::None,
            redact: [
                "password",
                "secret",
                "token",
                "api_key",
                "apikey",
                "authorization",
                "cookie",
            ]
            .map(str::to_owned)
            .to_vec(),
        }
    }
}

/// How much of a call's arguments the access line shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentLogging {
    /// Nothing.
    #[default]
    None,
    /// The top-level argument names.
    Keys,
    /// The arguments, redacted.
    Values,
}

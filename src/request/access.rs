//! The access (audit) line of a host request (fields in the parent module's docs),
//! and what it may show of a call's arguments.

use std::net::IpAddr;

use serde_json::Value;

use super::{Outcome, RequestContext};
use crate::auth::PrincipalId;
use crate::config::{ArgumentAudit, ArgumentLogging};
use crate::jsonrpc::Id;
use crate::mcp::ProtocolVersion;

/// What only the access line needs.
#[derive(Default)]
pub(super) struct Audit {
    pub(super) rpc_id: Option<Id>,
    pub(super) revision: Option<ProtocolVersion>,
    pub(super) modern: Option<bool>,
    pub(super) principal: Option<PrincipalId>,
    pub(super) client: Option<IpAddr>,
    pub(super) code: Option<i64>,
    pub(super) status: Option<u16>,
    pub(super) bytes_in: Option<usize>,
    pub(super) bytes_out: Option<usize>,
    pub(super) arguments: Option<String>,
    /// `GET` or `DELETE` (a POST carries a JSON-RPC method instead).
    pub(super) http_method: Option<&'static str>,
}

/// The longest method name the access line repeats (a host may send any string).
const LOGGED_METHOD_MAX: usize = 64;

/// The most bytes of arguments an access line holds.
const LOGGED_ARGUMENTS_MAX: usize = 1024;

/// What the access line shows of a `tools/call`'s `arguments` under `audit`:
/// `None` (not logged), the top-level keys as a JSON array, or the arguments as
/// JSON with every value under a `redact` key (case-insensitive, any depth)
/// replaced by `"[redacted]"`, cut to [`LOGGED_ARGUMENTS_MAX`] bytes (then ending
/// in `…`).
pub fn audited_arguments(audit: &ArgumentAudit, arguments: Option<&Value>) -> Option<String> {
    let text = match audit.arguments {
        ArgumentLogging::None => return None,
        ArgumentLogging::Keys => {
            let keys: Vec<&String> = match arguments {
                Some(Value::Object(m)) => m.keys().collect(),
                _ => Vec::new(),
            };
            serde_json::to_string(&keys).unwrap_or_default()
        }
        ArgumentLogging::Values => {
            let mut v = arguments.cloned().unwrap_or(Value::Null);
            redact(&mut v, &audit.redact);
            v.to_string()
        }
    };
    if text.len() <= LOGGED_ARGUMENTS_MAX {
        return Some(text);
    }
    let mut end = LOGGED_ARGUMENTS_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("{}…", &text[..end]))
}

fn redact(v: &mut Value, keys: &[String]) {
    match v {
        Value::Object(m) => {
            for (k, inner) in m.iter_mut() {
                if keys.iter().any(|r| r.eq_ignore_ascii_case(k)) {
                    *inner = Value::String("[redacted]".into());
                } else {
                    redact(inner, keys);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact(i, keys)),
        _ => {}
    }
}

impl RequestContext {
    /// Writes the access line.
    pub(super) fn log(&self, outcome: Outcome, secs: f64) {
        let a = &self.audit;
        let method = self.method.as_ref().map(|m| truncated(m.as_str()));
        tracing::info!(
            target: "mcpgate::access",
            http = a.http_method,
            method,
            rpc_id = a.rpc_id.as_ref().map(|id| tracing::field::display(id.logged())),
            session = self.session.as_deref(),
            era = a.modern.map(|m| if m { "modern" } else { "legacy" }),
            revision = a.revision.map(ProtocolVersion::as_str),
            issuer = a.principal.as_ref().map(|p| &*p.issuer),
            subject = a.principal.as_ref().map(|p| &*p.subject),
            client = a.client.map(|ip| tracing::field::display(Client(ip))),
            backend = self.backend.as_deref(),
            name = self.target.as_deref(),
            outcome = outcome.label(),
            code = a.code,
            status = a.status.unwrap_or(200),
            reason = match outcome {
                Outcome::Rejected(why) => Some(why.label()),
                _ => None,
            },
            ms = (secs * 1000.0) as u64,
            bytes_in = a.bytes_in,
            bytes_out = a.bytes_out,
            arguments = a.arguments.as_deref(),
            handed = self.handed.then_some(true),
            trace_id = self.trace.as_ref().map(crate::telemetry::ServerSpan::trace_id),
            "request"
        );
    }
}

/// A client address as `IpAddr` displays it; IPv4 without `fmt` machinery
/// (four `itoa` octets: the access line is written for every request).
struct Client(IpAddr);

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let IpAddr::V4(v4) = self.0 else {
            return self.0.fmt(f);
        };
        let mut digits = itoa::Buffer::new();
        for (i, octet) in v4.octets().into_iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(digits.format(octet))?;
        }
        Ok(())
    }
}

/// `s`, cut to at most [`LOGGED_METHOD_MAX`] bytes at a character boundary.
fn truncated(s: &str) -> &str {
    if s.len() <= LOGGED_METHOD_MAX {
        return s;
    }
    let mut end = LOGGED_METHOD_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_shown_only_as_configured_redacted_and_bounded() {
        let args = serde_json::json!({"q": "x", "TOKEN": "t", "deep": {"secret": [1]}});
        let mut audit = ArgumentAudit::default();
        assert_eq!(audited_arguments(&audit, Some(&args)), None);
        audit.arguments = ArgumentLogging::Keys;
        assert_eq!(
            audited_arguments(&audit, Some(&args)).as_deref(),
            Some(r#"["q","TOKEN","deep"]"#)
        );
        assert_eq!(audited_arguments(&audit, None).as_deref(), Some("[]"));
        audit.arguments = ArgumentLogging::Values;
        assert_eq!(
            audited_arguments(&audit, Some(&args)).as_deref(),
            Some(r#"{"q":"x","TOKEN":"[redacted]","deep":{"secret":"[redacted]"}}"#)
        );
        let long = serde_json::json!({"q": "é".repeat(2000)});
        let shown = audited_arguments(&audit, Some(&long)).unwrap();
        assert!(
            shown.len() <= LOGGED_ARGUMENTS_MAX + "…".len(),
            "{}",
            shown.len()
        );
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn client_addresses_read_as_ipaddr_displays_them() {
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "255.10.0.9",
            "2001:db8::1",
            "::ffff:1.2.3.4",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(Client(ip).to_string(), ip.to_string());
        }
    }
}

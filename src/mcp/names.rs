//! Namespacing: exposed tool/prompt names and resource URIs, a reversible table
//! rather than string parsing, so a name never routes to the wrong backend.
//!
//! Names become `{prefix}__{name}`. Exposed names always satisfy MCP 2025-11-25
//! server/tools "Tool Names": 1–128 characters from `[A-Za-z0-9_.-]` (and the
//! configured `max_name_len`). A name that does not fit is made to fit
//! deterministically: disallowed characters become `_` and a hash of the original
//! name is appended, so distinct originals stay distinct (`天气预报` ≠ `天气查询`,
//! `café` ≠ `cafe`). The router keeps exposed → original in a table; nothing is
//! ever parsed back out of an exposed name. URIs become `{uri_prefix}+{uri}`.
//! Ids that backends mint and hosts echo back (task ids, URL-elicitation ids)
//! become `{backend}:{id}` ([`expose_id`]), so equal ids of two backends stay apart.

use sha2::{Digest, Sha256};

/// Separator between prefix and original name.
pub const SEPARATOR: &str = "__";

/// Whether `c` is allowed in a tool name (MCP 2025-11-25 server/tools).
pub fn allowed_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Whether `s` is a valid exposed name of at most `max_len` characters.
pub fn is_valid_name(s: &str, max_len: usize) -> bool {
    !s.is_empty() && s.len() <= max_len && s.chars().all(allowed_char)
}

/// First 8 hex digits of SHA-256 of `s`.
pub fn short_hash(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The exposed name for `original` of a backend with `prefix` (`""` = none).
pub fn expose(prefix: &str, original: &str, max_len: usize) -> String {
    let joined = join(prefix, original);
    if is_valid_name(&joined, max_len) {
        return joined;
    }
    let sanitized: String = original
        .chars()
        .map(|c| if allowed_char(c) { c } else { '_' })
        .collect();
    with_suffix(&join(prefix, &sanitized), &short_hash(original), max_len)
}

/// `name` shortened so that `name-suffix` fits in `max_len`.
pub fn with_suffix(name: &str, suffix: &str, max_len: usize) -> String {
    let keep = max_len.saturating_sub(suffix.len() + 1);
    let base: String = name.chars().take(keep).collect();
    format!("{base}-{suffix}")
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}{SEPARATOR}{name}")
    }
}

/// The exposed form of a backend resource URI or URI template.
pub fn expose_uri(uri_prefix: &str, uri: &str) -> String {
    if uri_prefix.is_empty() {
        uri.to_owned()
    } else {
        format!("{uri_prefix}+{uri}")
    }
}

/// The exposed form of an id minted by backend `backend` (a task id or an
/// `elicitationId`): `{backend}:{id}`. Exposed task ids are looked up in the
/// session's table, never split.
pub fn expose_id(backend: &str, id: &str) -> String {
    format!("{backend}:{id}")
}

/// Splits an exposed URI into `(uri_prefix, original)` when it has the
/// `{prefix}+{uri}` form: the part before the first `+` must come before the
/// first `:` (so it belongs to the scheme) and be a plausible prefix.
pub fn split_uri(uri: &str) -> Option<(&str, &str)> {
    let plus = uri.find('+')?;
    let colon = uri.find(':')?;
    if plus >= colon || plus == 0 {
        return None;
    }
    Some((&uri[..plus], &uri[plus + 1..]))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn plain_names_are_joined() {
        assert_eq!(
            expose("time", "get_current_time", 128),
            "time__get_current_time"
        );
        assert_eq!(expose("", "echo", 128), "echo");
    }

    #[test]
    fn disallowed_characters_and_unicode_stay_distinct() {
        let originals = [
            "read/file",
            "a.b/c",
            "天气预报",
            "天气查询",
            "café",
            "cafe",
            "with space",
            "",
        ];
        let exposed: Vec<String> = originals.iter().map(|o| expose("fs", o, 128)).collect();
        for e in &exposed {
            assert!(is_valid_name(e, 128), "{e}");
            assert!(e.starts_with("fs__"), "{e}");
        }
        let unique: HashSet<&String> = exposed.iter().collect();
        assert_eq!(unique.len(), originals.len(), "{exposed:?}");
        assert_eq!(expose("fs", "cafe", 128), "fs__cafe");
        // Deterministic.
        assert_eq!(expose("fs", "café", 128), expose("fs", "café", 128));
    }

    #[test]
    fn long_names_are_shortened_deterministically() {
        let long = "x".repeat(200);
        let a = expose("p", &long, 64);
        assert_eq!(a.len(), 64);
        assert!(is_valid_name(&a, 64));
        let b = expose("p", &format!("{long}y"), 64);
        assert_ne!(a, b);
        assert_eq!(a, expose("p", &long, 64));
    }

    #[test]
    fn uris_round_trip() {
        let e = expose_uri("files", "file:///srv/readme.md");
        assert_eq!(e, "files+file:///srv/readme.md");
        assert_eq!(split_uri(&e), Some(("files", "file:///srv/readme.md")));
        assert_eq!(split_uri("git+ssh://x"), Some(("git", "ssh://x")));
        assert_eq!(split_uri("file:///a+b"), None);
        assert_eq!(split_uri("test://static"), None);
        let nested = expose_uri("a", "git+ssh://host/repo");
        assert_eq!(split_uri(&nested), Some(("a", "git+ssh://host/repo")));
    }
}

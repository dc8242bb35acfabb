//! `[cluster]`: the keys that seal session ids, list cursors and other values
//! handed to hosts, so that every replica sharing them (and a restarted process)
//! can open what another one sealed.
//!
//! Key lines come from `cluster.session_keys_file` or the environment variable
//! `MCPGATE_SESSION_KEYS`, never from the config text itself (it is often in a
//! ConfigMap or a repository; keys belong in a Secret). Format, one key a line:
//!
//! ```text
//! KID:BASE64
//! ```
//!
//! `KID` is 1–16 of `A-Za-z0-9_-` (sealed values carry it in clear to name the key
//! that opens them); `BASE64` is standard base64 (padding optional) of exactly 32
//! random bytes, e.g. `openssl rand -base64 32`. The first line seals; every line
//! opens (rotation). Blank lines and lines starting with `#` are ignored.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Deserialize;

use super::ConfigProblem;
use super::schema;

/// The environment variable that may hold the key lines instead of a file.
pub const KEYS_ENV: &str = "MCPGATE_SESSION_KEYS";

/// Longest key id, so that a sealed session id stays within 128 characters
/// (an HAProxy stick-table key, `deploy/haproxy/haproxy.cfg`).
pub const MAX_KID_LEN: usize = 16;

/// `[cluster]`: what lets several replicas (or a restarted process) serve the
/// same sessions.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// A file of `KID:BASE64` lines (32 random bytes each, e.g. `openssl rand
    /// -base64 32`): the first line seals session ids and cursors, every line
    /// opens them. Read at start (`check-config` reads it too). Alternatively
    /// the same lines in the environment variable `MCPGATE_SESSION_KEYS` (not
    /// both). Without either, a random key per process: sessions do not survive
    /// a restart and cursors open only in the process that made them.
    pub session_keys_file: Option<PathBuf>,
    /// Absolute lifetime of a session after its `initialize`, whatever its
    /// activity; also how long a sealed id is accepted at all. Default 24 h.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub session_max_lifetime: Duration,
    /// The shared session store, `redis://[user:password@]host:port[/db]` or
    /// `rediss://…` (TLS, the system's roots). With it, every replica holding the
    /// same keys shares what changes in a session: a `DELETE`d or expired session
    /// ends everywhere, a log level set on one replica holds on all, and a replica
    /// that stops for a rollout leaves its sessions to the others. Needs
    /// `session_keys_file` (or `MCPGATE_SESSION_KEYS`). Absent: sessions are
    /// carried by their sealed ids alone (token-only mode).
    pub redis: Option<String>,
    /// How often a replica announces itself in the store (`mcpg:replica:TAG`,
    /// kept for 3 heartbeats) and checks that the store answers. Default 1 s.
    #[serde(with = "humantime_serde")]
    #[schemars(schema_with = "schema::duration")]
    pub heartbeat: Duration,
    /// The keys read from `session_keys_file` or `MCPGATE_SESSION_KEYS`, first
    /// = sealing key; empty when neither is set.
    #[serde(skip)]
    #[schemars(skip)]
    pub keys: Vec<SessionKey>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            session_keys_file: None,
            session_max_lifetime: Duration::from_secs(24 * 3600),
            redis: None,
            heartbeat: Duration::from_secs(1),
            keys: Vec::new(),
        }
    }
}

/// One configured key: its id and 32 secret bytes. `Debug` shows the id only.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey {
    /// Key id, carried in clear by sealed values.
    pub kid: String,
    /// The key.
    pub secret: [u8; 32],
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// Reads the keys of `cluster` from its file or from `MCPGATE_SESSION_KEYS`
/// (through `env`). Problems carry the field path (`cluster.session_keys_file`)
/// or the variable's name; they never quote key material.
pub(super) fn load(
    cluster: &ClusterConfig,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<ConfigProblem>,
) -> Vec<SessionKey> {
    const FIELD: &str = "cluster.session_keys_file";
    let from_env = env(KEYS_ENV);
    let (text, source) = match (&cluster.session_keys_file, from_env) {
        (Some(_), Some(_)) => {
            problems.push(ConfigProblem::new(
                FIELD,
                format!("{KEYS_ENV} is set too; configure the keys in one place"),
            ));
            return Vec::new();
        }
        (Some(path), None) => match std::fs::read_to_string(path) {
            Ok(text) => (text, FIELD),
            Err(e) => {
                problems.push(ConfigProblem::new(
                    FIELD,
                    format!("cannot read {}: {e}", path.display()),
                ));
                return Vec::new();
            }
        },
        (None, Some(text)) => (text, KEYS_ENV),
        (None, None) => return Vec::new(),
    };
    match parse_keys(&text) {
        Ok(keys) => keys,
        Err(found) => {
            problems.extend(found.into_iter().map(|m| ConfigProblem::new(source, m)));
            Vec::new()
        }
    }
}

/// Parses `KID:BASE64` lines (see the module docs). Errors: every problem, as a
/// message naming the line (`line 2 (kid "k2"): ...`).
pub fn parse_keys(text: &str) -> Result<Vec<SessionKey>, Vec<String>> {
    let b64 = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let mut keys: Vec<SessionKey> = Vec::new();
    let mut problems = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = n + 1;
        let Some((kid, value)) = line.split_once(':') else {
            problems.push(format!("line {n}: expected KID:BASE64"));
            continue;
        };
        let (kid, value) = (kid.trim(), value.trim());
        if !is_valid_kid(kid) {
            problems.push(format!(
                "line {n}: key id {kid:?} must be 1-{MAX_KID_LEN} of A-Za-z0-9_-"
            ));
            continue;
        }
        let at = format!("line {n} (kid {kid:?})");
        let Ok(secret) = b64.decode(value) else {
            problems.push(format!("{at}: the key is not valid base64"));
            continue;
        };
        let Ok(secret) = <[u8; 32]>::try_from(secret.as_slice()) else {
            problems.push(format!(
                "{at}: the key is {} bytes, expected 32 (openssl rand -base64 32)",
                secret.len()
            ));
            continue;
        };
        if keys.iter().any(|k| k.kid == kid) {
            problems.push(format!("{at}: duplicate key id"));
            continue;
        }
        keys.push(SessionKey {
            kid: kid.to_owned(),
            secret,
        });
    }
    if keys.is_empty() && problems.is_empty() {
        problems.push("no key: expected at least one KID:BASE64 line".into());
    }
    if problems.is_empty() {
        Ok(keys)
    } else {
        Err(problems)
    }
}

fn is_valid_kid(kid: &str) -> bool {
    (1..=MAX_KID_LEN).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="; // 32 x 0x01
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI"; // 32 x 0x02, unpadded

    #[test]
    fn reads_keys_in_order_first_seals() {
        let keys = parse_keys(&format!("# rotation\nnew:{K2}\n\n old : {K1} \r\n")).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[0].kid.as_str(), keys[0].secret), ("new", [2; 32]));
        assert_eq!((keys[1].kid.as_str(), keys[1].secret), ("old", [1; 32]));
        assert!(!format!("{keys:?}").contains("secret"), "{keys:?}");
    }

    #[test]
    fn names_every_bad_line() {
        let text = format!(
            "a:{K1}\nb:not*base64\nc:{}\na:{K2}\nno-colon\nbad kid:{K1}\n",
            base64::engine::general_purpose::STANDARD.encode([7u8; 16])
        );
        let problems = parse_keys(&text).unwrap_err();
        assert_eq!(
            problems,
            [
                "line 2 (kid \"b\"): the key is not valid base64",
                "line 3 (kid \"c\"): the key is 16 bytes, expected 32 (openssl rand -base64 32)",
                "line 4 (kid \"a\"): duplicate key id",
                "line 5: expected KID:BASE64",
                "line 6: key id \"bad kid\" must be 1-16 of A-Za-z0-9_-",
            ]
        );
        assert!(problems.iter().all(|p| !p.contains(K1)), "no key material");
    }

    #[test]
    fn an_empty_file_is_a_problem() {
        for text in ["", "\n# only a comment\n  \n"] {
            assert_eq!(
                parse_keys(text).unwrap_err(),
                ["no key: expected at least one KID:BASE64 line"]
            );
        }
    }

    fn parse(
        toml: &str,
        keys_env: Option<&str>,
    ) -> Result<super::super::Config, Vec<ConfigProblem>> {
        let env = |n: &str| {
            (n == KEYS_ENV)
                .then(|| keys_env.map(str::to_owned))
                .flatten()
        };
        super::super::Config::parse(toml, std::path::Path::new("c.toml"), &env)
    }

    fn problems(toml: &str, keys_env: Option<&str>) -> Vec<String> {
        parse(toml, keys_env)
            .map(|_| Vec::new())
            .unwrap_or_else(|p| p.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn config_problems_carry_the_field_path() {
        let dir = std::env::temp_dir().join(format!("mcpgate-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            format!(
                "[cluster]\nsession_keys_file = {:?}\n",
                path.display().to_string()
            )
        };
        let good = file("good", &format!("k1:{K1}\n"));
        let c = parse(&good, None).unwrap();
        assert_eq!(c.cluster.keys[0].kid, "k1");
        assert_eq!(
            c.cluster.session_max_lifetime,
            Duration::from_secs(86_400),
            "default 24 h"
        );
        assert_eq!(
            problems(&file("short", "k1:AQID\n"), None),
            [
                "cluster.session_keys_file: line 1 (kid \"k1\"): the key is 3 bytes, expected 32 (openssl rand -base64 32)"
            ]
        );
        assert_eq!(
            problems(&file("empty", ""), None),
            ["cluster.session_keys_file: no key: expected at least one KID:BASE64 line"]
        );
        assert_eq!(
            problems(&file("dup", &format!("k1:{K1}\nk1:{K2}\n")), None),
            ["cluster.session_keys_file: line 2 (kid \"k1\"): duplicate key id"]
        );
        let missing = problems(
            "[cluster]\nsession_keys_file = \"/nonexistent/keys\"\n",
            None,
        );
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].starts_with("cluster.session_keys_file: cannot read /nonexistent/keys"),
            "{missing:?}"
        );
        assert_eq!(
            problems(&good, Some(&format!("k2:{K2}"))),
            [
                "cluster.session_keys_file: MCPGATE_SESSION_KEYS is set too; configure the keys in one place"
            ]
        );
        assert_eq!(
            problems("", Some("k1:%%%")),
            ["MCPGATE_SESSION_KEYS: line 1 (kid \"k1\"): the key is not valid base64"]
        );
        let from_env = parse("", Some(&format!("a:{K1}\nb:{K2}"))).unwrap();
        let kids: Vec<&str> = from_env
            .cluster
            .keys
            .iter()
            .map(|k| k.kid.as_str())
            .collect();
        assert_eq!(kids, ["a", "b"]);
        assert_eq!(
            problems("[cluster]\nsession_max_lifetime = \"0s\"\n", None),
            ["cluster.session_max_lifetime: must be greater than zero"]
        );
        assert!(
            parse("", None).unwrap().cluster.keys.is_empty(),
            "no keys: none"
        );
        assert_eq!(
            problems("[cluster]\nredis = \"redis://r:6379\"\n", None),
            [
                "cluster.redis: a shared store needs shared session keys: set cluster.session_keys_file or MCPGATE_SESSION_KEYS"
            ]
        );
        let keys = format!("k1:{K1}");
        for url in [
            "http://r:6379",
            "redis:r",
            "not a url",
            "redis://user:secret@/0",
        ] {
            let found = problems(&format!("[cluster]\nredis = {url:?}\n"), Some(&keys));
            assert_eq!(
                found,
                ["cluster.redis: expected redis://HOST[:PORT][/DB] or rediss://HOST[:PORT][/DB]"],
                "{url}"
            );
        }
        for url in ["redis://r:6379/0", "rediss://user:pw@r.example:6380"] {
            let c = parse(&format!("[cluster]\nredis = {url:?}\n"), Some(&keys)).unwrap();
            assert_eq!(c.cluster.redis.as_deref(), Some(url));
            assert_eq!(c.cluster.heartbeat, Duration::from_secs(1), "default");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

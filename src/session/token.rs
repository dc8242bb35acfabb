//! The sealed `Mcp-Session-Id`: everything a gateway process needs to take a
//! session over (after a restart, or on another replica) without asking anyone,
//! sealed with [`Sealer`] so that a host can neither forge nor alter it nor read
//! who it belongs to (MCP 2025-11-25 basic/transports, session management: the
//! id is a secure, visible-ASCII identifier; security best practices, session
//! hijacking: bind it to the user).
//!
//! Plaintext (45 bytes), sealed for [`Purpose::Session`] with AAD [`AAD`]:
//!
//! ```text
//! fmt:1 = 1 | flags:1 | created:u32 | epoch:u32 | rand:16 | principal:16 | version:1 | caps:u16
//! ```
//!
//! - `flags` bit 0: bound to a principal (else `principal` is zeros: open endpoint).
//! - `created`: Unix seconds of `initialize` (until 2106), for `session_max_lifetime`.
//! - `epoch`: the minting store's random epoch ([`crate::session::SessionStore::epoch`]):
//!   the store tells its own ids from those of another process.
//! - `rand`: 128 random bits, the session's identity.
//! - `principal`: [`Sealer::principal_mac`] of issuer and subject (never the token).
//! - `version`: the negotiated revision; `caps`: [`Caps`].
//!
//! Integers are big-endian. The id is `KID.` + 98 base64url characters: at most
//! 115 with a 16-character kid, within an HAProxy stick-table key of 128.

use serde_json::{Map, Value, json};

use crate::auth::PrincipalId;
use crate::cluster::{Purpose, Sealer, random_bytes};
use crate::mcp::ProtocolVersion;

/// Bound into every sealed session id (a value sealed for another use of the
/// session subkey never opens as one).
pub const AAD: &[u8] = b"mcpgate session id";
const FMT: u8 = 1;

/// The AAD of a session id at `endpoint`: [`AAD`] alone for `server.path` (ids
/// of a gateway without `[endpoints]` are unchanged), else `AAD` + `@` + name, so
/// an id opens only at the endpoint that minted it.
fn aad(endpoint: &str) -> std::borrow::Cow<'static, [u8]> {
    if endpoint.is_empty() {
        return AAD.into();
    }
    let mut a = AAD.to_vec();
    a.push(b'@');
    a.extend_from_slice(endpoint.as_bytes());
    a.into()
}
const LEN: usize = 45;

/// Who a session is, independent of its id's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// 128 random bits.
    pub rand: [u8; 16],
    /// Unix seconds of `initialize`.
    pub created: u32,
    /// The epoch of the store that minted it.
    pub epoch: u32,
}

impl Identity {
    /// A new identity, created now, in store epoch `epoch`.
    pub fn mint(epoch: u32) -> Identity {
        Identity {
            rand: random_bytes(),
            created: unix_now(),
            epoch,
        }
    }

    /// Whether `max_lifetime` passed since `created`, at Unix time `now`.
    pub fn outlived(&self, now: u32, max_lifetime: std::time::Duration) -> bool {
        u64::from(now.saturating_sub(self.created)) >= max_lifetime.as_secs()
    }
}

/// Unix seconds now (0 before 1970, `u32::MAX` after 2106).
pub fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
}

/// The client capabilities the gateway decides on, one bit each (MCP 2025-11-25
/// client capabilities: roots, sampling, elicitation, tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps(u16);

/// (bit, top-level capability, sub-field or "" for the capability itself).
const CAP_BITS: [(u16, &str, &str); 9] = [
    (1 << 0, "roots", ""),
    (1 << 1, "roots", "listChanged"),
    (1 << 2, "sampling", ""),
    (1 << 3, "sampling", "context"),
    (1 << 4, "sampling", "tools"),
    (1 << 5, "elicitation", ""),
    (1 << 6, "elicitation", "form"),
    (1 << 7, "elicitation", "url"),
    (1 << 8, "tasks", ""),
];

impl Caps {
    /// The bits of an `initialize` `capabilities` object: a capability counts
    /// when present and not null (as `Session::has_capability`); `roots.listChanged`
    /// when `true`; other sub-fields when present.
    pub fn of(capabilities: &Value) -> Caps {
        let mut bits = 0;
        for (bit, cap, sub) in CAP_BITS {
            let Some(c) = capabilities.get(cap).filter(|c| !c.is_null()) else {
                continue;
            };
            let set = match sub {
                "" => true,
                "listChanged" => c.get(sub) == Some(&Value::Bool(true)),
                _ => c.get(sub).is_some(),
            };
            if set {
                bits |= bit;
            }
        }
        Caps(bits)
    }

    /// The capabilities object these bits stand for, e.g. `{"roots":
    /// {"listChanged": true}, "elicitation": {"form": {}}}`. Lossy: sub-fields
    /// the bits do not name (`tasks.requests`, `experimental`, anything newer)
    /// and non-empty values of the named ones are gone, so a backend opened for a
    /// restored session sees only these.
    pub fn to_json(self) -> Value {
        let mut out = Map::new();
        for (bit, cap, sub) in CAP_BITS {
            if self.0 & bit == 0 {
                continue;
            }
            let entry = out.entry(cap).or_insert_with(|| json!({}));
            match sub {
                "" => {}
                "listChanged" => entry[sub] = Value::Bool(true),
                _ => entry[sub] = json!({}),
            }
        }
        Value::Object(out)
    }
}

/// What a sealed session id carries; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionToken {
    /// Who the session is.
    pub identity: Identity,
    /// The principal binding (`None`: open endpoint).
    pub principal: Option<[u8; 16]>,
    /// The revision negotiated with the host.
    pub version: ProtocolVersion,
    /// The host's capability bits.
    pub caps: Caps,
}

impl SessionToken {
    /// The token of a session a host just initialized, bound to `principal`.
    pub fn new(
        sealer: &Sealer,
        identity: Identity,
        principal: Option<&PrincipalId>,
        version: ProtocolVersion,
        capabilities: &Value,
    ) -> SessionToken {
        SessionToken {
            identity,
            principal: principal.map(|p| sealer.principal_mac(&p.issuer, &p.subject)),
            version,
            caps: Caps::of(capabilities),
        }
    }

    /// The `Mcp-Session-Id` text (one ChaCha20-Poly1305 seal, ~1 µs) of a
    /// session at endpoint `endpoint` (`[endpoints.NAME]`, `""`: `server.path`):
    /// it opens only at that endpoint ([`aad`]).
    pub fn seal(&self, sealer: &Sealer, endpoint: &str) -> String {
        let mut p = [0u8; LEN];
        let id = &self.identity;
        p[0] = FMT;
        p[1] = u8::from(self.principal.is_some());
        p[2..6].copy_from_slice(&id.created.to_be_bytes());
        p[6..10].copy_from_slice(&id.epoch.to_be_bytes());
        p[10..26].copy_from_slice(&id.rand);
        p[26..42].copy_from_slice(&self.principal.unwrap_or_default());
        p[42] = version_byte(self.version);
        p[43..45].copy_from_slice(&self.caps.0.to_be_bytes());
        sealer.seal(Purpose::Session, &aad(endpoint), &p)
    }

    /// Opens an `Mcp-Session-Id` presented at endpoint `endpoint`; `None` when it
    /// was not sealed by a key this process holds, was altered, is not of a
    /// format it knows, or belongs to another endpoint.
    pub fn open(sealer: &Sealer, id: &str, endpoint: &str) -> Option<SessionToken> {
        let p = sealer.open(Purpose::Session, &aad(endpoint), id)?;
        if p.len() != LEN || p[0] != FMT || p[1] > 1 {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        let mut rand = [0u8; 16];
        rand.copy_from_slice(&p[10..26]);
        let mut mac = [0u8; 16];
        mac.copy_from_slice(&p[26..42]);
        Some(SessionToken {
            identity: Identity {
                rand,
                created: u32_at(2),
                epoch: u32_at(6),
            },
            principal: (p[1] == 1).then_some(mac),
            version: version_of(p[42])?,
            caps: Caps(u16::from_be_bytes([p[43], p[44]])),
        })
    }

    /// Whether the session is bound to `presented` (both open, or the same
    /// issuer and subject under any configured key).
    pub fn binds(&self, sealer: &Sealer, presented: Option<&PrincipalId>) -> bool {
        match (&self.principal, presented) {
            (None, None) => true,
            (Some(mac), Some(p)) => sealer.principal_matches(&p.issuer, &p.subject, mac),
            _ => false,
        }
    }
}

fn version_byte(v: ProtocolVersion) -> u8 {
    match v {
        ProtocolVersion::V2024_11_05 => 1,
        ProtocolVersion::V2025_03_26 => 2,
        ProtocolVersion::V2025_06_18 => 3,
        ProtocolVersion::V2025_11_25 => 4,
        // Sessionless on the wire; listed so that every revision has a byte.
        ProtocolVersion::V2026_07_28 => 5,
    }
}

fn version_of(b: u8) -> Option<ProtocolVersion> {
    Some(match b {
        1 => ProtocolVersion::V2024_11_05,
        2 => ProtocolVersion::V2025_03_26,
        3 => ProtocolVersion::V2025_06_18,
        4 => ProtocolVersion::V2025_11_25,
        5 => ProtocolVersion::V2026_07_28,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::seal_tests::sealer;

    fn alice() -> PrincipalId {
        PrincipalId {
            issuer: Arc::from("https://issuer.test"),
            subject: Arc::from("alice"),
        }
    }

    #[test]
    fn carries_identity_binding_revision_and_capabilities() {
        let s = sealer(&[("0123456789abcdef", 1)]);
        let caps = json!({
            "roots": {"listChanged": true},
            "sampling": {"tools": {}},
            "elicitation": {"url": {}, "x-unknown": 1},
            "experimental": {"a": {}},
        });
        let t = SessionToken::new(
            &s,
            Identity::mint(7),
            Some(&alice()),
            ProtocolVersion::V2025_06_18,
            &caps,
        );
        let id = t.seal(&s, "");
        assert_eq!(id.len(), 16 + 1 + 98, "{id}");
        assert!(id.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{id}");
        let back = SessionToken::open(&s, &id, "").unwrap();
        assert_eq!(back, t);
        assert_eq!(back.identity.epoch, 7);
        assert!(back.binds(&s, Some(&alice())));
        let bob = PrincipalId {
            subject: Arc::from("bob"),
            ..alice()
        };
        assert!(!back.binds(&s, Some(&bob)));
        assert!(!back.binds(&s, None));
        assert_eq!(
            back.caps.to_json(),
            json!({
                "roots": {"listChanged": true},
                "sampling": {"tools": {}},
                "elicitation": {"url": {}},
            }),
            "unknown sub-fields and experimental are gone"
        );
        let open = SessionToken::new(
            &s,
            Identity::mint(7),
            None,
            ProtocolVersion::LATEST,
            &json!({}),
        );
        let open = SessionToken::open(&s, &open.seal(&s, ""), "").unwrap();
        assert!(open.binds(&s, None) && !open.binds(&s, Some(&alice())));
    }

    #[test]
    fn capability_bits_keep_every_gateway_decision() {
        for caps in [
            json!({}),
            json!({"elicitation": {}}),
            json!({"elicitation": {"form": {}}}),
            json!({"sampling": {"context": {}, "tools": {}}, "tasks": {"list": {}}}),
            json!({"roots": {}, "sampling": null}),
        ] {
            let back = Caps::of(&caps).to_json();
            assert_eq!(Caps::of(&back), Caps::of(&caps), "{caps}");
            for cap in ["roots", "sampling", "elicitation", "tasks"] {
                let has = |v: &Value| v.get(cap).is_some_and(|c| !c.is_null());
                assert_eq!(has(&back), has(&caps), "{cap} in {caps}");
            }
        }
        assert_eq!(
            Caps::of(&json!({"elicitation": {}})).to_json(),
            json!({"elicitation": {}})
        );
    }

    #[test]
    fn a_flipped_character_or_another_key_never_opens() {
        let s = sealer(&[("k", 1)]);
        let t = SessionToken::new(
            &s,
            Identity::mint(1),
            None,
            ProtocolVersion::LATEST,
            &json!({}),
        );
        let id = t.seal(&s, "");
        for i in 0..id.len() {
            let mut b = id.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(b).unwrap();
            if tampered != id {
                assert_eq!(SessionToken::open(&s, &tampered, ""), None, "char {i}");
            }
        }
        assert_eq!(SessionToken::open(&sealer(&[("k", 2)]), &id, ""), None);
        let cursor = s.seal(Purpose::Cursor, AAD, &[1; LEN]);
        assert_eq!(
            SessionToken::open(&s, &cursor, ""),
            None,
            "a cursor is no session id"
        );
        let at_eng = t.seal(&s, "eng");
        assert_eq!(SessionToken::open(&s, &at_eng, "eng"), Some(t.clone()));
        for elsewhere in ["", "ops", "en"] {
            assert_eq!(
                SessionToken::open(&s, &at_eng, elsewhere),
                None,
                "an id of endpoint eng at {elsewhere:?}"
            );
        }
        assert_eq!(SessionToken::open(&s, &id, "eng"), None);
    }

    #[test]
    fn lifetime_counts_from_created() {
        let id = Identity {
            rand: [0; 16],
            created: 1_000,
            epoch: 0,
        };
        let day = std::time::Duration::from_secs(86_400);
        assert!(!id.outlived(1_000 + 86_399, day));
        assert!(id.outlived(1_000 + 86_400, day));
        assert!(!id.outlived(500, day), "a clock behind the minting one");
    }

    /// The CPU cost per id, for the README: `cargo test --release --lib seal_cost
    /// -- --ignored --nocapture` (Linux). Also what a held session costs instead
    /// (a store lookup, no crypto).
    #[test]
    #[ignore = "timing; run with --release"]
    fn seal_cost() {
        use crate::session::{MemoryStore, Session, SessionStore};
        let s = sealer(&[("k1", 1)]);
        let caps = json!({"sampling": {}, "roots": {"listChanged": true}});
        let t = SessionToken::new(
            &s,
            Identity::mint(1),
            Some(&alice()),
            ProtocolVersion::LATEST,
            &caps,
        );
        let n = 200_000u64;
        // CPU time of this thread (ns on CPU, /proc/thread-self/schedstat): wall
        // time on a shared machine counts the other processes' turns too.
        let cpu = || -> u64 {
            let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
            stat.split(' ')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0)
        };
        let per = |start: u64| (cpu() - start) / n;
        let start = cpu();
        let mut id = String::new();
        for _ in 0..n {
            id = std::hint::black_box(t.seal(&s, ""));
        }
        let seal = per(start);
        let start = cpu();
        for _ in 0..n {
            let opened = SessionToken::open(&s, std::hint::black_box(&id), "");
            assert!(opened.is_some_and(|o| o.binds(&s, Some(&alice()))));
        }
        let open = per(start);
        let store = MemoryStore::new(16, std::time::Duration::from_secs(86_400));
        let session = Session::new(id.as_str().into(), t.identity, t.version, caps, Value::Null);
        store.insert(std::sync::Arc::new(session)).unwrap();
        let start = cpu();
        for _ in 0..n {
            assert!(store.get(std::hint::black_box(&id)).is_some());
        }
        let held = per(start);
        println!(
            "per id: seal {seal} ns, open + principal check {open} ns; held session lookup {held} ns"
        );
    }
}

//! [`Sealer`]: authenticated encryption of small values handed to hosts (session
//! ids, list cursors; later the 2026-07-28 `requestState` and task ids), so that
//! any process holding the same keys can open them and nobody else can forge,
//! alter or read them.
//!
//! Crypto stack: `ring` only. Per configured key, one subkey per purpose is
//! derived once at startup with HKDF-SHA256 (RFC 5869; salt `mcpgate/v1`, info
//! `mcpgate/v1/<purpose>`): ChaCha20-Poly1305 (RFC 8439) keys for
//! [`Purpose::Session`], [`Purpose::Cursor`] and [`Purpose::Value`], and an
//! HMAC-SHA256 key for the principal binding. Nothing is derived per request.
//!
//! Wire form of a sealed value (visible ASCII, URL-safe, no padding):
//!
//! ```text
//! KID "." base64url( nonce:12 | ciphertext:len(plaintext) | tag:16 )
//! ```
//!
//! `KID` names the key that sealed it (configured, 1–16 of `A-Za-z0-9_-`), so
//! during a rotation every replica opens values sealed under any key it holds.
//! The nonce is 96 random bits per seal (safe far beyond 2^32 seals per key).

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{self, HKDF_SHA256, KeyType};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::config::SessionKey;

/// The kid of the random per-process key used when no key is configured.
const EPHEMERAL_KID: &str = "local";
const SALT: &[u8] = b"mcpgate/v1";
const TAG_LEN: usize = 16;

/// What a sealed value is for. Each purpose has its own subkey, so a value sealed
/// for one never opens for another (a cursor is never a session id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `Mcp-Session-Id`.
    Session,
    /// List cursors (`nextCursor`).
    Cursor,
    /// Any other value the gateway hands out and gets back: the place for the
    /// 2026-07-28 `requestState` and sealed task ids. Give each kind its own
    /// `aad` (e.g. `b"requestState/v1"`) so one kind never opens as another.
    Value,
}

impl Purpose {
    const ALL: [Purpose; 3] = [Purpose::Session, Purpose::Cursor, Purpose::Value];

    fn info(self) -> &'static [u8] {
        match self {
            Purpose::Session => b"mcpgate/v1/session",
            Purpose::Cursor => b"mcpgate/v1/cursor",
            Purpose::Value => b"mcpgate/v1/value",
        }
    }
}

const PRINCIPAL_INFO: &[u8] = b"mcpgate/v1/principal";

/// One key and its subkeys.
struct Keyset {
    kid: String,
    aead: [LessSafeKey; 3],
    principal: hmac::Key,
}

impl Keyset {
    fn derive(kid: &str, secret: &[u8; 32]) -> Keyset {
        let prk = hkdf::Salt::new(HKDF_SHA256, SALT).extract(secret);
        let aead = Purpose::ALL.map(|p| {
            let raw = expand32(&prk, p.info());
            let key = UnboundKey::new(&CHACHA20_POLY1305, &raw)
                .unwrap_or_else(|_| unreachable!("ChaCha20-Poly1305 keys are 32 bytes"));
            LessSafeKey::new(key)
        });
        Keyset {
            kid: kid.to_owned(),
            aead,
            principal: hmac::Key::new(hmac::HMAC_SHA256, &expand32(&prk, PRINCIPAL_INFO)),
        }
    }

    fn principal_tag(&self, issuer: &str, subject: &str) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.principal);
        ctx.update(issuer.as_bytes());
        ctx.update(&[0]);
        ctx.update(subject.as_bytes());
        ctx.sign()
    }
}

/// HKDF-Expand to 32 bytes (far below HKDF's 255 × 32 limit: cannot fail).
fn expand32(prk: &hkdf::Prk, info: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let infos = [info];
    let filled = prk.expand(&infos, Len32).and_then(|okm| okm.fill(&mut out));
    debug_assert!(filled.is_ok());
    out
}

struct Len32;

impl KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

/// Seals and opens values under the configured keys; see the module docs. Built
/// once at startup and shared (`Arc`); every method takes `&self`.
pub struct Sealer {
    /// First = the key that seals; all of them open.
    keys: Vec<Keyset>,
    ephemeral: bool,
    rng: SystemRandom,
    /// Feeds the fallback nonce should the OS RNG ever fail (see `nonce`).
    seals: AtomicU64,
}

impl Sealer {
    /// A sealer for `keys` (first seals). With no key: one random key for this
    /// process only ([`Sealer::is_ephemeral`]).
    pub fn new(keys: &[SessionKey]) -> Sealer {
        let rng = SystemRandom::new();
        let (keys, ephemeral) = if keys.is_empty() {
            let mut secret = [0u8; 32];
            if rng.fill(&mut secret).is_err() {
                secret = fallback_bytes(0);
            }
            (vec![Keyset::derive(EPHEMERAL_KID, &secret)], true)
        } else {
            let derived = keys
                .iter()
                .map(|k| Keyset::derive(&k.kid, &k.secret))
                .collect();
            (derived, false)
        };
        Sealer {
            keys,
            ephemeral,
            rng,
            seals: AtomicU64::new(0),
        }
    }

    /// A sealer with one key `t` of 32 bytes `byte` (tests and fuzzing).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn fixed(byte: u8) -> Sealer {
        Sealer::new(&[SessionKey {
            kid: "t".into(),
            secret: [byte; 32],
        }])
    }

    /// Whether the key is a random one of this process (no key configured):
    /// what it sealed opens nowhere else and not after a restart.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// The id of the key that seals.
    pub fn sealing_kid(&self) -> &str {
        &self.keys[0].kid
    }

    /// The configured key ids, sealing key first.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }

    /// Seals `plaintext` for `purpose` under the sealing key, binding `aad`
    /// (not carried: [`Sealer::open`] must be given the same bytes). The result
    /// is `KID.base64url(nonce|ciphertext|tag)`: `len(kid) + 1 + ⌈4 (28 +
    /// len(plaintext)) / 3⌉` characters.
    pub fn seal(&self, purpose: Purpose, aad: &[u8], plaintext: &[u8]) -> String {
        self.seal_with_nonce(purpose, aad, plaintext, self.nonce())
    }

    fn seal_with_nonce(
        &self,
        purpose: Purpose,
        aad: &[u8],
        plaintext: &[u8],
        nonce: [u8; NONCE_LEN],
    ) -> String {
        let key = &self.keys[0];
        let mut body = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        body.extend_from_slice(&nonce);
        body.extend_from_slice(plaintext);
        let tag = key.aead[purpose as usize].seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut body[NONCE_LEN..],
        );
        // Sealing fails only for plaintexts beyond ChaCha20's 256 GiB.
        match tag {
            Ok(tag) => body.extend_from_slice(tag.as_ref()),
            Err(_) => body.truncate(NONCE_LEN),
        }
        let mut out = String::with_capacity(key.kid.len() + 1 + body.len().div_ceil(3) * 4);
        out.push_str(&key.kid);
        out.push('.');
        URL_SAFE_NO_PAD.encode_string(&body, &mut out);
        out
    }

    /// Opens a value sealed by [`Sealer::seal`] for `purpose` with the same
    /// `aad`, under whichever configured key its kid names. `None` when the kid
    /// is unknown, the text is malformed, or anything was altered (no detail: a
    /// forgery learns nothing).
    pub fn open(&self, purpose: Purpose, aad: &[u8], sealed: &str) -> Option<Vec<u8>> {
        let (kid, body) = sealed.split_once('.')?;
        let key = self.keys.iter().find(|k| k.kid == kid)?;
        let mut raw = URL_SAFE_NO_PAD.decode(body).ok()?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let nonce = Nonce::try_assume_unique_for_key(&raw[..NONCE_LEN]).ok()?;
        let plain = key.aead[purpose as usize]
            .open_within(nonce, Aad::from(aad), &mut raw, NONCE_LEN..)
            .ok()?;
        let len = plain.len();
        raw.truncate(len);
        Some(raw)
    }

    /// The principal binding a session carries: HMAC-SHA256 under the sealing
    /// key's principal subkey of `issuer ‖ 0x00 ‖ subject`, first 16 bytes.
    /// Never of the token itself, so a refreshed token keeps its sessions.
    pub fn principal_mac(&self, issuer: &str, subject: &str) -> [u8; 16] {
        let tag = self.keys[0].principal_tag(issuer, subject);
        let mut out = [0u8; 16];
        out.copy_from_slice(&tag.as_ref()[..16]);
        out
    }

    /// Whether `mac` is the binding of (`issuer`, `subject`) under any configured
    /// key (a session sealed before a rotation carries the old key's), compared
    /// without an early exit. (The binding travels inside the sealed id, so a
    /// host cannot choose it anyway.)
    pub fn principal_matches(&self, issuer: &str, subject: &str, mac: &[u8; 16]) -> bool {
        self.keys.iter().any(|k| {
            let tag = k.principal_tag(issuer, subject);
            let diff = tag.as_ref()[..16]
                .iter()
                .zip(mac)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            diff == 0
        })
    }

    /// 96 fresh random bits. Should the OS RNG fail, a hash of time, process id
    /// and a per-process counter: unique, which is all a nonce must be.
    fn nonce(&self) -> [u8; NONCE_LEN] {
        let mut n = [0u8; NONCE_LEN];
        if self.rng.fill(&mut n).is_err() {
            let count = self.seals.fetch_add(1, Ordering::Relaxed);
            n.copy_from_slice(&fallback_bytes(count)[..NONCE_LEN]);
        }
        n
    }
}

/// SHA-256 of the wall clock, the process id and `count`: the last resort when
/// the OS RNG fails.
fn fallback_bytes(count: u64) -> [u8; 32] {
    let seed = format!(
        "{:?}/{}/{count}",
        std::time::SystemTime::now(),
        std::process::id()
    );
    ring::digest::digest(&ring::digest::SHA256, seed.as_bytes())
        .as_ref()
        .try_into()
        .unwrap_or([0; 32])
}

/// `N` bytes from the OS RNG (for identities, not nonces), with the same
/// last resort as nonces.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if SystemRandom::new().fill(&mut out).is_err() {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let fb = fallback_bytes(COUNT.fetch_add(1, Ordering::Relaxed));
        for (o, b) in out.iter_mut().zip(fb.iter().cycle()) {
            *o = *b;
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn key(kid: &str, byte: u8) -> SessionKey {
        SessionKey {
            kid: kid.into(),
            secret: [byte; 32],
        }
    }

    pub(crate) fn sealer(keys: &[(&str, u8)]) -> Sealer {
        let keys: Vec<SessionKey> = keys.iter().map(|(k, b)| key(k, *b)).collect();
        Sealer::new(&keys)
    }

    #[test]
    fn round_trips_and_refuses_every_alteration() {
        let s = sealer(&[("k1", 1)]);
        let sealed = s.seal(Purpose::Value, b"kind/v1", b"hello");
        assert!(sealed.starts_with("k1."), "{sealed}");
        assert_eq!(sealed.len(), 3 + (4 * (28 + 5usize)).div_ceil(3));
        assert_eq!(
            s.open(Purpose::Value, b"kind/v1", &sealed).as_deref(),
            Some(&b"hello"[..])
        );
        assert_ne!(
            sealed,
            s.seal(Purpose::Value, b"kind/v1", b"hello"),
            "nonce"
        );
        assert_eq!(s.open(Purpose::Value, b"kind/v2", &sealed), None, "aad");
        let raw = URL_SAFE_NO_PAD.decode(&sealed[3..]).unwrap();
        for i in 0..raw.len() {
            let mut t = raw.clone();
            t[i] ^= 0x01;
            let tampered = format!("k1.{}", URL_SAFE_NO_PAD.encode(&t));
            assert_eq!(
                s.open(Purpose::Value, b"kind/v1", &tampered),
                None,
                "byte {i}"
            );
        }
        for bad in [
            "",
            "k1",
            "k1.",
            "k1.!!!",
            "k2.AAAA",
            &sealed[..sealed.len() - 2],
        ] {
            assert_eq!(s.open(Purpose::Value, b"kind/v1", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn purposes_are_separate() {
        let s = sealer(&[("k1", 1)]);
        let cursor = s.seal(Purpose::Cursor, b"", b"page 2");
        assert!(s.open(Purpose::Cursor, b"", &cursor).is_some());
        assert_eq!(s.open(Purpose::Session, b"", &cursor), None);
        assert_eq!(s.open(Purpose::Value, b"", &cursor), None);
    }

    #[test]
    fn rotation_old_and_new_open_only_the_first_seals() {
        let old = sealer(&[("old", 1)]);
        let both = sealer(&[("old", 1), ("new", 2)]);
        let swapped = sealer(&[("new", 2), ("old", 1)]);
        let new = sealer(&[("new", 2)]);
        let a = old.seal(Purpose::Session, b"", b"a");
        let b = both.seal(Purpose::Session, b"", b"b");
        let c = swapped.seal(Purpose::Session, b"", b"c");
        assert!(b.starts_with("old.") && c.starts_with("new."), "{b} {c}");
        for s in [&both, &swapped] {
            for v in [&a, &b, &c] {
                assert!(s.open(Purpose::Session, b"", v).is_some(), "{v}");
            }
        }
        assert!(new.open(Purpose::Session, b"", &c).is_some());
        assert_eq!(new.open(Purpose::Session, b"", &a), None);
        assert_eq!(new.open(Purpose::Session, b"", &b), None);
        // The same kid with another secret (a botched rotation) opens nothing.
        assert_eq!(sealer(&[("old", 9)]).open(Purpose::Session, b"", &a), None);
        let mac = old.principal_mac("https://issuer", "alice");
        assert!(swapped.principal_matches("https://issuer", "alice", &mac));
        assert!(!new.principal_matches("https://issuer", "alice", &mac));
        assert!(!old.principal_matches("https://issuer", "bob", &mac));
        assert!(!old.principal_matches("https://issuer/", "alice", &mac));
        // issuer‖0‖subject: moving the boundary changes the binding.
        assert_ne!(old.principal_mac("ab", "c"), old.principal_mac("a", "bc"));
    }

    #[test]
    fn no_key_means_a_random_key_of_this_process() {
        let a = Sealer::new(&[]);
        let b = Sealer::new(&[]);
        assert!(a.is_ephemeral() && !sealer(&[("k", 1)]).is_ephemeral());
        let v = a.seal(Purpose::Session, b"", b"x");
        assert!(a.open(Purpose::Session, b"", &v).is_some());
        assert_eq!(b.open(Purpose::Session, b"", &v), None);
    }

    /// Fixed vectors: the wire form must not change by accident, or every id
    /// and cursor in use stops opening at the next rolling upgrade. Computed
    /// independently (Python `cryptography`: HKDF-SHA256 + ChaCha20Poly1305).
    #[test]
    fn fixed_vectors() {
        let s = sealer(&[("k1", 1)]);
        let v = s.seal_with_nonce(Purpose::Session, b"aad", b"plaintext", [7; 12]);
        assert_eq!(v, VECTOR_SESSION);
        let c = s.seal_with_nonce(Purpose::Cursor, b"", b"plaintext", [7; 12]);
        assert_eq!(c, VECTOR_CURSOR);
        assert_eq!(
            hex(&s.principal_mac("https://issuer.test", "alice")),
            VECTOR_PRINCIPAL
        );
    }

    const VECTOR_SESSION: &str = "k1.BwcHBwcHBwcHBwcH5dFlVtnlxs2KJ6Fxx6JPfbe85tNprjaLQQ";
    const VECTOR_CURSOR: &str = "k1.BwcHBwcHBwcHBwcHZ6NW5eHv_Xn8P7t7QJ7E0CiGvsTp-TwS3A";
    const VECTOR_PRINCIPAL: &str = "9dddfce74ee4524e84bed227478bf2c8";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}

//! One pass over a backend result for every key the respond phase may act on:
//! resource URIs to prefix (`uri`, `resourceUri`), an `input_required` result,
//! the 2026-07-28-only result fields a legacy host must not see. A 1 MiB result
//! was searched once per key (five passes, ~2.3 M instructions); it is now
//! searched once (`aho-corasick`, SIMD), and a result that shows none of them
//! is passed on without a parse.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::memmem::Finder;

/// The keys searched, byte for byte. `ri"` ends both `"uri"` and
/// `"resourceUri"`. No key's end is another's start, so a non-overlapping
/// search finds every one present.
const KEYS: [&str; 5] = [
    "ri\"",
    "input_required",
    "resultType",
    "ttlMs",
    "cacheScope",
];
const URI: u8 = 1;
const INPUT_REQUIRED: u8 = 1 << 1;
/// Any of `resultType`, `ttlMs`, `cacheScope` (MCP 2026-07-28 basic/index
/// §ResultType, server/utilities/caching).
const MODERN: u8 = 1 << 2;
const BITS: [u8; 5] = [URI, INPUT_REQUIRED, MODERN, MODERN, MODERN];
/// Below this many bytes a search per key costs less than the automaton.
const AUTOMATON_FROM: usize = 4096;

/// One `memmem` finder per key, built once, for texts shorter than
/// [`AUTOMATON_FROM`]: a search has no set-up and skips ahead on the key's
/// rarest bytes. Before, a `memchr` of each key's first byte checked every
/// `r`, `t` and `i` of the text: ~1,800 instructions per echo result
/// (`bench/README.md`, 2026-12-07 perf7).
static FINDERS: LazyLock<[Finder<'static>; 5]> = LazyLock::new(|| KEYS.map(Finder::new));

/// Leftmost-first: the kind that has the SIMD (Teddy) prefilter; with no key
/// overlapping another it finds the same keys as the standard kind.
static SEARCH: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(KEYS)
        .ok()
});

/// Which keys a result's text contains anywhere (inside strings too: a
/// superset of what its JSON has, so a mark only costs a parse that finds
/// nothing; a key the text lacks is never marked). Still a superset after the
/// result was changed by removing fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks(u8);

impl Marks {
    /// The keys in `raw` (a result's JSON text).
    pub fn of(raw: &[u8]) -> Marks {
        let search = SEARCH.as_ref().filter(|_| raw.len() >= AUTOMATON_FROM);
        let Some(search) = search else {
            let found = FINDERS
                .iter()
                .zip(BITS)
                .filter(|(f, _)| f.find(raw).is_some())
                .fold(0, |m, (_, bit)| m | bit);
            return Marks(found);
        };
        let all = URI | INPUT_REQUIRED | MODERN;
        let mut found = 0;
        for m in search.find_iter(raw) {
            found |= BITS[m.pattern().as_usize()];
            if found == all {
                break;
            }
        }
        Marks(found)
    }

    /// Every key marked (nothing may be skipped).
    pub fn all() -> Marks {
        Marks(URI | INPUT_REQUIRED | MODERN)
    }

    /// `uri` or `resourceUri` may be present.
    pub fn uri(self) -> bool {
        self.0 & URI != 0
    }

    /// `input_required` may be present.
    pub fn input_required(self) -> bool {
        self.0 & INPUT_REQUIRED != 0
    }

    /// A 2026-07-28-only result field may be present.
    pub fn modern(self) -> bool {
        self.0 & MODERN != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_each_key_in_short_and_long_texts() {
        for pad in [0, 10_000] {
            let x = "x".repeat(pad);
            let of = |s: &str| Marks::of(format!("{x}{s}{x}").as_bytes());
            assert_eq!(of(r#"{"a":1}"#), Marks(0), "{pad}");
            assert!(of(r#"{"uri":"a"}"#).uri());
            assert!(of(r#"{"_meta":{"ui":{"resourceUri":"a"}}}"#).uri());
            let ask = of(r#"{"resultType":"input_required"}"#);
            assert!(ask.input_required() && ask.modern() && !ask.uri());
            assert!(of(r#"{"ttlMs":5}"#).modern());
            assert!(of(r#"{"cacheScope":"public"}"#).modern());
            assert_eq!(
                of(r#"{"uri":"a","ttlMs":1,"input_required":1}"#),
                Marks::all()
            );
            // Inside a string: marked (a superset); an escaped quote is not `"`.
            assert!(of(r#"{"text":"uri\" ttlMs"}"#).modern());
            assert!(!of(r#"{"text":"uri\" ttlMs"}"#).uri());
        }
    }
}

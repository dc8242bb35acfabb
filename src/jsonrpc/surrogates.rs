//! Lone UTF-16 surrogate escapes in JSON text (`"\ud83d"` without its low half):
//! the JSON grammar allows them (RFC 8259 §8.2: software that receives them
//! behaves unpredictably), JavaScript's `JSON.stringify` writes them for a
//! string cut inside an emoji, and `serde_json` refuses the whole text. The
//! repair replaces each one with `\ufffd` (U+FFFD REPLACEMENT CHARACTER), what a
//! JavaScript `TextEncoder` makes of a lone surrogate; escaped pairs are kept.

/// `text` with every lone surrogate escape replaced by `\ufffd` (same length:
/// both escapes are six bytes), or `None` when it has none. Only escapes count:
/// `\\ud800` is an escaped backslash and the letters `ud800`. Other defects are
/// left for the parser to report.
pub fn repair(text: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while let Some(skip) = memchr::memchr(b'\\', &text[i.min(text.len())..]) {
        i += skip;
        let Some(unit) = unit_at(text, i) else {
            // `\"`, `\\`, `\n` …: the escaped byte is not an escape of its own.
            i += 2;
            continue;
        };
        match unit {
            0xD800..=0xDBFF if unit_at(text, i + 6).is_some_and(is_low) => i += 12,
            0xD800..=0xDFFF => {
                let fixed = out.get_or_insert_with(|| text.to_vec());
                fixed[i + 2..i + 6].copy_from_slice(b"fffd");
                i += 6;
            }
            _ => i += 6,
        }
    }
    out
}

/// The code unit of a `\uXXXX` escape starting at `at`, if one does.
fn unit_at(text: &[u8], at: usize) -> Option<u16> {
    let escape = text.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

fn is_low(unit: u16) -> bool {
    (0xDC00..=0xDFFF).contains(&unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(text: &str) -> Option<String> {
        repair(text.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn lone_halves_become_the_replacement_character_and_pairs_stay() {
        assert_eq!(fixed(r#""a\ud83d""#).as_deref(), Some(r#""a\ufffd""#));
        assert_eq!(fixed(r#""\uDE00b""#).as_deref(), Some(r#""\ufffdb""#));
        assert_eq!(
            fixed(r#""\ud83d\ud83d\ude00""#).as_deref(),
            Some(r#""\ufffd\ud83d\ude00""#)
        );
        assert_eq!(fixed(r#""\ud83d\n""#).as_deref(), Some(r#""\ufffd\n""#));
        for untouched in [
            r#""\ud83d\ude00""#,
            r#""\\ud800""#,
            r#""\u00e9 \" \\""#,
            r#""\ud8"#,
            r#""\uzzzz""#,
            "plain",
        ] {
            assert_eq!(fixed(untouched), None, "{untouched}");
        }
        let v: serde_json::Value =
            serde_json::from_slice(&repair(br#"{"t":"x\udc00\ud800y"}"#).unwrap()).unwrap();
        assert_eq!(v["t"], "x\u{FFFD}\u{FFFD}y");
    }
}

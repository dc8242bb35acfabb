//! The JSON-RPC request id ([`Id`]): read from a message's text exactly, echoed
//! byte for byte.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON-RPC request id: an integer or a string, never `null` (MCP basic/index).
///
/// The original JSON type is kept: `1` and `"1"` are different ids and are echoed back
/// exactly as received. An integer of any size and spelling is an id (JSON-RPC 2.0
/// §4: "a Number"; MCP's schema: `string | number`, an integer, which JSON Schema
/// reads by value): one that is not a plain `i64` literal (outside `i64`, or
/// written `-0`, `1.0`, `1e3`) is kept as its text ([`Id::Big`]) and echoed
/// byte for byte; ids are compared as written, so `-0` is not `0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    /// An integer id that fits an `i64`.
    Num(i64),
    /// An integer id that is not a plain `i64` literal: outside `i64` (e.g.
    /// `123456789012345678901234567890`) or spelled otherwise (`-0`, `1.0`,
    /// `1e3`): its JSON text as written.
    Big(Box<str>),
    /// A string id.
    Str(Box<str>),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Num(n) => fmt::Display::fmt(n, f),
            Id::Big(digits) => f.write_str(digits),
            Id::Str(s) => fmt::Debug::fmt(&**s, f),
        }
    }
}

impl Id {
    /// This id as the log shows it (bounded: [`LoggedId`]).
    pub fn logged(&self) -> LoggedId<'_> {
        LoggedId(self)
    }

    /// Reads an id from a JSON value; `None` for `null`, fractions and other
    /// types. An integer beyond 64 bits has already lost its digits in a
    /// [`Value`] (it is a double there): `None`; read it from the text with
    /// [`Id::from_json`].
    pub fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Some(Id::Num(i)),
                (None, Some(u)) => Some(Id::Big(u.to_string().into())),
                (None, None) => None,
            },
            Value::String(s) => Some(Id::Str(s.as_str().into())),
            _ => None,
        }
    }

    /// Reads an id from its JSON text (a string, or a number whose value is an
    /// integer, of any size and spelling, as found in a message); `None` for
    /// `null`, numbers with a fractional value (`1.5`, `1e-3`) and other types.
    pub fn from_json(text: &str) -> Option<Id> {
        let text = text.trim_ascii();
        if text.starts_with('"') {
            return serde_json::from_str::<String>(text)
                .ok()
                .map(|s| Id::Str(s.into()));
        }
        if !is_integer_number(text) {
            return None;
        }
        // JSON has no `+` and no leading zeros: `-0` is the one integer
        // literal that `i64` would not write back as it came.
        Some(match text.parse::<i64>() {
            Ok(n) if text != "-0" => Id::Num(n),
            _ => Id::Big(text.into()),
        })
    }

    /// Whether `v` (a number in a parsed message, e.g. a cancel's `requestId`)
    /// names this id: equal ids, or, for an [`Id::Big`] that a [`Value`] cannot
    /// hold as written (`-0`, `1e3`, beyond 64 bits), the same number.
    pub fn matches_value(&self, v: &Value) -> bool {
        match (self, Id::from_value(v)) {
            (_, Some(id)) => *self == id,
            (Id::Big(_), None) => v.is_number() && self.to_value() == *v,
            _ => false,
        }
    }

    /// The id as a JSON value of its original type ([`Id::Big`]: the nearest
    /// double, as `serde_json` reads such a number; its exact text is
    /// [`Id::to_json`]).
    pub fn to_value(&self) -> Value {
        match self {
            Id::Num(n) => Value::from(*n),
            Id::Big(digits) => serde_json::from_str(digits).unwrap_or(Value::Null),
            Id::Str(s) => Value::from(&**s),
        }
    }

    /// The id as JSON text, exactly as it is written in a message.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether `text` is a JSON number (RFC 8259 §6) whose value is an integer:
/// `-0`, `1.0`, `1e3`, `12.50e1` are; `1.5`, `1e-3`, `01` are not.
fn is_integer_number(text: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let t = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !digits(int) || (int.len() > 1 && int.starts_with('0')) {
        return false;
    }
    if mantissa.contains('.') && !digits(frac) {
        return false;
    }
    let exp: i128 = match exp {
        None => 0,
        Some(e) => {
            let magnitude = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !digits(magnitude) {
                return false;
            }
            let m = magnitude.trim_start_matches('0');
            // Beyond 30 digits the exponent outweighs any mantissa a body holds.
            let m: i128 = if m.len() > 30 {
                1 << 100
            } else {
                m.parse().unwrap_or(0)
            };
            if e.starts_with('-') { -m } else { m }
        }
    };
    // The value is the digits of `int` and `frac` times 10^(exp - frac.len()):
    // an integer when it is zero or the trailing zeros make up the difference.
    let all = int.bytes().chain(frac.bytes());
    if all.clone().all(|b| b == b'0') {
        return true;
    }
    let zeros = all.rev().take_while(|&b| b == b'0').count();
    exp - frac.len() as i128 + zeros as i128 >= 0
}

/// Longest part of a request id written to the log, in bytes.
const LOGGED_ID_MAX: usize = 64;

/// A request id as the log shows it: whole up to [`LOGGED_ID_MAX`] bytes (a
/// string id quoted and escaped as always), else its first bytes and its length
/// (`"xxxx…"…(200002 bytes)`). An id may be as long as the body limit allows
/// and is written into the span and the access line; the answer always echoes
/// it whole.
pub struct LoggedId<'a>(&'a Id);

impl fmt::Display for LoggedId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self.0 {
            Id::Num(_) => return fmt::Display::fmt(self.0, f),
            Id::Big(digits) => &**digits,
            Id::Str(s) => &**s,
        };
        if text.len() <= LOGGED_ID_MAX {
            return fmt::Display::fmt(self.0, f);
        }
        let mut end = LOGGED_ID_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        match self.0 {
            Id::Str(_) => write!(f, "{:?}", &text[..end])?,
            _ => f.write_str(&text[..end])?,
        }
        write!(f, "…({} bytes)", text.len())
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Num(n) => s.serialize_i64(*n),
            // Written verbatim by serde_json (`raw_value`).
            Id::Big(digits) => RawValue::from_string(digits.to_string())
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
            Id::Str(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Id::from_value(&v).ok_or_else(|| de::Error::custom("id must be an integer or a string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_ids_are_cut_in_the_log_and_short_ones_kept() {
        let short: Id = serde_json::from_str("\"a\\\"b\"").unwrap();
        assert_eq!(short.logged().to_string(), short.to_string());
        assert_eq!(Id::Num(-7).logged().to_string(), "-7");
        let long: Id = serde_json::from_str(&format!("\"{}\"", "é".repeat(100))).unwrap();
        let shown = long.logged().to_string();
        assert!(shown.ends_with("…(200 bytes)"), "{shown}");
        assert!(shown.len() < 100, "{shown}");
        let big = Id::from_json(&"9".repeat(300)).unwrap();
        assert_eq!(
            big.logged().to_string(),
            format!("{}…(300 bytes)", "9".repeat(64))
        );
    }

    /// Integer ids of any size are read exactly and written back byte for byte;
    /// fractions and exponents are not ids.
    #[test]
    fn integer_ids_of_any_size_round_trip() {
        for text in [
            "0",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551616",
            "-123456789012345678901234567890",
        ] {
            let id = Id::from_json(text).unwrap();
            assert_eq!(id.to_json(), text);
            assert_eq!(id.to_string(), text);
        }
        assert_eq!(Id::from_json("42"), Some(Id::Num(42)));
        assert_eq!(Id::from_json(r#""a\u0062""#), Some(Id::Str("ab".into())));
        for not in [
            "-", "", "null", "true", "[1]", "--1", "1.5", "1e-3", "12.55e1", "01", "1.", ".5",
            "1e", "1e+", "+1",
        ] {
            assert_eq!(Id::from_json(not), None, "{not}");
        }
    }

    /// Other spellings of integers are ids, kept as written (`-0` is not `0`),
    /// and a parsed number names such an id by value.
    #[test]
    fn integer_ids_of_any_spelling_are_kept_as_written() {
        for text in [
            "-0", "1.0", "1e3", "1E+3", "-0.0", "12.50e1", "100e-2", "0e-5", "1e400",
        ] {
            let id = Id::from_json(text).unwrap();
            assert_eq!(id, Id::Big(text.into()), "{text}");
            assert_eq!(id.to_json(), text);
            // serde_json refuses `1e400` (out of range): nothing to match then.
            if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                assert!(id.matches_value(&parsed), "{text}");
            }
        }
        assert_ne!(Id::from_json("-0"), Id::from_json("0"));
        assert!(Id::Num(7).matches_value(&serde_json::json!(7)));
        assert!(!Id::Num(7).matches_value(&serde_json::json!("7")));
        assert!(!Id::Big("1e3".into()).matches_value(&serde_json::json!(1000)));
        assert_eq!(
            Id::from_value(&serde_json::json!(u64::MAX)),
            Some(Id::Big(u64::MAX.to_string().into()))
        );
    }
}

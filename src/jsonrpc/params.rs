//! A request's `params`: a `serde_json::Value`, or the JSON text the request
//! arrived with, parsed into a `Value` only when something reads it. A request
//! forwarded with one member replaced (`tools/call`'s `name`) is written from
//! its text: the rest reaches the backend byte for byte, unparsed.

use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use serde_json::Value;

use super::RawJson;

/// A request's params (a JSON object). Reads go through `Deref` to a `Value`
/// (parsed from the text on the first read, once); `DerefMut` parses and drops
/// the text, so a changed value is never written as the old text.
///
/// Text that JSON allows but a `Value` cannot hold (a number beyond `f64`'s
/// range such as `1e400`, a lone surrogate escape, nesting deeper than 128)
/// reads as `null` through `Deref`; [`Params::into_value`] reports it.
#[derive(Clone, Debug)]
pub struct Params(Inner);

#[derive(Clone, Debug)]
enum Inner {
    Value(Value),
    Text {
        text: RawJson,
        parsed: OnceLock<Value>,
    },
}

impl Params {
    /// Params kept as `text` (one JSON object, checked by a parser, or spliced
    /// from checked text by [`RawJson::spliced`]).
    pub fn from_text(text: RawJson) -> Self {
        Params(Inner::Text {
            text,
            parsed: OnceLock::new(),
        })
    }

    /// The JSON text, when the params are still the text they were made from
    /// (not changed through `DerefMut`).
    pub fn text(&self) -> Option<&RawJson> {
        match &self.0 {
            Inner::Text { text, .. } => Some(text),
            Inner::Value(_) => None,
        }
    }

    /// Whether the params may have a top-level member `key` (a name
    /// without `"` or `\`): `false` only for text that contains neither `"key"`
    /// nor any escape, read without a parse; a value is looked up.
    pub fn may_have(&self, key: &str) -> bool {
        let text = match &self.0 {
            Inner::Value(v) => return v.get(key).is_some(),
            Inner::Text { text, .. } => text.as_bytes(),
        };
        if memchr::memchr(b'\\', text).is_some() {
            return true;
        }
        let quoted =
            |i: usize| i > 0 && text[i - 1] == b'"' && text.get(i + key.len()) == Some(&b'"');
        memchr::memmem::find_iter(text, key.as_bytes()).any(quoted)
    }

    /// The params as a `Value`.
    ///
    /// Errors: the text cannot be held by a `Value` (see the type's docs);
    /// the error names the place, e.g. `number out of range at line 1 column 9`.
    pub fn into_value(self) -> serde_json::Result<Value> {
        match self.0 {
            Inner::Value(v) => Ok(v),
            Inner::Text { text, parsed } => match parsed.into_inner() {
                // `null` is never the parse of an object's text: it marks a failure.
                Some(v) if !v.is_null() => Ok(v),
                _ => text.parse(),
            },
        }
    }

    /// The value to change, the text dropped; `None` (the text kept) when
    /// the text cannot be held by a `Value` (see the type's docs).
    pub fn value_mut(&mut self) -> Option<&mut Value> {
        if let Inner::Text { text, parsed } = &mut self.0 {
            let v = match parsed.take() {
                Some(v) if !v.is_null() => v,
                _ => text.parse().ok()?,
            };
            self.0 = Inner::Value(v);
        }
        match &mut self.0 {
            Inner::Value(v) => Some(v),
            Inner::Text { .. } => None,
        }
    }
}

impl From<Value> for Params {
    fn from(v: Value) -> Self {
        Params(Inner::Value(v))
    }
}

impl Deref for Params {
    type Target = Value;

    fn deref(&self) -> &Value {
        match &self.0 {
            Inner::Value(v) => v,
            Inner::Text { text, parsed } => parsed.get_or_init(|| text.parse().unwrap_or_default()),
        }
    }
}

impl DerefMut for Params {
    /// The value to change, the text dropped; text a `Value` cannot hold
    /// becomes `null` ([`Params::value_mut`] leaves it as it is).
    fn deref_mut(&mut self) -> &mut Value {
        if self.value_mut().is_none() {
            self.0 = Inner::Value(Value::Null);
        }
        match &mut self.0 {
            Inner::Value(v) => v,
            Inner::Text { .. } => unreachable!("made a value above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use serde_json::value::RawValue;

    use super::*;

    fn text(s: &str) -> Params {
        Params::from_text(RawJson::from_raw(RawValue::from_string(s.into()).unwrap()))
    }

    #[test]
    fn reads_parse_the_text_once_and_keep_it() {
        let p = text(r#"{"name":"a","n":-0}"#);
        assert_eq!(p.get("name"), Some(&json!("a")));
        assert_eq!(p.text().unwrap().get(), r#"{"name":"a","n":-0}"#);
        assert_eq!(p.into_value().unwrap()["name"], "a");
    }

    #[test]
    fn may_have_is_false_only_where_no_member_can_be() {
        assert!(!text(r#"{"name":"a","arguments":{"m":"meta"}}"#).may_have("_meta"));
        assert!(
            text(r#"{"name":"a","x":"_meta"}"#).may_have("_meta"),
            "in a string: maybe"
        );
        assert!(
            text(r#"{"\u005fmeta":{}}"#).may_have("_meta"),
            "escaped: maybe"
        );
        assert!(text(r#"{"_meta":{}}"#).may_have("_meta"));
        assert!(!Params::from(json!({"a": 1})).may_have("_meta"));
        assert!(Params::from(json!({"_meta": null})).may_have("_meta"));
    }

    #[test]
    fn a_change_drops_the_text() {
        let mut p = text(r#"{"name":"a"}"#);
        p["name"] = "b".into();
        assert!(p.text().is_none());
        assert_eq!(*p, json!({"name": "b"}));
        let mut q = Params::from(json!({"x": 1}));
        q["x"] = 2.into();
        assert_eq!(q.into_value().unwrap(), json!({"x": 2}));
    }

    #[test]
    fn text_a_value_cannot_hold_reads_as_null_and_is_reported() {
        let mut p = text(r#"{"big":1e400}"#);
        assert_eq!(*p, Value::Null);
        assert!(p.value_mut().is_none());
        assert_eq!(p.text().unwrap().get(), r#"{"big":1e400}"#, "kept");
        let e = p.into_value().unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }
}

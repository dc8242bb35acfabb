//! Results carried as the bytes they arrived in. A [`RawJson`] is a slice of a
//! backend's HTTP body, SSE event or stdio line (no copy), and an [`Encoded`]
//! response is our envelope around it, written in pieces: a large result is
//! never copied between the backend's bytes and the host's socket.

use std::fmt;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::Id;

/// One JSON value's text, sharing the buffer it was read from: cloning it
/// copies nothing. Invariant: UTF-8 JSON text of exactly one value (made only
/// from a `&RawValue` a parser checked, or from a serializer's output).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RawJson(Bytes);

impl RawJson {
    /// The value `raw`, a slice of `owner` when it lies inside it (the parsed
    /// text borrowed from `owner`), else a copy of its text.
    pub fn within(owner: &Bytes, raw: &RawValue) -> Self {
        let text = raw.get().as_bytes();
        let outer = owner.as_ptr_range();
        let inner = text.as_ptr_range();
        if !text.is_empty() && outer.start <= inner.start && inner.end <= outer.end {
            RawJson(owner.slice_ref(text))
        } else {
            RawJson(Bytes::copy_from_slice(text))
        }
    }

    /// The text of `raw`, taken over without a copy.
    pub fn from_raw(raw: Box<RawValue>) -> Self {
        let text: Box<str> = raw.into();
        RawJson(Bytes::from(text.into_boxed_bytes()))
    }

    /// Checked JSON text, taken over without a copy.
    pub(super) fn from_vec(text: Vec<u8>) -> Self {
        RawJson(Bytes::from(text))
    }

    /// `value` serialized; `None` if it cannot be (a map with non-string keys).
    pub fn from_value<T: Serialize + ?Sized>(value: &T) -> Option<Self> {
        serde_json::to_vec(value).ok().map(|v| RawJson(v.into()))
    }

    /// `text` (checked JSON text) with the bytes at `at` replaced by `value`
    /// serialized: one member's value swapped, the rest byte for byte.
    /// `None` when `at` is not inside `text` on char boundaries or `value`
    /// cannot be serialized.
    pub fn spliced<T: Serialize + ?Sized>(
        text: &str,
        at: std::ops::Range<usize>,
        value: &T,
    ) -> Option<Self> {
        let (head, tail) = (text.get(..at.start)?, text.get(at.end..)?);
        let mut out = Vec::with_capacity(text.len() + 16);
        out.extend_from_slice(head.as_bytes());
        serde_json::to_writer(&mut out, value).ok()?;
        out.extend_from_slice(tail.as_bytes());
        Some(RawJson(out.into()))
    }

    /// Where `part` (a slice of `text`, e.g. a `&RawValue` borrowed from it)
    /// lies in `text`, as a byte range; `None` if it lies elsewhere.
    pub fn span_in(text: &str, part: &str) -> Option<std::ops::Range<usize>> {
        let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
        let end = start + part.len();
        (end <= text.len()).then_some(start..end)
    }

    /// `{}`: the empty object.
    pub fn empty_object() -> Self {
        RawJson(Bytes::from_static(b"{}"))
    }

    /// The JSON text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The JSON text. Checks the UTF-8 again (the bytes are shared, not typed
    /// as `str`): a pass over the text, for paths that parse it anyway; the
    /// pass-through filters read [`RawJson::as_bytes`].
    pub fn get(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("null")
    }

    /// The text's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the text is empty (only [`RawJson::default`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses the value into `T`.
    ///
    /// Errors: the value does not have `T`'s shape.
    pub fn parse<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.0)
    }

    /// The shared bytes.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Longer texts are shown cut (a result may be megabytes).
        const SHOWN: usize = 256;
        let text = String::from_utf8_lossy(&self.0[..self.0.len().min(SHOWN)]);
        write!(f, "RawJson({text}")?;
        if self.0.len() > SHOWN {
            write!(f, "… {} bytes", self.0.len())?;
        }
        f.write_str(")")
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(self.get()).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

/// One serialized JSON-RPC message, in up to three pieces written one after
/// the other: a response around a large backend result is our head
/// (`{"jsonrpc":"2.0","id":…,"result":`), the result's own bytes and `}`.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    head: Bytes,
    body: Bytes,
    tail: Bytes,
}

impl Encoded {
    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in order (some may be empty).
    pub fn into_pieces(self) -> [Bytes; 3] {
        [self.head, self.body, self.tail]
    }

    /// The message in one buffer: copied only when it is in pieces.
    pub fn to_bytes(&self) -> Bytes {
        if self.body.is_empty() && self.tail.is_empty() {
            return self.head.clone();
        }
        let mut out = Vec::with_capacity(self.len());
        for piece in [&self.head, &self.body, &self.tail] {
            out.extend_from_slice(piece);
        }
        out.into()
    }
}

impl From<Bytes> for Encoded {
    fn from(head: Bytes) -> Self {
        Encoded {
            head,
            ..Encoded::default()
        }
    }
}

impl From<Vec<u8>> for Encoded {
    fn from(v: Vec<u8>) -> Self {
        Bytes::from(v).into()
    }
}

/// A success response with result `result`: a large result is not copied
/// (three pieces), a small one is joined (one buffer costs less than three).
pub fn result_encoded(id: &Id, result: &RawJson) -> Encoded {
    /// From this size on the result is written as a piece of its own.
    const PIECES_FROM: usize = 16 * 1024;
    if result.len() < PIECES_FROM {
        return super::result_bytes(id, result.as_bytes()).into();
    }
    let id = serde_json::to_string(id).unwrap_or_default();
    let mut head = Vec::with_capacity(id.len() + 32);
    head.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    head.extend_from_slice(id.as_bytes());
    head.extend_from_slice(b",\"result\":");
    Encoded {
        head: head.into(),
        body: result.0.clone(),
        tail: Bytes::from_static(b"}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_what_lies_inside_and_copies_the_rest() {
        let owner = Bytes::from_static(br#"{"result":{"a":[1,2]}}"#);
        let text = std::str::from_utf8(&owner).unwrap();
        #[derive(serde::Deserialize)]
        struct R<'a> {
            #[serde(borrow)]
            result: &'a RawValue,
        }
        let r: R<'_> = serde_json::from_str(text).unwrap();
        let inside = RawJson::within(&owner, r.result);
        assert_eq!(inside.get(), r#"{"a":[1,2]}"#);
        assert_eq!(
            inside.as_bytes().as_ptr(),
            r.result.get().as_ptr(),
            "no copy"
        );
        let elsewhere = RawValue::from_string("[3]".into()).unwrap();
        let copied = RawJson::within(&owner, &elsewhere);
        assert_eq!(copied.get(), "[3]");
        assert_ne!(copied.as_bytes().as_ptr(), elsewhere.get().as_ptr());
    }

    #[test]
    fn large_results_go_in_pieces_small_ones_joined() {
        let id = Id::Num(7);
        let small = RawJson::from_value(&serde_json::json!({"x": 1})).unwrap();
        let e = result_encoded(&id, &small);
        assert_eq!(
            e.to_bytes(),
            &br#"{"jsonrpc":"2.0","id":7,"result":{"x":1}}"#[..]
        );
        let text = format!("\"{}\"", "y".repeat(20_000));
        let big = RawJson::from_raw(RawValue::from_string(text.clone()).unwrap());
        let e = result_encoded(&id, &big);
        let [head, body, tail] = e.clone().into_pieces();
        assert_eq!(
            body.as_ptr(),
            big.as_bytes().as_ptr(),
            "the result is not copied"
        );
        assert_eq!(&head[..], br#"{"jsonrpc":"2.0","id":7,"result":"#);
        assert_eq!(&tail[..], b"}");
        let joined: serde_json::Value = serde_json::from_slice(&e.to_bytes()).unwrap();
        assert_eq!(
            joined["result"],
            serde_json::Value::String("y".repeat(20_000))
        );
        assert_eq!(e.len(), head.len() + body.len() + 1);
    }
}

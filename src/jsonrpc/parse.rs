//! Reading one JSON-RPC 2.0 message: the envelope in one pass over the text,
//! `jsonrpc` and `method` borrowed from it; a failure is classified against a
//! skim (syntax only) of the whole text, so -32700 and -32600 are told apart.

use std::borrow::Cow;

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::{
    EnvelopeError, ErrorObject, Id, Message, MethodName, Notification, Params, RawJson, Request,
    Response,
};

/// Wire shape used only to classify; `id` distinguishes "absent" from `null`.
/// `jsonrpc` and `method` are borrowed from the text (checked, not kept).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<&'a RawValue>,
    /// Kept as text: an integer id of any size is read exactly (`Id::from_json`).
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a RawValue>,
    /// Borrowed: parsed into a `Value` here, or kept as text when the method
    /// asks for that ([`MethodName::keeps_params_text`]).
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    /// Borrowed: kept as a slice of the message's bytes when they are shared
    /// ([`parse_message_in`]), copied otherwise.
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<Value>,
}

/// Deserializes a field that is present (even as `null`) into `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Parses one message from JSON text.
///
/// Errors: [`EnvelopeError::Parse`] for non-JSON text; [`EnvelopeError::Invalid`] for
/// JSON that is not a JSON-RPC 2.0 message (wrong `jsonrpc`, `null` or fractional id,
/// non-string method, non-object params); [`EnvelopeError::Response`] for one
/// without a `method` that is no valid response (both or neither of
/// `result`/`error`, no usable id, a malformed `error`).
///
/// A lone surrogate escape (`"\ud800"`, what JavaScript's `JSON.stringify`
/// writes for a string cut inside an emoji) is JSON text by the grammar (RFC
/// 8259 §8.2) that `serde_json` refuses: such text is read again with each one
/// replaced by `\ufffd` (U+FFFD, as a JavaScript `TextEncoder` would), except in
/// the `id`, which could not be echoed back as sent (-32600, no id).
pub fn parse_message<M: MethodName>(text: &[u8]) -> Result<Message<M>, EnvelopeError> {
    parse(text, None)
}

/// [`parse_message`] of `text`, a part of `owner`: a response's `result` is
/// kept as a slice of `owner` ([`RawJson::within`]), not copied.
///
/// Errors: as [`parse_message`].
pub fn parse_message_in<M: MethodName>(
    text: &[u8],
    owner: &Bytes,
) -> Result<Message<M>, EnvelopeError> {
    parse(text, Some(owner))
}

fn parse<M: MethodName>(text: &[u8], owner: Option<&Bytes>) -> Result<Message<M>, EnvelopeError> {
    // One pass for a well-formed object; a failure is classified against a
    // skim of the whole text, as if the skim had come first.
    if text.trim_ascii_start().first() != Some(&b'{') {
        return Err(skim(text).err().unwrap_or_else(not_an_object));
    }
    match serde_json::from_slice::<Envelope<'_>>(text) {
        Ok(env) => classify(env, owner),
        Err(e) => match super::surrogates::repair(text) {
            Some(repaired) => parse_repaired(text, &repaired),
            None => Err(skim(text).err().unwrap_or_else(|| envelope_error(&e))),
        },
    }
}

/// Why a message whose id has a lone surrogate escape is refused.
const LONE_SURROGATE_ID: &str =
    "id has a lone surrogate escape; it could not be echoed back as sent";

/// A message whose lone surrogate escapes were replaced (`repaired`, from
/// `text`): refused when its id had one (-32600, no id: it cannot be echoed).
fn parse_repaired<M: MethodName>(
    text: &[u8],
    repaired: &[u8],
) -> Result<Message<M>, EnvelopeError> {
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let id_text = serde_json::from_slice::<IdOnly<'_>>(text)
        .ok()
        .and_then(|i| i.id)
        .map(RawValue::get);
    if id_text.is_some_and(|id| super::surrogates::repair(id.as_bytes()).is_some()) {
        return Err(EnvelopeError::Invalid {
            id: None,
            reason: LONE_SURROGATE_ID.into(),
        });
    }
    match serde_json::from_slice::<Envelope<'_>>(repaired) {
        Ok(env) => classify(env, None),
        Err(e) => Err(skim(repaired).err().unwrap_or_else(|| envelope_error(&e))),
    }
}

/// Whether `text` is one JSON value (the skim: syntax only, nothing built).
fn skim(text: &[u8]) -> Result<(), EnvelopeError> {
    serde_json::from_slice::<&RawValue>(text)
        .map(|_| ())
        .map_err(|e| EnvelopeError::Parse(e.to_string()))
}

fn not_an_object() -> EnvelopeError {
    EnvelopeError::Invalid {
        id: None,
        reason: "a JSON-RPC message must be a JSON object".into(),
    }
}

/// A full parse's failure on text the skim accepts.
fn envelope_error(e: &serde_json::Error) -> EnvelopeError {
    match e.classify() {
        // Text the skim let through but a full parse rejects: a lone
        // surrogate escape, nesting deeper than serde_json's limit.
        Category::Syntax | Category::Eof | Category::Io => EnvelopeError::Parse(e.to_string()),
        // An object with a duplicate member, for example.
        Category::Data => EnvelopeError::Invalid {
            id: None,
            reason: e.to_string().into(),
        },
    }
}

/// Classifies one already-parsed JSON value (used for batch elements).
pub fn classify_raw<M: MethodName>(raw: &RawValue) -> Result<Message<M>, EnvelopeError> {
    classify_raw_in(raw, None)
}

/// [`classify_raw`] of a batch element borrowed from `owner` (its `result`
/// kept as a slice of it, as in [`parse_message_in`]).
pub fn classify_raw_in<M: MethodName>(
    raw: &RawValue,
    owner: Option<&Bytes>,
) -> Result<Message<M>, EnvelopeError> {
    // serde's derived struct impl would also take an array of the fields in order.
    if !raw.get().trim_start().starts_with('{') {
        return Err(not_an_object());
    }
    match serde_json::from_str::<Envelope<'_>>(raw.get()) {
        Ok(env) => classify(env, owner),
        Err(e) => match super::surrogates::repair(raw.get().as_bytes()) {
            Some(repaired) => parse_repaired(raw.get().as_bytes(), &repaired),
            None => Err(envelope_error(&e)),
        },
    }
}

fn classify<M: MethodName>(
    env: Envelope<'_>,
    owner: Option<&Bytes>,
) -> Result<Message<M>, EnvelopeError> {
    let id = match &env.id {
        None => None,
        Some(v) => match Id::from_json(v.get()) {
            Some(id) => Some(Ok(id)),
            // A string id that does not decode (a lone surrogate escape, which
            // the raw value keeps): it could not be echoed back as sent.
            None if v.get().starts_with('"') => {
                return Err(EnvelopeError::Invalid {
                    id: None,
                    reason: LONE_SURROGATE_ID.into(),
                });
            }
            None => Some(Err(v.get() == "null")),
        },
    };
    let readable_id = match &id {
        Some(Ok(id)) => Some(id.clone()),
        _ => None,
    };
    let invalid = |reason: &'static str| EnvelopeError::Invalid {
        id: readable_id.clone(),
        reason: reason.into(),
    };
    let version_ok = env.jsonrpc.map(RawValue::get) == Some("\"2.0\"");
    if let Some(method) = env.method {
        if !version_ok {
            return Err(invalid("jsonrpc must be \"2.0\""));
        }
        let Some(method) = string_member(method) else {
            return Err(invalid("method must be a string"));
        };
        if env.result.is_some() || env.error.is_some() {
            return Err(invalid("a request must not carry result or error"));
        }
        if let Some(p) = env.params
            && !p.get().starts_with('{')
        {
            return Err(invalid("params must be an object"));
        }
        let method = M::from_name(&method);
        return match id {
            None => Ok(Message::Notification(Notification {
                params: env.params.map(params_value).transpose()?,
                method,
            })),
            Some(Ok(id)) => {
                let params = match env.params {
                    Some(p) if method.keeps_params_text() => Some(Params::from_text(
                        // A lone surrogate escape (which the envelope's pass
                        // over the raw text lets through) is read as U+FFFD
                        // here too, as in a message that needed the repair.
                        match super::surrogates::repair(p.get().as_bytes()) {
                            Some(repaired) => RawJson::from_vec(repaired),
                            None => match owner {
                                Some(owner) => RawJson::within(owner, p),
                                None => RawJson::from_raw(p.to_owned()),
                            },
                        },
                    )),
                    Some(p) => Some(params_value(p)?.into()),
                    None => None,
                };
                Ok(Message::Request(Request { id, method, params }))
            }
            Some(Err(true)) => Err(invalid("id must not be null")),
            Some(Err(false)) => Err(invalid("id must be an integer or a string")),
        };
    }
    // No method: meant as a response, whose refusal is never tied to its id.
    let invalid = |reason: &'static str| EnvelopeError::Response(reason.into());
    if !version_ok {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    let id = match id {
        Some(Ok(id)) => Some(id),
        // An error response may carry a null id when the request id was unreadable.
        Some(Err(true)) if env.error.is_some() => None,
        None if env.error.is_some() => None,
        _ => return Err(invalid("a response needs an integer or string id")),
    };
    let outcome = match (env.result, env.error) {
        (Some(r), None) => Ok(match owner {
            Some(owner) => RawJson::within(owner, r),
            None => RawJson::from_raw(r.to_owned()),
        }),
        (None, Some(e)) => Err(serde_json::from_value::<ErrorObject>(e)
            .map_err(|_| invalid("error must be {code, message, data?}"))?),
        (Some(_), Some(_)) => {
            return Err(invalid(
                "a response has both result and error; it must have exactly one",
            ));
        }
        (None, None) => return Err(invalid("a message needs a method, a result or an error")),
    };
    Ok(Message::Response(Response { id, outcome }))
}

/// Params parsed into a `Value`. Errors as a parse of the whole message would
/// have failed: text the envelope's pass let through (a lone surrogate escape,
/// a number out of range) is not JSON a `Value` holds.
/// `raw` as a `Value`, a lone surrogate escape read as U+FFFD.
fn params_value(raw: &RawValue) -> Result<Value, EnvelopeError> {
    serde_json::from_str(raw.get()).or_else(|e| {
        match super::surrogates::repair(raw.get().as_bytes()) {
            Some(repaired) => serde_json::from_slice(&repaired),
            None => Err(e),
        }
        .map_err(|e| envelope_error(&e))
    })
}

/// A member's string value (escapes decoded, a lone surrogate escape read as
/// U+FFFD like everywhere else), borrowed when it has no escape; `None` for
/// any other JSON type.
pub fn string_member(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(plain) => Some(Cow::Borrowed(plain)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .or_else(|| {
                let repaired = super::surrogates::repair(raw.get().as_bytes())?;
                serde_json::from_slice::<String>(&repaired).ok()
            })
            .map(Cow::Owned),
    }
}

//! The SSE parser of the client face: backends' `text/event-stream` bodies as
//! events (WHATWG HTML "Server-sent events", §9.2.6 parsing), on
//! `eventsource-stream`.
//!
//! eventsource-stream 0.2.3 removes a leading byte-order mark by slicing one
//! *byte* off a `str` and panics on it (U+FEFF is three bytes), so one backend
//! answering with a BOM took down the task reading its answer. Here the stream
//! it parses never starts with a BOM: the one leading BOM the spec allows is
//! removed first, and an empty line goes before the body (an empty line with
//! no field dispatches nothing), so a second U+FEFF stays part of a field name,
//! as the spec reads it.

use bytes::{Bytes, BytesMut};
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt, stream};

const BOM: &[u8] = "\u{feff}".as_bytes();

/// The events of an SSE body given as chunks of bytes.
pub(crate) fn sse_events<S, E>(body: S) -> impl Stream<Item = Result<Event, EventStreamError<E>>>
where
    S: Stream<Item = Result<Bytes, E>>,
{
    let lead = stream::iter([Ok(Bytes::from_static(b"\n"))]);
    lead.chain(without_leading_bom(Box::pin(body)))
        .eventsource()
}

/// `body` without a UTF-8 byte-order mark at its very start (however the first
/// bytes are split into chunks).
fn without_leading_bom<S, E>(body: S) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    // `Some(head)`: still undecided, holding fewer than 3 leading bytes.
    stream::unfold(
        (body, Some(BytesMut::new())),
        |(mut body, mut head)| async move {
            let Some(held) = head.as_mut() else {
                let next = body.next().await?;
                return Some((next, (body, None)));
            };
            loop {
                match body.next().await {
                    Some(Ok(chunk)) => {
                        held.extend_from_slice(&chunk);
                        if held.len() >= BOM.len() || !BOM.starts_with(held) {
                            let mut all = std::mem::take(held).freeze();
                            if all.starts_with(BOM) {
                                all = all.slice(BOM.len()..);
                            }
                            return Some((Ok(all), (body, None)));
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), (body, None))),
                    None => {
                        let rest = std::mem::take(held).freeze();
                        return (!rest.is_empty()).then_some((Ok(rest), (body, None)));
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let body = stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        );
        let mut s = Box::pin(sse_events(body));
        let mut out = Vec::new();
        while let Some(Some(Ok(ev))) = s.next().now_or_never() {
            out.push((ev.event, ev.data));
        }
        out
    }

    #[test]
    fn a_leading_bom_is_removed_wherever_the_chunks_split_it() {
        let want = vec![("message".to_owned(), "x".to_owned())];
        let body = b"\xef\xbb\xbfevent: message\ndata: x\n\n";
        assert_eq!(events(&[body]), want);
        for cut in 1..4 {
            assert_eq!(events(&[&body[..cut], &body[cut..]]), want, "cut at {cut}");
        }
        assert_eq!(events(&[b"event: message\ndata: x\n\n"]), want);
    }

    #[test]
    fn a_second_bom_does_not_panic_and_stays_in_the_field_name() {
        // Found by fuzzing (sse_body): eventsource-stream panicked on a BOM.
        let got = events(&[b"\xef\xbb\xbf\xef\xbb\xbfdata: dropped\n\ndata: kept\n\n"]);
        assert_eq!(got.last().map(|e| e.1.as_str()), Some("kept"), "{got:?}");
        assert!(!got.iter().any(|e| e.1 == "dropped"), "{got:?}");
    }
}

//! Unit tests of the event log.

use super::*;

fn data(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn frames_events() {
    let f = |seq: u64, data: &'static [u8]| Frame {
        stream: 3,
        seq,
        data: Bytes::from_static(data),
        last: false,
    };
    assert_eq!(&f(0, b"").encode()[..], b"id: 3-0\nretry: 1000\ndata: \n\n");
    assert_eq!(
        &f(1, br#"{"a":1}"#).encode()[..],
        b"id: 3-1\ndata: {\"a\":1}\n\n"
    );
}

#[tokio::test]
async fn replays_only_its_own_stream_after_the_id() {
    let log = EventLog::default();
    let (a, mut rx_a) = log.open();
    let (b, _rx_b) = log.open();
    log.push(a, data("a1"), false);
    log.push(b, data("b1"), false);
    log.push(a, data("a2"), false);
    assert_eq!(rx_a.recv().await.unwrap().data, data("a1"));
    drop(rx_a);
    log.push(a, data("a3"), true);
    let r = log.resume(&format!("{a}-1")).unwrap();
    let got: Vec<Bytes> = r.replay.iter().map(|f| f.data.clone()).collect();
    assert_eq!(got, [data("a2"), data("a3")]);
    assert!(r.live.is_none(), "stream ended with its response");
    assert_eq!(r.replay[1].id(), format!("{a}-3"));
    // From the priming event on: everything.
    assert_eq!(log.resume(&format!("{a}-0")).unwrap().replay.len(), 3);
}

#[tokio::test]
async fn resumed_stream_continues_live() {
    let log = EventLog::default();
    let (a, rx) = log.open();
    drop(rx);
    log.push(a, data("x"), false);
    let mut r = log.resume(&format!("{a}-0")).unwrap();
    assert_eq!(r.replay.len(), 1);
    log.push(a, data("y"), true);
    let f = r.live.as_mut().unwrap().recv().await.unwrap();
    assert_eq!((f.data, f.last), (data("y"), true));
}

#[test]
fn a_cut_stream_flooded_with_notifications_still_resumes_to_its_answer() {
    // The 60-minute soak: a host reading a tool's 2,000 progress notifications
    // too slowly was cut, resumed, and got 410: the notifications after its
    // last id had been evicted, and with them the way to the call's result.
    let log = EventLog::default();
    let (a, rx) = log.open();
    let progress = |i: usize| {
        data(&format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{i}}}}}"#
        ))
    };
    for i in 0..(LIVE_CAPACITY + 1) {
        log.push(a, progress(i), false);
    }
    drop(rx); // the host read nothing more: the stream was cut at LIVE_CAPACITY
    for i in 0..2000 {
        log.push(a, progress(i), false);
    }
    let answer = data(r#"{"jsonrpc":"2.0","id":"flood-1","result":{}}"#);
    log.push(a, answer.clone(), true);
    let r = log
        .resume(&format!("{a}-{LIVE_CAPACITY}"))
        .expect("only notifications were lost: resumable");
    let last = r.replay.last().expect("replay");
    assert_eq!((&last.data, last.last), (&answer, true));
    // A lost request or response is never skipped over.
    let (b, _rx) = log.open();
    log.push(
        b,
        data(r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}"#),
        false,
    );
    for i in 0..(MAX_EVENTS + 1) {
        log.push(b, progress(i), false);
    }
    assert_eq!(
        log.resume(&format!("{b}-0")).unwrap_err(),
        ResumeError::Gone
    );
}

#[test]
fn refuses_what_it_cannot_honour() {
    let log = EventLog::default();
    assert_eq!(log.resume("nope").unwrap_err(), ResumeError::Malformed);
    assert_eq!(log.resume("9-1").unwrap_err(), ResumeError::Gone);
    let (a, _rx) = log.open();
    for i in 0..(MAX_EVENTS + 10) {
        log.push(a, data(&i.to_string()), false);
    }
    assert_eq!(
        log.resume(&format!("{a}-1")).unwrap_err(),
        ResumeError::Gone,
        "evicted"
    );
    assert!(log.resume(&format!("{a}-{}", MAX_EVENTS + 5)).is_ok());
    assert_eq!(
        log.resume(&format!("{a}-99999")).unwrap_err(),
        ResumeError::Gone,
        "future id"
    );
}

#[tokio::test]
async fn standalone_queues_until_attached() {
    let log = EventLog::default();
    log.push_standalone(data("early"));
    let mut att = log.attach_standalone(false);
    assert_eq!(att.replay.len(), 1);
    log.push_standalone(data("late"));
    assert_eq!(
        att.live.as_mut().unwrap().recv().await.unwrap().data,
        data("late")
    );
}

#[tokio::test]
async fn a_new_standalone_get_does_not_repeat_what_an_earlier_one_was_sent() {
    let log = EventLog::default();
    let mut first = log.attach_standalone(false);
    log.push_standalone(data("one"));
    assert_eq!(
        first.live.as_mut().unwrap().recv().await.unwrap().data,
        data("one")
    );
    drop(first);
    log.push_standalone(data("queued"));
    let mut second = log.attach_standalone(false);
    let got: Vec<Bytes> = second.replay.iter().map(|f| f.data.clone()).collect();
    assert_eq!(got, [data("queued")], "only what nobody was sent");
    log.push_standalone(data("live"));
    assert_eq!(
        second.live.as_mut().unwrap().recv().await.unwrap().data,
        data("live")
    );
    // The explicit resumption still replays from the id it names.
    let r = log.resume(&format!("{}-0", second.stream)).unwrap();
    assert_eq!(r.replay.len(), 3);
}

#[tokio::test]
async fn a_standalone_get_after_evictions_still_gets_live_events() {
    // A long-lived session whose standalone stream saw more events than the
    // buffer holds: each later GET must still be attached (the soak run found
    // GETs that stayed silent forever once anything had been evicted).
    let log = EventLog::default();
    for round in 0..3 {
        let mut att = log.attach_standalone(false);
        for i in 0..(MAX_EVENTS + 10) {
            log.push_standalone(data(&format!("{round}-{i}")));
            let f = att.live.as_mut().expect("attached").recv().await.unwrap();
            assert_eq!(f.data, data(&format!("{round}-{i}")));
        }
    }
    log.push_standalone(data("while detached"));
    let mut att = log.attach_standalone(false);
    assert_eq!(att.replay.len(), 1, "the one queued while nobody listened");
    log.push_standalone(data("after"));
    assert_eq!(
        att.live.as_mut().unwrap().recv().await.unwrap().data,
        data("after")
    );
}

#[tokio::test]
async fn slow_reader_is_cut_off() {
    let log = EventLog::default();
    let (a, mut rx) = log.open();
    for i in 0..(LIVE_CAPACITY + 5) {
        log.push(a, data(&i.to_string()), false);
    }
    let mut n = 0;
    while rx.recv().await.is_some() {
        n += 1;
    }
    assert_eq!(n, LIVE_CAPACITY, "channel closed after the overflow");
}

#[tokio::test]
async fn a_standalone_stream_taken_over_continues_its_numbers_and_carries_what_was_queued() {
    let log = EventLog::default();
    let mirrored = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = mirrored.clone();
    log.set_standalone_mirror(Box::new(move |f: &Frame| {
        seen.lock().unwrap().push(f.id());
    }));
    // Queued here before any GET: not mirrored (the stream is not claimed).
    log.push_standalone(data("queued"));
    let replay = vec![Frame {
        stream: 77,
        seq: 5,
        data: data("from elsewhere"),
        last: false,
    }];
    let mut got = log.take_standalone(Some(77), 6, replay);
    assert_eq!(log.standalone(), Some(77));
    assert_eq!(got.replay.len(), 1);
    let live = got.live.as_mut().unwrap();
    assert_eq!(
        live.recv().await.unwrap().id(),
        "77-6",
        "the queued event, renumbered"
    );
    log.push_standalone(data("next"));
    assert_eq!(live.recv().await.unwrap().id(), "77-7");
    assert_eq!(*mirrored.lock().unwrap(), ["77-6", "77-7"]);
    // Resumable here, replayed frames included.
    assert_eq!(log.resume("77-3").unwrap_err(), ResumeError::Gone);
    assert_eq!(log.resume("77-4").unwrap().replay.len(), 3);
    // Forgotten: no longer answered from here.
    log.forget(77);
    assert_eq!(log.standalone(), None);
    assert_eq!(log.resume("77-6").unwrap_err(), ResumeError::Gone);
}

#[test]
fn the_standalone_stream_is_here_while_attached_or_claimed() {
    let log = EventLog::default();
    assert!(!log.standalone_here(), "no stream");
    log.push_standalone(data("queued"));
    assert!(!log.standalone_here(), "queued, nobody listens here");
    let attached = log.attach_standalone(false);
    assert!(log.standalone_here(), "a GET is attached");
    drop(attached);
    assert!(!log.standalone_here(), "the GET went away");
    log.mirror_standalone(attached_stream(&log), true);
    assert!(
        log.standalone_here(),
        "claimed here: the host comes back here"
    );
    log.mirror_standalone(attached_stream(&log), false);
    assert!(!log.standalone_here(), "the store names another stream");
}

#[tokio::test]
async fn a_get_still_attached_here_does_not_count_once_the_store_names_another_stream() {
    // The host left its GET here for one on another replica; hyper has not
    // noticed yet (the response is still attached) when the store refuses
    // the next event: that and every later message goes to the hand-off.
    let log = EventLog::default();
    let old = log.attach_standalone(false);
    log.mirror_standalone(old.stream, true);
    log.push_standalone(data("two"));
    let mut back = Vec::new();
    assert_eq!(
        log.take_back(old.stream, 1, false, |m| back.push(m)),
        Some(1)
    );
    assert_eq!(back, [data("two")]);
    assert!(!log.standalone_here(), "the host listens elsewhere");
    let refused = log.push_standalone_if_here(data("three"));
    assert_eq!(refused, Err(data("three")), "not put on the stream left");
    // What the hand-off keeps here after all (the store down, or the other
    // stream's replica gone) is kept for the next GET here, not written to
    // the response the host left.
    log.push_standalone(data("kept"));
    let mut old_live = old.live.unwrap();
    let to_old: Vec<Bytes> = std::iter::from_fn(|| old_live.try_recv().ok())
        .map(|f| f.data)
        .collect();
    assert!(!to_old.contains(&data("kept")), "{to_old:?}");
    // A GET attaching here again is the host back here: it gets what was kept.
    let again = log.attach_standalone(false);
    let replayed: Vec<Bytes> = again.replay.iter().map(|f| f.data.clone()).collect();
    assert_eq!(replayed, [data("kept")]);
    assert!(log.standalone_here());
    assert!(log.push_standalone_if_here(data("four")).is_ok());
    drop(again);
}

#[tokio::test]
async fn a_refusal_from_before_the_host_came_back_leaves_the_stream_produced_here() {
    // The host left for another replica, the event "two" was refused there,
    // and the host came back here before the refusal was read: its new GET
    // is the listener, and stays so.
    let log = EventLog::default();
    let old = log.attach_standalone(false);
    log.mirror_standalone(old.stream, true);
    log.push_standalone(data("two"));
    let again = log.attach_standalone(false);
    let mut back = Vec::new();
    assert!(
        log.take_back(old.stream, 1, false, |m| back.push(m))
            .is_some()
    );
    assert_eq!(back, [data("two")], "still handed on (and found here)");
    assert!(log.standalone_here(), "the host listens here again");
    assert!(log.push_standalone_if_here(data("three")).is_ok());
    let mut live = again.live.unwrap();
    let heard: Vec<Bytes> = std::iter::from_fn(|| live.try_recv().ok())
        .map(|f| f.data)
        .collect();
    assert!(heard.contains(&data("three")), "{heard:?}");
    drop(old);
}

fn attached_stream(log: &EventLog) -> u64 {
    log.standalone().unwrap()
}

#[tokio::test]
async fn a_primed_get_taking_the_standalone_stream_over_gets_an_id_of_its_own() {
    let log = EventLog::default();
    let first = log.attach_standalone(true);
    assert!(first.prime_due, "seq 0 primes the first GET");
    let second = log.attach_standalone(true);
    assert!(!second.prime_due, "seq 0 was sent already");
    assert_eq!(second.stream, first.stream);
    let ids: Vec<(u64, bool)> = second
        .replay
        .iter()
        .map(|f| (f.seq, f.data.is_empty()))
        .collect();
    assert_eq!(
        ids,
        [(1, true)],
        "an empty event recorded as its priming event"
    );
    let encoded = second.replay[0].encode();
    let text = String::from_utf8_lossy(&encoded);
    assert!(text.contains("retry: "), "with the retry advice: {text}");
    // It resumes like any other event, and the next GET gets the next one.
    assert!(log.resume(&format!("{}-1", second.stream)).is_ok());
    let third = log.attach_standalone(true);
    assert_eq!(third.replay.iter().map(|f| f.seq).collect::<Vec<_>>(), [2]);
    // With something queued (nobody listening), that event's id is enough:
    // nothing is added.
    drop((first, second, third));
    log.push_standalone(data("queued"));
    let fourth = log.attach_standalone(true);
    assert!(!fourth.prime_due);
    assert_eq!(fourth.replay.len(), 1);
    assert_eq!(fourth.replay[0].data, data("queued"));
    // An unprimed GET (an older revision) never gets an empty event.
    let unprimed = EventLog::default();
    let _ = unprimed.attach_standalone(false);
    assert!(unprimed.attach_standalone(false).replay.is_empty());
}

#[tokio::test]
async fn a_later_standalone_get_keeps_the_earlier_one_and_each_event_goes_to_one() {
    let log = EventLog::default();
    let mut first = log.attach_standalone(true);
    let mut second = log.attach_standalone(true);
    assert!(second.replay[0].data.is_empty(), "its own priming event");
    let (mut a, mut b) = (first.live.take().unwrap(), second.live.take().unwrap());
    assert!(
        a.try_recv().is_err(),
        "the first is not sent the second's priming event"
    );
    assert!(!a.is_closed(), "the first stays attached");
    log.push_standalone(data("one"));
    assert_eq!(b.recv().await.unwrap().data, data("one"));
    assert!(a.try_recv().is_err(), "never on both");
    drop(b);
    log.push_standalone(data("two"));
    assert_eq!(
        a.recv().await.unwrap().data,
        data("two"),
        "the one still open"
    );
    assert!(log.is_attached());
    drop(a);
    assert!(!log.is_attached());
}

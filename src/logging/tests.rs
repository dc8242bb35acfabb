//! `AccessFormat` writes exactly what the stock formatter writes, save the
//! timestamp's instant: every case runs under both and the lines are compared.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::format;

use super::*;
use crate::metrics::Metrics;
use crate::request::RequestContext;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }
}

/// `emit` after recomputing every callsite's interest with the subscriber in force.
/// Other tests run the same callsites (the access line of `RequestContext`) on
/// other threads with no subscriber; a callsite first hit there while this
/// test's subscriber was being registered could keep the interest "never"
/// computed without it, and the event would be dropped (seen once in CI: the
/// stock formatter wrote no line). The rebuild makes the test independent of that.
fn with_fresh_interest(emit: fn()) -> impl FnOnce() {
    move || {
        tracing::callsite::rebuild_interest_cache();
        emit();
    }
}

/// The lines `emit` gives under the stock formatter and under `AccessFormat`
/// (JSON or text), and how many lines `AccessFormat` wrote itself.
fn both(json: bool, emit: fn()) -> (Vec<String>, Vec<String>, usize) {
    let (stock, fast) = (Capture::default(), Capture::default());
    let (s, f) = (stock.clone(), fast.clone());
    let builder = || tracing_subscriber::fmt().with_ansi(false);
    let before = FAST_LINES.with(|n| n.load(Ordering::Relaxed));
    if json {
        let sub = builder().json().with_writer(move || s.clone()).finish();
        tracing::subscriber::with_default(sub, with_fresh_interest(emit));
        let sub = builder()
            .json()
            .with_writer(move || f.clone())
            .event_format(AccessFormat::json(format().json()))
            .finish();
        tracing::subscriber::with_default(sub, with_fresh_interest(emit));
    } else {
        let sub = builder().with_writer(move || s.clone()).finish();
        tracing::subscriber::with_default(sub, with_fresh_interest(emit));
        let sub = builder()
            .with_writer(move || f.clone())
            .fmt_fields(FastFields::default())
            .event_format(AccessFormat::text(format()))
            .finish();
        tracing::subscriber::with_default(sub, with_fresh_interest(emit));
    }
    let written = FAST_LINES.with(|n| n.load(Ordering::Relaxed)) - before;
    (stock.lines(), fast.lines(), written)
}

/// The line without its timestamp, which must have the stock shape
/// (`2026-12-02T05:14:11.123456Z`).
fn untimed(line: &str, json: bool) -> &str {
    let (ts, rest) = if json {
        let rest = line.strip_prefix("{\"timestamp\":\"").expect(line);
        (&rest[..27], &rest[27..])
    } else {
        line.split_at(27)
    };
    let shape: String = ts
        .chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect();
    assert_eq!(shape, "0000-00-00T00:00:00.000000Z", "{line}");
    rest
}

fn assert_same(json: bool, emit: fn(), fast_lines: usize) {
    let (stock, fast, written) = both(json, emit);
    assert_eq!(stock.len(), fast.len(), "{stock:#?}\n{fast:#?}");
    for (s, f) in stock.iter().zip(&fast) {
        assert_eq!(untimed(s, json), untimed(f, json), "json: {json}");
    }
    assert_eq!(written, fast_lines, "lines written by AccessFormat itself");
}

/// Strings that need escaping in one format or the other, numbers, absent
/// fields, `Display` values, inside nested spans one of which recorded a field
/// after it was created.
fn access_lines() {
    let outer = tracing::info_span!("conn");
    let _outer = outer.enter();
    let span = tracing::info_span!(
        "request",
        id = %"\"x\"",
        session = "ab\"c",
        backend = tracing::field::Empty,
    );
    span.record("backend", "fx");
    let _g = span.enter();
    let client: std::net::IpAddr = "2001:db8::1".parse().unwrap();
    tracing::info!(
        target: ACCESS_TARGET,
        method = "tools/call",
        rpc_id = %"\"call-1\"",
        quoted = "say \"hi\" \\ there",
        lines = "a\nb\tc\r\u{1}",
        unicode = "é—名前\u{7f}\u{9b}\u{200b}",
        escape = "\u{1b}[31mred",
        client = %client,
        absent = Option::<&str>::None,
        code = -32602i64,
        status = 200u16,
        ms = 0u64,
        big = u64::MAX,
        flag = true,
        "request"
    );
    drop(_g);
    tracing::info!(target: ACCESS_TARGET, outcome = "ok", "request");
}

/// A float (the stock formatter's in JSON, written here as `Debug` in text, as
/// the stock one does), a message with a control character (the stock
/// formatter's in text, which escapes it; JSON escapes it anyway), another target.
fn other_lines() {
    tracing::info!(target: ACCESS_TARGET, ratio = 0.5f64, "request");
    tracing::info!(target: ACCESS_TARGET, "re\u{1b}quest");
    tracing::warn!(target: "mcpgate::other", n = 1u64, "elsewhere");
}

/// Spans and events the stock event formatter writes, with fields of every
/// kind `FastFields` formats or hands on: strings that need escaping, `Display`
/// and `Debug` values, numbers, a float, a bool, an error, raw and `log.`
/// names, a message with a control character, fields recorded after creation.
fn span_lines() {
    let span = tracing::info_span!(
        "request",
        id = %7,
        session = %"1a2b3c4d",
        method = %"tools/call",
        tool = tracing::field::Empty,
        backend = tracing::field::Empty,
    );
    span.record("tool", "s__echo");
    span.record("backend", "s \"quoted\"");
    let _g = span.enter();
    tracing::info!(target: ACCESS_TARGET, method = "tools/call", "request");
    tracing::warn!(backend = "b", cause = %"gone", n = 3u64, i = -1i64, "backend failed");
    let inner = tracing::info_span!("inner", flag = true, ratio = 0.25f64, list = ?[1, 2]);
    let _i = inner.enter();
    tracing::info!(text = "tab\there \u{1b}[0m", "with \"quotes\"");
    let err = std::io::Error::other("boom");
    tracing::warn!(cause = &err as &dyn std::error::Error, "an error field");
    tracing::info!(r#type = "raw", "a raw name");
    tracing::info!("a bell\u{7} in the message");
    let odd = tracing::info_span!("odd", r#type = "raw", "log.target" = "x");
    let _o = odd.enter();
    tracing::info!(target: ACCESS_TARGET, "request");
}

fn outside_spans() {
    tracing::info!(target: ACCESS_TARGET, method = "ping", "request");
}

/// The gateway's own access line, from a request context.
fn context_line() {
    let metrics = Arc::new(Metrics::new());
    let mut ctx = RequestContext::new(&metrics);
    ctx.set_request(&crate::mcp::Method::ToolsCall);
    ctx.set_rpc_id(&serde_json::from_str("\"id-1\"").unwrap());
    ctx.set_client(Some([127, 0, 0, 1].into()));
    ctx.set_session("s1");
    ctx.set_bytes_in(120);
    ctx.set_bytes_out(80);
    ctx.finish_error(crate::request::Outcome::Error, -32602);
}

#[test]
fn access_lines_are_the_stock_formatters_lines() {
    for json in [false, true] {
        assert_same(json, access_lines, 2);
        assert_same(json, outside_spans, 1);
        assert_same(json, context_line, 1);
        assert_same(json, other_lines, 1);
        assert_same(json, span_lines, 2);
    }
}

#[test]
fn span_fields_are_written_without_the_stock_visitor() {
    let before = FAST_FIELDS.with(|n| n.load(Ordering::Relaxed));
    both(false, span_lines);
    let written = FAST_FIELDS.with(|n| n.load(Ordering::Relaxed)) - before;
    // The request span (created, two records), the warning, the inner span and
    // two of its events; the error, the bell and the `log.` name go to
    // `DefaultFields`.
    assert_eq!(written, 7);
}

#[test]
fn the_timestamp_is_now() {
    // Between the stock formatter's timestamps of the lines before and after.
    let ts = |line: &str| line[..27].to_owned();
    let (before, fast, _) = both(false, outside_spans);
    let (after, _, _) = both(false, outside_spans);
    let (before, fast, after) = (ts(&before[0]), ts(&fast[0]), ts(&after[0]));
    assert!(before <= fast && fast <= after, "{before} {fast} {after}");
}

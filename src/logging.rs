//! Log output: the access line without tracing-subscriber's generic formatting.
//!
//! The access line ([`ACCESS_TARGET`], one per host request) is the only log line
//! on the request path at info. Formatted by tracing-subscriber's stock event
//! formatter it cost ~21,000 instructions per request (Debug-escaping every string
//! field through `fmt::Formatter`, an ANSI `Style` per field even when colours are
//! off, the calendar date recomputed for every timestamp, a JSON span re-parsed per
//! line). [`AccessFormat`] wraps the stock formatter and writes that one target
//! itself, byte for byte what the stock formatter writes (the tests below compare
//! the two): plain strings copied without escaping, numbers through `itoa`, JSON
//! escaping through `serde_json`, the date of the current second cached per thread,
//! and the span fields the fmt layer already stored reused as they are. Every other
//! event, a line whose fields it does not handle (a float, an error, a message with
//! terminal control characters) and any line with ANSI colours go to the stock
//! formatter. Filtering is untouched: the event is still a `tracing` event, so
//! `RUST_LOG=info,mcpgate::access=off` turns it off.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The target of the access (audit) line (`request/mod.rs` lists its fields).
pub const ACCESS_TARGET: &str = "mcpgate::access";

/// An event formatter that writes [`ACCESS_TARGET`] events itself and hands
/// every other event to `inner`: tracing-subscriber's default `Format<Full>`
/// ([`AccessFormat::text`]) or `Format<Json>` with `JsonFields`
/// ([`AccessFormat::json`]), both with their default settings (timestamps in
/// RFC 3339 UTC with microseconds, level, target, span context).
pub struct AccessFormat<F> {
    inner: F,
    json: bool,
}

impl<F> AccessFormat<F> {
    /// Around the human-readable formatter (`tracing_subscriber::fmt::format()`).
    pub fn text(inner: F) -> Self {
        AccessFormat { inner, json: false }
    }

    /// Around the JSON formatter (`tracing_subscriber::fmt::format().json()`,
    /// with the layer's field formatter `JsonFields`).
    pub fn json(inner: F) -> Self {
        AccessFormat { inner, json: true }
    }
}

impl<S, N, F> FormatEvent<S, N> for AccessFormat<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // Colours (text on a terminal) are left to the stock formatter.
        if event.metadata().target() != ACCESS_TARGET || (!self.json && writer.has_ansi_escapes()) {
            return self.inner.format_event(ctx, writer, event);
        }
        let written = LINE.with(|line| {
            let Ok(mut line) = line.try_borrow_mut() else {
                return false;
            };
            let done = if self.json {
                line.json(ctx, event)
            } else {
                line.text(ctx, event)
            };
            done && writer.write_str(&line.out).is_ok()
        });
        if written {
            #[cfg(test)]
            FAST_LINES.with(|n| n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            Ok(())
        } else {
            self.inner.format_event(ctx, writer, event)
        }
    }
}

thread_local! {
    static LINE: RefCell<Line> = RefCell::new(Line::default());
    static FIELDS: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The field formatter of the text output: tracing-subscriber's `DefaultFields`
/// bytes, written without `core::fmt` where it can be. Every request's span
/// (`id`, `session`, `method`, then `tool` and `backend` when routed) is
/// formatted by it when created and recorded, ~2,400 instructions per field
/// through `DefaultFields`. Fields are written as [`AccessFormat`] writes the
/// access line's; a set of fields it does not handle (an error, a `log.` or
/// `r#` name, a message with terminal control characters) and any output with
/// ANSI colours go to `DefaultFields`.
#[derive(Debug, Default)]
pub struct FastFields {
    inner: tracing_subscriber::fmt::format::DefaultFields,
}

impl<'writer> FormatFields<'writer> for FastFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        if !writer.has_ansi_escapes() {
            let written = FIELDS.with(|out| {
                let mut out = out.try_borrow_mut().ok()?;
                out.clear();
                let mut visit = TextFields {
                    out: &mut out,
                    first: true,
                    ok: true,
                };
                fields.record(&mut visit);
                visit.ok.then(|| writer.write_str(&out))
            });
            if let Some(result) = written {
                #[cfg(test)]
                FAST_FIELDS.with(|n| n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                return result;
            }
        }
        self.inner.format_fields(writer, fields)
    }
}

#[cfg(test)]
thread_local! {
    /// Lines `AccessFormat` wrote itself on this thread.
    static FAST_LINES: std::sync::atomic::AtomicUsize = const { std::sync::atomic::AtomicUsize::new(0) };
    /// Sets of fields `FastFields` wrote itself on this thread.
    static FAST_FIELDS: std::sync::atomic::AtomicUsize = const { std::sync::atomic::AtomicUsize::new(0) };
}

/// One thread's line buffer and its cached clock.
#[derive(Default)]
struct Line {
    out: String,
    /// Scratch for values formatted through `Debug`.
    scratch: String,
    /// The Unix second `date` shows, as `YYYY-MM-DDTHH:MM:SS.`.
    second: Option<u64>,
    date: String,
}

impl Line {
    /// `timestamp  INFO span{fields}: target: message field=value…` (`false`: not
    /// handled here).
    fn text<S, N>(&mut self, ctx: &FmtContext<'_, S, N>, event: &Event<'_>) -> bool
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        self.out.clear();
        if !self.timestamp() {
            return false;
        }
        self.out.push(' ');
        self.out.push_str(level_text(event.metadata().level()));
        self.out.push(' ');
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                self.out.push_str(span.metadata().name());
                seen = true;
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    self.out.push('{');
                    self.out.push_str(fields);
                    self.out.push('}');
                }
                self.out.push(':');
            }
            if seen {
                self.out.push(' ');
            }
        }
        self.out.push_str(event.metadata().target());
        self.out.push_str(": ");
        let mut fields = TextFields {
            out: &mut self.out,
            first: true,
            ok: true,
        };
        event.record(&mut fields);
        if !fields.ok {
            return false;
        }
        self.out.push('\n');
        true
    }

    /// `{"timestamp":…,"level":…,"fields":{…},"target":…,"span":{…},"spans":[…]}`.
    fn json<S, N>(&mut self, ctx: &FmtContext<'_, S, N>, event: &Event<'_>) -> bool
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        self.out.clear();
        self.out.push_str("{\"timestamp\":\"");
        if !self.timestamp() {
            return false;
        }
        self.out.push_str("\",\"level\":\"");
        self.out.push_str(event.metadata().level().as_str());
        self.out.push_str("\",\"fields\":{");
        let mut fields = JsonFields {
            line: self,
            first: true,
            ok: true,
        };
        event.record(&mut fields);
        if !fields.ok {
            return false;
        }
        self.out.push_str("},\"target\":");
        json_str(&mut self.out, event.metadata().target());
        let current = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(span) = current {
            self.out.push_str(",\"span\":");
            if !json_span::<S, N>(&mut self.out, &span) {
                return false;
            }
            self.out.push_str(",\"spans\":[");
            if let Some(leaf) = ctx.lookup_current() {
                for (i, span) in leaf.scope().from_root().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    if !json_span::<S, N>(&mut self.out, &span) {
                        return false;
                    }
                }
            }
            self.out.push(']');
        }
        self.out.push_str("}\n");
        true
    }

    /// Appends the time now as `2026-12-02T05:14:11.123456Z` (UTC); the date and
    /// time of day are formatted once per second.
    fn timestamp(&mut self) -> bool {
        let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return false;
        };
        let secs = now.as_secs();
        if self.second != Some(secs) {
            let Some(date) = i64::try_from(secs)
                .ok()
                .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
                .filter(|d| (0..=9999).contains(&d.year()))
            else {
                return false;
            };
            self.date.clear();
            let _ = write!(
                self.date,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
                date.year(),
                u8::from(date.month()),
                date.day(),
                date.hour(),
                date.minute(),
                date.second()
            );
            self.second = Some(secs);
        }
        self.out.push_str(&self.date);
        let micros = now.subsec_micros();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(micros);
        for _ in digits.len()..6 {
            self.out.push('0');
        }
        self.out.push_str(digits);
        self.out.push('Z');
        true
    }

    /// `value`'s `Debug` form in the scratch buffer.
    fn debug(&mut self, value: &dyn fmt::Debug) -> &str {
        self.scratch.clear();
        let _ = write!(self.scratch, "{value:?}");
        &self.scratch
    }
}

/// The level as the text formatter pads it (five columns, right-aligned).
fn level_text(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// Fields the stock formatters treat apart (log-crate metadata, raw identifiers).
fn special(name: &str) -> bool {
    matches!(name.as_bytes().first(), Some(b'l' | b'r'))
        && (name.starts_with("log.") || name.starts_with("r#"))
}

/// Bytes a string may hold to be written as it is (`text`: between quotes, as
/// `str`'s `Debug` writes it; `json`: as `serde_json` writes it).
const fn plain_bytes(json: bool) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let quoted = b == b'"' as usize || b == b'\\' as usize;
        table[b] = !quoted && b >= 0x20 && (json || b < 0x7f);
        b += 1;
    }
    table
}

const PLAIN_TEXT: [bool; 256] = plain_bytes(false);
const PLAIN_JSON: [bool; 256] = plain_bytes(true);

/// The event's fields as the text formatter writes them: the message first as
/// it is, then `name=value` separated by spaces, strings in their `Debug` form.
struct TextFields<'a> {
    out: &'a mut String,
    first: bool,
    ok: bool,
}

impl TextFields<'_> {
    /// Starts field `name` (`false`: not handled here).
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        if !self.ok || special(name) {
            self.ok = false;
            return false;
        }
        if !self.first {
            self.out.push(' ');
        }
        self.first = false;
        if name != "message" {
            self.out.push_str(name);
            self.out.push('=');
        }
        true
    }
}

impl Visit for TextFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            return self.record_debug(field, &format_args!("{value}"));
        }
        if !self.start(field) {
            return;
        }
        let out = &mut *self.out;
        if value.bytes().all(|b| PLAIN_TEXT[usize::from(b)]) {
            out.push('"');
            out.push_str(value);
            out.push('"');
        } else {
            let _ = write!(out, "{value:?}");
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.out.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.out.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.start(field) {
            self.out.push_str(if value { "true" } else { "false" });
        }
    }

    fn record_error(&mut self, _: &Field, _: &(dyn std::error::Error + 'static)) {
        self.ok = false;
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.start(field) {
            return;
        }
        let out = &mut *self.out;
        let from = out.len();
        let _ = write!(out, "{value:?}");
        // The stock formatter escapes terminal control characters in the message.
        if field.name() == "message"
            && out[from..].chars().any(|c| {
                matches!(
                    c,
                    '\x07' | '\x08' | '\x0c' | '\x1b' | '\x7f' | '\u{80}'..='\u{9f}'
                )
            })
        {
            self.ok = false;
        }
    }
}

/// The event's fields as the JSON formatter writes them: an object in field
/// order, strings escaped by `serde_json`, `Debug` values as strings.
struct JsonFields<'a> {
    line: &'a mut Line,
    first: bool,
    ok: bool,
}

impl JsonFields<'_> {
    /// Starts the entry of `field` (`false`: not handled here).
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        if !self.ok || special(name) {
            self.ok = false;
            return false;
        }
        if !self.first {
            self.line.out.push(',');
        }
        self.first = false;
        json_str(&mut self.line.out, name);
        self.line.out.push(':');
        true
    }
}

impl Visit for JsonFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.start(field) {
            json_str(&mut self.line.out, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.line.out.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.line.out.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.start(field) {
            self.line.out.push_str(if value { "true" } else { "false" });
        }
    }

    fn record_f64(&mut self, _: &Field, _: f64) {
        self.ok = false;
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.start(field) {
            return;
        }
        let line = &mut *self.line;
        line.debug(value);
        json_str(&mut line.out, &line.scratch);
    }
}

/// Appends `s` as a JSON string (escaped as `serde_json` escapes it).
fn json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| PLAIN_JSON[usize::from(b)]) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// Appends one span as the JSON formatter does: its stored fields (a JSON object
/// written by `JsonFields`) and its `name` (`false`: not handled here).
fn json_span<S, N>(out: &mut String, span: &tracing_subscriber::registry::SpanRef<'_, S>) -> bool
where
    S: for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let ext = span.extensions();
    let Some(fields) = ext.get::<FormattedFields<N>>() else {
        return false;
    };
    let inner = match fields.as_str() {
        "" | "{}" => "",
        f => match f.strip_prefix('{').and_then(|f| f.strip_suffix('}')) {
            Some(inner) => inner,
            None => return false,
        },
    };
    out.push('{');
    out.push_str(inner);
    if !inner.is_empty() {
        out.push(',');
    }
    out.push_str("\"name\":");
    json_str(out, span.metadata().name());
    out.push('}');
    true
}

#[cfg(test)]
mod tests;

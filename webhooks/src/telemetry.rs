//! Logging setup: one structured line per review (at debug level for reviews that are simply
//! allowed), text or JSON; the targets those lines are logged under; and `event_at!`, which
//! logs them at their level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// The target of the handlers' log lines, wherever in `handlers` they are logged: log filters
/// (`RUST_LOG`) and queries name the module, not the file inside it.
pub(crate) const HANDLERS_TARGET: &str = "volume_health_webhooks::handlers";
/// The target of the server's log lines, wherever in `server` they are logged, likewise.
pub(crate) const SERVER_TARGET: &str = "volume_health_webhooks::server";

/// Most bytes of one value of a request in a log line. A request may be megabytes long; what
/// identifies it (uid, names, user) is far shorter in any real review.
pub(crate) const MAX_LOGGED_VALUE: usize = 256;

/// `value`, cut to [`MAX_LOGGED_VALUE`] bytes on a character boundary, for a log field.
pub(crate) fn logged(value: &str) -> &str {
    volume_health_validation::error::prefix(value, MAX_LOGGED_VALUE)
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable `key=value` lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Installs the global subscriber; `RUST_LOG` overrides the default `info` level.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a terminal: log collectors store them as noise, and writing them
    // costs a measurable share of a small request.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests) keeps the first subscriber. JSON strings escape control characters
    // already; the text format needs `text_fields`.
    let _ = match format {
        LogFormat::Text => builder.fmt_fields(text_fields()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_writer(|| JsonEscapes(std::io::stderr()))
            .try_init(),
    };
}

/// A writer of JSON log lines that escapes what serde_json leaves raw in strings: the C1 control
/// characters (U+0080 to U+009F) and the Unicode line and paragraph separators. serde_json
/// escapes only C0 controls; the others can still break a line in some viewers. Outside strings
/// JSON is ASCII, so each of them found in a line is inside a string, where `\uXXXX` means the
/// same character.
pub struct JsonEscapes<W>(pub W);

impl<W: std::io::Write> std::io::Write for JsonEscapes<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    /// tracing-subscriber writes each line whole, so no character is split between calls.
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let mut start = 0;
        let mut i = 0;
        while i + 1 < buf.len() {
            let escaped = match (buf[i], buf[i + 1], buf.get(i + 2)) {
                (0xc2, second @ 0x80..=0x9f, _) => Some((u32::from(second), 2)),
                (0xe2, 0x80, Some(&third @ (0xa8 | 0xa9))) => {
                    Some((0x2000 + u32::from(third) - 0x80, 3))
                }
                _ => None,
            };
            match escaped {
                Some((code, len)) => {
                    self.0.write_all(&buf[start..i])?;
                    write!(self.0, "\\u{code:04x}")?;
                    i += len;
                    start = i;
                }
                None => i += 1,
            }
        }
        self.0.write_all(&buf[start..])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The fields of the text format, written as tracing-subscriber writes them (`key=value`, strings
/// quoted) but with every control character escaped, whatever the field and however it is
/// recorded. Uids, user names and resource attributes come from requests: a user name holding
/// `\n2099-01-01T00:00:00Z INFO ...` must not write a second line, nor an escape sequence reach a
/// terminal.
pub fn text_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    debug_fn(|writer: &mut Writer<'_>, field, value| {
        let text = format!("{value:?}");
        if field.name() != "message" {
            write!(writer, "{field}=")?;
        }
        write_escaped(writer, &text)
    })
    .delimited(" ")
}

/// Writes `text` with control characters (and the Unicode line and paragraph separators) as
/// `\u{..}` escapes; a backslash before one stays a backslash, so the result reads unambiguously
/// in the common case of no control characters.
fn write_escaped(writer: &mut Writer<'_>, text: &str) -> std::fmt::Result {
    if !text.chars().any(needs_escape) {
        return writer.write_str(text);
    }
    for c in text.chars() {
        if needs_escape(c) {
            write!(writer, "{}", c.escape_unicode())?;
        } else {
            writer.write_char(c)?;
        }
    }
    Ok(())
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `tracing::event!` at a level known only at run time: the macro wants it as a constant, and
/// the answers are logged at debug or info.
macro_rules! event_at {
    (target: $target:expr, $level:expr, $($event:tt)*) => {
        if $level == ::tracing::Level::DEBUG {
            ::tracing::event!(target: $target, ::tracing::Level::DEBUG, $($event)*)
        } else {
            ::tracing::event!(target: $target, ::tracing::Level::INFO, $($event)*)
        }
    };
}
pub(crate) use event_at;

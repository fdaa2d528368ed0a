//! An error and its causes on one line, the way the webhooks, `check` and the node doctor
//! print them: each cause once, and the line bounded in length however long the text it quotes.
//! A crate of its own, so that the doctor shares it without depending on the webhooks' library.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Most bytes of an error line. A message may quote a value whole (serde's
/// `invalid type: string "..."` does, escaped, up to 8 times larger), and the value may come
/// from a request or a file an attacker wrote: a line is never longer than this.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Marks where a text was cut.
const CUT_MARK: &str = "...";

/// An error and its sources as one line, `err: source: source`, skipping a source whose text
/// the message already contains (serde and io errors often repeat their cause). At most about
/// [`MAX_MESSAGE_BYTES`]: each part is written through [`Bounded`], so no part is ever held
/// longer than that, however long its own text.
///
/// ```
/// use std::{error::Error, fmt, io};
/// use error_line::{MAX_MESSAGE_BYTES, chain};
///
/// /// What was being done, and the io error that stopped it.
/// #[derive(Debug)]
/// struct Context(&'static str, io::Error);
///
/// impl fmt::Display for Context {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str(self.0)
///     }
/// }
///
/// impl Error for Context {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.1)
///     }
/// }
///
/// let denied = || io::Error::new(io::ErrorKind::PermissionDenied, "permission denied");
/// let err = Context("reading vol_data.json", denied());
/// assert_eq!(chain(&err), "reading vol_data.json: permission denied");
/// // A cause the message already quotes is not repeated.
/// let err = Context("open failed: permission denied", denied());
/// assert_eq!(chain(&err), "open failed: permission denied");
/// // However long a cause's text, the line stays bounded.
/// let err = Context("reading vol_data.json", io::Error::other("x".repeat(10_000)));
/// let line = chain(&err);
/// assert!(line.len() <= MAX_MESSAGE_BYTES && line.ends_with("..."));
/// ```
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut message = bounded(err);
    let mut source = err.source();
    while let Some(cause) = source {
        if message.len() >= MAX_MESSAGE_BYTES {
            break;
        }
        let text = bounded(cause);
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    cut(&message, MAX_MESSAGE_BYTES).into_owned()
}

/// `value` as text, cut to [`MAX_MESSAGE_BYTES`] while it is written.
fn bounded<T: fmt::Display + ?Sized>(value: &T) -> String {
    Bounded(value).to_string()
}

/// `text`, cut to at most `max` bytes on a character boundary, with `...` at the cut.
///
/// ```
/// use std::borrow::Cow;
/// use error_line::cut;
///
/// // A text that fits is borrowed, not copied.
/// assert!(matches!(cut("node-1", 16), Cow::Borrowed("node-1")));
/// // The mark counts in the limit, and a character is never split: `é` is two bytes.
/// assert_eq!(cut("résumé", 6), "ré...");
/// assert_eq!(cut("éééé", 6), "é...");
/// ```
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max.saturating_sub(CUT_MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{CUT_MARK}", &text[..end]))
}

/// `text` cut to at most `max` bytes on a character boundary, without a mark: for log fields,
/// where no copy is wanted.
///
/// ```
/// use error_line::prefix;
///
/// assert_eq!(prefix("node-1", 16), "node-1");
/// // `é` is two bytes: the cut falls before it rather than inside it.
/// assert_eq!(prefix("volumé", 6), "volum");
/// ```
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Displays its value cut to [`MAX_MESSAGE_BYTES`], stopping the value's own formatting there:
/// a message about a long value is never built whole, not even for a moment.
pub struct Bounded<T>(pub T);

impl<T: fmt::Display> fmt::Display for Bounded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Limited {
            text: String::new(),
            full: false,
        };
        // An error here is only the limit, reached: the text so far is what is shown.
        let _ = write!(out, "{}", self.0);
        if out.full {
            let kept = prefix(&out.text, MAX_MESSAGE_BYTES - CUT_MARK.len());
            write!(f, "{kept}{CUT_MARK}")
        } else {
            f.write_str(&out.text)
        }
    }
}

/// A writer that takes up to [`MAX_MESSAGE_BYTES`], then refuses.
struct Limited {
    text: String,
    full: bool,
}

impl fmt::Write for Limited {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_MESSAGE_BYTES - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        self.text.push_str(prefix(s, room));
        self.full = true;
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let text = "é".repeat(2000);
        let cut_text = cut(&text, MAX_MESSAGE_BYTES);
        assert!(cut_text.len() <= MAX_MESSAGE_BYTES, "{}", cut_text.len());
        assert!(cut_text.ends_with("é..."));
        assert_eq!(cut("short", MAX_MESSAGE_BYTES), "short");
        assert_eq!(prefix("éé", 3), "é");
        let shown = Bounded(&text).to_string();
        assert!(
            shown.len() <= MAX_MESSAGE_BYTES && shown.ends_with("..."),
            "{shown}"
        );
        assert_eq!(Bounded("short").to_string(), "short");
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(Bounded(&exact).to_string(), exact);
    }

    /// An error with an optional cause, for the chain tests.
    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|cause| cause as _)
        }
    }

    fn layer(text: &str, cause: Option<Layer>) -> Layer {
        Layer(text.to_owned(), cause.map(Box::new))
    }

    #[test]
    fn a_chain_names_each_cause_once_on_one_bounded_line() {
        let io = layer("permission denied", None);
        let read = layer("reading vol_data.json", Some(io));
        assert_eq!(chain(&read), "reading vol_data.json: permission denied");
        // A cause the message already quotes is not repeated.
        let repeated = layer("parse: bad token", Some(layer("bad token", None)));
        assert_eq!(chain(&repeated), "parse: bad token");
        // However long each layer, the line is bounded.
        let long = layer(&"x".repeat(10_000), Some(layer(&"y".repeat(10_000), None)));
        let line = chain(&long);
        assert!(
            line.len() <= MAX_MESSAGE_BYTES && line.ends_with(CUT_MARK),
            "{}",
            line.len()
        );
    }
}

//! Names and values from the node, made safe to print.
//!
//! Directory names and `vol_data.json` values are chosen by whoever can write
//! below the kubelet root. Printed raw, a newline in one forges report lines
//! (a fake "summary: ... 0 findings"), an ESC drives the reader's terminal, a
//! carriage return overwrites what came before, and a bidi override shows
//! text in another order than it is stored. The JSON output is escaped by
//! serde; the text and node-problem-detector outputs escape with this.

use std::fmt;

/// `value` as it is printed in the text report: control characters (C0,
/// DEL, C1), bidi controls and line or paragraph separators become `\n`,
/// `\r`, `\t` or `\u{..}`, and a backslash is doubled so that an escape in
/// the output always means an escape.
pub fn text(value: &str) -> Escaped<'_> {
    Escaped {
        value,
        spaces: false,
    }
}

/// `value` as it is printed in the node-problem-detector line: as
/// [`text`], and spaces too, since they separate the line's parts.
pub fn npd(value: &str) -> Escaped<'_> {
    Escaped {
        value,
        spaces: true,
    }
}

/// A value displayed escaped; see [`text`] and [`npd`].
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a> {
    value: &'a str,
    spaces: bool,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for c in self.value.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                ' ' if self.spaces => f.write_str("\\u{20}")?,
                c if is_unsafe(c) => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Arabic letter mark, LRM, RLM, embeddings and overrides, isolates.
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            // Line and paragraph separators end a line in some viewers.
            | '\u{2028}' | '\u{2029}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bidi_and_separator_characters_are_escaped_and_the_rest_is_kept() {
        let hostile =
            "a\nsummary: 0 findings\r\x1b[2J\t\u{7f}\u{85}\u{202e}gpj.exe\u{2066}\u{2028}\\é";
        assert_eq!(
            text(hostile).to_string(),
            "a\\nsummary: 0 findings\\r\\u{1b}[2J\\t\\u{7f}\\u{85}\\u{202e}gpj.exe\\u{2066}\\u{2028}\\\\é"
        );
        assert_eq!(
            text("pvc-1 /var/lib/kubelet").to_string(),
            "pvc-1 /var/lib/kubelet"
        );
        assert_eq!(npd("a b=c").to_string(), "a\\u{20}b=c");
    }
}

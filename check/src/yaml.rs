//! YAML inputs, one document at a time.
//!
//! serde_yaml reads a whole stream before it yields the first document, so documents are cut
//! at their `---` and `...` lines here and parsed one by one: memory stays bounded by the
//! largest document.

use std::io::{self, BufRead};

use serde_json::Value;

use crate::input::{InputError, Located, Position};

/// Reads every document of `reader` and hands each object, or each item of a list, to `sink`.
pub(crate) fn read<R: BufRead>(
    mut reader: R,
    sink: &mut dyn FnMut(Located<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut document = Document::default();
    let mut number = 0;
    let mut line = String::new();
    let mut line_number = 0u64;
    let mut offset = 0u64;
    loop {
        line.clear();
        let read = match reader.read_line(&mut line) {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                return Err(InputError::Syntax {
                    position: Position {
                        document: number + 1,
                        line: line_number + 1,
                        column: 1,
                    },
                    message: "stream did not contain valid UTF-8".to_owned(),
                });
            }
            Err(err) => return Err(InputError::Read(err)),
        };
        if read == 0 {
            break;
        }
        line_number += 1;
        offset += read as u64;
        let start = marker(&line, "---");
        if start || marker(&line, "...") {
            document.flush(&mut number, offset, sink)?;
            document = Document {
                first_line: line_number,
                ..Document::default()
            };
            if start {
                // Whatever follows `---` on its line belongs to the new document; blanking the
                // marker keeps its columns.
                document.push(&format!("   {}", &line[3..]), line_number);
            } else {
                document.first_line = line_number + 1;
            }
            continue;
        }
        if document.text.is_empty() && !document.content {
            document.first_line = line_number;
        }
        document.push(&line, line_number);
    }
    document.flush(&mut number, offset, sink)
}

/// A document marker line: `---` or `...`, alone or followed by white space.
fn marker(line: &str, mark: &str) -> bool {
    line.strip_prefix(mark)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

#[derive(Default)]
struct Document {
    text: String,
    /// The input line of the text's first line.
    first_line: u64,
    /// Something other than blank lines and comments.
    content: bool,
    /// The input line where that starts: the position of the document's objects.
    content_line: u64,
}

impl Document {
    fn push(&mut self, line: &str, number: u64) {
        let trimmed = line.trim();
        if !self.content && !trimmed.is_empty() && !trimmed.starts_with('#') {
            self.content = true;
            self.content_line = number;
        }
        self.text.push_str(line);
    }

    /// Parses the document, unless it is empty, and hands its objects to `sink`.
    fn flush(
        &self,
        number: &mut usize,
        offset: u64,
        sink: &mut dyn FnMut(Located<'_>) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        if !self.content {
            return Ok(());
        }
        *number += 1;
        let first_line = self.first_line.max(1);
        let at = |line: u64, column: u64| Position {
            document: *number,
            line: first_line + line.saturating_sub(1),
            column,
        };
        let value: Value = serde_yaml::from_str(&self.text).map_err(|err| {
            let (line, column) = err
                .location()
                .map_or((1, 1), |l| (l.line() as u64, l.column() as u64));
            let text = err.to_string();
            let text = match text.rfind(" at line ") {
                Some(i) if err.location().is_some() => &text[..i],
                _ => &text,
            };
            let message = absolute_lines(text, first_line - 1);
            InputError::Syntax {
                position: at(line, column),
                message,
            }
        })?;
        let position = Position {
            document: *number,
            line: self.content_line,
            column: 1,
        };
        let mut one = |value: &Value| -> Result<(), InputError> {
            let raw = serde_json::value::to_raw_value(value).map_err(|err| InputError::Syntax {
                position,
                message: err.to_string(),
            })?;
            sink(Located {
                raw: &raw,
                position,
                offset,
            })
        };
        match &value {
            Value::Null => Ok(()),
            Value::Array(items) => items.iter().try_for_each(one),
            Value::Object(members) => match members.get("items") {
                Some(Value::Array(items)) => items.iter().try_for_each(one),
                _ => one(&value),
            },
            _ => Err(InputError::Syntax {
                position,
                message: "expected an object or a list".to_owned(),
            }),
        }
    }
}

/// The message with every `line N` in it (libyaml names the mark where a construct began)
/// counted from the start of the input instead of the document.
fn absolute_lines(message: &str, before: u64) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("line ") {
        let (head, tail) = rest.split_at(i + "line ".len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match tail[..digits].parse::<u64>() {
            Ok(line) => out.push_str(&(line + before).to_string()),
            Err(_) => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: &str) -> (Vec<(String, Position)>, Option<String>) {
        let mut seen = Vec::new();
        let result = read(input.as_bytes(), &mut |located| {
            seen.push((located.raw.get().to_owned(), located.position));
            Ok(())
        });
        (seen, result.err().map(|e| e.to_string()))
    }

    fn at(document: usize, line: u64) -> Position {
        Position {
            document,
            line,
            column: 1,
        }
    }

    #[test]
    fn documents_lists_and_errors() {
        let (seen, error) = read_all(
            "# comment\n---\na: 1\n---\n---\n# none\n...\nitems:\n- b: 2\n- c: 3\n--- {d: 4}\n",
        );
        assert_eq!(error, None);
        assert_eq!(
            seen,
            [
                (r#"{"a":1}"#.to_owned(), at(1, 3)),
                (r#"{"b":2}"#.to_owned(), at(2, 8)),
                (r#"{"c":3}"#.to_owned(), at(2, 8)),
                (r#"{"d":4}"#.to_owned(), at(3, 11)),
            ]
        );
        let (seen, error) = read_all("a: 1\n---\nb: [1,\nc: 2\n");
        assert_eq!(seen.len(), 1);
        let error = error.unwrap_or_default();
        assert_eq!(
            error,
            "document 2: line 5 column 1: did not find expected ',' or ']' at line 5 column 1, \
             while parsing a flow sequence"
        );
        let (_, error) = read_all("just a string\n");
        assert_eq!(
            error.as_deref(),
            Some("document 1: line 1 column 1: expected an object or a list")
        );
    }

    #[test]
    fn relative_lines_become_absolute() {
        assert_eq!(
            absolute_lines(
                "did not find expected ',' at line 7 column 5, while parsing",
                4
            ),
            "did not find expected ',' at line 11 column 5, while parsing"
        );
        assert_eq!(absolute_lines("no lines here", 4), "no lines here");
    }
}

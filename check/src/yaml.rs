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
                document.push(&format!("   {}", &line[3..]));
            } else {
                document.first_line = line_number + 1;
            }
            continue;
        }
        if document.text.is_empty() && !document.content {
            document.first_line = line_number;
        }
        document.push(&line);
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
}

impl Document {
    fn push(&mut self, line: &str) {
        let trimmed = line.trim();
        self.content |= !trimmed.is_empty() && !trimmed.starts_with('#');
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
            let message = match text.rfind(" at line ") {
                Some(i) if err.location().is_some() => text[..i].to_owned(),
                _ => text,
            };
            InputError::Syntax {
                position: at(line, column),
                message,
            }
        })?;
        let position = at(1, 1);
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

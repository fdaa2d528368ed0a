//! YAML inputs, one document at a time, and a list's items one at a time.
//!
//! serde_yaml reads a whole stream before it yields the first document, so documents are cut
//! at their `---` and `...` lines here and parsed one by one. A list as `kubectl get -o yaml`
//! prints it is one document, so its top-level `items:` sequence is cut too, at the lines
//! that start its entries (`- ` at the sequence's indentation), and each entry is parsed on its
//! own: memory stays bounded by the largest object, not by the input.

use std::io::{self, BufRead};

use serde_json::Value;

use crate::input::{InputError, Located, Position};

type Sink<'s> = &'s mut dyn FnMut(Located<'_>) -> Result<(), InputError>;

/// Reads every document of `reader` and hands each object, or each item of a list, to `sink`.
pub(crate) fn read<R: BufRead>(mut reader: R, sink: Sink<'_>) -> Result<(), InputError> {
    let mut document = Document::default();
    let mut documents = 0;
    let mut line = String::new();
    let mut number = 0u64;
    let mut offset = 0u64;
    loop {
        line.clear();
        let read = match reader.read_line(&mut line) {
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                return Err(InputError::Syntax {
                    position: Position {
                        document: documents + 1,
                        line: number + 1,
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
        number += 1;
        offset += read as u64;
        let start = marker(&line, "---");
        if start || marker(&line, "...") {
            document.flush(offset, sink)?;
            document = Document::default();
            if start {
                // Whatever follows `---` on its line belongs to the new document; blanking the
                // marker keeps its columns.
                document.push(&format!("   {}", &line[3..]), number, &mut documents);
            }
            continue;
        }
        if let Some(items) = &mut document.items {
            match items.place(&line) {
                Place::Skip => continue,
                Place::Start(indent) => {
                    document.listed = true;
                    if let Some(item) = items.item.take() {
                        item.flush_item(offset, sink)?;
                    }
                    let mut item = Document {
                        number: document.number,
                        ..Document::default()
                    };
                    // The `-` becomes a space: the entry's own columns stay as they were.
                    let text = format!("{} {}", &line[..indent], &line[indent + 1..]);
                    item.push(&text, number, &mut 0);
                    items.item = Some(Box::new(item));
                    continue;
                }
                Place::Continue => {
                    if let Some(item) = &mut items.item {
                        item.push(&line, number, &mut 0);
                    }
                    continue;
                }
                Place::End => {
                    if let Some(item) = items.item.take() {
                        item.flush_item(offset, sink)?;
                    }
                    document.items = None;
                }
            }
        }
        if line.trim_end() == "items:" && !document.listed {
            // A top-level `items:`: a list to stream if entries of a sequence follow.
            document.items = Some(Items::default());
            // Left in the envelope as `items: null`.
            document.push(&line, number, &mut documents);
            continue;
        }
        document.push(&line, number, &mut documents);
    }
    document.flush(offset, sink)
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
    /// The document's number, given when its content starts.
    number: usize,
    /// The entries of a top-level `items:` being read.
    items: Option<Items>,
    /// Its `items` were streamed (at least one entry): the rest of it is the list's envelope.
    listed: bool,
}

/// The entries of a top-level `items:` sequence, one at a time.
#[derive(Default)]
struct Items {
    /// The column of the entries' `-`, known at the first entry.
    indent: Option<usize>,
    item: Option<Box<Document>>,
}

enum Place {
    /// A blank line or a comment before the first entry.
    Skip,
    /// The first line of an entry, its `-` at this column.
    Start(usize),
    /// A line of the current entry.
    Continue,
    /// The first line after the sequence.
    End,
}

impl Items {
    fn place(&mut self, line: &str) -> Place {
        let trimmed = line.trim();
        let blank = trimmed.is_empty() || trimmed.starts_with('#');
        let indent = line.len() - line.trim_start_matches(' ').len();
        let entry = trimmed == "-" || line[indent..].starts_with("- ");
        match self.indent {
            None if blank => Place::Skip,
            None if entry => {
                self.indent = Some(indent);
                Place::Start(indent)
            }
            Some(n) if entry && indent == n => Place::Start(indent),
            Some(n) if blank || indent > n => Place::Continue,
            _ => Place::End,
        }
    }
}

impl Document {
    fn push(&mut self, line: &str, number: u64, documents: &mut usize) {
        if self.text.is_empty() {
            self.first_line = number;
        }
        let trimmed = line.trim();
        if !self.content && !trimmed.is_empty() && !trimmed.starts_with('#') {
            self.content = true;
            self.content_line = number;
            *documents += 1;
            if self.number == 0 {
                self.number = *documents;
            }
        }
        self.text.push_str(line);
    }

    /// Parses the text as YAML.
    fn parse(&self) -> Result<Value, InputError> {
        let first_line = self.first_line.max(1);
        serde_yaml::from_str(&self.text).map_err(|err| {
            let (line, column) = err
                .location()
                .map_or((1, 1), |l| (l.line() as u64, l.column() as u64));
            let text = err.to_string();
            let text = match text.rfind(" at line ") {
                Some(i) if err.location().is_some() => &text[..i],
                _ => &text,
            };
            InputError::Syntax {
                position: Position {
                    document: self.number,
                    line: first_line + line.saturating_sub(1),
                    column,
                },
                message: absolute_lines(text, first_line - 1),
            }
        })
    }

    fn position(&self) -> Position {
        Position {
            document: self.number,
            line: self.content_line,
            column: 1,
        }
    }

    /// Parses the document, unless it is empty, and hands its objects to `sink`.
    fn flush(&mut self, offset: u64, sink: Sink<'_>) -> Result<(), InputError> {
        if let Some(item) = self.items.take().and_then(|items| items.item) {
            item.flush_item(offset, sink)?;
        }
        if !self.content {
            return Ok(());
        }
        let value = self.parse()?;
        if self.listed {
            // The envelope of a list whose items were streamed: checked to be YAML, no more.
            return Ok(());
        }
        let position = self.position();
        let mut one = |value: &Value| send(value, position, offset, sink);
        match &value {
            Value::Null => Ok(()),
            Value::Array(items) => items.iter().try_for_each(&mut one),
            Value::Object(members) => match members.get("items") {
                Some(Value::Array(items)) => items.iter().try_for_each(&mut one),
                _ => one(&value),
            },
            _ => Err(InputError::Syntax {
                position,
                message: "expected an object or a list".to_owned(),
            }),
        }
    }

    /// Parses one entry of a streamed list and hands it to `sink`.
    fn flush_item(&self, offset: u64, sink: Sink<'_>) -> Result<(), InputError> {
        if !self.content {
            return Ok(());
        }
        send(&self.parse()?, self.position(), offset, sink)
    }
}

fn send(value: &Value, position: Position, offset: u64, sink: Sink<'_>) -> Result<(), InputError> {
    let raw = serde_json::value::to_raw_value(value).map_err(|err| InputError::Syntax {
        position,
        message: err.to_string(),
    })?;
    sink(Located {
        raw: &raw,
        position,
        offset,
    })
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
                (r#"{"b":2}"#.to_owned(), at(2, 9)),
                (r#"{"c":3}"#.to_owned(), at(2, 10)),
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
    fn a_kubectl_list_is_read_entry_by_entry() {
        let list = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n  spec:\n    containers:\n    - name: c\n      args:\n      - |\n        x\n# a comment\n- kind: Pod\n  metadata: {name: b}\nkind: List\nmetadata:\n  resourceVersion: \"\"\n---\nitems:\n  - kind: Pod\n\n    metadata:\n      name: c\n  -\n    kind: Pod\n";
        let (seen, error) = read_all(list);
        assert_eq!(error, None);
        let objects: Vec<(&str, u64)> = seen.iter().map(|(t, p)| (t.as_str(), p.line)).collect();
        assert_eq!(
            objects,
            [
                (
                    r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"args":["x\n"],"name":"c"}]}}"#,
                    3
                ),
                (r#"{"kind":"Pod","metadata":{"name":"b"}}"#, 14),
                (r#"{"kind":"Pod","metadata":{"name":"c"}}"#, 21),
                (r#"{"kind":"Pod"}"#, 26),
            ]
        );
        assert_eq!(seen[3].1.document, 2);
        // `items` that are not a sequence are a member like any other.
        let (seen, error) = read_all("kind: Thing\nitems:\n  a: 1\n");
        assert_eq!(error, None);
        assert_eq!(seen[0].0, r#"{"items":{"a":1},"kind":"Thing"}"#);
        // An error in an entry is placed in the input.
        let (seen, error) = read_all("items:\n- kind: Pod\n- kind: [Pod\n  x: 1\nkind: List\n");
        assert_eq!(seen.len(), 1);
        assert!(
            error
                .unwrap_or_default()
                .starts_with("document 1: line 4 column ")
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

//! A JSON stream read value by value, and a list's `items` element by element.
//!
//! `kubectl get -o json` prints one object, or one `List` holding every object, so a cluster
//! dump is a single JSON value of any size. serde_json reads a value from a reader only whole,
//! so the stream is read in chunks into a buffer instead, and serde_json parses one element of
//! `items` at a time from the buffer (which gives each its fast, borrowing slice parser and its
//! own line and column for errors). Processed bytes are dropped from the front of the buffer, so
//! memory stays bounded by the largest single element plus one chunk.
//!
//! The bytes between values (white space, `:`, `,`, brackets) are JSON's own grammar, read
//! here; every value, member name included, is parsed by serde_json. Whether a document is a
//! list is [`Envelope`]'s rule, shared with YAML, and no object may name a member twice.

use std::borrow::Cow;
use std::io::Read;

use serde_json::value::RawValue;
use volume_health_validation::json::{Borrowed, message_without_position};

use super::list::{Envelope, duplicate};
use super::{InputError, Located, Position};

/// Bytes read at once; also the least a retry after a cut-off value waits for.
const CHUNK: usize = 1 << 20;

/// Reads every top-level value of `reader` and hands each object, or each element of a list's
/// `items`, to `sink`.
pub(crate) fn read<R: Read>(
    reader: R,
    sink: &mut dyn FnMut(Located<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    Stream::new(reader, CHUNK).run(sink)
}

struct Stream<R> {
    reader: R,
    /// Bytes to read at once (small in tests, to cut values at every place).
    chunk: usize,
    buf: Vec<u8>,
    /// The next byte to read in `buf`.
    pos: usize,
    /// The reader has reported its end.
    eof: bool,
    /// Bytes dropped from the front of `buf` so far.
    dropped: u64,
    /// Line and column (1-based) of `buf[0]`.
    line0: u64,
    column0: u64,
    /// Line and column of `buf[counted]`: value starts are counted forward from there, so the
    /// whole input is counted once.
    line: u64,
    column: u64,
    counted: usize,
    /// The 1-based number of the top-level value being read.
    document: usize,
}

/// What one parse attempt at the cursor gave.
enum Step {
    Done(usize),
    More,
    Failed(InputError),
}

type Sink<'s> = &'s mut dyn FnMut(Located<'_>) -> Result<(), InputError>;

impl<R: Read> Stream<R> {
    fn new(reader: R, chunk: usize) -> Self {
        Stream {
            reader,
            chunk,
            buf: Vec::new(),
            pos: 0,
            eof: false,
            dropped: 0,
            line0: 1,
            column0: 1,
            line: 1,
            column: 1,
            counted: 0,
            document: 0,
        }
    }

    fn run(&mut self, sink: Sink<'_>) -> Result<(), InputError> {
        loop {
            self.compact();
            let Some(first) = self.skip_whitespace()? else {
                return Ok(());
            };
            self.document += 1;
            match first {
                b'[' => {
                    self.pos += 1;
                    self.items(sink)?;
                }
                b'{' => self.object(sink)?,
                _ => {
                    let at = self.pos;
                    self.value(&mut |_| Ok(()))?;
                    return Err(self.error_at(at, "expected an object or a list".to_owned()));
                }
            }
        }
    }

    /// A top-level object: a list when it has an array `items` (as every `kind: List` and
    /// `*List` has), else one object; [`Envelope`] decides, as for YAML.
    fn object(&mut self, sink: Sink<'_>) -> Result<(), InputError> {
        let start = self.pos;
        let position = self.position_ahead(start);
        self.pos += 1;
        let mut envelope = Envelope::default();
        if self.open(b'}', "a member name or `}`")? {
            loop {
                if self.skip_whitespace()? != Some(b'"') {
                    return Err(self.error_at(self.pos, "expected a member name".to_owned()));
                }
                let at = self.pos;
                let mut key = String::new();
                self.value(&mut |member| {
                    // A string, so this cannot fail.
                    key = serde_json::from_str::<Cow<'_, str>>(member.raw.get())
                        .map(Cow::into_owned)
                        .unwrap_or_default();
                    Ok(())
                })?;
                envelope
                    .member(&key)
                    .map_err(|message| self.error_at(at, message))?;
                if self.skip_whitespace()? != Some(b':') {
                    return Err(self.error_at(self.pos, "expected `:`".to_owned()));
                }
                self.pos += 1;
                self.skip_whitespace()?;
                let at = self.pos;
                if key == "items" && self.skip_whitespace()? == Some(b'[') {
                    envelope
                        .stream_items()
                        .map_err(|message| self.error_at(at, message))?;
                    self.pos += 1;
                    self.items(sink)?;
                } else if key == "kind" {
                    let mut kind = None;
                    self.value(&mut |member| {
                        kind = serde_json::from_str::<Cow<'_, str>>(member.raw.get())
                            .map(Cow::into_owned)
                            .ok();
                        Ok(())
                    })?;
                    if let Some(kind) = kind {
                        envelope
                            .kind(&kind)
                            .map_err(|message| self.error_at(at, message))?;
                    }
                } else {
                    self.value(&mut |_| Ok(()))?;
                }
                match self.skip_whitespace()? {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => {
                        return Err(self.error_at(self.pos, "expected `,` or `}`".to_owned()));
                    }
                }
            }
        }
        if envelope.is_list() {
            return Ok(());
        }
        // One object. Only lists compact the buffer, so its text is still all there.
        let raw: &RawValue = match serde_json::from_slice(&self.buf[start..self.pos]) {
            Ok(raw) => raw,
            Err(err) => return Err(self.serde_error(start, &err)),
        };
        refuse_duplicates(raw).map_err(|err| self.serde_error(start, &err))?;
        sink(Located {
            raw,
            position,
            offset: self.dropped + self.pos as u64,
        })
    }

    /// Elements of a list, after its `[`, up to and including its `]`.
    fn items(&mut self, sink: Sink<'_>) -> Result<(), InputError> {
        if !self.open(b']', "a value or `]`")? {
            return Ok(());
        }
        loop {
            self.compact();
            let start = self.pos;
            let mut duplicate = None;
            self.value(&mut |located| match refuse_duplicates(located.raw) {
                Ok(()) => sink(located),
                Err(err) => {
                    duplicate = Some(err);
                    Ok(())
                }
            })?;
            if let Some(err) = duplicate {
                return Err(self.serde_error(start, &err));
            }
            match self.skip_whitespace()? {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.error_at(self.pos, "expected `,` or `]`".to_owned())),
            }
        }
    }

    /// After an opening bracket: `Ok(false)`, consumed, when the next byte is `close`.
    fn open(&mut self, close: u8, expected: &str) -> Result<bool, InputError> {
        match self.skip_whitespace()? {
            Some(b) if b == close => {
                self.pos += 1;
                Ok(false)
            }
            Some(_) => Ok(true),
            None => Err(self.error_at(self.pos, format!("EOF while expecting {expected}"))),
        }
    }

    /// Parses the value at the cursor with serde_json and hands it to `sink`; reads more of the
    /// input when the buffer ends inside the value.
    fn value(&mut self, sink: Sink<'_>) -> Result<(), InputError> {
        if self.skip_whitespace()?.is_none() {
            return Err(self.error_at(self.pos, "EOF while parsing a value".to_owned()));
        }
        let start = self.pos;
        let position = self.position_ahead(start);
        loop {
            let step = {
                let mut stream = serde_json::Deserializer::from_slice(&self.buf[start..])
                    .into_iter::<&RawValue>();
                match stream.next() {
                    Some(Ok(raw)) => {
                        let end = start + stream.byte_offset();
                        match sink(Located {
                            raw,
                            position,
                            offset: self.dropped + end as u64,
                        }) {
                            Ok(()) => Step::Done(end),
                            Err(err) => Step::Failed(err),
                        }
                    }
                    Some(Err(err)) if err.is_eof() && !self.eof => Step::More,
                    Some(Err(err)) => Step::Failed(self.serde_error(start, &err)),
                    // Not after a byte that is not white space; kept finite all the same.
                    None if self.eof => {
                        Step::Failed(self.error_at(start, "EOF while parsing a value".to_owned()))
                    }
                    None => Step::More,
                }
            };
            match step {
                Step::Done(end) => {
                    self.pos = end;
                    return Ok(());
                }
                Step::Failed(err) => return Err(err),
                Step::More => {
                    // Wait for as much again as is pending, so that a huge value is parsed
                    // a bounded number of times.
                    let pending = self.buf.len() - start;
                    self.fill(pending.max(self.chunk))?;
                }
            }
        }
    }

    /// Skips whitespace, reading more as needed; the next byte, or `None` at the end.
    fn skip_whitespace(&mut self) -> Result<Option<u8>, InputError> {
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if self.eof {
                return Ok(None);
            }
            self.fill(self.chunk)?;
        }
    }

    /// Reads at least `want` more bytes, or up to the end of the input.
    fn fill(&mut self, want: usize) -> Result<(), InputError> {
        if self.eof {
            return Ok(());
        }
        let want = want.max(self.chunk) as u64;
        // `read_to_end` on a `Take` reads into spare capacity without zeroing it first.
        let read = (&mut self.reader)
            .take(want)
            .read_to_end(&mut self.buf)
            .map_err(InputError::Read)?;
        self.eof = (read as u64) < want;
        Ok(())
    }

    /// Drops the bytes before the cursor once they are a good part of the buffer.
    fn compact(&mut self) {
        if self.pos < self.chunk || self.pos < self.buf.len() / 2 {
            return;
        }
        self.position_ahead(self.pos);
        self.buf.drain(..self.pos);
        self.dropped += self.pos as u64;
        (self.line0, self.column0, self.counted) = (self.line, self.column, 0);
        self.pos = 0;
    }

    /// The position of `buf[at]`, for `at` at or after the last position asked for this way.
    fn position_ahead(&mut self, at: usize) -> Position {
        (self.line, self.column) = advance(self.line, self.column, &self.buf[self.counted..at]);
        self.counted = at;
        Position {
            document: self.document,
            line: self.line,
            column: self.column,
        }
    }

    /// The position of `buf[at]`, anywhere in the buffer.
    fn position(&self, at: usize) -> Position {
        let (line, column) = if at >= self.counted {
            advance(self.line, self.column, &self.buf[self.counted..at])
        } else {
            advance(self.line0, self.column0, &self.buf[..at])
        };
        Position {
            document: self.document,
            line,
            column,
        }
    }

    fn error_at(&self, at: usize, message: String) -> InputError {
        InputError::Syntax {
            position: self.position(at.min(self.buf.len())),
            message,
        }
    }

    /// A serde_json error in a parse that started at `buf[start]`, with its line and column
    /// made absolute.
    fn serde_error(&self, start: usize, err: &serde_json::Error) -> InputError {
        let base = self.position(start);
        let (line, column) = if err.line() <= 1 {
            (
                base.line,
                base.column + (err.column() as u64).saturating_sub(1),
            )
        } else {
            (base.line + err.line() as u64 - 1, err.column() as u64)
        };
        InputError::Syntax {
            position: Position {
                document: base.document,
                line,
                column,
            },
            message: message_without_position(err),
        }
    }
}

/// The line and column after `bytes`, from `line` and `column` before them.
fn advance(line: u64, column: u64, bytes: &[u8]) -> (u64, u64) {
    match memchr::memrchr(b'\n', bytes) {
        None => (line, column + bytes.len() as u64),
        Some(last) => (
            line + memchr::memchr_iter(b'\n', bytes).count() as u64,
            (bytes.len() - last) as u64,
        ),
    }
}

/// Fails on the first member given twice in any object of `raw`, at any depth (serde_json
/// keeps the last of them, strict decoding refuses them; YAML's parser refuses them too).
/// Keys are compared as decoded, so `"kin\u0064"` is `"kind"`.
pub(crate) fn refuse_duplicates(raw: &RawValue) -> Result<(), serde_json::Error> {
    serde_json::from_str::<Unique>(raw.get()).map(|_| ())
}

/// Any JSON value whose objects have no member twice.
struct Unique;

/// Objects with more members than this keep their names in a set rather than a list.
const FEW_MEMBERS: usize = 16;

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut few: Vec<Cow<'de, str>> = Vec::new();
        let mut many: std::collections::HashSet<Cow<'de, str>> = Default::default();
        while let Some(Borrowed(key)) = map.next_key::<Borrowed<'de>>()? {
            if few.contains(&key) || many.contains(&key) {
                return Err(serde::de::Error::custom(duplicate(&key)));
            }
            map.next_value::<Unique>()?;
            if many.is_empty() && few.len() < FEW_MEMBERS {
                few.push(key);
            } else {
                many.extend(few.drain(..));
                many.insert(key);
            }
        }
        Ok(Unique)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object read: its text, line, column and document.
    type Seen<S> = (S, u64, u64, usize);

    /// What a read gives: each object's text and position, then the error if any.
    fn objects(input: &str, chunk: usize) -> (Vec<Seen<String>>, Option<String>) {
        let mut seen = Vec::new();
        let result = Stream::new(input.as_bytes(), chunk).run(&mut |located| {
            let p = located.position;
            seen.push((located.raw.get().to_owned(), p.line, p.column, p.document));
            Ok(())
        });
        (seen, result.err().map(|e| e.to_string()))
    }

    const LIST: &str = "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {\"kind\": \"Pod\", \"a\": [1, {\"b\": \"]}\\\"\"}]},\n    {\"kind\": \"PersistentVolumeClaim\"}\n  ],\n  \"kind\": \"List\",\n  \"metadata\": {\"resourceVersion\": \"\"}\n}\n";

    #[test]
    fn a_list_is_read_item_by_item_with_positions_at_any_chunk_size() {
        for chunk in [1, 2, 3, 7, 16, 64, CHUNK] {
            let (seen, error) = objects(LIST, chunk);
            assert_eq!(error, None, "chunk {chunk}");
            assert_eq!(
                seen,
                [
                    (
                        r#"{"kind": "Pod", "a": [1, {"b": "]}\""}]}"#.to_owned(),
                        4,
                        5,
                        1
                    ),
                    (r#"{"kind": "PersistentVolumeClaim"}"#.to_owned(), 5, 5, 1),
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn inputs() {
        type Case<'a> = (&'a str, &'a str, &'a [Seen<&'a str>], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (
                "one object",
                r#" {"kind": "Pod"} "#,
                &[(r#"{"kind": "Pod"}"#, 1, 2, 1)],
                None,
            ),
            (
                "objects one after the other",
                "{\"a\":1}\n{\"b\":2}{\"c\":3}",
                &[
                    ("{\"a\":1}", 1, 1, 1),
                    ("{\"b\":2}", 2, 1, 2),
                    ("{\"c\":3}", 2, 8, 3),
                ],
                None,
            ),
            (
                "a top-level array is a list",
                "[{\"a\":1}, {\"b\":2}]",
                &[("{\"a\":1}", 1, 2, 1), ("{\"b\":2}", 1, 11, 1)],
                None,
            ),
            (
                "an empty list",
                r#"{"kind": "List", "items": []}"#,
                &[],
                None,
            ),
            ("empty input", " \n ", &[], None),
            (
                "items that are not an array are an object's member",
                r#"{"kind": "Thing", "items": {"a": 1}}"#,
                &[(r#"{"kind": "Thing", "items": {"a": 1}}"#, 1, 1, 1)],
                None,
            ),
            (
                "a syntax error in an item, with its line and column",
                "{\"items\": [\n  {\"a\": 1},\n  {\"b\": tru}\n]}",
                &[("{\"a\": 1}", 2, 3, 1)],
                Some("document 1: line 3 column 12: expected ident"),
            ),
            (
                "a cut-off list",
                "{\"items\": [{\"a\": 1}",
                &[("{\"a\": 1}", 1, 12, 1)],
                Some("document 1: line 1 column 20: expected `,` or `]`"),
            ),
            (
                "a cut-off object",
                "{\"kind\": \"Pod\",\n \"x\": ",
                &[],
                Some("document 1: line 2 column 7: EOF while parsing a value"),
            ),
            (
                "a scalar document",
                "{\"a\": 1}\n42\n",
                &[("{\"a\": 1}", 1, 1, 1)],
                Some("document 2: line 2 column 1: expected an object or a list"),
            ),
            (
                "not JSON after a value",
                "{\"a\": 1} kind: Pod",
                &[("{\"a\": 1}", 1, 1, 1)],
                Some("document 2: line 1 column 10: expected value"),
            ),
        ];
        for (name, input, want, want_error) in cases {
            for chunk in [1, 5, CHUNK] {
                let (seen, error) = objects(input, chunk);
                let seen: Vec<Seen<&str>> = seen
                    .iter()
                    .map(|(t, l, c, d)| (t.as_str(), *l, *c, *d))
                    .collect();
                assert_eq!(seen, *want, "{name}, chunk {chunk}");
                assert_eq!(error.as_deref(), *want_error, "{name}, chunk {chunk}");
            }
        }
    }

    #[test]
    fn processed_items_leave_the_buffer() {
        let item = r#"{"kind": "Pod", "metadata": {"name": "web"}}"#;
        let mut input = String::from(r#"{"items": ["#);
        for i in 0..2000 {
            if i > 0 {
                input.push(',');
            }
            input.push_str(item);
        }
        input.push_str("]}");
        let mut stream = Stream::new(input.as_bytes(), 256);
        let mut count = 0;
        stream
            .run(&mut |_| {
                count += 1;
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let largest = stream.buf.capacity();
        assert_eq!(count, 2000);
        assert!(
            largest < 4 * 1024,
            "buffer grew to {largest} bytes for a {} byte input",
            input.len()
        );
    }
}

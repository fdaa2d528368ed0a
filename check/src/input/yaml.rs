//! YAML inputs: every document, and a list's items one at a time, read by serde-saphyr and
//! written out as JSON text for the checks.
//!
//! The parser reads events from the input as it goes, so a list of any size needs memory for
//! one item: each entry of a top-level `items` sequence (or of a top-level sequence) is
//! written out and handed on as soon as it has been read. serde-saphyr hands documents only to
//! types it builds itself, so it runs on a thread of its own and sends each object over a
//! short queue; the queue bounds what is held, and the checks run on the caller's thread.
//!
//! Its budgets make every input cost time and memory in proportion to its size: anchors and
//! aliases are refused (kubectl never writes them, and an alias repeats what it names, so a
//! few kilobytes could stand for gigabytes), as are merge keys, which need them; nesting stops
//! at [`MAX_DEPTH`] as it is read; a member given twice is refused anywhere, as strict
//! decoding refuses it.

use std::cell::RefCell;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_saphyr::{DuplicateKeyPolicy, MergeKeyPolicy, NonFiniteFloatPolicy, Spanned};

use super::list::Envelope;
use super::{InputError, Located, Position};

type Sink<'s> = &'s mut dyn FnMut(Located<'_>) -> Result<(), InputError>;

/// How deeply collections may nest, as serde_json's own limit: an object deeper than this
/// could not be checked anyway.
pub(crate) const MAX_DEPTH: usize = 128;

/// The parser thread's stack (address space; only what is used is memory).
const PARSER_STACK: usize = 64 << 20;

/// Objects read ahead of the checks.
const QUEUE: usize = 4;

/// What the parser's thread sends.
enum Message {
    /// An object, as JSON text.
    Object {
        text: String,
        position: Position,
        offset: u64,
    },
    /// The error that ends the input.
    Failed(InputError),
}

/// Reads every document of `reader` and hands each object, or each item of a list, to `sink`.
pub(crate) fn read<R: Read + Send>(reader: R, sink: Sink<'_>) -> Result<(), InputError> {
    let consumed = Arc::new(AtomicU64::new(0));
    let (tx, rx) = sync_channel(QUEUE);
    std::thread::scope(|scope| {
        let counted = Counted {
            reader,
            consumed: Arc::clone(&consumed),
        };
        // Nesting is bounded by MAX_DEPTH, but each level is several frames of the parser's
        // and the visitors' (large ones in a debug build): a stack of its own, of room for all.
        let parser = std::thread::Builder::new()
            .name("yaml".to_owned())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, move || parse(counted, tx, consumed))
            .map_err(InputError::Read)?;
        let mut result = Ok(());
        for message in rx.iter() {
            let outcome = match message {
                Message::Object {
                    text,
                    position,
                    offset,
                } => match RawValue::from_string(text) {
                    Ok(raw) => sink(Located {
                        raw: &raw,
                        position,
                        offset,
                    }),
                    Err(err) => Err(InputError::Syntax {
                        position,
                        message: err.to_string(),
                    }),
                },
                Message::Failed(err) => Err(err),
            };
            if let Err(err) = outcome {
                result = Err(err);
                break;
            }
        }
        // The parser stops at its next send once nobody receives.
        drop(rx);
        if let Err(panic) = parser.join() {
            std::panic::resume_unwind(panic);
        }
        result
    })
}

/// The parser's options: budgets for every shape of input, per document, none on its size.
fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = None;
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_total_scalar_bytes = usize::MAX;
    budget.max_documents = usize::MAX;
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    budget.max_aliases = 0;
    budget.max_anchors = 0;
    budget.max_recorded_anchor_events = 0;
    budget.max_recorded_anchor_bytes = 0;
    budget.max_merge_keys = 0;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.merge_keys = MergeKeyPolicy::Error;
    options.non_finite_float_policy = NonFiniteFloatPolicy::PassThrough;
    options.ignore_binary_tag_for_string = true;
    // YAML 1.1 scalars, as kubectl's YAML reader takes them: `0755` is octal, `yes` and `y`
    // are true.
    options.legacy_octal_numbers = true;
    options.with_snippet = false;
    options
}

/// Where the parser's thread sends objects, and what it counts.
struct Out {
    tx: SyncSender<Message>,
    consumed: Arc<AtomicU64>,
    document: usize,
}

thread_local! {
    /// The parser builds documents through `Deserialize`, which takes no arguments: this is
    /// how they reach the queue. Set only on the parser's own thread.
    static OUT: RefCell<Option<Out>> = const { RefCell::new(None) };
}

/// The receiver is gone: the checks stopped.
const STOPPED: &str = "stopped";

fn parse<R: Read>(mut reader: R, tx: SyncSender<Message>, consumed: Arc<AtomicU64>) {
    OUT.with_borrow_mut(|out| {
        *out = Some(Out {
            tx: tx.clone(),
            consumed,
            document: 0,
        })
    });
    for result in serde_saphyr::read_with_options::<_, Spanned<Document>>(&mut reader, options()) {
        let message = match result {
            Ok(Spanned {
                value: Document(None),
                ..
            }) => continue,
            Ok(Spanned {
                value: Document(Some(text)),
                referenced,
                ..
            }) => Message::Object {
                text,
                position: position(referenced.line(), referenced.column()),
                offset: offset(),
            },
            Err(err) => Message::Failed(error(&err)),
        };
        let failed = matches!(message, Message::Failed(_));
        if tx.send(message).is_err() || failed {
            break;
        }
    }
    OUT.with_borrow_mut(|out| *out = None);
}

/// Where an object or an error is, in the document being read.
fn position(line: u64, column: u64) -> Position {
    Position {
        document: OUT
            .with_borrow(|out| out.as_ref().map_or(0, |out| out.document))
            .max(1),
        line: line.max(1),
        column: column.max(1),
    }
}

fn offset() -> u64 {
    OUT.with_borrow(|out| {
        out.as_ref()
            .map_or(0, |out| out.consumed.load(Ordering::Relaxed))
    })
}

/// The parser's error, placed in the input.
fn error(err: &serde_saphyr::Error) -> InputError {
    let (line, column) = err.location().map_or((1, 1), |l| (l.line(), l.column()));
    let mut message = err.without_snippet().to_string();
    // The position is reported on its own.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    // The parser's words for its budgets are about its options; these are about the input.
    let message = if message.contains("Anchors {") || message.contains("Aliases {") {
        "YAML anchors and aliases are not read (kubectl never writes them, and one alias can \
         stand for any amount of data): write the values out"
            .to_owned()
    } else if message.contains("Depth {") || message.contains("recursion limit") {
        format!("nested more than {MAX_DEPTH} levels deep")
    } else if message.contains("merge key") {
        "YAML merge keys (`<<`) are not read: write the members out".to_owned()
    } else if let Some(rest) = message.strip_prefix("duplicate mapping key: ") {
        let key = rest
            .split(", set DuplicateKeyPolicy")
            .next()
            .unwrap_or(rest);
        super::list::duplicate(key)
    } else if let serde_saphyr::Error::IOError { cause } = err {
        if cause.kind() == io::ErrorKind::InvalidData {
            "stream did not contain valid UTF-8".to_owned()
        } else {
            cause.to_string()
        }
    } else {
        message
    };
    InputError::Syntax {
        position: position(line, column),
        message,
    }
}

/// Hands an object to the checks; fails once they stopped.
fn send<E: de::Error>(text: Vec<u8>, line: u64, column: u64) -> Result<(), E> {
    let text = String::from_utf8(text).map_err(E::custom)?;
    let message = Message::Object {
        text,
        position: position(line, column),
        offset: offset(),
    };
    OUT.with_borrow(|out| match out {
        Some(out) => out.tx.send(message).map_err(|_| E::custom(STOPPED)),
        None => Err(E::custom(STOPPED)),
    })
}

/// One document: the object's JSON text, or `None` for a list, whose items were sent.
struct Document(Option<String>);

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        OUT.with_borrow_mut(|out| {
            if let Some(out) = out {
                out.document += 1;
            }
        });
        deserializer.deserialize_any(DocumentVisitor)
    }
}

struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Document;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object or a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut envelope = Envelope::default();
        let mut out = vec![b'{'];
        while let Some(key) = map.next_key_seed(KeySeed)? {
            envelope.member(&key).map_err(de::Error::custom)?;
            if out.len() > 1 {
                out.push(b',');
            }
            write_string(&mut out, &key);
            out.push(b':');
            let start = out.len();
            let list = (key == "items").then_some(&mut envelope);
            map.next_value_seed(Json {
                out: &mut out,
                list,
            })?;
            if key == "kind"
                && let Ok(kind) = serde_json::from_slice::<String>(&out[start..])
            {
                envelope.kind(&kind).map_err(de::Error::custom)?;
            }
        }
        if envelope.is_list() {
            return Ok(Document(None));
        }
        out.push(b'}');
        String::from_utf8(out)
            .map(|text| Document(Some(text)))
            .map_err(de::Error::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Document, A::Error> {
        stream(seq)?;
        Ok(Document(None))
    }
}

/// Sends every entry of a list as an object of its own.
fn stream<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while let Some(item) = seq.next_element::<Spanned<Item>>()? {
        send(
            item.value.0,
            item.referenced.line(),
            item.referenced.column(),
        )?;
    }
    Ok(())
}

/// Any value, as JSON text.
struct Item(Vec<u8>);

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut out = Vec::new();
        Json {
            out: &mut out,
            list: None,
        }
        .deserialize(deserializer)?;
        Ok(Item(out))
    }
}

/// Writes a value as JSON to `out`. With `list`, a sequence is a list's items, sent one by
/// one, and written as `null`.
struct Json<'o> {
    out: &'o mut Vec<u8>,
    list: Option<&'o mut Envelope>,
}

impl<'de> DeserializeSeed<'de> for Json<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

fn write_string(out: &mut Vec<u8>, text: &str) {
    // Room for the common case of no escapes: a long scalar then costs its length once more,
    // not the doubling of a growing buffer.
    out.reserve(text.len() + 2);
    // Writing to a Vec cannot fail, and a str is always serializable.
    let _ = serde_json::to_writer(out, text);
}

fn write_display(out: &mut Vec<u8>, value: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = write!(out, "{value}");
}

impl<'de> Visitor<'de> for Json<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<(), E> {
        write_display(self.out, value);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<(), E> {
        write_display(self.out, value);
        Ok(())
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<(), E> {
        write_display(self.out, value);
        Ok(())
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<(), E> {
        write_display(self.out, value);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<(), E> {
        // JSON has no NaN or infinity: null, as serde_json writes them.
        let _ = serde_json::to_writer(&mut *self.out, &value);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        write_string(self.out, value);
        Ok(())
    }

    fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<(), E> {
        write_string(self.out, &String::from_utf8_lossy(value));
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(envelope) = self.list {
            envelope.stream_items().map_err(de::Error::custom)?;
            stream(seq)?;
            self.out.extend_from_slice(b"null");
            return Ok(());
        }
        self.out.push(b'[');
        let mut first = true;
        loop {
            let mark = self.out.len();
            if !first {
                self.out.push(b',');
            }
            let seed = Json {
                out: &mut *self.out,
                list: None,
            };
            if seq.next_element_seed(seed)?.is_none() {
                self.out.truncate(mark);
                break;
            }
            first = false;
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.out.push(b'{');
        let mut first = true;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if !first {
                self.out.push(b',');
            }
            first = false;
            write_string(self.out, &key);
            self.out.push(b':');
            map.next_value_seed(Json {
                out: &mut *self.out,
                list: None,
            })?;
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// A mapping key as JSON names it: a string, or a scalar's text (`1: a` is `{"1": "a"}`, as
/// kubectl converts it).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a scalar mapping key")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<String, E> {
        Ok(value.to_string())
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        Ok(value.to_owned())
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<String, E> {
        Ok(value)
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }

    fn visit_none<E: de::Error>(self) -> Result<String, E> {
        self.visit_unit()
    }
}

/// Counts the bytes read, for progress.
struct Counted<R> {
    reader: R,
    consumed: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reader.read(buf)?;
        self.consumed.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
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

    fn at(document: usize, line: u64, column: u64) -> Position {
        Position {
            document,
            line,
            column,
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
                (r#"{"a":1}"#.to_owned(), at(1, 3, 1)),
                (r#"{"b":2}"#.to_owned(), at(2, 9, 3)),
                (r#"{"c":3}"#.to_owned(), at(2, 10, 3)),
                (r#"{"d":4}"#.to_owned(), at(3, 11, 5)),
            ]
        );
        let (seen, error) = read_all("a: 1\n---\nb: [1,\nc: 2\n");
        assert_eq!(seen.len(), 1);
        let error = error.unwrap_or_default();
        assert!(error.starts_with("document 2: line "), "{error}");
        let (_, error) = read_all("just a string\n");
        assert!(
            error
                .as_deref()
                .unwrap_or_default()
                .starts_with("document 1: "),
            "{error:?}"
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
                    r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","args":["x\n"]}]}}"#,
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
        assert_eq!(seen[0].0, r#"{"kind":"Thing","items":{"a":1}}"#);
        // An error in an entry is placed in the input, after the entries before it.
        let (seen, error) = read_all("items:\n- kind: Pod\n- kind: [Pod\n  x: 1\nkind: List\n");
        assert_eq!(seen.len(), 1);
        assert!(
            error
                .unwrap_or_default()
                .starts_with("document 1: line 4 column ")
        );
    }
}

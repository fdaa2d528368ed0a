//! Where objects come from: files, directories and standard input, as JSON or YAML, one object
//! at a time.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::value::RawValue;

pub(crate) mod json;
mod list;
mod yaml;

/// Where an object, or a syntax error, starts in its input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Position {
    /// The 1-based number of the document (a YAML document, or a top-level JSON value).
    pub document: usize,
    /// The 1-based line.
    pub line: u64,
    /// The 1-based column: in bytes for JSON, in characters for YAML (as its parser counts).
    pub column: u64,
}

/// One object read from an input, as JSON text.
#[derive(Clone, Copy, Debug)]
pub struct Located<'a> {
    /// The object.
    pub raw: &'a RawValue,
    /// Where it starts.
    pub position: Position,
    /// Bytes of the input read up to the end of it, for progress.
    pub offset: u64,
}

/// Why an input could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Reading failed.
    #[error("{0}")]
    Read(#[source] io::Error),
    /// The input is not JSON or YAML, or a document in it is not an object or a list.
    #[error("document {}: line {} column {}: {message}", position.document, position.line, position.column)]
    Syntax {
        /// Where the parser stopped.
        position: Position,
        /// The parser's message.
        message: String,
    },
    /// Writing the report failed.
    #[error("writing the report: {0}")]
    Output(#[source] io::Error),
}

/// An input to check: a file, or standard input (`-`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Standard input.
    Stdin,
    /// A file.
    File(PathBuf),
}

impl Source {
    /// The name the report gives it: the path, or `-`.
    pub fn name(&self) -> String {
        match self {
            Source::Stdin => "-".to_owned(),
            Source::File(path) => path.display().to_string(),
        }
    }

    /// Its size when known in advance, for progress.
    pub fn size(&self) -> Option<u64> {
        match self {
            Source::Stdin => None,
            Source::File(path) => std::fs::metadata(path).ok().map(|m| m.len()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A path given on the command line that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct PathError {
    /// The path.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// The inputs named by command-line arguments: `-` is standard input, a file is itself, a
/// directory stands for its `*.yaml`, `*.yml` and `*.json` files, recursively, in name order.
/// No argument means standard input.
pub fn sources<P: AsRef<Path>>(args: &[P]) -> Result<Vec<Source>, PathError> {
    if args.is_empty() {
        return Ok(vec![Source::Stdin]);
    }
    let mut sources = Vec::new();
    for arg in args {
        let path = arg.as_ref();
        if path == Path::new("-") {
            sources.push(Source::Stdin);
            continue;
        }
        let error = |source| PathError {
            path: path.to_owned(),
            source,
        };
        if !std::fs::metadata(path).map_err(error)?.is_dir() {
            sources.push(Source::File(path.to_owned()));
            continue;
        }
        for entry in walkdir::WalkDir::new(path)
            .follow_links(true)
            .sort_by_file_name()
        {
            let entry = entry.map_err(|err| PathError {
                path: err.path().unwrap_or(path).to_owned(),
                source: err.into(),
            })?;
            if entry.file_type().is_file() && format_of(entry.path()).is_some() {
                sources.push(Source::File(entry.into_path()));
            }
        }
    }
    Ok(sources)
}

/// How an input is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// JSON: objects, lists, or several of them one after the other.
    Json,
    /// YAML: documents separated by `---`.
    Yaml,
}

/// The format a file name promises, if any.
fn format_of(path: &Path) -> Option<Format> {
    match path.extension()?.to_str()? {
        "json" => Some(Format::Json),
        "yaml" | "yml" => Some(Format::Yaml),
        _ => None,
    }
}

/// Reads every object of `source` into `sink`.
pub(crate) fn read_source(
    source: &Source,
    sink: &mut dyn FnMut(Located<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    match source {
        Source::Stdin => read(io::stdin(), None, sink),
        Source::File(path) => {
            let file = File::open(path).map_err(InputError::Read)?;
            read(file, format_of(path), sink)
        }
    }
}

/// Reads objects from `reader`, JSON or YAML as `format` says; without a format, JSON when the
/// first byte that is not white space opens an object or an array (JSON is also YAML, but the
/// JSON reader streams a list's items and reports JSON's own errors).
pub(crate) fn read<R: Read + Send>(
    reader: R,
    format: Option<Format>,
    sink: &mut dyn FnMut(Located<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    skip_bom(&mut reader).map_err(InputError::Read)?;
    let format = match format {
        Some(format) => format,
        None => sniff(&mut reader).map_err(InputError::Read)?,
    };
    match format {
        Format::Json => json::read(reader, sink),
        Format::Yaml => yaml::read(reader, sink),
    }
}

/// Drops a UTF-8 byte order mark before the content, as kubectl does (editors on Windows
/// write one); positions count from after it.
fn skip_bom<R: Read>(reader: &mut BufReader<R>) -> io::Result<()> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    reader.fill_buf()?;
    if reader.buffer().starts_with(BOM) {
        reader.consume(BOM.len());
    }
    Ok(())
}

/// Looks at the start of the input, without consuming it (positions count from its start).
fn sniff<R: Read>(reader: &mut BufReader<R>) -> io::Result<Format> {
    let buf = reader.fill_buf()?;
    Ok(match buf.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') => Format::Json,
        _ => Format::Yaml,
    })
}

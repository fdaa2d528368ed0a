//! The report: one line per finding and a summary, or one JSON document.

use std::fmt;
use std::io::{self, Write};

use anstyle::{AnsiColor, Style};
use serde::Serialize;
use volume_health_validation::field::{ErrorKind, GoQuoted, LengthUnit};
use volume_health_validation::{FieldError, HealthResource};

use crate::input::Position;
use crate::object::Finding;

/// How the report is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// A line per error, dropped field or failed input, then a summary line.
    #[default]
    Text,
    /// One JSON document: every object checked, the inputs that failed, and the counts.
    Json,
}

/// One object checked, and the answer.
#[derive(Clone, Copy, Debug)]
pub struct Checked<'a> {
    /// What it is.
    pub resource: HealthResource,
    /// `metadata.namespace`, when set.
    pub namespace: Option<&'a str>,
    /// `metadata.name`.
    pub name: &'a str,
    /// The input it was read from.
    pub file: &'a str,
    /// Where in it.
    pub position: Position,
    /// Whether it was paired with an old object from `--old`.
    pub paired: bool,
    /// The answer.
    pub finding: &'a Finding,
}

/// An input that could not be read to its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The input (`-` for standard input).
    pub file: String,
    /// Where the parser stopped, when it did.
    #[serde(flatten)]
    pub position: Option<Position>,
    /// Why.
    pub message: String,
}

/// The file and message are escaped and shortened, as in the report.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = Printable(&self.file, MAX_NAME);
        let message = Printable(&self.message, MAX_MESSAGE);
        match self.position {
            Some(p) => write!(
                f,
                "{file}: document {}: line {} column {}: {message}",
                p.document, p.line, p.column
            ),
            None => write!(f, "{file}: {message}"),
        }
    }
}

/// An input from which objects were skipped, or nothing was read at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// The input (`-` for standard input).
    pub file: String,
    /// Objects of a checked kind read from it.
    pub checked: u64,
    /// The kinds skipped (`AdmissionReview (admission.k8s.io/v1)`) and how many of each, in
    /// the order first seen; at most [`Skipped::KINDS`] of them.
    pub kinds: Vec<(String, u64)>,
    /// Objects of kinds past the first [`Skipped::KINDS`].
    pub other: u64,
}

impl Skipped {
    /// The kinds named one by one.
    pub const KINDS: usize = 8;

    /// Counts an object of `kind`, skipped.
    pub(crate) fn count(&mut self, kind: String) {
        if let Some((_, n)) = self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            *n += 1;
        } else if self.kinds.len() < Self::KINDS {
            self.kinds.push((kind, 1));
        } else {
            self.other += 1;
        }
    }

    /// Whether there is anything to say: something skipped, or nothing read.
    pub fn is_notable(&self) -> bool {
        self.checked == 0 || !self.kinds.is_empty()
    }
}

/// `deploy/app.yaml: skipped 2 Deployment (apps/v1), 1 Service (v1): not a Pod, ...`.
impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", Printable(&self.file, MAX_NAME))?;
        if self.kinds.is_empty() {
            return f.write_str("no object in it");
        }
        f.write_str(if self.checked == 0 {
            "nothing checked, skipped "
        } else {
            "skipped "
        })?;
        for (i, (kind, n)) in self.kinds.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n} {}", Printable(kind, MAX_NAME))?;
        }
        if self.other > 0 {
            write!(f, ", {} of other kinds", self.other)?;
        }
        f.write_str(": only Pods, PersistentVolumeClaims and CSINodes (storage.k8s.io) are checked")
    }
}

/// Longest name, namespace or file name printed whole, in characters.
pub(crate) const MAX_NAME: usize = 256;

/// Longest message printed whole, in characters.
const MAX_MESSAGE: usize = 2048;

/// Most errors printed for one object; the rest are counted (`-o json` has them all).
const MAX_ERRORS: usize = 32;

/// Text from the input, fit for a terminal: every control character (and the Unicode line and
/// paragraph separators) escaped as `\u{1b}`, as the webhook escapes its logs, so that no
/// escape sequence reaches the terminal and no line can be forged; cut after `.1` characters
/// with a count of what was left out. Public for other readers of untrusted objects (the
/// cluster audit), so that every report escapes alike.
pub struct Printable<'a>(pub &'a str, pub usize);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Printable(text, max) = *self;
        for (written, (at, c)) in text.char_indices().enumerate() {
            if written >= max {
                return write!(f, "...[{} more bytes]", text.len() - at);
            }
            if c.is_control() || invisible(c) {
                write!(f, "{}", c.escape_unicode())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

/// A character that prints nothing yet changes what the terminal shows: line and paragraph
/// separators, and the bidirectional marks, embeddings, overrides and isolates, with which a
/// name can be shown reversed (`bidi\u{202e}evil`).
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// The counts of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Objects checked: pods, claims and CSINodes.
    pub objects: u64,
    /// Pods checked.
    pub pods: u64,
    /// PersistentVolumeClaims checked.
    pub claims: u64,
    /// CSINodes checked.
    pub csinodes: u64,
    /// Objects the validating webhook would refuse with field errors (422), or as undecodable
    /// (400).
    pub invalid: u64,
    /// Objects the node rules would refuse (403).
    pub forbidden: u64,
    /// Objects drop on save would remove a field from.
    pub dropped: u64,
    /// Objects `--repair` would repair (counted as the repaired object's finding otherwise).
    pub repaired: u64,
    /// The repairs `--repair` would make, by kind ([`RepairKind::label`](volume_health_validation::repair::RepairKind::label)).
    pub repairs: std::collections::BTreeMap<&'static str, u64>,
    /// Objects of other kinds.
    pub skipped: u64,
    /// Inputs that could not be read to their end.
    pub failed_inputs: u64,
}

impl Summary {
    pub(crate) fn count(&mut self, resource: HealthResource, finding: &Finding) {
        self.objects += 1;
        match resource {
            HealthResource::Pods => self.pods += 1,
            HealthResource::PersistentVolumeClaims => self.claims += 1,
            HealthResource::CsiNodes => self.csinodes += 1,
        }
        match &finding.denial {
            Some(denial) if denial.code == 403 => self.forbidden += 1,
            Some(_) => self.invalid += 1,
            None => {}
        }
        if finding.dropped.is_some() {
            self.dropped += 1;
        }
        if !finding.repairs.is_empty() {
            self.repaired += 1;
        }
        for repair in &finding.repairs {
            *self.repairs.entry(repair.kind.label()).or_default() += 1;
        }
    }

    /// Whether something would be refused.
    pub fn refused(&self) -> bool {
        self.invalid + self.forbidden > 0
    }
}

/// `checked 1204 objects: 980 pods, 220 claims, 4 CSINodes; 3 invalid; 1911 skipped`, with the
/// forbidden and dropped counts when there are any.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |count: u64, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        write!(
            f,
            "checked {}: {}, {}, {}; {} invalid",
            n(self.objects, "object", "objects"),
            n(self.pods, "pod", "pods"),
            n(self.claims, "claim", "claims"),
            n(self.csinodes, "CSINode", "CSINodes"),
            self.invalid,
        )?;
        if self.forbidden > 0 {
            write!(f, ", {} forbidden", self.forbidden)?;
        }
        if self.dropped > 0 {
            write!(f, "; {} dropped", n(self.dropped, "field", "fields"))?;
        }
        if self.repaired > 0 {
            let kinds: Vec<String> = self
                .repairs
                .iter()
                .map(|(label, count)| format!("{label}={count}"))
                .collect();
            write!(f, "; {} repaired ({})", self.repaired, kinds.join(", "))?;
        }
        write!(f, "; {} skipped", self.skipped)?;
        if self.failed_inputs > 0 {
            write!(
                f,
                "; {} not read to the end",
                n(self.failed_inputs, "input", "inputs")
            )?;
        }
        Ok(())
    }
}

/// Writes the report as objects are checked, so that nothing but counts is kept.
pub struct Reporter<W> {
    out: W,
    format: OutputFormat,
    color: bool,
    objects: u64,
}

impl<W: Write> Reporter<W> {
    /// A report to `out`; `color` adds terminal colours to the text form.
    pub fn new(out: W, format: OutputFormat, color: bool) -> Self {
        Reporter {
            out,
            format,
            color,
            objects: 0,
        }
    }

    /// Reports one object: in text, only what would be refused or dropped; in JSON, every
    /// object.
    pub fn object(&mut self, checked: &Checked<'_>) -> io::Result<()> {
        match self.format {
            OutputFormat::Text => self.text_object(checked),
            OutputFormat::Json => {
                self.out.write_all(if self.objects == 0 {
                    b"{\"objects\":[\n"
                } else {
                    b",\n"
                })?;
                self.objects += 1;
                serde_json::to_writer(&mut self.out, &ObjectJson::new(checked))?;
                Ok(())
            }
        }
    }

    fn text_object(&mut self, checked: &Checked<'_>) -> io::Result<()> {
        let finding = checked.finding;
        if finding.allowed() && finding.dropped.is_none() && finding.repairs.is_empty() {
            return Ok(());
        }
        let reference = Reference(checked);
        let bold = self.style(Style::new().bold());
        let red = self.style(AnsiColor::Red.on_default());
        let yellow = self.style(AnsiColor::Yellow.on_default());
        let reset = if self.color { "\x1b[0m" } else { "" };
        if let Some(field) = finding.dropped {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {field}: {yellow}dropped on save{reset} (CSIVolumeHealth is disabled)"
            )?;
        }
        for repair in finding.repairs.iter().take(MAX_ERRORS) {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {}: {yellow}repaired{reset}: {}",
                Printable(&repair.path, MAX_MESSAGE),
                Printable(&repair.kind.to_string(), MAX_MESSAGE)
            )?;
        }
        if let Some(more) = finding
            .repairs
            .len()
            .checked_sub(MAX_ERRORS)
            .filter(|n| *n > 0)
        {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {yellow}{more} more repairs{reset} (-o json lists them all)"
            )?;
        }
        let Some(denial) = &finding.denial else {
            return Ok(());
        };
        if denial.errors.is_empty() {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {red}{}{reset}",
                Printable(&denial.message, MAX_MESSAGE)
            )?;
        }
        for error in denial.errors.iter().take(MAX_ERRORS) {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {}: {red}{}{reset}",
                Printable(&error.field, MAX_MESSAGE),
                Printable(&error.kind.to_string(), MAX_MESSAGE)
            )?;
        }
        if let Some(more) = denial
            .errors
            .len()
            .checked_sub(MAX_ERRORS)
            .filter(|n| *n > 0)
        {
            writeln!(
                self.out,
                "{bold}{reference}{reset}: {red}{more} more errors{reset} (-o json lists them all)"
            )?;
        }
        Ok(())
    }

    fn style(&self, style: Style) -> String {
        if self.color {
            style.render().to_string()
        } else {
            String::new()
        }
    }

    /// Ends the report with the inputs that failed and the counts.
    pub fn finish(&mut self, summary: &Summary, failures: &[Failure]) -> io::Result<()> {
        match self.format {
            OutputFormat::Text => {
                let style = if summary.refused() || summary.failed_inputs > 0 {
                    AnsiColor::Red.on_default()
                } else {
                    AnsiColor::Green.on_default()
                };
                let (on, off) = if self.color {
                    (style.render().to_string(), "\x1b[0m")
                } else {
                    (String::new(), "")
                };
                writeln!(self.out, "{on}{summary}{off}")?;
            }
            OutputFormat::Json => {
                self.out.write_all(if self.objects == 0 {
                    b"{\"objects\":[],\n\"failedInputs\":"
                } else {
                    b"\n],\n\"failedInputs\":"
                })?;
                serde_json::to_writer(&mut self.out, failures)?;
                self.out.write_all(b",\n\"summary\":")?;
                serde_json::to_writer(&mut self.out, &SummaryJson(summary))?;
                self.out.write_all(b"}\n")?;
            }
        }
        self.out.flush()
    }
}

/// `Kind/namespace/name`, or `Kind/name` without a namespace; the names printable.
struct Reference<'a>(&'a Checked<'a>);

impl fmt::Display for Reference<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let checked = self.0;
        f.write_str(checked.resource.kind())?;
        if let Some(namespace) = checked.namespace {
            write!(f, "/{}", Printable(namespace, MAX_NAME))?;
        }
        write!(f, "/{}", Printable(checked.name, MAX_NAME))
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectJson<'a> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
    name: &'a str,
    file: &'a str,
    document: usize,
    line: u64,
    column: u64,
    old: bool,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    errors: Vec<ErrorJson<'a>>,
    dropped: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repaired: Vec<RepairJson<'a>>,
}

/// A repair `--repair` would make: where, its label in metrics, and what it does.
#[derive(Serialize)]
struct RepairJson<'a> {
    path: &'a str,
    repair: &'static str,
    message: String,
}

impl<'a> ObjectJson<'a> {
    fn new(checked: &Checked<'a>) -> Self {
        let finding = checked.finding;
        let denial = finding.denial.as_ref();
        ObjectJson {
            kind: checked.resource.kind(),
            namespace: checked.namespace,
            name: checked.name,
            file: checked.file,
            document: checked.position.document,
            line: checked.position.line,
            column: checked.position.column,
            old: checked.paired,
            allowed: finding.allowed(),
            code: denial.map(|d| d.code),
            reason: denial.map(|d| d.reason.as_str()),
            message: denial.map(|d| d.message.as_str()),
            errors: denial
                .map(|d| d.errors.iter().map(ErrorJson::new).collect())
                .unwrap_or_default(),
            dropped: finding.dropped.into_iter().collect(),
            repaired: finding
                .repairs
                .iter()
                .map(|r| RepairJson {
                    path: &r.path,
                    repair: r.kind.label(),
                    message: r.kind.to_string(),
                })
                .collect(),
        }
    }
}

/// A field error as `StatusCause` and apimachinery's `field.Error` describe it.
#[derive(Serialize)]
struct ErrorJson<'a> {
    field: &'a str,
    /// The cause type, e.g. `FieldValueNotFound`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// `field.Error.Detail`: the explanation after the value, empty for some types.
    detail: String,
    /// The body, as `StatusCause.message` carries it.
    message: String,
}

impl<'a> ErrorJson<'a> {
    fn new(error: &'a FieldError) -> Self {
        ErrorJson {
            field: &error.field,
            kind: error.kind.cause_type(),
            detail: detail(&error.kind),
            message: error.body(),
        }
    }
}

/// apimachinery's `Detail` of each error type used by the rules.
fn detail(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::NotSupported { supported, .. } => {
            let values: Vec<String> = supported.iter().map(|v| GoQuoted(v).to_string()).collect();
            format!("supported values: {}", values.join(", "))
        }
        ErrorKind::TooLong { max, unit } => format!(
            "may not be more than {max} {}",
            match unit {
                LengthUnit::Bytes => "bytes",
                LengthUnit::Characters => "characters",
            }
        ),
        ErrorKind::TooMany { max, .. } => format!("must have at most {max} items"),
        ErrorKind::Invalid { detail, .. } => (*detail).to_owned(),
        _ => String::new(),
    }
}

/// The summary with every count, zero or not.
struct SummaryJson<'a>(&'a Summary);

impl Serialize for SummaryJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let s = self.0;
        let mut out = serializer.serialize_struct("Summary", 11)?;
        out.serialize_field("objects", &s.objects)?;
        out.serialize_field("pods", &s.pods)?;
        out.serialize_field("persistentVolumeClaims", &s.claims)?;
        out.serialize_field("csiNodes", &s.csinodes)?;
        out.serialize_field("invalid", &s.invalid)?;
        out.serialize_field("forbidden", &s.forbidden)?;
        out.serialize_field("dropped", &s.dropped)?;
        out.serialize_field("repaired", &s.repaired)?;
        out.serialize_field("repairs", &s.repairs)?;
        out.serialize_field("skipped", &s.skipped)?;
        out.serialize_field("failedInputs", &s.failed_inputs)?;
        out.end()
    }
}

//! Field errors in the shape of apimachinery's `field.Error`.
//!
//! Paths are built on the stack as [`FieldPath`] and rendered to a string only when an error is
//! recorded, so valid objects cost no allocation here.

use std::fmt;

pub use crate::render::GoJson;

/// A field path such as `status.volumeHealth[0].healthConditions[1].reason`, borrowed from the
/// caller's stack frames. Rendered like apimachinery's `field.Path`.
#[derive(Clone, Copy, Debug)]
pub enum FieldPath<'a> {
    /// A top-level field.
    Root(&'static str),
    /// A named field of a parent path.
    Child(&'a FieldPath<'a>, &'static str),
    /// A list element of a parent path.
    Index(&'a FieldPath<'a>, usize),
}

impl<'a> FieldPath<'a> {
    /// A top-level field.
    ///
    /// ```
    /// use volume_health_validation::field::FieldPath;
    ///
    /// assert_eq!(FieldPath::root("status").to_string(), "status");
    /// ```
    pub const fn root(name: &'static str) -> Self {
        FieldPath::Root(name)
    }

    /// The named field below this path.
    ///
    /// ```
    /// use volume_health_validation::field::FieldPath;
    ///
    /// // Each step borrows its parent: the path lives on the stack until an error renders it.
    /// let status = FieldPath::root("status");
    /// assert_eq!(status.child("healthStatus").to_string(), "status.healthStatus");
    /// ```
    pub fn child(&'a self, name: &'static str) -> FieldPath<'a> {
        FieldPath::Child(self, name)
    }

    /// The list element `index` of this path.
    ///
    /// ```
    /// use volume_health_validation::field::FieldPath;
    ///
    /// let status = FieldPath::root("status");
    /// let entries = status.child("volumeHealth");
    /// let entry = entries.index(2);
    /// assert_eq!(entry.child("name").to_string(), "status.volumeHealth[2].name");
    /// ```
    pub fn index(&'a self, index: usize) -> FieldPath<'a> {
        FieldPath::Index(self, index)
    }
}

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root(name) => f.write_str(name),
            FieldPath::Child(parent, name) => write!(f, "{parent}.{name}"),
            FieldPath::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// Whether a length limit counts bytes or characters (Unicode scalar values, Go's runes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthUnit {
    /// UTF-8 bytes, as Go's `len(s)`.
    Bytes,
    /// Characters, as Go's `utf8.RuneCountInString(s)`.
    Characters,
}

/// What is wrong with a field; one variant per apimachinery `field.ErrorType` used here.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A required field is empty or absent.
    Required,
    /// A value outside an enumeration. The value is of a named string type, so it renders as
    /// Go's `json.Marshal` writes it (see [`GoJson`]).
    NotSupported {
        /// The rejected value.
        value: String,
        /// The accepted values, in the order upstream lists them.
        supported: &'static [&'static str],
    },
    /// A string longer than its limit.
    TooLong {
        /// The limit.
        max: usize,
        /// What the limit counts.
        unit: LengthUnit,
    },
    /// A list longer than its limit.
    TooMany {
        /// The list's length.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A list item whose key repeats an earlier item's key.
    Duplicate {
        /// The key, already rendered (a Go-quoted string or a JSON object).
        rendered: String,
    },
    /// A reference to something that does not exist.
    NotFound {
        /// The missing name.
        value: String,
    },
    /// A malformed value.
    Invalid {
        /// The rejected value.
        value: String,
        /// Why it is malformed.
        detail: &'static str,
    },
}

impl ErrorKind {
    /// The `metav1.CauseType` of this kind, e.g. `FieldValueRequired`.
    ///
    /// ```
    /// use volume_health_validation::field::ErrorKind;
    ///
    /// assert_eq!(ErrorKind::Required.cause_type(), "FieldValueRequired");
    /// let too_many = ErrorKind::TooMany { count: 17, max: 16 };
    /// assert_eq!(too_many.cause_type(), "FieldValueTooMany");
    /// ```
    pub fn cause_type(&self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            ErrorKind::TooLong { .. } => "FieldValueTooLong",
            ErrorKind::TooMany { .. } => "FieldValueTooMany",
            ErrorKind::Duplicate { .. } => "FieldValueDuplicate",
            ErrorKind::NotFound { .. } => "FieldValueNotFound",
            ErrorKind::Invalid { .. } => "FieldValueInvalid",
        }
    }
}

/// Renders the error body, byte for byte as apimachinery's `(*field.Error).ErrorBody`.
impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Required => f.write_str("Required value"),
            ErrorKind::NotSupported { value, supported } => {
                write!(
                    f,
                    "Unsupported value: {}: supported values: ",
                    GoJson(value)
                )?;
                for (i, v) in supported.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", GoQuoted(v))?;
                }
                Ok(())
            }
            ErrorKind::TooLong { max, unit } => {
                let unit = match unit {
                    LengthUnit::Bytes => "bytes",
                    LengthUnit::Characters => "characters",
                };
                write!(f, "Too long: may not be more than {max} {unit}")
            }
            ErrorKind::TooMany { count, max } => {
                write!(f, "Too many: {count}: must have at most {max} items")
            }
            ErrorKind::Duplicate { rendered } => write!(f, "Duplicate value: {rendered}"),
            ErrorKind::NotFound { value } => write!(f, "Not found: {}", GoQuoted(value)),
            ErrorKind::Invalid { value, detail } => {
                write!(f, "Invalid value: {}: {detail}", GoQuoted(value))
            }
        }
    }
}

/// One field error: where, and what. Its `Display` is the Kubernetes string `<path>: <body>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The rendered path, e.g. `status.healthStatus.healthConditions[0].status`.
    pub field: String,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl FieldError {
    /// An error of `kind` at `path`.
    ///
    /// ```
    /// use volume_health_validation::field::{ErrorKind, FieldError, FieldPath};
    ///
    /// let status = FieldPath::root("status");
    /// let entries = status.child("volumeHealth");
    /// let entry = entries.index(1);
    /// let name = entry.child("name");
    /// let error = FieldError::new(&name, ErrorKind::NotFound { value: "logs".into() });
    /// assert_eq!(error.field, "status.volumeHealth[1].name");
    /// assert_eq!(error.to_string(), r#"status.volumeHealth[1].name: Not found: "logs""#);
    /// ```
    pub fn new(path: &FieldPath<'_>, kind: ErrorKind) -> Self {
        FieldError {
            field: path.to_string(),
            kind,
        }
    }

    /// The body without the path, as `StatusCause.message` carries it.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{Pod, PodStatus, PodVolumeHealth};
    /// use volume_health_validation::validate_pod;
    ///
    /// let pod = Pod {
    ///     status: Some(PodStatus {
    ///         volume_health: Some(vec![PodVolumeHealth { name: "logs".into(), ..Default::default() }]),
    ///         ..Default::default()
    ///     }),
    ///     ..Default::default()
    /// };
    /// let errors = validate_pod(&pod, None);
    /// assert_eq!(errors[0].body(), r#"Not found: "logs""#);
    /// assert_eq!(errors[0].to_string(), format!("{}: {}", errors[0].field, errors[0].body()));
    /// ```
    pub fn body(&self) -> String {
        self.kind.to_string()
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.kind)
    }
}

impl std::error::Error for FieldError {}

/// All errors found in one object, in the order Kubernetes reports them.
pub type ErrorList = Vec<FieldError>;

/// The errors of one object as they are found, in three runs reported in this order: upstream's
/// handwritten checks, upstream's declarative checks, then this project's own rule ([`crate::rules::ConditionIdentity`]),
/// so that the upstream part of a list is exactly what kube-apiserver reports. At most `limit`
/// are kept.
#[derive(Debug)]
pub(crate) struct Errors {
    handwritten: ErrorList,
    declarative: ErrorList,
    own: ErrorList,
    limit: usize,
    found: usize,
}

impl Default for Errors {
    fn default() -> Self {
        Errors::with_limit(usize::MAX)
    }
}

impl Errors {
    /// Keeps the first `limit` errors (handwritten ones first) and counts the rest.
    pub(crate) fn with_limit(limit: usize) -> Self {
        Errors {
            handwritten: ErrorList::new(),
            declarative: ErrorList::new(),
            own: ErrorList::new(),
            limit,
            found: 0,
        }
    }

    fn push(list: &mut ErrorList, limit: usize, path: &FieldPath<'_>, kind: ErrorKind) {
        if list.len() < limit {
            list.push(FieldError::new(path, kind));
        }
    }

    /// An error of an upstream handwritten check (`pkg/apis/*/validation`).
    pub(crate) fn handwritten(&mut self, path: &FieldPath<'_>, kind: ErrorKind) {
        self.found += 1;
        Self::push(&mut self.handwritten, self.limit, path, kind);
    }

    /// An error of an upstream declarative check (`zz_generated.validations.go`).
    pub(crate) fn declarative(&mut self, path: &FieldPath<'_>, kind: ErrorKind) {
        self.found += 1;
        Self::push(&mut self.declarative, self.limit, path, kind);
    }

    /// An error of this project's own rule, which in-tree Kubernetes does not have.
    pub(crate) fn own(&mut self, path: &FieldPath<'_>, kind: ErrorKind) {
        self.found += 1;
        Self::push(&mut self.own, self.limit, path, kind);
    }

    /// The errors kept, in Kubernetes order, and how many more were found.
    pub(crate) fn finish(mut self) -> (ErrorList, usize) {
        self.handwritten.append(&mut self.declarative);
        self.handwritten.append(&mut self.own);
        self.handwritten.truncate(self.limit);
        let omitted = self.found - self.handwritten.len();
        (self.handwritten, omitted)
    }

    /// Every error, for callers without a limit.
    pub(crate) fn into_list(self) -> ErrorList {
        self.finish().0
    }
}

/// Formats a string as Go's `%q` verb does: double quotes, Go escapes, and `\u`/`\U` escapes for
/// characters that Go's `strconv.IsPrint` rejects.
#[derive(Clone, Copy, Debug)]
pub struct GoQuoted<'a>(pub &'a str);

impl fmt::Display for GoQuoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '\x07' => f.write_str("\\a")?,
                '\x08' => f.write_str("\\b")?,
                '\x0c' => f.write_str("\\f")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\x0b' => f.write_str("\\v")?,
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                c if is_go_printable(c) => f.write_char(c)?,
                c if (c as u32) < 0x80 => write!(f, "\\x{:02x}", c as u32)?,
                c if (c as u32) < 0x10000 => write!(f, "\\u{:04x}", c as u32)?,
                c => write!(f, "\\U{:08x}", c as u32)?,
            }
        }
        f.write_char('"')
    }
}

/// Go's `strconv.IsPrint`: letters, marks, numbers, punctuation, symbols (Unicode 15.0.0, as
/// Go's tables) and the ASCII space.
pub(crate) fn is_go_printable(c: char) -> bool {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    if c.is_ascii() {
        return matches!(c, ' '..='~');
    }
    !matches!(
        get_general_category(c),
        G::Control
            | G::Format
            | G::Surrogate
            | G::PrivateUse
            | G::Unassigned
            | G::SpaceSeparator
            | G::LineSeparator
            | G::ParagraphSeparator
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_apimachinery() {
        let status = FieldPath::root("status");
        let list = status.child("volumeHealth");
        let item = list.index(0);
        let conditions = item.child("healthConditions");
        let condition = conditions.index(12);
        let reason = condition.child("reason");
        assert_eq!(
            reason.to_string(),
            "status.volumeHealth[0].healthConditions[12].reason"
        );
    }

    #[test]
    fn bodies_match_upstream_strings() {
        let cases: &[(ErrorKind, &str)] = &[
            (ErrorKind::Required, "Required value"),
            (
                ErrorKind::NotSupported {
                    value: "Healthy".into(),
                    supported: &["DataLoss", "Degraded", "Inaccessible"],
                },
                r#"Unsupported value: "Healthy": supported values: "DataLoss", "Degraded", "Inaccessible""#,
            ),
            (
                ErrorKind::TooLong {
                    max: 256,
                    unit: LengthUnit::Bytes,
                },
                "Too long: may not be more than 256 bytes",
            ),
            (
                ErrorKind::TooLong {
                    max: 1024,
                    unit: LengthUnit::Characters,
                },
                "Too long: may not be more than 1024 characters",
            ),
            (
                ErrorKind::TooMany { count: 17, max: 16 },
                "Too many: 17: must have at most 16 items",
            ),
            (
                ErrorKind::Duplicate {
                    rendered: "\"vol\"".into(),
                },
                "Duplicate value: \"vol\"",
            ),
            (
                ErrorKind::NotFound {
                    value: "other".into(),
                },
                "Not found: \"other\"",
            ),
            (
                ErrorKind::Invalid {
                    value: "1x".into(),
                    detail: "bad",
                },
                "Invalid value: \"1x\": bad",
            ),
        ];
        for (kind, want) in cases {
            assert_eq!(kind.to_string(), *want);
        }
    }

    #[test]
    fn cause_types_match_metav1() {
        assert_eq!(ErrorKind::Required.cause_type(), "FieldValueRequired");
        assert_eq!(
            ErrorKind::TooMany { count: 1, max: 0 }.cause_type(),
            "FieldValueTooMany"
        );
        assert_eq!(
            ErrorKind::Duplicate {
                rendered: String::new()
            }
            .cause_type(),
            "FieldValueDuplicate"
        );
    }

    #[test]
    fn go_quoting_escapes_like_strconv_quote() {
        let cases = [
            ("plain", r#""plain""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("tab\tnl\ncr\r", r#""tab\tnl\ncr\r""#),
            ("\x07\x08\x0c\x0b", r#""\a\b\f\v""#),
            ("\x00\x1f\x7f", r#""\x00\x1f\x7f""#),
            ("é日本", "\"é日本\""),
            ("\u{80}", r#""\u0080""#),
            ("\u{a0}", r#""\u00a0""#),
            ("\u{200b}", r#""\u200b""#),
            ("\u{feff}", r#""\ufeff""#),
            ("😀", "\"😀\""),
            ("\u{f0000}", r#""\U000f0000""#),
            // Go's IsPrint tables decide: unassigned, and format characters outside the
            // ranges one would list by hand.
            ("\u{378}", r#""\u0378""#),
            ("\u{1d173}", r#""\U0001d173""#),
            ("\u{110bd}", r#""\U000110bd""#),
            ("\u{2028}\u{3000}\u{ad}", r#""\u2028\u3000\u00ad""#),
            // Assigned in Unicode 15.0.0, printable in Go.
            ("\u{1f6dd}\u{11f00}", "\"\u{1f6dd}\u{11f00}\""),
            ("\u{301}", "\"\u{301}\""),
        ];
        for (input, want) in cases {
            assert_eq!(GoQuoted(input).to_string(), want, "quoting {input:?}");
        }
    }
}

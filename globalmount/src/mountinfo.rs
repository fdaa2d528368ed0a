//! `/proc/<pid>/mountinfo` parsing with the semantics of mount-utils'
//! `ParseMountInfo`, plus its consistent-read helper.
//!
//! One deliberate difference: the kernel's octal escapes (`\040` space, `\011`
//! tab, `\012` newline, `\134` backslash) are decoded in root, mount point and
//! source, and the raw text is kept beside the decoded value. Upstream keeps
//! them literal, which makes a kubelet root with a space unmatchable.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use thiserror::Error;

/// Suffix the kernel appends to a path whose dentry was unlinked.
pub const DELETED_SUFFIX: &str = " (deleted)";

/// How many re-reads a consistent read attempts (mount-utils `maxListTries`).
pub const MAX_LIST_TRIES: usize = 10;

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Mount ID.
    pub id: i64,
    /// Parent mount ID.
    pub parent_id: i64,
    /// Device major number.
    pub major: i64,
    /// Device minor number.
    pub minor: i64,
    /// Root of the mount within its filesystem, decoded.
    pub root: PathBuf,
    /// Root as written in the file.
    pub root_raw: String,
    /// Mount point, decoded, with a trailing ` (deleted)` removed.
    pub mount_point: PathBuf,
    /// Mount point as written in the file.
    pub mount_point_raw: String,
    /// Per-mount options.
    pub options: Vec<String>,
    /// Optional fields such as `shared:1` or `master:2`.
    pub optional_fields: Vec<String>,
    /// Filesystem type.
    pub fs_type: String,
    /// Mount source, decoded.
    pub source: String,
    /// Source as written in the file.
    pub source_raw: String,
    /// Per-superblock options.
    pub super_options: Vec<String>,
    /// The kernel marked the root or the mount point as deleted.
    pub deleted: bool,
}

/// What is wrong with a mountinfo line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MountInfoErrorKind {
    /// A line needs at least ten whitespace-separated fields.
    #[error("expected at least 10 fields, got {0}")]
    TooFewFields(usize),
    /// An ID or device number is not an integer.
    #[error("{field} {value:?} is not an integer")]
    NotAnInteger {
        /// Which field.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// The device field is not `major:minor`.
    #[error("device {0:?} is not of the form major:minor")]
    BadMajorMinor(String),
    /// Fewer than three fields follow the `-` separator.
    #[error("expected 3 fields after the separator, got {0}")]
    TooFewFieldsAfterSeparator(usize),
}

/// A mountinfo parse error; it fails the whole parse, as upstream does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("mountinfo line {line_number} ({line:?}): {kind}")]
pub struct MountInfoError {
    /// 1-based line number.
    pub line_number: usize,
    /// The offending line.
    pub line: String,
    /// What is wrong with it.
    pub kind: MountInfoErrorKind,
}

/// Parses a whole mountinfo file. Empty lines (and so the trailing newline) are ignored.
///
/// The input is bytes because paths need not be UTF-8; fields are split on
/// ASCII whitespace, the only whitespace the kernel leaves unescaped.
pub fn parse_mountinfo(content: impl AsRef<[u8]>) -> Result<Vec<MountInfo>, MountInfoError> {
    let mut infos = Vec::new();
    for (index, line) in content.as_ref().split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let parsed = parse_line(line).map_err(|kind| MountInfoError {
            line_number: index + 1,
            line: String::from_utf8_lossy(line).into_owned(),
            kind,
        })?;
        infos.push(parsed);
    }
    Ok(infos)
}

fn parse_line(line: &[u8]) -> Result<MountInfo, MountInfoErrorKind> {
    let fields: Vec<&[u8]> = line
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .collect();
    if fields.len() < 10 {
        return Err(MountInfoErrorKind::TooFewFields(fields.len()));
    }
    let id = parse_int("mount ID", fields[0])?;
    let parent_id = parse_int("parent ID", fields[1])?;
    let device: Vec<&[u8]> = fields[2].split(|&b| b == b':').collect();
    let [major, minor] = device.as_slice() else {
        return Err(MountInfoErrorKind::BadMajorMinor(lossy(fields[2])));
    };
    let major = parse_int("major", major)?;
    let minor = parse_int("minor", minor)?;

    let mut i = 6;
    let mut optional_fields = Vec::new();
    while i < fields.len() && fields[i] != b"-" {
        optional_fields.push(lossy(fields[i]));
        i += 1;
    }
    i += 1; // past the separator
    let after = fields.len().saturating_sub(i);
    if after < 3 {
        return Err(MountInfoErrorKind::TooFewFieldsAfterSeparator(after));
    }

    let (root, root_deleted) = decode_path(fields[3]);
    let (mount_point, mount_point_deleted) = decode_path(fields[4]);
    let source = lossy(&unescape_octal(fields[i + 1]));
    Ok(MountInfo {
        id,
        parent_id,
        major,
        minor,
        root,
        root_raw: lossy(fields[3]),
        mount_point,
        mount_point_raw: lossy(fields[4]),
        options: split_mount_options(&lossy(fields[5])),
        optional_fields,
        fs_type: lossy(fields[i]),
        source,
        source_raw: lossy(fields[i + 1]),
        super_options: split_mount_options(&lossy(fields[i + 2])),
        deleted: root_deleted || mount_point_deleted,
    })
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn parse_int(field: &'static str, value: &[u8]) -> Result<i64, MountInfoErrorKind> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| MountInfoErrorKind::NotAnInteger {
            field,
            value: lossy(value),
        })
}

fn decode_path(raw: &[u8]) -> (PathBuf, bool) {
    let mut bytes = unescape_octal(raw);
    let deleted = bytes.ends_with(DELETED_SUFFIX.as_bytes());
    if deleted {
        bytes.truncate(bytes.len() - DELETED_SUFFIX.len());
    }
    (PathBuf::from(OsString::from_vec(bytes)), deleted)
}

/// Decodes the kernel's `\ooo` octal escapes; any other backslash stays literal.
pub fn unescape_octal(raw: impl AsRef<[u8]>) -> Vec<u8> {
    let bytes = raw.as_ref();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Escapes the characters the kernel escapes in mountinfo paths (space, tab,
/// newline, backslash) as `\ooo`. Used to write mount tables for tests.
pub fn escape_octal(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &b in path {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => out.push(b),
        }
    }
    out
}

/// Splits an option field on commas that are not inside double quotes; empty
/// pieces are dropped, as Go's `strings.FieldsFunc` drops them.
pub fn split_mount_options(s: &str) -> Vec<String> {
    let mut options = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    for c in s.chars() {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        if c == ',' && !in_quotes {
            if !current.is_empty() {
                options.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        options.push(current);
    }
    options
}

/// Something that yields the current bytes of a mount table on every call.
pub trait MountInfoSource {
    /// Reads the whole table once.
    fn read_mountinfo(&mut self) -> io::Result<Vec<u8>>;
    /// A name for messages and reports.
    fn describe(&self) -> String;
}

/// A mountinfo file read from disk.
#[derive(Debug, Clone)]
pub struct MountInfoFile {
    path: PathBuf,
}

impl MountInfoFile {
    /// A source reading `path` on every call.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

impl MountInfoSource for MountInfoFile {
    fn read_mountinfo(&mut self) -> io::Result<Vec<u8>> {
        std::fs::read(&self.path)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// Why a consistent read failed.
#[derive(Debug, Error)]
pub enum ConsistentReadError {
    /// The source could not be read at all.
    #[error("reading {source_name}")]
    Io {
        /// The source.
        source_name: String,
        /// The I/O error.
        #[source]
        error: io::Error,
    },
    /// Consecutive reads kept differing (mount-utils' `InconsistentReadError`).
    #[error("could not get consistent content of {source_name} after {attempts} attempts")]
    Inconsistent {
        /// The source.
        source_name: String,
        /// How many re-reads were made.
        attempts: usize,
    },
}

/// Reads until two consecutive reads are identical, re-reading at most
/// `attempts` times after the first read, as mount-utils' `ConsistentRead` does.
/// Mount tables are generated per read, so a table changing under a busy node
/// yields torn content that must not be trusted.
pub fn consistent_read(
    source: &mut (impl MountInfoSource + ?Sized),
    attempts: usize,
) -> Result<Vec<u8>, ConsistentReadError> {
    let source_name = source.describe();
    let io_error = |error| ConsistentReadError::Io {
        source_name: source_name.clone(),
        error,
    };
    let mut previous = source.read_mountinfo().map_err(io_error)?;
    for _ in 0..attempts {
        let current = source.read_mountinfo().map_err(io_error)?;
        if current == previous {
            return Ok(current);
        }
        previous = current;
    }
    Err(ConsistentReadError::Inconsistent {
        source_name,
        attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KERNEL_EXAMPLE: &str =
        "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue";

    #[test]
    fn parses_the_kernel_documentation_example() {
        let infos = parse_mountinfo(KERNEL_EXAMPLE).unwrap();
        assert_eq!(infos.len(), 1);
        let m = &infos[0];
        assert_eq!((m.id, m.parent_id, m.major, m.minor), (36, 35, 98, 0));
        assert_eq!(m.root, PathBuf::from("/mnt1"));
        assert_eq!(m.mount_point, PathBuf::from("/mnt2"));
        assert_eq!(m.options, ["rw", "noatime"]);
        assert_eq!(m.optional_fields, ["master:1"]);
        assert_eq!(m.fs_type, "ext3");
        assert_eq!(m.source, "/dev/root");
        assert_eq!(m.super_options, ["rw", "errors=continue"]);
        assert!(!m.deleted);
    }

    #[test]
    fn accepts_zero_one_or_several_optional_fields() {
        let cases = [
            ("1 0 8:1 / / rw - ext4 /dev/sda1 rw", vec![]),
            (
                "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw",
                vec!["shared:1"],
            ),
            (
                "1 0 8:1 / / rw shared:1 master:2 - ext4 /dev/sda1 rw",
                vec!["shared:1", "master:2"],
            ),
        ];
        for (line, optional) in cases {
            let m = &parse_mountinfo(line).unwrap()[0];
            assert_eq!(m.optional_fields, optional, "{line}");
            assert_eq!(m.fs_type, "ext4", "{line}");
        }
    }

    #[test]
    fn malformed_lines_fail_the_whole_parse_and_name_the_line() {
        let good = "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n";
        type KindCheck = fn(&MountInfoErrorKind) -> bool;
        let cases: [(&str, KindCheck); 6] = [
            ("1 0 8:1 / / rw - ext4 /dev/sda1", |k| {
                matches!(k, MountInfoErrorKind::TooFewFields(9))
            }),
            ("x 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw", |k| {
                matches!(
                    k,
                    MountInfoErrorKind::NotAnInteger {
                        field: "mount ID",
                        ..
                    }
                )
            }),
            ("1 0 8-1 / / rw shared:1 - ext4 /dev/sda1 rw", |k| {
                matches!(k, MountInfoErrorKind::BadMajorMinor(_))
            }),
            ("1 0 8:1:2 / / rw shared:1 - ext4 /dev/sda1 rw", |k| {
                matches!(k, MountInfoErrorKind::BadMajorMinor(_))
            }),
            ("1 0 8:1 / / rw shared:1 master:2 - ext4 /dev/sda1", |k| {
                matches!(k, MountInfoErrorKind::TooFewFieldsAfterSeparator(2))
            }),
            ("1 0 8:1 / / rw a b c d e", |k| {
                matches!(k, MountInfoErrorKind::TooFewFieldsAfterSeparator(0))
            }),
        ];
        for (bad, expected) in cases {
            let content = format!("{good}{bad}\n{good}");
            let err = parse_mountinfo(&content).unwrap_err();
            assert_eq!(err.line_number, 2, "{bad}");
            assert_eq!(err.line, bad);
            assert!(expected(&err.kind), "{bad}: {:?}", err.kind);
        }
    }

    #[test]
    fn empty_lines_and_the_trailing_newline_are_ignored() {
        let content =
            "\n1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\n2 1 8:2 / /b rw - ext4 /dev/sda2 rw\n";
        let infos = parse_mountinfo(content).unwrap();
        assert_eq!(infos.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
        assert!(parse_mountinfo("").unwrap().is_empty());
    }

    #[test]
    fn commas_inside_quotes_do_not_split_options() {
        let line = r#"1 0 0:50 / /mnt rw,relatime - fuse.x src rw,opt="a,b",other"#;
        let m = &parse_mountinfo(line).unwrap()[0];
        assert_eq!(m.super_options, ["rw", r#"opt="a,b""#, "other"]);
        assert_eq!(split_mount_options(",a,,b,"), ["a", "b"]);
    }

    #[test]
    fn octal_escapes_are_decoded_and_the_raw_form_kept() {
        let line = r"1 0 8:1 /a\134b /var/lib/my\040kubelet/x\011y rw - ext4 /dev/disk\040one rw";
        let m = &parse_mountinfo(line).unwrap()[0];
        assert_eq!(m.mount_point, PathBuf::from("/var/lib/my kubelet/x\ty"));
        assert_eq!(m.mount_point_raw, r"/var/lib/my\040kubelet/x\011y");
        assert_eq!(m.root, PathBuf::from(r"/a\b"));
        assert_eq!(m.source, "/dev/disk one");
        assert_eq!(m.source_raw, r"/dev/disk\040one");
        assert_eq!(unescape_octal(r"a\012b"), b"a\nb");
        // Not an escape: too short, or not octal.
        assert_eq!(unescape_octal(r"a\04"), br"a\04");
        assert_eq!(unescape_octal(r"a\089"), br"a\089");
    }

    #[test]
    fn deleted_suffix_is_stripped_and_flagged() {
        let line = r"1 0 8:1 / /var/lib/kubelet/x\040(deleted) rw - ext4 /dev/sda1 rw";
        let m = &parse_mountinfo(line).unwrap()[0];
        assert_eq!(m.mount_point, PathBuf::from("/var/lib/kubelet/x"));
        assert!(m.deleted);
    }

    struct ScriptedSource {
        reads: Vec<&'static str>,
        calls: usize,
    }

    impl MountInfoSource for ScriptedSource {
        fn read_mountinfo(&mut self) -> io::Result<Vec<u8>> {
            let index = self.calls.min(self.reads.len() - 1);
            self.calls += 1;
            Ok(self.reads[index].as_bytes().to_vec())
        }

        fn describe(&self) -> String {
            "scripted".into()
        }
    }

    #[test]
    fn consistent_read_waits_for_two_identical_reads() {
        let mut settles = ScriptedSource {
            reads: vec!["a", "b", "c", "c"],
            calls: 0,
        };
        assert_eq!(consistent_read(&mut settles, MAX_LIST_TRIES).unwrap(), b"c");
        assert_eq!(settles.calls, 4);

        let mut churning = ScriptedSource {
            reads: (0..20)
                .map(|i| if i % 2 == 0 { "x" } else { "y" })
                .collect(),
            calls: 0,
        };
        let err = consistent_read(&mut churning, MAX_LIST_TRIES).unwrap_err();
        assert!(
            matches!(err, ConsistentReadError::Inconsistent { attempts: 10, .. }),
            "{err}"
        );
        assert_eq!(churning.calls, 11);
    }

    proptest! {
        #[test]
        fn escape_then_unescape_is_identity(path in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(unescape_octal(escape_octal(&path)), path);
        }
    }
}

//! `vol_data.json`: the small string map kubelet's CSI plugin writes beside
//! every mount it makes, decoded with the same leniency as Go's `encoding/json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::fs::NodeFs;

/// File name of the volume data file.
pub const VOL_DATA_FILE: &str = "vol_data.json";

/// The keys kubelet writes (`volDataKey` in the CSI plugin).
pub mod keys {
    /// PV name, or the pod-spec volume name of an inline volume.
    pub const SPEC_VOL_ID: &str = "specVolID";
    /// CSI volume ID.
    pub const VOLUME_HANDLE: &str = "volumeHandle";
    /// CSI driver name.
    pub const DRIVER_NAME: &str = "driverName";
    /// Node name.
    pub const NODE_NAME: &str = "nodeName";
    /// VolumeAttachment name.
    pub const ATTACHMENT_ID: &str = "attachmentID";
    /// `Persistent` or `Ephemeral`.
    pub const VOLUME_LIFECYCLE_MODE: &str = "volumeLifecycleMode";
    /// SELinux mount label.
    pub const SELINUX_MOUNT_CONTEXT: &str = "seLinuxMountContext";
}

/// The decoded content of a `vol_data.json`: string keys to string values.
///
/// Absent keys read as the empty string, as a Go map lookup does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeData(BTreeMap<String, String>);

impl VolumeData {
    /// Wraps a map.
    pub fn from_map(map: BTreeMap<String, String>) -> Self {
        Self(map)
    }

    /// Builds volume data from key/value pairs; a later duplicate key wins.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// The underlying map.
    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// The value of `key`, or `""` when it is absent.
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map(String::as_str).unwrap_or("")
    }

    /// `driverName`.
    pub fn driver_name(&self) -> &str {
        self.get(keys::DRIVER_NAME)
    }

    /// `volumeHandle`.
    pub fn volume_handle(&self) -> &str {
        self.get(keys::VOLUME_HANDLE)
    }

    /// `specVolID`.
    pub fn spec_vol_id(&self) -> &str {
        self.get(keys::SPEC_VOL_ID)
    }

    /// `seLinuxMountContext`.
    pub fn se_linux_mount_context(&self) -> &str {
        self.get(keys::SELINUX_MOUNT_CONTEXT)
    }

    /// `nodeName`.
    pub fn node_name(&self) -> &str {
        self.get(keys::NODE_NAME)
    }

    /// The names of the identity keys (`driverName`, `volumeHandle`) that are
    /// missing or empty; kubelet cannot use a file that lacks either.
    pub fn missing_identity_keys(&self) -> Vec<&'static str> {
        [keys::DRIVER_NAME, keys::VOLUME_HANDLE]
            .into_iter()
            .filter(|k| self.get(k).is_empty())
            .collect()
    }
}

/// Why a `vol_data.json` could not be loaded.
#[derive(Debug, Error)]
pub enum VolDataError {
    /// The file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The content is not a JSON object of strings.
    #[error("decoding {}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

impl VolDataError {
    /// Whether the file is simply absent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Decodes `vol_data.json` bytes the way Go's `json.NewDecoder(f).Decode(&map)` does.
///
/// * Only the first JSON value is read; whatever follows it is ignored.
/// * An empty or truncated file, or a non-string value, is an error.
/// * A top-level `null` is an empty map; a `null` member is the empty string.
/// * Duplicate keys: the last one wins. Unknown keys are kept and ignored by callers.
/// * Invalid UTF-8 inside strings becomes U+FFFD, as Go replaces it.
pub fn decode(bytes: &[u8]) -> Result<VolumeData, serde_json::Error> {
    let text = String::from_utf8_lossy(bytes);
    // A bare Deserializer without `end()` stops after the first value, which is
    // what Go's streaming decoder does; `serde_json::from_slice` would reject
    // trailing bytes and so refuse files kubelet accepts.
    let mut de = serde_json::Deserializer::from_str(&text);
    let parsed = Option::<BTreeMap<String, Option<String>>>::deserialize(&mut de)?;
    Ok(VolumeData(
        parsed
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or_default()))
            .collect(),
    ))
}

/// Encodes volume data byte-for-byte as Go's `json.NewEncoder(f).Encode(map)`:
/// keys sorted by bytes, no spaces, HTML-safe escapes, and a trailing newline.
///
/// Kubelet's writer is the reference; this exists to build fixtures that match it.
pub fn encode(data: &VolumeData) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    for (i, (key, value)) in data.0.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_go_string(&mut out, key);
        out.push(b':');
        write_go_string(&mut out, value);
    }
    out.extend_from_slice(b"}\n");
    out
}

fn write_go_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            // Go 1.22 and later write these two short forms.
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            // Control characters and Go's HTML-unsafe set become \u00XX.
            c if (c as u32) < 0x20 || c == '<' || c == '>' || c == '&' => {
                let b = c as u32;
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
            }
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Loads `<dir>/vol_data.json` through `fs`.
pub fn load(fs: &(impl NodeFs + ?Sized), dir: &Path) -> Result<VolumeData, VolDataError> {
    let path = dir.join(VOL_DATA_FILE);
    let bytes = fs.read_file(&path).map_err(|source| VolDataError::Read {
        path: path.clone(),
        source,
    })?;
    decode(&bytes).map_err(|source| VolDataError::Decode { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A real global vol_data.json line quoted in a kubelet code comment
    /// (driver topsc.topke.io); its attachmentID is the VolumeAttachment name.
    const REAL_LINE: &str = "{\"attachmentID\":\"csi-f68a9cdf83f572a3de797db507b8dd615595cf7054db3057b9e681bbbadab56a\",\"driverName\":\"topsc.topke.io\",\"nodeName\":\"haaaa-10-30-100-149\",\"specVolID\":\"pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c\",\"volumeHandle\":\"pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c\",\"volumeLifecycleMode\":\"Persistent\"}\n";

    #[test]
    fn decodes_go_encoder_output_with_escapes() {
        let data = decode(br#"{"driverName":"a\u003cb\u0026c","volumeHandle":"h"}"#).unwrap();
        assert_eq!(data.driver_name(), "a<b&c");
        assert_eq!(data.volume_handle(), "h");
        let real = decode(REAL_LINE.as_bytes()).unwrap();
        assert_eq!(
            real.spec_vol_id(),
            "pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c"
        );
        assert_eq!(real.node_name(), "haaaa-10-30-100-149");
    }

    #[test]
    fn decode_table() {
        // (input, Some(expected driverName) when it must load, None when it must fail)
        let cases: &[(&[u8], Option<&str>)] = &[
            (b"{\"driverName\":\"d\"}\n", Some("d")),
            (b"{\"driverName\":\"d\"}garbage after the value", Some("d")),
            (
                b"  {\"driverName\":\"d\"} {\"driverName\":\"e\"}",
                Some("d"),
            ),
            (b"{\"driverName\":\"d\",\"driverName\":\"e\"}", Some("e")),
            (b"{\"driverName\":\"d\",\"somethingNew\":\"x\"}", Some("d")),
            (b"null", Some("")),
            (b"{\"driverName\":null}", Some("")),
            (b"{}", Some("")),
            (b"", None),
            (b"   \n", None),
            (b"{\"volumeHandle\":\"x\",", None),
            (b"{\"driverName\":\"d\"", None),
            (b"{\"driverName\":1}", None),
            (b"{\"driverName\":{\"a\":\"b\"}}", None),
            (b"[\"driverName\"]", None),
            (b"\"just a string\"", None),
        ];
        for (input, expected) in cases {
            let got = decode(input);
            match expected {
                Some(driver) => assert_eq!(
                    got.as_ref().map(VolumeData::driver_name).ok(),
                    Some(*driver),
                    "input {:?}",
                    String::from_utf8_lossy(input)
                ),
                None => assert!(
                    got.is_err(),
                    "input {:?} decoded to {got:?}",
                    String::from_utf8_lossy(input)
                ),
            }
        }
    }

    #[test]
    fn invalid_utf8_in_a_string_becomes_the_replacement_character() {
        let data = decode(b"{\"driverName\":\"a\xffb\"}").unwrap();
        assert_eq!(data.driver_name(), "a\u{fffd}b");
    }

    #[test]
    fn encoder_reproduces_the_real_kubelet_line_byte_for_byte() {
        let data = VolumeData::from_pairs([
            ("volumeLifecycleMode", "Persistent"),
            ("volumeHandle", "pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c"),
            ("specVolID", "pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c"),
            ("nodeName", "haaaa-10-30-100-149"),
            ("driverName", "topsc.topke.io"),
            (
                "attachmentID",
                "csi-f68a9cdf83f572a3de797db507b8dd615595cf7054db3057b9e681bbbadab56a",
            ),
        ]);
        assert_eq!(String::from_utf8(encode(&data)).unwrap(), REAL_LINE);
    }

    #[test]
    fn encoder_escapes_like_go() {
        let data = VolumeData::from_pairs([(
            "k",
            "<a>&\"q\"\\ \n\r\t\u{8}\u{c}\u{1}\u{7f}\u{2028}\u{2029}é",
        )]);
        assert_eq!(
            String::from_utf8(encode(&data)).unwrap(),
            "{\"k\":\"\\u003ca\\u003e\\u0026\\\"q\\\"\\\\ \\n\\r\\t\\b\\f\\u0001\u{7f}\\u2028\\u2029é\"}\n"
        );
        assert_eq!(encode(&VolumeData::default()), b"{}\n");
    }

    #[test]
    fn missing_identity_keys_names_what_is_empty() {
        let data = VolumeData::from_pairs([("driverName", "d"), ("volumeHandle", "")]);
        assert_eq!(data.missing_identity_keys(), ["volumeHandle"]);
        assert!(
            VolumeData::from_pairs([("driverName", "d"), ("volumeHandle", "h")])
                .missing_identity_keys()
                .is_empty()
        );
    }

    proptest! {
        #[test]
        fn encode_then_decode_is_identity(map in proptest::collection::btree_map(".{0,12}", ".{0,24}", 0..6)) {
            let data = VolumeData::from_map(map);
            prop_assert_eq!(decode(&encode(&data)).unwrap(), data);
        }
    }
}

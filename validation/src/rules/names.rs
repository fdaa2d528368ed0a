//! Name and format predicates, reimplemented from apimachinery without regular expressions.

use std::borrow::Cow;

/// The upstream detail for a condition reason that fails [`is_condition_reason`]
/// (`metav1validation`'s `conditionReasonErrMsg`, with its two spaces before each `or`).
pub(crate) const CONDITION_REASON_DETAIL: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";

/// The upstream detail for a name that is not a lowercase RFC 1123 subdomain.
pub(crate) const DNS1123_SUBDOMAIN_DETAIL: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The upstream detail for a DNS-1123 subdomain over its length limit.
pub(crate) const DNS1123_SUBDOMAIN_MAX_LEN_DETAIL: &str = "must be no more than 253 characters";

/// Longest DNS-1123 subdomain.
pub(crate) const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// Longest CSI driver name (`ValidateCSIDriverName`).
pub(crate) const CSI_DRIVER_NAME_MAX_LEN: usize = 63;

/// Whether `reason` matches `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
pub(crate) fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let Some((first, rest)) = bytes.split_first() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    let inner_ok = rest
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':'));
    let last_ok = rest
        .last()
        .is_none_or(|b| b.is_ascii_alphanumeric() || *b == b'_');
    inner_ok && last_ok
}

/// Whether `name` matches the DNS-1123 subdomain regular expression (length not checked): labels
/// of `[a-z0-9-]` that start and end with `[a-z0-9]`, joined by dots. One pass over the bytes;
/// every name of every entry in a review goes through here.
pub(crate) fn matches_dns1123_subdomain(name: &str) -> bool {
    // `.` before the first byte: a name starts as a label does.
    let mut previous = b'.';
    for &byte in name.as_bytes() {
        let fits = match byte {
            b'a'..=b'z' | b'0'..=b'9' => true,
            b'-' => previous != b'.',
            b'.' => previous != b'.' && previous != b'-',
            _ => false,
        };
        if !fits {
            return false;
        }
        previous = byte;
    }
    previous != b'.' && previous != b'-'
}

/// The messages apimachinery's `IsDNS1123Subdomain` returns for `name`; empty when valid.
pub(crate) fn dns1123_subdomain_errors(name: &str) -> Vec<&'static str> {
    let mut errors = Vec::new();
    if name.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errors.push(DNS1123_SUBDOMAIN_MAX_LEN_DETAIL);
    }
    if !matches_dns1123_subdomain(name) {
        errors.push(DNS1123_SUBDOMAIN_DETAIL);
    }
    errors
}

/// Whether `name` passes `ValidateCSIDriverName`: non-empty, at most 63 bytes, and a DNS-1123
/// subdomain once lower-cased (as Go lower-cases, see [`go_to_lower`]).
pub(crate) fn is_csi_driver_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= CSI_DRIVER_NAME_MAX_LEN
        && matches_dns1123_subdomain(&go_to_lower(name))
}

/// Go's `strings.ToLower`: every character mapped by Unicode's *simple* lowercase mapping, one
/// character for one. Rust's `to_lowercase` uses the full mapping, which differs for one
/// character only: U+0130 (İ) becomes "i̇" there and `i` in Go. Two characters outside ASCII
/// lower-case into it, U+0130 to `i` and U+212A (KELVIN SIGN) to `k`, so a driver name holding
/// them is valid to Kubernetes.
pub(crate) fn go_to_lower(s: &str) -> Cow<'_, str> {
    if !s.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
        return Cow::Borrowed(s);
    }
    // The full mapping's first character is the simple mapping for every character, U+0130
    // included.
    Cow::Owned(
        s.chars()
            .map(|c| c.to_lowercase().next().unwrap_or(c))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_reasons() {
        let valid = [
            "A",
            "a",
            "DiskSlow",
            "my_name",
            "MY_NAME",
            "ReasonA,ReasonB",
            "ReasonA:ReasonB",
            "ReasonA,ReasonB:C_1",
            "A_",
            "A1",
            "a:b,c_d",
        ];
        let invalid = [
            "", "1abc", "_abc", ",a", "abc,", "abc:", "a b", "a-b", "a.b", "é", "aé", "a\n",
        ];
        for r in valid {
            assert!(is_condition_reason(r), "{r:?} should be valid");
        }
        for r in invalid {
            assert!(!is_condition_reason(r), "{r:?} should be invalid");
        }
    }

    #[test]
    fn dns1123_subdomains() {
        let valid = ["a", "csi.example.com", "a-b.c-d", "0", "1.2.3", "x--y"];
        let invalid = [
            "", "-a", "a-", ".a", "a.", "a..b", "A", "a_b", "a b", "a.-b",
        ];
        for n in valid {
            assert!(dns1123_subdomain_errors(n).is_empty(), "{n:?}");
        }
        for n in invalid {
            assert_eq!(
                dns1123_subdomain_errors(n),
                [DNS1123_SUBDOMAIN_DETAIL],
                "{n:?}"
            );
        }
        let long = "a".repeat(254);
        assert_eq!(
            dns1123_subdomain_errors(&long),
            [DNS1123_SUBDOMAIN_MAX_LEN_DETAIL]
        );
        assert!(dns1123_subdomain_errors(&"a".repeat(253)).is_empty());
    }

    /// The one-pass check against the regular expression's structure, label by label, over
    /// every string of up to five characters from the bytes that matter.
    #[test]
    fn dns1123_subdomain_shape_agrees_with_labels() {
        fn by_labels(name: &str) -> bool {
            let label = |label: &str| {
                let bytes = label.as_bytes();
                let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
                match (bytes.first(), bytes.last()) {
                    (Some(first), Some(last)) => {
                        alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
                    }
                    _ => false,
                }
            };
            !name.is_empty() && name.split('.').all(label)
        }
        let alphabet = ['a', 'z', '0', '9', '-', '.', 'A', '_', 'é'];
        let mut names = vec![String::new()];
        let mut checked = 0;
        for _ in 0..6 {
            let mut longer = Vec::new();
            for name in &names {
                assert_eq!(matches_dns1123_subdomain(name), by_labels(name), "{name:?}");
                checked += 1;
                longer.extend(alphabet.iter().map(|c| format!("{name}{c}")));
            }
            names = longer;
        }
        assert_eq!(checked, (0..6).map(|n| 9_usize.pow(n)).sum::<usize>());
    }

    #[test]
    fn csi_driver_names() {
        assert!(is_csi_driver_name("csi.example.com"));
        assert!(is_csi_driver_name("CSI.Example.COM"), "checked lower-cased");
        assert!(is_csi_driver_name(&"a".repeat(63)));
        assert!(!is_csi_driver_name(&"a".repeat(64)));
        assert!(!is_csi_driver_name(""));
        assert!(!is_csi_driver_name("csi_example"));
    }

    #[test]
    fn lower_casing_is_go_strings_to_lower() {
        let cases = [
            ("csi.example.com", "csi.example.com"),
            ("CSI.Example.COM", "csi.example.com"),
            // U+212A KELVIN SIGN and U+0130 LATIN CAPITAL LETTER I WITH DOT ABOVE lower-case
            // into ASCII in Go.
            ("\u{212a}8s.io", "k8s.io"),
            ("\u{130}o.example", "io.example"),
            ("ÉTÉ", "été"),
            ("\u{3a3}\u{3a3}", "\u{3c3}\u{3c3}"),
        ];
        for (name, want) in cases {
            assert_eq!(go_to_lower(name), want, "{name:?}");
        }
        assert!(is_csi_driver_name("\u{212a}8s.example.com"));
        assert!(is_csi_driver_name("d\u{130}sk.example.com"));
        assert!(
            !is_csi_driver_name("\u{212b}.example.com"),
            "ANGSTROM SIGN lower-cases to å"
        );
    }

    #[test]
    fn detail_texts_are_upstream() {
        assert!(CONDITION_REASON_DETAIL.contains("'my_name',  or 'MY_NAME',  or"));
        assert!(DNS1123_SUBDOMAIN_DETAIL.ends_with(
            "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ));
    }
}

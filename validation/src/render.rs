//! Values in error bodies as apimachinery renders them: a field of a Go `string` type as Go's
//! `%q` ([`GoQuoted`]); anything else (a value of a named string type such as
//! `VolumeHealthStatusType`, a whole list item) as Go's `json.Marshal` writes it ([`GoJson`] and
//! the item renderings here), `field.Error.ErrorBody`'s default branch.

use std::fmt::{self, Write};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::decode::{
    PodVolumeHealthView, RawList, StorageConditionView, VolumeConditionView, Walk,
};

/// A string as Go's `encoding/json` writes it: HTML-safe (`<`, `>`, `&` escaped), `\b`, `\f`,
/// `\n`, `\r`, `\t` and other control characters below U+0020 escaped, U+2028 and U+2029
/// escaped, everything else (DEL included) as it is.
#[derive(Clone, Copy, Debug)]
pub struct GoJson<'a>(pub &'a str);

impl fmt::Display for GoJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        let mut start = 0;
        for (i, c) in self.0.char_indices() {
            let escape = match c {
                '"' => "\\\"",
                '\\' => "\\\\",
                '\x08' => "\\b",
                '\x0c' => "\\f",
                '\n' => "\\n",
                '\r' => "\\r",
                '\t' => "\\t",
                '\0'..='\x1f' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => "",
                _ => continue,
            };
            f.write_str(&self.0[start..i])?;
            if escape.is_empty() {
                write!(f, "\\u{:04x}", c as u32)?;
            } else {
                f.write_str(escape)?;
            }
            start = i + c.len_utf8();
        }
        f.write_str(&self.0[start..])?;
        f.write_char('"')
    }
}

/// `metav1.Time`'s `MarshalJSON`: `null` for Go's zero time (and for an absent time, which Go
/// holds as the zero time), else RFC 3339 in UTC to the second.
fn write_time(out: &mut String, time: Option<&Time>) {
    match time {
        Some(Time(t)) if *t != go_zero_time() => {
            // Calendar fields, so that a time before 1970 with a fraction floors as Go's does.
            let _ = write!(out, "\"{}\"", t.strftime("%Y-%m-%dT%H:%M:%SZ"));
        }
        _ => out.push_str("null"),
    }
}

/// Go's `time.Time{}`: 0001-01-01T00:00:00Z.
fn go_zero_time() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::constant(-62_135_596_800, 0)
}

/// `"key":value` after the first member of an object.
fn member(out: &mut String, key: &str, value: impl fmt::Display) {
    let _ = write!(out, ",\"{key}\":{value}");
}

/// A `VolumeHealthCondition` (`status`, `reason`, `message` when not empty).
pub(crate) fn volume_condition(condition: &VolumeConditionView<'_>) -> String {
    let mut out = String::new();
    write_volume_condition(&mut out, condition);
    out
}

fn write_volume_condition(out: &mut String, condition: &VolumeConditionView<'_>) {
    let _ = write!(out, "{{\"status\":{}", GoJson(&condition.status));
    member(out, "reason", GoJson(&condition.reason));
    if let Some(message) = condition.message.as_deref().filter(|m| !m.is_empty()) {
        member(out, "message", GoJson(message));
    }
    out.push('}');
}

/// A `PodVolumeHealth` (`name`, `healthConditions` when not empty, `lastTransitionTime`, which
/// `omitempty` never omits: Go's struct is never empty).
pub(crate) fn pod_volume_health(entry: &PodVolumeHealthView<'_>) -> String {
    let mut out = format!("{{\"name\":{}", GoJson(&entry.name));
    if let Some(conditions) = entry.health_conditions.as_ref().filter(|c| c.len() > 0) {
        out.push_str(",\"healthConditions\":[");
        walk_items(conditions, |i, condition| {
            if i > 0 {
                out.push(',');
            }
            write_volume_condition(&mut out, condition);
        });
        out.push(']');
    }
    out.push_str(",\"lastTransitionTime\":");
    write_time(&mut out, entry.last_transition_time.as_ref());
    out.push('}');
    out
}

/// A `StorageHealthCondition` (`accessMode` and `volumeMode` are pointers: written when set,
/// even to `""`).
pub(crate) fn storage_condition(condition: &StorageConditionView<'_>) -> String {
    let mut out = format!("{{\"status\":{}", GoJson(&condition.status));
    member(&mut out, "reason", GoJson(&condition.reason));
    if let Some(message) = condition.message.as_deref().filter(|m| !m.is_empty()) {
        member(&mut out, "message", GoJson(message));
    }
    if let Some(mode) = &condition.access_mode {
        member(&mut out, "accessMode", GoJson(mode));
    }
    if let Some(mode) = &condition.volume_mode {
        member(&mut out, "volumeMode", GoJson(mode));
    }
    out.push_str(",\"lastTransitionTime\":");
    write_time(&mut out, condition.last_transition_time.as_ref());
    out.push('}');
    out
}

fn walk_items<'a, T: serde::Deserialize<'a> + crate::decode::Fingerprinted>(
    list: &RawList<'a, T>,
    mut visit: impl FnMut(usize, &T),
) {
    list.walk(|i, item| {
        visit(i, item);
        Walk::Next
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each expected string is what Go 1.26's `encoding/json` printed for the same input.
    #[test]
    fn strings_render_as_go_json_marshal() {
        let cases = [
            ("A<B&C>", r#""A\u003cB\u0026C\u003e""#),
            ("a\u{1}", r#""a\u0001""#),
            ("a\u{7f}", "\"a\u{7f}\""),
            ("\x08\x0c\n\r\t\"\\", r#""\b\f\n\r\t\"\\""#),
            ("\u{2028}\u{2029}", r#""\u2028\u2029""#),
            ("é日😀", "\"é日😀\""),
            ("\u{a0}\u{200b}\u{feff}", "\"\u{a0}\u{200b}\u{feff}\""),
            ("\x1f", r#""\u001f""#),
            ("", r#""""#),
        ];
        for (input, want) in cases {
            assert_eq!(GoJson(input).to_string(), want, "rendering {input:?}");
        }
    }

    fn entry(json: &str) -> String {
        let entry: PodVolumeHealthView<'_> = crate::decode::json::from_str(json).unwrap();
        pod_volume_health(&entry)
    }

    /// Expected strings from Go's `json.Marshal` of `corev1.PodVolumeHealth`.
    #[test]
    fn entries_render_whole() {
        assert_eq!(
            entry(r#"{"name":"vol"}"#),
            r#"{"name":"vol","lastTransitionTime":null}"#
        );
        assert_eq!(
            entry(r#"{"name":"vol","healthConditions":[]}"#),
            r#"{"name":"vol","lastTransitionTime":null}"#
        );
        assert_eq!(
            entry(
                r#"{"lastTransitionTime":"2026-07-20T14:00:00.123+02:00","name":"v",
                    "healthConditions":[{"message":"m","reason":"R","status":"Degraded"},
                                        {"status":"DataLoss","reason":"S","message":""}]}"#
            ),
            r#"{"name":"v","healthConditions":[{"status":"Degraded","reason":"R","message":"m"},{"status":"DataLoss","reason":"S"}],"lastTransitionTime":"2026-07-20T12:00:00Z"}"#
        );
        assert_eq!(
            entry(r#"{"name":"v","lastTransitionTime":"0001-01-01T00:00:00Z"}"#),
            r#"{"name":"v","lastTransitionTime":null}"#,
            "Go's zero time"
        );
        assert_eq!(
            entry(r#"{"name":"v","lastTransitionTime":"1969-12-31T23:59:59.5Z"}"#),
            r#"{"name":"v","lastTransitionTime":"1969-12-31T23:59:59Z"}"#
        );
    }

    #[test]
    fn storage_conditions_write_set_pointers() {
        let render = |json: &str| {
            let c: StorageConditionView<'_> = crate::decode::json::from_str(json).unwrap();
            storage_condition(&c)
        };
        assert_eq!(
            render(r#"{"status":"StorageDegraded","reason":"PoolFull","message":"twice"}"#),
            r#"{"status":"StorageDegraded","reason":"PoolFull","message":"twice","lastTransitionTime":null}"#
        );
        assert_eq!(
            render(
                r#"{"volumeMode":"Block","accessMode":"","reason":"R","status":"S<","lastTransitionTime":"2026-01-01T00:00:00Z"}"#
            ),
            r#"{"status":"S\u003c","reason":"R","accessMode":"","volumeMode":"Block","lastTransitionTime":"2026-01-01T00:00:00Z"}"#
        );
    }
}

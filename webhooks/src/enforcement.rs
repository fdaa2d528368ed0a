//! What `/validate` does with a review that field validation refuses: deny it (the default),
//! allow it with the errors as warnings, or allow it silently and only log and count it, so
//! that a cluster can watch what the rules would refuse before they are enforced.

use volume_health_validation::FieldError;

/// What the validating webhook does with a review that field validation refuses. Node
/// restriction, and an object that cannot be decoded as its kind, are denied whatever the
/// action: they are not policy to roll out but requests that must not pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EnforcementAction {
    /// Refuse it: the 422 with every error.
    #[default]
    Deny,
    /// Allow it; the answer carries the errors as warnings (kubectl prints them as
    /// `Warning: ...`).
    Warn,
    /// Allow it silently; the would-be denial is logged and counted.
    Dryrun,
}

impl EnforcementAction {
    /// The flag value, also the `action` label of the violations counter.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementAction::Deny => "deny",
            EnforcementAction::Warn => "warn",
            EnforcementAction::Dryrun => "dryrun",
        }
    }
}

/// kube-apiserver passes an admission webhook's warnings to its client through the recorder of
/// `k8s.io/apiserver/pkg/endpoints/filters/warning.go` (the validating dispatcher calls
/// `warning.AddWarning` for each). Its limits: `truncateItemRunes = 256` and
/// `truncateAtTotalRunes = 4 * 1024`. Warnings are counted in runes; once their total would go
/// over 4096, every warning, those already recorded included, is cut to its first 256 runes
/// (`string([]rune(text)[:256])`, no ellipsis), and further warnings are dropped once 4096
/// runes are written. `AdmissionResponse.warnings` documents the same ("Warnings over 256
/// characters and large numbers of warnings may be truncated"). So each warning is cut here as
/// the apiserver would cut it, and there are never so many that the total reaches the point
/// where the apiserver starts dropping them, with room left for other webhooks' warnings.
pub const WARNING_MAX_CHARS: usize = 256;

/// The apiserver's budget for all warnings of one request, in runes (see
/// [`WARNING_MAX_CHARS`]).
pub const WARNINGS_TOTAL_MAX_CHARS: usize = 4 * 1024;

/// At most this many warnings per answer; past it, the last one says how many more errors
/// there were.
pub const MAX_WARNINGS: usize = 10;

// Even at full length the warnings stay within the apiserver's total, with 1.5k runes to spare.
const _: () = assert!(MAX_WARNINGS * WARNING_MAX_CHARS <= WARNINGS_TOTAL_MAX_CHARS);

/// The warnings of `warn` mode for `errors`: one per error, with the strings the denial would
/// list (each distinct string once, as in its message), each cut to [`WARNING_MAX_CHARS`]
/// characters; past [`MAX_WARNINGS`], the first `MAX_WARNINGS - 1` and one saying how many
/// more there were.
///
/// The apiserver drops a warning that contains a control character; the error strings quote
/// every value as Go's `%q` does, so they never contain one.
pub fn warnings(errors: &[FieldError]) -> Vec<String> {
    let mut distinct: Vec<String> = Vec::with_capacity(errors.len().min(MAX_WARNINGS));
    for error in errors {
        let text = error.to_string();
        if !distinct.contains(&text) {
            distinct.push(text);
        }
    }
    let total = distinct.len();
    if total > MAX_WARNINGS {
        let shown = MAX_WARNINGS - 1;
        distinct.truncate(shown);
        distinct.push(format!(
            "and {} more validation errors, {total} in all",
            total - shown
        ));
    }
    distinct.into_iter().map(truncate).collect()
}

/// The first [`WARNING_MAX_CHARS`] characters of `text`, as the apiserver cuts a warning: on a
/// character boundary, nothing added.
fn truncate(mut text: String) -> String {
    if let Some((end, _)) = text.char_indices().nth(WARNING_MAX_CHARS) {
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use volume_health_validation::field::ErrorKind;

    use super::*;

    fn required(field: &str) -> FieldError {
        FieldError {
            field: field.to_owned(),
            kind: ErrorKind::Required,
        }
    }

    fn invalid(field: &str, value: &str) -> FieldError {
        FieldError {
            field: field.to_owned(),
            kind: ErrorKind::Invalid {
                value: value.to_owned(),
                detail: "a detail",
            },
        }
    }

    #[test]
    fn flag_values_are_the_metric_labels() {
        use clap::ValueEnum;
        for action in EnforcementAction::value_variants() {
            let value = action.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(value.as_deref(), Some(action.as_str()));
        }
        assert_eq!(EnforcementAction::default(), EnforcementAction::Deny);
    }

    #[test]
    fn one_warning_per_error_with_the_denial_strings() {
        let errors = [
            required("status.volumeHealth[0].name"),
            FieldError {
                field: "status.volumeHealth[1].healthConditions".to_owned(),
                kind: ErrorKind::TooMany { count: 17, max: 16 },
            },
        ];
        assert_eq!(
            warnings(&errors),
            [
                "status.volumeHealth[0].name: Required value",
                "status.volumeHealth[1].healthConditions: Too many: 17: must have at most 16 items",
            ]
        );
        assert!(warnings(&[]).is_empty());
    }

    #[test]
    fn identical_strings_warn_once_as_the_message_lists_them_once() {
        let errors = [required("a"), required("b"), required("a")];
        assert_eq!(
            warnings(&errors),
            ["a: Required value", "b: Required value"]
        );
    }

    #[test]
    fn a_long_warning_is_cut_to_256_characters_as_the_apiserver_cuts_it() {
        // `a: Invalid value: "` is 19 characters; the value's four-byte characters straddle
        // the limit, so a cut by bytes would split one.
        let value = "𝒜".repeat(300);
        let full = invalid("a", &value).to_string();
        let [warning] = warnings(&[invalid("a", &value)])
            .try_into()
            .unwrap_or_else(|w| {
                panic!("one warning expected, got {w:?}");
            });
        assert_eq!(warning.chars().count(), WARNING_MAX_CHARS);
        assert!(full.starts_with(&warning));
        assert_eq!(warning, full.chars().take(256).collect::<String>());
        assert!(warning.ends_with('𝒜'), "cut on a character boundary");

        // Exactly 256 characters is kept whole; one more is cut.
        for (len, want) in [(256, 256), (257, 256), (255, 255)] {
            let field = "x".repeat(len - ": Required value".len());
            let got = warnings(&[required(&field)]);
            assert_eq!(got[0].chars().count(), want, "{len}");
        }
    }

    #[test]
    fn past_ten_errors_the_last_warning_counts_the_rest() {
        let ten: Vec<FieldError> = (0..10).map(|i| required(&format!("f[{i}]"))).collect();
        let got = warnings(&ten);
        assert_eq!(got.len(), 10, "ten errors: ten warnings, no summary");
        assert_eq!(got[9], "f[9]: Required value");

        let many: Vec<FieldError> = (0..25).map(|i| required(&format!("f[{i}]"))).collect();
        let got = warnings(&many);
        assert_eq!(got.len(), MAX_WARNINGS);
        assert_eq!(got[8], "f[8]: Required value");
        assert_eq!(got[9], "and 16 more validation errors, 25 in all");
    }

    #[test]
    fn the_warnings_never_reach_the_apiserver_total() {
        let value = "v".repeat(1000);
        let errors: Vec<FieldError> = (0..40)
            .map(|i| invalid(&format!("f[{i}]"), &value))
            .collect();
        let got = warnings(&errors);
        let total: usize = got.iter().map(|w| w.chars().count()).sum();
        assert!(total <= WARNINGS_TOTAL_MAX_CHARS, "{total}");
        assert!(got.iter().all(|w| w.chars().count() <= WARNING_MAX_CHARS));
        assert!(
            got.iter().all(|w| !w.chars().any(char::is_control)),
            "the apiserver drops warnings with control characters"
        );
    }

    #[test]
    fn control_characters_in_values_are_quoted_not_sent() {
        let got = warnings(&[invalid("a", "bad\nreason\u{7}")]);
        assert!(!got[0].chars().any(char::is_control), "{got:?}");
        assert!(got[0].contains(r#""bad\nreason\a""#), "{got:?}");
    }
}

//! What `verify` found: a line per installed entry, the mode, and an exit status.

use std::fmt::Write as _;

use serde::Serialize;

/// What was shown of one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The apiserver called it and got its answer.
    Answered,
    /// The apiserver could not call it, or its answer turns writes away that it should not.
    Failed,
    /// Nothing failed, but nothing showed its answer either.
    Unshown,
}

/// One installed entry (a webhook entry or a policy binding) and what was shown of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryCheck {
    /// `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration`,
    /// `ValidatingAdmissionPolicyBinding` or `MutatingAdmissionPolicyBinding`.
    pub kind: String,
    /// The entry's or the binding's name.
    pub name: String,
    /// What was shown.
    pub outcome: Outcome,
    /// How: the answer, or why it failed.
    pub evidence: String,
}

/// What the installed webhook server was seen to do (`None`: not seen).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// Repair: a write it could repair was repaired (`true`) or answered unchanged (`false`).
    pub repair: Option<bool>,
    /// Its `CSIVolumeHealth` gate: a new health report dropped means off.
    pub gate: Option<bool>,
    /// Its enforcement of a refused write: `deny` or `warn`; `dryrun` answers nothing a
    /// client sees.
    pub enforcement: Option<String>,
}

/// The whole answer of `verify`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `webhooks`, `native`, `webhooks+native`, or `none`.
    pub mode: String,
    /// What the webhook server was seen to do.
    pub seen: Seen,
    /// One per installed entry and binding.
    pub entries: Vec<EntryCheck>,
    /// What to look at, when something failed.
    pub hints: Vec<String>,
}

/// How `verify` ends, for a CI job to gate on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every installed entry answered.
    Verified,
    /// An entry failed, or nothing is installed.
    Failed,
    /// Nothing failed, but some entry's answer was not shown.
    Unshown,
}

impl Report {
    /// The exit status the report calls for.
    pub fn status(&self) -> Status {
        if self.entries.is_empty() || self.entries.iter().any(|e| e.outcome == Outcome::Failed) {
            Status::Failed
        } else if self.entries.iter().any(|e| e.outcome == Outcome::Unshown) {
            Status::Unshown
        } else {
            Status::Verified
        }
    }

    /// The report as lines of text, every text from the cluster escaped.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "mode: {}", self.mode);
        let seen = [
            self.seen.repair.map(|on| format!("repair {}", on_off(on))),
            self.seen
                .gate
                .map(|on| format!("CSIVolumeHealth {}", on_off(on))),
            self.seen
                .enforcement
                .as_ref()
                .map(|e| format!("enforcement {e}")),
        ];
        let seen: Vec<String> = seen.into_iter().flatten().collect();
        if !seen.is_empty() {
            let _ = writeln!(out, "webhook server: {}", seen.join(", "));
        }
        for entry in &self.entries {
            let outcome = match entry.outcome {
                Outcome::Answered => "ok     ",
                Outcome::Failed => "FAILED ",
                Outcome::Unshown => "unshown",
            };
            let _ = writeln!(
                out,
                "{outcome} {} {}: {}",
                entry.kind,
                escape(&entry.name),
                escape(&entry.evidence)
            );
        }
        for hint in &self.hints {
            let _ = writeln!(out, "hint: {}", escape(hint));
        }
        let count = |o| self.entries.iter().filter(|e| e.outcome == o).count();
        let _ = writeln!(
            out,
            "verify: {} answered, {} failed, {} unshown{}",
            count(Outcome::Answered),
            count(Outcome::Failed),
            count(Outcome::Unshown),
            if self.entries.is_empty() {
                " (nothing of volume health is installed)"
            } else {
                ""
            }
        );
        out
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// A text from the cluster for a terminal: control and invisible characters escaped, at most
/// 1 KiB. An apiserver's message quotes what a webhook or a tenant wrote.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    error_line::cut(&out, error_line::MAX_MESSAGE_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(outcome: Outcome) -> EntryCheck {
        EntryCheck {
            kind: "ValidatingWebhookConfiguration".to_owned(),
            name: "csinode.validate.volume-health.github.io".to_owned(),
            outcome,
            evidence: "evidence".to_owned(),
        }
    }

    fn report(entries: Vec<EntryCheck>) -> Report {
        Report {
            mode: "webhooks".to_owned(),
            seen: Seen::default(),
            entries,
            hints: Vec::new(),
        }
    }

    #[test]
    fn the_status_is_the_worst_outcome_and_nothing_installed_fails() {
        let cases = [
            (vec![], Status::Failed),
            (vec![entry(Outcome::Answered)], Status::Verified),
            (
                vec![entry(Outcome::Answered), entry(Outcome::Unshown)],
                Status::Unshown,
            ),
            (
                vec![entry(Outcome::Unshown), entry(Outcome::Failed)],
                Status::Failed,
            ),
        ];
        for (entries, status) in cases {
            assert_eq!(report(entries.clone()).status(), status, "{entries:?}");
        }
    }

    #[test]
    fn texts_from_the_cluster_are_escaped_and_bounded() {
        let mut failed = entry(Outcome::Failed);
        failed.evidence = "x509: bad\u{1b}[31m\nnext\u{202e}".to_owned();
        let text = report(vec![failed]).text();
        assert!(
            text.contains(r"x509: bad\u{1b}[31m\u{a}next\u{202e}"),
            "{text}"
        );
        assert!(
            text.ends_with("verify: 0 answered, 1 failed, 0 unshown\n"),
            "{text}"
        );
        assert!(escape(&"a".repeat(5000)).len() <= error_line::MAX_MESSAGE_BYTES);
    }
}

//! What a top-level document is: one object, or a list whose `items` are read one at a time.
//! The JSON and the YAML reader both decide it here, member by member as their parser reads
//! the document, so the two formats cannot disagree on it.
//!
//! kubectl reads any document with an `items` sequence as a list (`kind: List`, `PodList`, ...),
//! the apiserver reads an object by its kind. The two agree except on a document of a checked
//! kind that also has an `items` sequence: which one it is depends on who reads it, so it is
//! refused rather than guessed (guessing "list" would leave the object itself unchecked).

use std::collections::HashSet;

use volume_health_validation::HealthResource;

/// The top-level members of one document, as they are read.
#[derive(Debug, Default)]
pub(crate) struct Envelope {
    members: HashSet<String>,
    kind: Option<String>,
    streamed: bool,
}

/// Why a document is refused.
pub(crate) type Refusal = String;

impl Envelope {
    /// A member named `name` starts. Duplicates are refused, as strict decoding (kubectl's
    /// default) refuses them: whichever of the two a reader took, another would take the other.
    pub(crate) fn member(&mut self, name: &str) -> Result<(), Refusal> {
        if !self.members.insert(name.to_owned()) {
            return Err(duplicate(name));
        }
        Ok(())
    }

    /// The value of `kind`, when it is a string.
    pub(crate) fn kind(&mut self, kind: &str) -> Result<(), Refusal> {
        self.kind = Some(kind.to_owned());
        self.ambiguous()
    }

    /// `items` holds a sequence: whether to read its entries as the list's objects.
    pub(crate) fn stream_items(&mut self) -> Result<(), Refusal> {
        self.streamed = true;
        self.ambiguous()
    }

    /// Whether the document was a list, its entries handed on one by one; else it is one
    /// object. Called when its last member has been read.
    pub(crate) fn is_list(&self) -> bool {
        self.streamed
    }

    fn ambiguous(&self) -> Result<(), Refusal> {
        match &self.kind {
            Some(kind) if self.streamed && checked_kind(kind) => Err(format!(
                "a {kind} with a top-level `items` sequence: kubectl reads it as a list, the \
                 apiserver as a {kind}; not checked"
            )),
            _ => Ok(()),
        }
    }
}

/// The message for a member given twice.
pub(crate) fn duplicate(name: &str) -> Refusal {
    format!(
        "duplicate member {}: refused, as strict decoding refuses it",
        serde_json::Value::from(name)
    )
}

fn checked_kind(kind: &str) -> bool {
    HealthResource::ALL.into_iter().any(|r| r.kind() == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_objects_and_refusals() {
        // kubectl's order: `items` before `kind`.
        let mut list = Envelope::default();
        for member in ["apiVersion", "items"] {
            assert_eq!(list.member(member), Ok(()));
        }
        assert_eq!(list.stream_items(), Ok(()));
        assert_eq!(list.member("kind"), Ok(()));
        assert_eq!(list.kind("List"), Ok(()));
        assert!(list.is_list());
        // Any other kind with `items` is a list, as kubectl reads it.
        let mut other = Envelope::default();
        assert_eq!(other.kind("Thing"), Ok(()));
        assert_eq!(other.stream_items(), Ok(()));
        // A checked kind with `items` is refused, whichever comes first.
        let mut before = Envelope::default();
        assert_eq!(before.kind("Pod"), Ok(()));
        assert!(before.stream_items().unwrap_err().starts_with("a Pod with"));
        let mut after = Envelope::default();
        assert_eq!(after.stream_items(), Ok(()));
        assert!(after.kind("CSINode").is_err());
        // One object.
        let mut object = Envelope::default();
        assert_eq!(object.kind("Pod"), Ok(()));
        assert!(!object.is_list());
        // Duplicates.
        let mut twice = Envelope::default();
        assert_eq!(twice.member("kind"), Ok(()));
        assert_eq!(
            twice.member("kind"),
            Err("duplicate member \"kind\": refused, as strict decoding refuses it".to_owned())
        );
    }
}

//! Drop on save: the gated field the mutating webhook removes from `object` while
//! `CSIVolumeHealth` is off, and the JSON Patch (RFC 6902) that removes it.

use serde::Serialize;

use crate::resource::HealthResource;

/// The decision of drop on save for one request: remove this resource's gated field from
/// `object`. [`AdmissionRequest::gated_field_to_drop`](super::AdmissionRequest::gated_field_to_drop)
/// makes it; the webhook sends [`patch`](Self::patch), and a program that wants the object the
/// apiserver would store applies the same patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropOnSave {
    resource: HealthResource,
}

impl DropOnSave {
    pub(crate) fn new(resource: HealthResource) -> Self {
        DropOnSave { resource }
    }

    /// The resource whose field is dropped.
    pub fn resource(self) -> HealthResource {
        self.resource
    }

    /// The field as a JSON Pointer (RFC 6901): `/status/volumeHealth`, ...
    pub fn pointer(self) -> &'static str {
        self.resource.gated_pointer()
    }

    /// The field as a field path: `status.volumeHealth`, ...
    pub fn field(self) -> &'static str {
        self.resource.gated_field()
    }

    /// The JSON Patch that drops the field: one `remove` at [`pointer`](Self::pointer).
    pub fn patch(self) -> [Remove; 1] {
        [Remove {
            path: self.pointer(),
        }]
    }

    /// The warning the client is shown when the field is dropped.
    pub fn warning(self) -> String {
        format!(
            "{} was dropped: feature gate CSIVolumeHealth is disabled",
            self.field()
        )
    }
}

/// A JSON Patch `remove` operation: `{"op":"remove","path":...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename = "remove")]
pub struct Remove {
    /// The JSON Pointer of the member removed.
    pub path: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_removes_the_gated_field() {
        for resource in HealthResource::ALL {
            let drop = DropOnSave::new(resource);
            assert_eq!(
                serde_json::to_string(&drop.patch()).unwrap(),
                format!(
                    r#"[{{"op":"remove","path":"/status/{}"}}]"#,
                    resource.gated_member()
                )
            );
        }
        assert_eq!(
            DropOnSave::new(HealthResource::CsiNodes).warning(),
            "status.storageHealth was dropped: feature gate CSIVolumeHealth is disabled"
        );
    }
}

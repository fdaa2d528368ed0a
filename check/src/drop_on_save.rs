//! The JSON Patch of drop on save: what the mutating webhook sends to remove a resource's gated
//! field, and what `check` applies to see the object the apiserver would validate.

use json_patch::jsonptr::Pointer;
use json_patch::{Patch, PatchOperation, RemoveOperation};
use volume_health_validation::HealthResource;

/// The JSON Pointer of a resource's gated field, as the patch that drops it names it.
pub fn gated_pointer(resource: HealthResource) -> &'static Pointer {
    // Each arm builds its own variant's pointer from the library's when compiled (`from_static`
    // of an invalid pointer does not build), so there is no table here to keep in step.
    match resource {
        HealthResource::Pods => {
            const { Pointer::from_static(HealthResource::Pods.gated_pointer()) }
        }
        HealthResource::PersistentVolumeClaims => {
            const { Pointer::from_static(HealthResource::PersistentVolumeClaims.gated_pointer()) }
        }
        HealthResource::CsiNodes => {
            const { Pointer::from_static(HealthResource::CsiNodes.gated_pointer()) }
        }
    }
}

/// The patch that drops a resource's gated field: one `remove` at [`gated_pointer`].
pub fn patch(resource: HealthResource) -> Patch {
    Patch(vec![PatchOperation::Remove(RemoveOperation {
        path: gated_pointer(resource).to_buf(),
    })])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_removes_the_librarys_pointer() {
        for resource in HealthResource::ALL {
            assert_eq!(gated_pointer(resource).as_str(), resource.gated_pointer());
            assert_eq!(
                serde_json::to_string(&patch(resource)).unwrap(),
                format!(
                    r#"[{{"op":"remove","path":"{}"}}]"#,
                    resource.gated_pointer()
                )
            );
        }
    }
}

//! The enforcement action the base and the warn overlays set.

use super::*;

/// The base denies, and says so; each warn overlay sets `warn` and changes nothing else: every
/// object is its plain overlay's, apart from that one variable.
#[test]
fn the_base_denies_and_the_warn_overlays_change_only_the_enforcement_action() {
    const VARIABLE: &str = "VOLUME_HEALTH_ENFORCEMENT_ACTION";
    for rendering in rendered() {
        let flags = ServerFlags::of(webhook_container(rendering));
        let want = if WARN.iter().any(|(warn, _)| rendering.name == *warn) {
            "warn"
        } else {
            "deny"
        };
        assert_eq!(
            flags.get("enforcement-action"),
            Some(want),
            "{}",
            rendering.name
        );
        assert!(
            flags.is_set("enforcement-action"),
            "{}: the action is set explicitly, so `kubectl set env` and overlays replace it",
            rendering.name
        );
        let set = array_at(webhook_container(rendering), "/env")
            .iter()
            .filter(|v| v["name"] == VARIABLE)
            .count();
        assert_eq!(set, 1, "{}: {VARIABLE} set once", rendering.name);
    }

    // The objects by kind, namespace and name, with the Deployment's variables in name order
    // and the enforcement action left out.
    let comparable = |rendering: &Rendered| -> std::collections::BTreeMap<String, Value> {
        rendering
            .objects
            .iter()
            .map(|object| {
                let mut object = object.clone();
                if object["kind"] == "Deployment" {
                    let env = object
                        .pointer_mut("/spec/template/spec/containers/0/env")
                        .and_then(Value::as_array_mut)
                        .expect("the container's env");
                    env.retain(|v| v["name"] != VARIABLE);
                    env.sort_by_key(|v| v["name"].as_str().unwrap_or_default().to_owned());
                }
                let key = format!(
                    "{}/{}/{}",
                    str_at(&object, "/kind"),
                    object["metadata"]["namespace"].as_str().unwrap_or(""),
                    str_at(&object, "/metadata/name")
                );
                (key, object)
            })
            .collect()
    };
    for (warn, plain) in WARN {
        assert_eq!(
            comparable(rendering(warn)),
            comparable(rendering(plain)),
            "{warn} differs from {plain} beyond the enforcement action"
        );
    }
}

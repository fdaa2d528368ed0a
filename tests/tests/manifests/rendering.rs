//! Every kustomization renders, into the webhooks' namespace.

use super::*;

#[test]
fn every_kustomization_is_listed_and_renders() {
    let listed: BTreeSet<String> = KUSTOMIZATIONS.iter().map(|k| (*k).to_owned()).collect();
    assert_eq!(
        kustomization_dirs(),
        listed,
        "every kustomization under manifests/ must be listed (and so rendered and checked) by these tests"
    );
    for rendering in rendered() {
        assert!(
            !rendering.objects.is_empty(),
            "{} renders nothing",
            rendering.name
        );
        for object in &rendering.objects {
            for field in ["/apiVersion", "/kind", "/metadata/name"] {
                str_at(object, field);
            }
        }
        let names: Vec<(String, String, String)> = rendering
            .objects
            .iter()
            .map(|o| {
                let namespace = o["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
                (
                    str_at(o, "/kind").to_owned(),
                    namespace,
                    str_at(o, "/metadata/name").to_owned(),
                )
            })
            .collect();
        let unique: BTreeSet<_> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "{}: duplicate objects",
            rendering.name
        );
    }
}

#[test]
fn namespaced_objects_live_in_the_webhooks_namespace() {
    const CLUSTER_SCOPED: &[&str] = &[
        "Namespace",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    for rendering in rendered() {
        for object in &rendering.objects {
            let kind = str_at(object, "/kind");
            let namespace = object["metadata"]["namespace"].as_str();
            if CLUSTER_SCOPED.contains(&kind) {
                assert_eq!(
                    namespace, None,
                    "{}: {kind} is cluster-scoped",
                    rendering.name
                );
            } else {
                assert_eq!(
                    namespace,
                    Some(NAMESPACE),
                    "{}: {kind} {}",
                    rendering.name,
                    object["metadata"]["name"]
                );
            }
        }
        assert_eq!(
            str_at(rendering.one("Namespace"), "/metadata/name"),
            NAMESPACE
        );
    }
}

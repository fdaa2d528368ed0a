//! The webhook configurations: the apiserver contract, coverage, namespaces, trust.

use super::*;

/// The resources whose writes carry a gated field, as `(group, resource, subresource)`: the
/// mutating webhooks drop the field from every one of them.
pub(crate) const GATED: &[(&str, &str, &str)] = &[
    ("", "pods", "status"),
    ("", "persistentvolumeclaims", ""),
    ("", "persistentvolumeclaims", "status"),
    ("storage.k8s.io", "csinodes", ""),
    ("storage.k8s.io", "csinodes", "status"),
];

/// The writes the base's validating entries cover: only `csinodes/status`, where the
/// project's own rule on storage conditions can differ from in-tree's. Pods and claims have
/// no entry of their own in the base (in-tree answers every rule of theirs); the writer list
/// adds one for `persistentvolumeclaims/status` (components/pvc-health-writers).
const VALIDATED: &[(&str, &str, &str)] = &[("storage.k8s.io", "csinodes", "status")];

fn probe_request(
    group: &'static str,
    resource: &'static str,
    sub: &'static str,
    operation: &'static str,
) -> AdmissionRequest {
    let namespace = if group.is_empty() { "default" } else { "" };
    AdmissionRequest {
        group,
        version: "v1",
        resource,
        sub_resource: sub,
        kind: "Object",
        namespace,
        name: "x".to_owned(),
        operation,
        username: "admin",
        groups: &["system:masters"],
        object: None,
        old_object: None,
    }
}

pub(crate) fn configurations(rendering: &Rendered) -> [(&'static str, &Value); 2] {
    [
        ("mutating", rendering.one("MutatingWebhookConfiguration")),
        (
            "validating",
            rendering.one("ValidatingWebhookConfiguration"),
        ),
    ]
}

#[test]
fn webhook_configurations_follow_the_apiserver_contract() {
    for rendering in rendered().iter().chain(switched()) {
        let mut names = BTreeSet::new();
        for (what, configuration) in configurations(rendering) {
            let webhooks = array_at(configuration, "/webhooks");
            assert!(
                !webhooks.is_empty(),
                "{}: {what} configuration has no webhooks",
                rendering.name
            );
            for webhook in webhooks {
                let name = str_at(webhook, "/name");
                assert!(
                    name.split('.').count() >= 3,
                    "{name}: webhook names must be fully qualified"
                );
                assert!(
                    names.insert(name.to_owned()),
                    "{name}: duplicate webhook name"
                );
                assert_eq!(
                    strings_at(webhook, "/admissionReviewVersions"),
                    ["v1"],
                    "{name}: admissionReviewVersions"
                );
                assert_eq!(webhook["sideEffects"], "None", "{name}: sideEffects");
                assert_eq!(webhook["matchPolicy"], "Equivalent", "{name}: matchPolicy");
                let policy = webhook["failurePolicy"].as_str();
                assert!(
                    matches!(policy, Some("Fail" | "Ignore")),
                    "{name}: failurePolicy must be explicit"
                );
                let timeout = webhook["timeoutSeconds"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name}: timeoutSeconds must be explicit"));
                assert!(
                    (1..=5).contains(&timeout),
                    "{name}: timeoutSeconds {timeout} must be 1..=5"
                );
                assert!(
                    webhook.get("objectSelector").is_none(),
                    "{name}: users control object labels"
                );

                let conditions = array_at(webhook, "/matchConditions");
                assert!(
                    !conditions.is_empty(),
                    "{name}: matchConditions keep unrelated writes away"
                );
                assert!(conditions.len() <= 64, "{name}: at most 64 matchConditions");
                let condition_names: BTreeSet<&str> =
                    conditions.iter().map(|c| str_at(c, "/name")).collect();
                assert_eq!(
                    condition_names.len(),
                    conditions.len(),
                    "{name}: matchCondition names must be unique"
                );

                for rule in array_at(webhook, "/rules") {
                    let operations = strings_at(rule, "/operations");
                    assert!(
                        operations.iter().all(|op| op == "CREATE" || op == "UPDATE"),
                        "{name}: only CREATE and UPDATE can carry a gated field, got {operations:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn only_the_writer_list_fails_closed() {
    // A refused kubelet status write is retried for ever (and a pod's carries its container
    // states), so every entry a kubelet's write can reach fails open; only the rule about
    // who may write a claim's health fails closed, and kubelets never reach it.
    let writers = writers_entry();
    let repairs = repair_entries();
    let all = rendered()
        .iter()
        .chain(switched())
        .flat_map(|r| configurations(r).map(|(_, c)| c))
        .chain([&writers, &repairs]);
    for configuration in all {
        for webhook in array_at(configuration, "/webhooks") {
            let name = str_at(webhook, "/name");
            let want = if name == "pvc-writers.validate.volume-health.github.io" {
                "Fail"
            } else {
                "Ignore"
            };
            assert_eq!(webhook["failurePolicy"], want, "{name}");
        }
    }
}

/// Asserts that `webhooks` cover `operations` of each of `covered`, never a DELETE, and
/// nothing else: pods themselves (the apiserver resets their status), other subresources,
/// other resources, and the gated resources outside `covered`.
fn assert_covers(
    what: &str,
    webhooks: &[Value],
    covered: &[(&'static str, &'static str, &'static str)],
    operations: &[&'static str],
) {
    for &(group, resource, sub) in covered {
        for &operation in operations {
            let request = probe_request(group, resource, sub, operation);
            assert!(
                webhooks.iter().any(|w| rules_match(w, &request)),
                "{what}: do not cover {operation} of {resource}/{sub} ({group})"
            );
        }
        let delete = probe_request(group, resource, sub, "DELETE");
        assert!(
            !webhooks.iter().any(|w| rules_match(w, &delete)),
            "{what}: cover DELETE of {resource}/{sub} ({group})"
        );
    }
    let others = [
        ("", "pods", ""),
        ("", "pods", "ephemeralcontainers"),
        ("", "persistentvolumes", "status"),
        ("", "configmaps", ""),
        ("storage.k8s.io", "csidrivers", ""),
        ("storage.k8s.io", "volumeattachments", "status"),
        ("coordination.k8s.io", "leases", ""),
    ];
    let uncovered = GATED.iter().filter(|gated| !covered.contains(gated));
    for &(group, resource, sub) in uncovered.chain(&others) {
        let request = probe_request(group, resource, sub, "UPDATE");
        assert!(
            !webhooks.iter().any(|w| rules_match(w, &request)),
            "{what}: must not cover {resource}/{sub} ({group})"
        );
    }
}

/// The status subresources, whose updates repair covers: a writer that is refused retries
/// them; the main resources and creates carry no status a writer waits on.
const REPAIRED: &[(&str, &str, &str)] = &[
    ("", "pods", "status"),
    ("", "persistentvolumeclaims", "status"),
    ("storage.k8s.io", "csinodes", "status"),
];

#[test]
fn each_configuration_covers_its_writes_and_nothing_else() {
    for rendering in rendered() {
        let [(_, mutating), (_, validating)] = configurations(rendering);
        let name = rendering.name;
        // With the gate on (every install), the mutating entries are repair's only.
        assert_covers(
            &format!("{name}: the mutating webhooks"),
            array_at(mutating, "/webhooks"),
            REPAIRED,
            &["UPDATE"],
        );
        let create = probe_request("", "pods", "status", "CREATE");
        assert!(
            !array_at(mutating, "/webhooks")
                .iter()
                .any(|w| rules_match(w, &create)),
            "{name}: a pod status CREATE carries no report to repair"
        );
        assert_covers(
            &format!("{name}: the validating webhooks"),
            array_at(validating, "/webhooks"),
            VALIDATED,
            &["CREATE", "UPDATE"],
        );
    }
}

#[test]
fn the_switch_drops_every_gated_field_on_create_and_update() {
    for switched in switched() {
        let overlay = switched.name;
        let [(_, mutating), _] = configurations(switched);
        let drop: Vec<Value> = array_at(mutating, "/webhooks")
            .iter()
            .filter(|w| !is_repair_entry(w))
            .cloned()
            .collect();
        assert_covers(
            &format!("{overlay} with {VOLUME_HEALTH_OFF}: drop on save's entries"),
            &drop,
            GATED,
            &["CREATE", "UPDATE"],
        );
    }
}

#[test]
fn own_namespace_is_excluded_and_every_other_namespace_is_not() {
    for rendering in rendered().iter().chain(switched()) {
        for (_, configuration) in configurations(rendering) {
            for webhook in array_at(configuration, "/webhooks") {
                let name = str_at(webhook, "/name");
                let namespaced = array_at(webhook, "/rules")
                    .iter()
                    .any(|r| r["scope"] != "Cluster");
                if !namespaced {
                    assert!(
                        webhook.get("namespaceSelector").is_none(),
                        "{name}: a namespace selector never filters cluster-scoped objects; leave it out"
                    );
                    continue;
                }
                let selector = &webhook["namespaceSelector"];
                assert!(
                    !selector_matches(selector, &namespace_labels(NAMESPACE)),
                    "{name}: must exclude {NAMESPACE}"
                );
                for other in ["default", "kube-system", "apps", "volume-health-tests"] {
                    assert!(
                        selector_matches(selector, &namespace_labels(other)),
                        "{name}: must not exclude {other}"
                    );
                }
            }
        }
    }
}

#[test]
fn overlays_change_only_how_the_apiserver_trusts_the_webhooks() {
    let without_ca = |configuration: &Value| {
        let mut webhooks = configuration["webhooks"].clone();
        for webhook in webhooks.as_array_mut().expect("webhooks") {
            webhook["clientConfig"]
                .as_object_mut()
                .expect("clientConfig")
                .remove("caBundle");
        }
        webhooks
    };
    let base = rendering("base");
    for name in INSTALLABLE {
        for ((what, overlay), (_, original)) in configurations(rendering(name))
            .into_iter()
            .zip(configurations(base))
        {
            assert_eq!(
                without_ca(overlay),
                without_ca(original),
                "{name}: the {what} webhooks differ from the base beyond the CA"
            );
        }
    }
}

#[test]
fn cert_manager_overlay_injects_the_ca_of_the_serving_certificate() {
    let rendering = rendering("overlays/cert-manager");
    let service = rendering.one("Service");
    let service_dns = format!(
        "{}.{}.svc",
        str_at(service, "/metadata/name"),
        str_at(service, "/metadata/namespace")
    );
    let secret = tls_secret_name(rendering);

    let serving = rendering
        .all("Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == secret)
        .unwrap_or_else(|| panic!("no Certificate writes the mounted Secret {secret}"));
    assert!(
        strings_at(serving, "/spec/dnsNames").contains(&service_dns),
        "the certificate must be valid for {service_dns}"
    );
    assert_ne!(
        serving["spec"]["isCA"], true,
        "the serving certificate is not a CA"
    );

    // The issuer chain ends in an installed Issuer (cert-manager must not need a
    // ClusterIssuer the operator has to create).
    let mut issuer_ref = &serving["spec"]["issuerRef"];
    let mut reached_root = false;
    for _ in 0..4 {
        assert_eq!(issuer_ref["kind"], "Issuer", "issuerRef kind");
        let issuer = rendering
            .find("Issuer", Some(NAMESPACE), str_at(issuer_ref, "/name"))
            .unwrap_or_else(|| panic!("Issuer {} is not installed", issuer_ref["name"]));
        if issuer["spec"].get("selfSigned").is_some() {
            reached_root = true;
            break;
        }
        let ca_secret = str_at(issuer, "/spec/ca/secretName");
        let ca = rendering
            .all("Certificate")
            .into_iter()
            .find(|c| c["spec"]["secretName"] == ca_secret && c["spec"]["isCA"] == true)
            .unwrap_or_else(|| panic!("no CA Certificate writes {ca_secret}"));
        issuer_ref = &ca["spec"]["issuerRef"];
    }
    assert!(
        reached_root,
        "the issuer chain must end in a self-signed Issuer"
    );

    let expected = format!("{NAMESPACE}/{}", str_at(serving, "/metadata/name"));
    for (what, configuration) in configurations(rendering) {
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], expected,
            "{what} configuration: CA injection"
        );
        for webhook in array_at(configuration, "/webhooks") {
            assert!(
                webhook["clientConfig"].get("caBundle").is_none(),
                "{}: the injector owns caBundle",
                webhook["name"]
            );
        }
    }
    assert!(
        rendering.find("Secret", Some(NAMESPACE), secret).is_none(),
        "cert-manager creates the Secret itself"
    );
}

/// Decodes a base64 field the way the apiserver does (Go's decoder skips line breaks,
/// which kustomize inserts into long values).
fn decode(value: &Value) -> String {
    let text: String = value
        .as_str()
        .unwrap_or_else(|| panic!("expected base64, got {value}"))
        .split_whitespace()
        .collect();
    String::from_utf8(BASE64.decode(text).expect("valid base64")).expect("UTF-8 stand-in")
}

#[test]
fn provided_certs_overlay_puts_the_ca_into_every_webhook() {
    let rendering = rendering(PROVIDED_CERTS);
    let file = |name: &str| {
        PROVIDED_CERT_FILES
            .iter()
            .find(|(f, _)| *f == name)
            .expect("stand-in file")
            .1
    };
    let secret_name = tls_secret_name(rendering);
    let secret = rendering
        .find("Secret", Some(NAMESPACE), secret_name)
        .unwrap_or_else(|| panic!("the overlay must create the mounted Secret {secret_name}"));
    assert_eq!(secret["type"], "kubernetes.io/tls");
    for key in ["tls.crt", "tls.key"] {
        assert_eq!(decode(&secret["data"][key]), file(key), "Secret key {key}");
    }
    for (what, configuration) in configurations(rendering) {
        assert!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null(),
            "{what}: no injection"
        );
        for webhook in array_at(configuration, "/webhooks") {
            assert_eq!(
                decode(&webhook["clientConfig"]["caBundle"]),
                file("ca.crt"),
                "{}: caBundle must be the provided ca.crt",
                webhook["name"]
            );
        }
    }
    assert!(
        rendering.all("Certificate").is_empty() && rendering.all("Issuer").is_empty(),
        "no cert-manager objects"
    );
}

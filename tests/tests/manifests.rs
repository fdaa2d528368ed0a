//! Offline checks of the deployment manifests under `manifests/`.
//!
//! Every kustomization is rendered with `kubectl kustomize` (kubectl is required; the
//! tests fail without it) and checked for what an operator relies on: the server's
//! routes, ports and flags line up with the Service, probes and webhook configurations,
//! every gated resource is covered, the webhooks' own namespace is excluded, and the pods
//! run restricted. Every `matchConditions` expression is evaluated with a CEL interpreter
//! against sample requests shaped as the kube-apiserver presents them, for the admission
//! webhooks and for the authorizer. The apiserver-side files of the authorizer (its
//! AuthorizationConfiguration, kubeconfig, static pod and kubeadm fragment) are checked
//! against each other.

mod manifests_support;

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use manifests_support::apiserver::{
    ACCESS_REVIEW_FIELDS, ADMISSION_REQUEST_FIELDS, AccessReview, AdmissionRequest, Dispatch,
    ResourceAttributes, Role, authorizer_sends, dispatch, identifiers, namespace_labels,
    rules_match, selector_matches,
};
use manifests_support::server::{
    AUTHORIZE_PATH, LIVENESS_PATH, MUTATE_PATH, PROPAGATION, READINESS_PATH, ServerFlags,
    VALIDATE_PATH, parse_duration,
};
use manifests_support::{
    COMPONENTS, INSTALLABLE, KUSTOMIZATIONS, NAMESPACE, PROVIDED_CERT_FILES, PROVIDED_CERTS,
    Rendered, STATIC_INSTALLS, WARN, array_at, component_dirs, kustomization_dirs, manifests_dir,
    read_manifest, read_single_manifest, render_operator_overlay, render_with_components, rendered,
    rendering, str_at, strings_at,
};

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// The Deployment
// ---------------------------------------------------------------------------------------

fn deployment(rendering: &Rendered) -> &Value {
    rendering.one("Deployment")
}

fn pod_spec(rendering: &Rendered) -> &Value {
    &deployment(rendering)["spec"]["template"]["spec"]
}

fn webhook_container(rendering: &Rendered) -> &Value {
    let containers = array_at(pod_spec(rendering), "/containers");
    assert_eq!(
        containers.len(),
        1,
        "{}: one container expected",
        rendering.name
    );
    &containers[0]
}

fn pod_labels(rendering: &Rendered) -> std::collections::BTreeMap<String, String> {
    let labels = deployment(rendering)["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("pod template labels");
    labels
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("label value").to_owned()))
        .collect()
}

/// The Secret the webhook container reads its serving certificate from.
fn tls_secret_name(rendering: &Rendered) -> &str {
    let flags = ServerFlags::of(webhook_container(rendering));
    let cert = flags.get("tls-cert-file").expect("--tls-cert-file");
    let mount = array_at(webhook_container(rendering), "/volumeMounts")
        .iter()
        .find(|m| cert.starts_with(&format!("{}/", str_at(m, "/mountPath"))))
        .unwrap_or_else(|| panic!("{}: {cert} is not inside a volume mount", rendering.name));
    let volume = array_at(pod_spec(rendering), "/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume is declared");
    str_at(volume, "/secret/secretName")
}

/// Resolves a container port reference (number or name) to a number.
fn container_port(container: &Value, reference: &Value) -> u16 {
    if let Some(number) = reference.as_u64() {
        return u16::try_from(number).expect("port number");
    }
    let name = reference.as_str().expect("port is a number or a name");
    let port = array_at(container, "/ports")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port named {name}"));
    u16::try_from(port["containerPort"].as_u64().expect("containerPort")).expect("port number")
}

#[test]
fn deployment_is_highly_available() {
    for name in INSTALLABLE {
        let rendering = rendering(name);
        let deployment = deployment(rendering);
        let spec = pod_spec(rendering);
        let labels = pod_labels(rendering);
        assert_eq!(deployment["spec"]["replicas"], 3, "{name}: replicas");
        assert!(
            selector_matches(&deployment["spec"]["selector"], &labels),
            "{name}: the Deployment selector must select its pods"
        );
        assert_eq!(
            spec["priorityClassName"], "system-cluster-critical",
            "{name}: priority class"
        );

        // Spread over nodes: a topology spread constraint or pod anti-affinity on the
        // hostname, selecting the webhook's own pods.
        let spread = array_at(spec, "/topologySpreadConstraints")
            .iter()
            .any(|c| {
                c["topologyKey"] == "kubernetes.io/hostname"
                    && c["maxSkew"] == 1
                    && selector_matches(&c["labelSelector"], &labels)
            });
        let anti_affinity = [
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ]
        .iter()
        .flat_map(|field| array_at(spec, &format!("/affinity/podAntiAffinity/{field}")))
        .map(|term| term.get("podAffinityTerm").unwrap_or(term))
        .any(|term| {
            term["topologyKey"] == "kubernetes.io/hostname"
                && selector_matches(&term["labelSelector"], &labels)
        });
        assert!(
            spread || anti_affinity,
            "{name}: replicas must be spread over nodes"
        );

        // The budget selects these pods, allows a drain and keeps two of three up.
        let budget = rendering.one("PodDisruptionBudget");
        assert!(
            selector_matches(&budget["spec"]["selector"], &labels),
            "{name}: the PodDisruptionBudget must select the webhook pods"
        );
        let replicas = deployment["spec"]["replicas"].as_i64().expect("replicas");
        let may_be_down = match (
            budget["spec"]["maxUnavailable"].as_i64(),
            budget["spec"]["minAvailable"].as_i64(),
        ) {
            (Some(max_unavailable), None) => max_unavailable,
            (None, Some(min_available)) => replicas - min_available,
            other => panic!(
                "{name}: the budget needs an integer maxUnavailable or minAvailable, has {other:?}"
            ),
        };
        assert!(
            may_be_down >= 1,
            "{name}: the budget must allow evictions, or node drains block"
        );
        assert!(
            replicas - may_be_down >= 2,
            "{name}: the budget must keep two replicas up"
        );

        // Clusters that limit critical priority classes to namespaces with a matching
        // quota admit the pods, rollout surge included.
        let priority = str_at(spec, "/priorityClassName");
        let quota = rendering
            .all("ResourceQuota")
            .into_iter()
            .find(|q| {
                array_at(q, "/spec/scopeSelector/matchExpressions")
                    .iter()
                    .any(|e| {
                        e["scopeName"] == "PriorityClass"
                            && e["operator"] == "In"
                            && strings_at(e, "/values").iter().any(|v| v == priority)
                    })
            })
            .unwrap_or_else(|| panic!("{name}: no ResourceQuota admits pods of {priority}"));
        let surge = deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"]
            .as_i64()
            .expect("integer maxSurge");
        let pods: i64 = str_at(quota, "/spec/hard/pods").parse().expect("pod count");
        assert!(
            pods >= replicas + surge,
            "{name}: the quota ({pods} pods) must admit {replicas} replicas and {surge} surge pods"
        );

        // The rolling update never takes a replica away before its successor is ready.
        assert_eq!(
            deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
            "{name}: rollout"
        );
    }
}

/// The drain's budget. From SIGTERM, the server keeps accepting, and asks every client to
/// reconnect, for `--shutdown-delay`: the endpoint must be out of every load balancer by then,
/// which takes the readiness probe's period × failure threshold (when the probe is what takes it
/// out) plus the propagation. Then the connections still open end by themselves within
/// `--shutdown-timeout`: in-flight requests within `--request-timeout`, unused keep-alive
/// connections at `--header-read-timeout`. The grace period covers both.
#[test]
fn the_shutdown_budget_adds_up() {
    for name in INSTALLABLE {
        let rendering = rendering(name);
        let container = webhook_container(rendering);
        let flags = ServerFlags::of(container);
        let probe = &container["readinessProbe"];
        let seconds = |field: &str| {
            Duration::from_secs(
                probe[field]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name}: readinessProbe.{field}")),
            )
        };
        let threshold = u32::try_from(probe["failureThreshold"].as_u64().expect("threshold"))
            .expect("threshold");
        let delay = flags.duration("shutdown-delay");
        let endpoint_gone = seconds("periodSeconds") * threshold + PROPAGATION;
        assert!(
            delay >= endpoint_gone,
            "{name}: --shutdown-delay {delay:?} ends before the endpoint can be gone \
             (readiness period × failure threshold + propagation = {endpoint_gone:?})"
        );
        let drain = flags.duration("shutdown-timeout");
        for flag in ["request-timeout", "header-read-timeout"] {
            assert!(
                drain > flags.duration(flag),
                "{name}: --shutdown-timeout {drain:?} must outlast --{flag}, so that connections end by themselves"
            );
        }
        let grace = Duration::from_secs(
            pod_spec(rendering)["terminationGracePeriodSeconds"]
                .as_u64()
                .expect("grace period"),
        );
        let needed = delay + drain;
        assert!(
            grace > needed,
            "{name}: grace period {grace:?} must exceed shutdown delay + drain = {needed:?}"
        );
        assert!(
            grace <= needed + Duration::from_secs(30),
            "{name}: grace period {grace:?} is far longer than needed"
        );
        assert!(
            container.pointer("/lifecycle/preStop").is_none(),
            "{name}: the server delays shutdown itself (--shutdown-delay); a preStop hook would add to it"
        );
    }
}

fn assert_restricted(what: &str, pod: &Value) {
    let pod_context = &pod["securityContext"];
    for container in array_at(pod, "/containers")
        .iter()
        .chain(array_at(pod, "/initContainers"))
    {
        let name = format!("{what}, container {}", container["name"]);
        let context = &container["securityContext"];
        let effective = |field: &str| {
            context
                .get(field)
                .or_else(|| pod_context.get(field))
                .cloned()
                .unwrap_or(Value::Null)
        };
        assert_eq!(effective("runAsNonRoot"), true, "{name}: runAsNonRoot");
        assert_ne!(effective("runAsUser"), 0, "{name}: runs as root");
        assert_eq!(
            effective("seccompProfile")["type"],
            "RuntimeDefault",
            "{name}: seccomp"
        );
        assert_eq!(
            context["allowPrivilegeEscalation"], false,
            "{name}: allowPrivilegeEscalation"
        );
        assert_eq!(
            context["readOnlyRootFilesystem"], true,
            "{name}: readOnlyRootFilesystem"
        );
        assert_ne!(context["privileged"], true, "{name}: privileged");
        assert_eq!(
            strings_at(context, "/capabilities/drop"),
            ["ALL"],
            "{name}: drop ALL capabilities"
        );
        assert!(
            array_at(context, "/capabilities/add").is_empty(),
            "{name}: adds capabilities"
        );
        let requests = &container["resources"]["requests"];
        assert!(
            requests["cpu"].is_string() && requests["memory"].is_string(),
            "{name}: cpu and memory requests"
        );
    }
    assert_eq!(
        pod["automountServiceAccountToken"], false,
        "{what}: the server needs no API token"
    );
    for field in ["hostPID", "hostIPC"] {
        assert_ne!(pod[field], true, "{what}: {field}");
    }
}

#[test]
fn pods_run_with_a_restricted_security_context() {
    for name in INSTALLABLE {
        let rendering = rendering(name);
        let spec = pod_spec(rendering);
        assert_restricted(name, spec);
        assert_ne!(
            spec["hostNetwork"], true,
            "{name}: the admission webhooks do not need the host network"
        );
        let account = str_at(spec, "/serviceAccountName");
        let account = rendering
            .find("ServiceAccount", Some(NAMESPACE), account)
            .unwrap_or_else(|| panic!("{name}: ServiceAccount {account} is not installed"));
        assert_eq!(
            account["automountServiceAccountToken"], false,
            "{name}: ServiceAccount token"
        );
        assert!(
            rendering.all("RoleBinding").is_empty()
                && rendering.all("ClusterRoleBinding").is_empty()
        );
        let namespace = rendering.one("Namespace");
        assert_eq!(
            namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted",
            "{name}: the namespace enforces the restricted Pod Security Standard"
        );
    }
    let static_pod = read_single_manifest("authz/volume-health-authz.yaml");
    assert_restricted("authz static pod", &static_pod["spec"]);
}

#[test]
fn server_flags_are_known_and_tls_files_come_from_the_mounted_secret() {
    for name in INSTALLABLE {
        let rendering = rendering(name);
        let container = webhook_container(rendering);
        let flags = ServerFlags::of(container);
        let image = str_at(container, "/image");
        assert!(
            image.starts_with("ghcr.io/volume-health/volume-health-webhook:"),
            "{name}: image {image}"
        );

        let secret_volume = array_at(pod_spec(rendering), "/volumes")
            .iter()
            .find(|v| v["secret"]["secretName"] == "volume-health-webhook-tls")
            .unwrap_or_else(|| panic!("{name}: the TLS Secret is not mounted"));
        let mount = array_at(container, "/volumeMounts")
            .iter()
            .find(|m| m["name"] == secret_volume["name"])
            .unwrap_or_else(|| panic!("{name}: the TLS volume is not mounted into the container"));
        assert!(
            mount.get("subPath").is_none(),
            "{name}: a subPath mount never sees Secret updates, so certificates would not rotate"
        );
        let mount_path = str_at(mount, "/mountPath");
        for (flag, key) in [
            ("tls-cert-file", "tls.crt"),
            ("tls-private-key-file", "tls.key"),
        ] {
            assert_eq!(
                flags.get(flag),
                Some(format!("{mount_path}/{key}").as_str()),
                "{name}: --{flag} must name {key} of the mounted Secret"
            );
        }
        assert!(
            !flags.is_set("self-signed-ca-file"),
            "{name}: a self-signed certificate would not match the caBundle the apiserver trusts"
        );
        let mode = secret_volume["secret"]["defaultMode"]
            .as_u64()
            .unwrap_or(0o644);
        assert_eq!(
            mode & 0o007,
            0,
            "{name}: the private key must not be world-readable (mode {mode:o})"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Enforcement action
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Static installs and versions
// ---------------------------------------------------------------------------------------

/// Each file of `manifests/install/` is its overlay as `kubectl kustomize` renders it today;
/// `make install-manifests` writes them.
#[test]
fn static_installs_are_their_overlays_rendered() {
    let dir = manifests_dir().join("install");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("manifests/install")
        .map(|e| {
            format!(
                "install/{}",
                e.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    let listed: BTreeSet<String> = STATIC_INSTALLS
        .iter()
        .map(|(f, _)| (*f).to_owned())
        .collect();
    assert_eq!(files, listed, "every static install is listed here");
    for (file, overlay) in STATIC_INSTALLS {
        assert_eq!(
            read_manifest(file),
            rendering(overlay).objects,
            "{file} is out of date: run `make install-manifests`"
        );
    }
}

/// Every image of the project that the manifests, the static installs and the chart pin is
/// tagged with the workspace version, which `make image` also tags by default; the CHANGELOG
/// has a section for it.
#[test]
fn images_are_tagged_with_the_workspace_version() {
    let want = format!("v{}", env!("CARGO_PKG_VERSION"));
    let mut images = Vec::new();
    let mut collect = |what: &str, value: &Value| {
        fn walk(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    for (key, value) in map {
                        match (key.as_str(), value) {
                            ("image", Value::String(image)) => found.push(image.clone()),
                            _ => walk(value, found),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        walk(value, &mut found);
        images.extend(found.into_iter().map(|image| (what.to_owned(), image)));
    };
    for rendering in rendered() {
        for object in &rendering.objects {
            collect(rendering.name, object);
        }
    }
    for (file, _) in STATIC_INSTALLS {
        for object in read_manifest(file) {
            collect(file, &object);
        }
    }
    for object in read_manifest(STATIC_POD) {
        collect(STATIC_POD, &object);
    }
    for doctor in ["doctor", "doctor/daemonset"] {
        for object in manifests_support::kustomize(&manifests_dir().join(doctor)) {
            collect(doctor, &object);
        }
    }
    let repository = manifests_dir().parent().expect("repository").to_path_buf();
    let chart_values: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repository.join("charts/volume-health/Chart.yaml"))
            .expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    assert_eq!(chart_values["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart_values["version"], env!("CARGO_PKG_VERSION"));
    let ours: Vec<&(String, String)> = images
        .iter()
        .filter(|(_, image)| image.starts_with("ghcr.io/volume-health/"))
        .collect();
    assert_eq!(
        ours.len(),
        images.len(),
        "only the project's images: {images:?}"
    );
    assert!(ours.len() >= 8, "{ours:?}");
    for (what, image) in ours {
        assert!(
            image.ends_with(&format!(":{want}")),
            "{what}: {image} is not tagged {want}, the workspace version"
        );
    }
    let changelog = std::fs::read_to_string(repository.join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## [{}]", env!("CARGO_PKG_VERSION"))),
        "CHANGELOG.md has no section for {}",
        env!("CARGO_PKG_VERSION")
    );
}

// ---------------------------------------------------------------------------------------
// Ports and routes
// ---------------------------------------------------------------------------------------

#[test]
fn probes_service_and_webhooks_use_the_servers_ports_and_routes() {
    for name in INSTALLABLE {
        let rendering = rendering(name);
        let container = webhook_container(rendering);
        let flags = ServerFlags::of(container);
        let secure_port = flags.port("secure-port");
        let health_port = flags.port("health-port");
        assert_ne!(
            secure_port, health_port,
            "{name}: the TLS and health ports must differ"
        );

        for (probe, path) in [
            ("readinessProbe", READINESS_PATH),
            ("livenessProbe", LIVENESS_PATH),
        ] {
            let get = &container[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name}: {probe} path");
            assert_eq!(
                container_port(container, &get["port"]),
                health_port,
                "{name}: {probe} must use --health-port"
            );
            assert_ne!(
                get["scheme"], "HTTPS",
                "{name}: the health port is plain HTTP"
            );
        }

        let service = rendering.one("Service");
        assert!(
            selector_matches(
                &json!({"matchLabels": service["spec"]["selector"]}),
                &pod_labels(rendering)
            ),
            "{name}: the Service must select the webhook pods"
        );
        for (kind, path) in [
            ("MutatingWebhookConfiguration", MUTATE_PATH),
            ("ValidatingWebhookConfiguration", VALIDATE_PATH),
        ] {
            for webhook in array_at(rendering.one(kind), "/webhooks") {
                let webhook_name = str_at(webhook, "/name");
                let reference = &webhook["clientConfig"]["service"];
                assert!(
                    webhook["clientConfig"].get("url").is_none(),
                    "{webhook_name}: use the Service, not a URL"
                );
                assert_eq!(
                    reference["name"], service["metadata"]["name"],
                    "{webhook_name}: Service name"
                );
                assert_eq!(
                    reference["namespace"], service["metadata"]["namespace"],
                    "{webhook_name}: Service namespace"
                );
                assert_eq!(reference["path"], path, "{webhook_name}: route");
                let port = reference["port"].as_u64().unwrap_or(443);
                let service_port = array_at(service, "/spec/ports")
                    .iter()
                    .find(|p| p["port"].as_u64() == Some(port))
                    .unwrap_or_else(|| panic!("{webhook_name}: the Service has no port {port}"));
                let target = service_port
                    .get("targetPort")
                    .unwrap_or(&service_port["port"]);
                assert_eq!(
                    container_port(container, target),
                    secure_port,
                    "{webhook_name}: Service port {port} must reach --secure-port"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Webhook configurations
// ---------------------------------------------------------------------------------------

/// The resources whose writes carry a gated field, as `(group, resource, subresource)`: the
/// mutating webhooks drop the field from every one of them.
const GATED: &[(&str, &str, &str)] = &[
    ("", "pods", "status"),
    ("", "persistentvolumeclaims", ""),
    ("", "persistentvolumeclaims", "status"),
    ("storage.k8s.io", "csinodes", ""),
    ("storage.k8s.io", "csinodes", "status"),
];

/// The writes with a validating rule: the gated fields are validated on `status` writes only,
/// and the name rule covers a node's CSINode itself. A claim's own writes have none.
const VALIDATED: &[(&str, &str, &str)] = &[
    ("", "pods", "status"),
    ("", "persistentvolumeclaims", "status"),
    ("storage.k8s.io", "csinodes", ""),
    ("storage.k8s.io", "csinodes", "status"),
];

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

fn configurations(rendering: &Rendered) -> [(&'static str, &Value); 2] {
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
    for rendering in rendered() {
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
fn every_gated_resource_is_covered_for_create_and_update_and_nothing_else() {
    for rendering in rendered() {
        for (what, configuration) in configurations(rendering) {
            let webhooks = array_at(configuration, "/webhooks");
            let covered = if what == "mutating" { GATED } else { VALIDATED };
            for &(group, resource, sub) in covered {
                for operation in ["CREATE", "UPDATE"] {
                    let request = probe_request(group, resource, sub, operation);
                    assert!(
                        webhooks.iter().any(|w| rules_match(w, &request)),
                        "{}: the {what} webhooks do not cover {operation} of {resource}/{sub} ({group})",
                        rendering.name
                    );
                }
                let delete = probe_request(group, resource, sub, "DELETE");
                assert!(
                    !webhooks.iter().any(|w| rules_match(w, &delete)),
                    "{}: {what} covers DELETE",
                    rendering.name
                );
            }
            // Nothing else: pods themselves (the apiserver resets their status), other
            // subresources, other resources; for validation, claims themselves.
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
                    "{}: the {what} webhooks must not cover {resource}/{sub} ({group})",
                    rendering.name
                );
            }
        }
    }
}

#[test]
fn own_namespace_is_excluded_and_every_other_namespace_is_not() {
    for rendering in rendered() {
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

// ---------------------------------------------------------------------------------------
// Admission matchConditions
// ---------------------------------------------------------------------------------------

const KUBELET: (&str, &[&str]) = (
    "system:node:node-1",
    &["system:nodes", "system:authenticated"],
);
const OTHER_KUBELET: (&str, &[&str]) = (
    "system:node:node-2",
    &["system:nodes", "system:authenticated"],
);
/// Named like a node, but not in system:nodes: not a node.
const NODE_NAMED_USER: (&str, &[&str]) = ("system:node:node-1", &["system:authenticated"]);
/// A user with no groups at all (the `groups` field is then absent).
const GROUPLESS_NODE_NAME: (&str, &[&str]) = ("system:node:node-1", &[]);
const HEALTH_MONITOR: (&str, &[&str]) = (
    "system:serviceaccount:kube-system:csi-health-monitor",
    &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
);
const RESIZER: (&str, &[&str]) = (
    "system:serviceaccount:kube-system:csi-resizer",
    &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
);
const ADMIN: (&str, &[&str]) = (
    "kubernetes-admin",
    &["kubeadm:cluster-admins", "system:authenticated"],
);

fn conditions(reasons: &[&str]) -> Value {
    Value::Array(
        reasons
            .iter()
            .map(|r| json!({"status": "Degraded", "reason": r, "message": "slow I/O"}))
            .collect(),
    )
}

/// A Pod with `status.volumeHealth` set to the given list, or without it.
fn pod(volume_health: Option<&[&str]>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "apps", "uid": "1"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "nginx"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    });
    if let Some(reasons) = volume_health {
        pod["status"]["volumeHealth"] = if reasons.is_empty() {
            json!([])
        } else {
            json!([{"name": "data", "healthConditions": conditions(reasons)}])
        };
    }
    pod
}

/// A PVC with `status.healthStatus` (conditions from `reasons`; `Some(&[])` is `{}`).
fn pvc(health_status: Option<&[&str]>) -> Value {
    let mut pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "apps", "uid": "2"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
    });
    if let Some(reasons) = health_status {
        pvc["status"]["healthStatus"] = if reasons.is_empty() {
            json!({})
        } else {
            json!({"healthConditions": conditions(reasons)})
        };
    }
    pvc
}

/// A CSINode: without `status` (as the kubelet creates it) for None, with an empty
/// `status` for `Some(&[])`, else with `status.storageHealth` for one driver.
fn csinode(name: &str, storage_health: Option<&[&str]>) -> Value {
    let mut node = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": name, "uid": "3"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": name, "topologyKeys": ["topology.example.com/zone"]}]},
    });
    if let Some(reasons) = storage_health {
        node["status"] = if reasons.is_empty() {
            // An empty list is left out, as the apiserver presents the object.
            json!({})
        } else {
            json!({"storageHealth": [{"name": "csi.example.com",
                "healthConditions": reasons.iter().map(|r| json!({"status": "StorageDegraded", "reason": r})).collect::<Vec<_>>()}]})
        };
    }
    node
}

fn write(
    (group, resource, sub, kind): (&'static str, &'static str, &'static str, &'static str),
    namespace: &'static str,
    operation: &'static str,
    (username, groups): (&'static str, &'static [&'static str]),
    old_object: Option<Value>,
    object: Option<Value>,
) -> AdmissionRequest {
    let name = object
        .as_ref()
        .or(old_object.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    AdmissionRequest {
        group,
        version: "v1",
        resource,
        sub_resource: sub,
        kind,
        namespace,
        name,
        operation,
        username,
        groups,
        object,
        old_object,
    }
}

const POD_STATUS: (&str, &str, &str, &str) = ("", "pods", "status", "Pod");
const POD: (&str, &str, &str, &str) = ("", "pods", "", "Pod");
const PVC: (&str, &str, &str, &str) = ("", "persistentvolumeclaims", "", "PersistentVolumeClaim");
const PVC_STATUS: (&str, &str, &str, &str) = (
    "",
    "persistentvolumeclaims",
    "status",
    "PersistentVolumeClaim",
);
const CSINODE: (&str, &str, &str, &str) = ("storage.k8s.io", "csinodes", "", "CSINode");
const CSINODE_STATUS: (&str, &str, &str, &str) =
    ("storage.k8s.io", "csinodes", "status", "CSINode");

/// What the apiserver does with one webhook configuration for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Decided without a call.
    Skip,
    /// Sent to one webhook whose failure policy is Fail.
    Fail,
    /// Sent to one webhook whose failure policy is Ignore.
    Ignore,
}

struct AdmissionCase {
    what: &'static str,
    request: AdmissionRequest,
    mutate: Expect,
    validate: Expect,
}

#[rustfmt::skip]
fn admission_cases() -> Vec<AdmissionCase> {
    use Expect::{Fail, Ignore, Skip};
    let case = |what, request, mutate, validate| AdmissionCase { what, request, mutate, validate };
    vec![
        // Pods: the kubelet's status updates are the most frequent writes in a cluster.
        case("kubelet updates pod status, no volume health on either side",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(None)), Some(pod(None))), Skip, Skip),
        case("kubelet adds volume health to a pod",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Fail, Fail),
        case("kubelet changes a pod's volume health (in use: nothing to drop)",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(Some(&["Unreachable"])))), Skip, Fail),
        case("kubelet removes a pod's volume health",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(None))), Skip, Fail),
        case("kubelet updates other status of a pod with volume health",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(Some(&["SlowIO"])))), Skip, Fail),
        case("another node writes volume health into a pod not bound to it",
             write(POD_STATUS, "apps", "UPDATE", OTHER_KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Fail, Fail),
        case("another node updates a pod's status without volume health (NodeRestriction's job)",
             write(POD_STATUS, "apps", "UPDATE", OTHER_KUBELET, Some(pod(None)), Some(pod(None))), Skip, Skip),
        case("an empty old volumeHealth list is not in use",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&[]))), Some(pod(Some(&["SlowIO"])))), Fail, Fail),
        case("a controller updates pod status without volume health",
             write(POD_STATUS, "apps", "UPDATE", ADMIN, Some(pod(None)), Some(pod(None))), Skip, Skip),
        case("volume health in the webhooks' own namespace is never sent",
             write(POD_STATUS, "volume-health", "UPDATE", KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Skip, Skip),
        case("creating a pod (the apiserver resets its status)",
             write(POD, "apps", "CREATE", ADMIN, None, Some(pod(Some(&["SlowIO"])))), Skip, Skip),

        // PVCs.
        case("the resizer updates PVC status without health status",
             write(PVC_STATUS, "apps", "UPDATE", RESIZER, Some(pvc(None)), Some(pvc(None))), Skip, Skip),
        case("the health monitor adds health status",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Fail, Fail),
        case("the health monitor changes health status (in use: nothing to drop)",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["Unreachable"])))), Skip, Fail),
        case("the health monitor removes health status",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(None))), Skip, Fail),
        case("an empty healthStatus object counts as set",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&[])))), Fail, Fail),
        case("an empty old healthStatus object is in use",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&[]))), Some(pvc(Some(&["SlowIO"])))), Skip, Fail),
        case("a node writes health status (the node rule applies)",
             write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Fail, Fail),
        case("a node removes health status (the node rule applies)",
             write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(Some(&["SlowIO"]))), Some(pvc(None))), Skip, Fail),
        case("a node updates PVC status without health status",
             write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(None)), Some(pvc(None))), Skip, Skip),
        case("creating a PVC with health status (dropped while gated; the apiserver resets status)",
             write(PVC, "apps", "CREATE", ADMIN, None, Some(pvc(Some(&["SlowIO"])))), Fail, Skip),
        case("creating a PVC without health status (no old object)",
             write(PVC, "apps", "CREATE", ADMIN, None, Some(pvc(None))), Skip, Skip),
        case("resizing a PVC that has health status (the stored status is kept: no rule applies)",
             write(PVC, "apps", "UPDATE", ADMIN, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["SlowIO"])))), Skip, Skip),
        case("health status in the webhooks' own namespace is never sent",
             write(PVC_STATUS, "volume-health", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Skip, Skip),
        case("deleting a PVC",
             write(PVC, "apps", "DELETE", ADMIN, Some(pvc(Some(&["SlowIO"]))), None), Skip, Skip),

        // CSINodes: cluster-scoped; every node write is validated.
        case("kubelet creates its CSINode (no status at all, no old object)",
             write(CSINODE, "", "CREATE", KUBELET, None, Some(csinode("node-1", None))), Skip, Ignore),
        case("kubelet registers a driver in its CSINode",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Ignore),
        case("kubelet writes another node's CSINode",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-2", None)), Some(csinode("node-2", None))), Skip, Ignore),
        case("kubelet writes csinodes/status without storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&[])))), Skip, Ignore),
        case("kubelet adds storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&["Flaky"])))), Fail, Fail),
        case("kubelet changes storage health (in use: nothing to drop)",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Down"])))), Skip, Fail),
        case("kubelet removes storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", None))), Skip, Fail),
        case("kubelet creates its CSINode with storage health (the name rule, failing open)",
             write(CSINODE, "", "CREATE", KUBELET, None, Some(csinode("node-1", Some(&["Flaky"])))), Fail, Ignore),
        case("kubelet unregisters a driver whose storage health stays",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Flaky"])))), Skip, Ignore),
        case("an admin updates a CSINode that has storage health",
             write(CSINODE, "", "UPDATE", ADMIN, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Flaky"])))), Skip, Skip),
        case("an admin adds storage health",
             write(CSINODE_STATUS, "", "UPDATE", ADMIN, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&["Flaky"])))), Fail, Fail),
        case("an admin updates a CSINode without storage health",
             write(CSINODE, "", "UPDATE", ADMIN, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip),
        case("a user named like a node but outside system:nodes is not a node",
             write(CSINODE, "", "UPDATE", NODE_NAMED_USER, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip),
        case("a user named like a node with no groups at all is not a node",
             write(CSINODE, "", "UPDATE", GROUPLESS_NODE_NAME, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip),
        case("kubelet deletes its CSINode",
             write(CSINODE, "", "DELETE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), None), Skip, Skip),
    ]
}

fn expectation(dispatch: &Dispatch) -> Expect {
    match dispatch {
        Dispatch::Skip => Expect::Skip,
        Dispatch::Call(calls) => {
            assert_eq!(
                calls.len(),
                1,
                "a request must reach at most one webhook of a configuration, reached {calls:?}"
            );
            match calls[0].1.as_str() {
                "Fail" => Expect::Fail,
                "Ignore" => Expect::Ignore,
                other => panic!("unexpected failure policy {other}"),
            }
        }
    }
}

#[test]
fn admission_match_conditions_send_only_the_requests_that_matter() {
    let cases = admission_cases();
    for rendering in rendered() {
        let [(_, mutating), (_, validating)] = configurations(rendering);
        let mut failures = Vec::new();
        for case in &cases {
            let mutate = expectation(&dispatch(mutating, &case.request));
            let validate = expectation(&dispatch(validating, &case.request));
            if (mutate, validate) != (case.mutate, case.validate) {
                failures.push(format!(
                    "  {}: mutate {mutate:?} (want {:?}), validate {validate:?} (want {:?})",
                    case.what, case.mutate, case.validate
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{}:\n{}",
            rendering.name,
            failures.join("\n")
        );
    }
}

#[test]
fn admission_cases_cover_every_webhook_and_both_decisions() {
    // The table must exercise each webhook entry, so a broken entry cannot hide.
    let rendering = rendering("base");
    for (what, configuration) in configurations(rendering) {
        for webhook in array_at(configuration, "/webhooks") {
            let name = str_at(webhook, "/name");
            let single = json!({"webhooks": [webhook]});
            let (mut sent, mut skipped) = (false, false);
            for case in admission_cases()
                .iter()
                .filter(|c| rules_match(webhook, &c.request))
            {
                match dispatch(&single, &case.request) {
                    Dispatch::Skip => skipped = true,
                    Dispatch::Call(_) => sent = true,
                }
            }
            assert!(
                sent && skipped,
                "{what} webhook {name}: the table must contain requests it gets and requests it does not"
            );
        }
    }
}

#[test]
fn match_conditions_never_error_whatever_the_object_shape() {
    // An expression error invokes the failure policy (Fail rejects the write), so every
    // condition must evaluate cleanly for every operation a webhook's rules admit, every
    // user shape and every object shape: null (no old object on CREATE), no status, an
    // empty status, a status with the gated field.
    // The base suffices: the overlays change nothing but the CA of the webhooks
    // (overlays_change_only_how_the_apiserver_trusts_the_webhooks).
    let users = [
        KUBELET,
        NODE_NAMED_USER,
        GROUPLESS_NODE_NAME,
        ADMIN,
        ("", &[][..]),
    ];
    let mut evaluated = 0;
    {
        let rendering = rendering("base");
        for (_, configuration) in configurations(rendering) {
            for webhook in array_at(configuration, "/webhooks") {
                let single = json!({"webhooks": [webhook]});
                for &(group, resource, sub) in GATED {
                    let kind = match resource {
                        "pods" => "Pod",
                        "persistentvolumeclaims" => "PersistentVolumeClaim",
                        _ => "CSINode",
                    };
                    let with_field = match resource {
                        "pods" => pod(Some(&["SlowIO"])),
                        "persistentvolumeclaims" => pvc(Some(&["SlowIO"])),
                        _ => csinode("node-1", Some(&["Flaky"])),
                    };
                    let mut without_status = with_field.clone();
                    without_status
                        .as_object_mut()
                        .expect("object")
                        .remove("status");
                    let mut empty_status = with_field.clone();
                    empty_status["status"] = json!({});
                    let shapes = [
                        None,
                        Some(without_status),
                        Some(empty_status),
                        Some(with_field),
                    ];
                    let namespace = if group.is_empty() { "apps" } else { "" };
                    for operation in ["CREATE", "UPDATE"] {
                        for user in users {
                            for old in &shapes {
                                for new in &shapes {
                                    let request = write(
                                        (group, resource, sub, kind),
                                        namespace,
                                        operation,
                                        user,
                                        old.clone(),
                                        new.clone(),
                                    );
                                    if rules_match(webhook, &request) {
                                        // dispatch panics on any evaluation error.
                                        dispatch(&single, &request);
                                        evaluated += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(evaluated > 0, "no request reached a webhook's conditions");
}

#[test]
fn match_conditions_use_only_cel_that_kubernetes_and_the_interpreter_share() {
    const FUNCTIONS: &[&str] = &["has", "size", "startsWith"];
    let check = |origin: &str, expression: &str, roots: &[&str], request_fields: &[&str]| {
        for identifier in identifiers(expression) {
            match identifier.role {
                Role::Call => assert!(
                    FUNCTIONS.contains(&identifier.name.as_str()),
                    "{origin}: function {} in {expression}",
                    identifier.name
                ),
                Role::Root => {
                    assert!(
                        roots.contains(&identifier.name.as_str())
                            || ["null", "true", "false", "in"].contains(&identifier.name.as_str()),
                        "{origin}: unknown variable {} in {expression}",
                        identifier.name
                    );
                    if identifier.name == "request" {
                        assert!(
                            request_fields.contains(&identifier.path.as_str()),
                            "{origin}: request.{} is not a field of the typed request variable",
                            identifier.path
                        );
                    }
                }
                Role::Member => {}
            }
        }
    };
    for rendering in rendered() {
        for (_, configuration) in configurations(rendering) {
            for webhook in array_at(configuration, "/webhooks") {
                for condition in array_at(webhook, "/matchConditions") {
                    let origin = format!("{} {}", rendering.name, webhook["name"]);
                    check(
                        &origin,
                        str_at(condition, "/expression"),
                        &["object", "oldObject", "request"],
                        ADMISSION_REQUEST_FIELDS,
                    );
                }
            }
        }
    }
    let authorizer = volume_health_authorizer();
    for condition in array_at(&authorizer, "/webhook/matchConditions") {
        check(
            "authorizer",
            str_at(condition, "/expression"),
            &["request"],
            ACCESS_REVIEW_FIELDS,
        );
    }
}

// ---------------------------------------------------------------------------------------
// The authorizer
// ---------------------------------------------------------------------------------------

const AUTHORIZATION_CONFIG: &str = "authz/authorization-config.yaml";
const AUTHORIZATION_CONFIG_MERGED: &str = "authz/authorization-config-with-existing-webhook.yaml";
const AUTHORIZER_KUBECONFIG: &str = "authz/authorizer-kubeconfig.yaml";
const STATIC_POD: &str = "authz/volume-health-authz.yaml";
const KUBEADM: &str = "authz/kubeadm-cluster-configuration.yaml";

fn authorization_config() -> Value {
    read_single_manifest(AUTHORIZATION_CONFIG)
}

fn volume_health_authorizer() -> Value {
    let config = authorization_config();
    let webhooks: Vec<&Value> = array_at(&config, "/authorizers")
        .iter()
        .filter(|a| a["type"] == "Webhook")
        .collect();
    assert_eq!(webhooks.len(), 1, "one Webhook authorizer expected");
    webhooks[0].clone()
}

#[test]
fn authorization_configuration_places_the_webhook_between_node_and_rbac() {
    let config = authorization_config();
    assert_eq!(config["apiVersion"], "apiserver.config.k8s.io/v1");
    assert_eq!(config["kind"], "AuthorizationConfiguration");
    let types: Vec<&str> = array_at(&config, "/authorizers")
        .iter()
        .map(|a| str_at(a, "/type"))
        .collect();
    assert_eq!(types, ["Node", "Webhook", "RBAC"], "authorizer chain");
    let names: BTreeSet<&str> = array_at(&config, "/authorizers")
        .iter()
        .map(|a| str_at(a, "/name"))
        .collect();
    assert_eq!(names.len(), 3, "authorizer names must be unique");

    let webhook = &volume_health_authorizer()["webhook"];
    let timeout = parse_duration(str_at(webhook, "/timeout"));
    assert!(
        timeout > Duration::ZERO && timeout <= Duration::from_secs(5),
        "timeout {timeout:?}"
    );
    let authorized = parse_duration(str_at(webhook, "/authorizedTTL"));
    let unauthorized = parse_duration(str_at(webhook, "/unauthorizedTTL"));
    assert!(
        authorized <= Duration::from_secs(300),
        "authorizedTTL {authorized:?}: a gate change must apply within minutes"
    );
    assert!(
        unauthorized <= authorized,
        "unauthorizedTTL {unauthorized:?}"
    );
    assert_eq!(webhook["subjectAccessReviewVersion"], "v1");
    assert_eq!(webhook["matchConditionSubjectAccessReviewVersion"], "v1");
    assert_eq!(
        webhook["failurePolicy"], "NoOpinion",
        "an outage must fall through to RBAC, not deny"
    );
    assert_eq!(webhook["connectionInfo"]["type"], "KubeConfigFile");
    let conditions = array_at(webhook, "/matchConditions");
    assert!(
        !conditions.is_empty() && conditions.len() <= 64,
        "matchConditions"
    );
    assert_eq!(
        str_at(&conditions[0], "/expression"),
        "has(request.resourceAttributes)",
        "guard first"
    );
}

/// The example for a cluster that already has an authorization webhook keeps it: the same
/// chain with that webhook where it was and the volume health entry exactly as in
/// `authorization-config.yaml`, after it.
#[test]
fn merged_authorization_configuration_keeps_the_existing_webhook() {
    let merged = read_single_manifest(AUTHORIZATION_CONFIG_MERGED);
    let config = authorization_config();
    assert_eq!(merged["apiVersion"], config["apiVersion"]);
    assert_eq!(merged["kind"], config["kind"]);
    let authorizers = array_at(&merged, "/authorizers");
    let names: Vec<&str> = authorizers.iter().map(|a| str_at(a, "/name")).collect();
    assert_eq!(names, ["node", "default", "volume-health", "rbac"]);
    let ours = volume_health_authorizer();
    assert_eq!(
        authorizers[2], ours,
        "the volume health entry as authorization-config.yaml has it"
    );
    // The existing webhook as the apiserver configures it from --authorization-webhook-*
    // flags (pkg/kubeapiserver/options/authorization.go), so nothing about it changes.
    let existing = &authorizers[1]["webhook"];
    assert_eq!(authorizers[1]["type"], "Webhook");
    assert_eq!(existing["timeout"], "30s");
    assert_eq!(existing["failurePolicy"], "NoOpinion");
    assert_eq!(existing["subjectAccessReviewVersion"], "v1beta1");
    assert_eq!(existing["connectionInfo"]["type"], "KubeConfigFile");
    assert!(
        existing["matchConditions"].is_null(),
        "flags cannot set matchConditions"
    );
}

struct AuthorizationCase {
    what: &'static str,
    review: AccessReview,
    sent: bool,
}

fn csinode_access(
    verb: &'static str,
    subresource: &'static str,
    name: &'static str,
) -> Option<ResourceAttributes> {
    Some(ResourceAttributes {
        verb,
        group: "storage.k8s.io",
        version: "v1",
        resource: "csinodes",
        subresource,
        namespace: "",
        name,
    })
}

#[rustfmt::skip]
fn authorization_cases() -> Vec<AuthorizationCase> {
    let case = |what, (user, groups): (&'static str, &'static [&'static str]), resource, sent| AuthorizationCase {
        what, review: AccessReview { user, groups, resource, non_resource: None }, sent,
    };
    let other = |verb, group, resource, subresource, namespace| Some(ResourceAttributes {
        verb, group, version: "v1", resource, subresource, namespace, name: "x",
    });
    let mut cases = vec![
        case("kubelet updates its csinodes/status", KUBELET, csinode_access("update", "status", "node-1"), true),
        case("kubelet patches another node's csinodes/status", KUBELET, csinode_access("patch", "status", "node-2"), true),
        case("kubelet gets its CSINode", KUBELET, csinode_access("get", "", "node-1"), true),
        case("kubelet creates a CSINode (no name yet)", KUBELET, csinode_access("create", "", ""), true),
        case("kubelet lists CSINodes", KUBELET, csinode_access("list", "", ""), true),
        case("kubelet reads a pod (core group, empty group string)", KUBELET, other("get", "", "pods", "", "apps"), false),
        case("kubelet reads a CSIDriver", KUBELET, other("get", "storage.k8s.io", "csidrivers", "", ""), false),
        case("csinodes of another API group", KUBELET, other("get", "example.com", "csinodes", "", ""), false),
        case("an admin updates csinodes/status", ADMIN, csinode_access("update", "status", "node-1"), false),
        case("the health monitor updates csinodes/status", HEALTH_MONITOR, csinode_access("update", "status", "node-1"), false),
        case("named like a node but outside system:nodes", NODE_NAMED_USER, csinode_access("update", "status", "node-1"), false),
        case("named like a node with no groups at all", GROUPLESS_NODE_NAME, csinode_access("update", "status", "node-1"), false),
        case("in system:nodes but not named like a node", ("kubelet-bootstrap", &["system:nodes"]), csinode_access("update", "status", "node-1"), false),
        case("anonymous", ("system:anonymous", &["system:unauthenticated"]), csinode_access("get", "", "node-1"), false),
    ];
    cases.push(AuthorizationCase {
        what: "kubelet asks for a non-resource URL",
        review: AccessReview { user: KUBELET.0, groups: KUBELET.1, resource: None, non_resource: Some(("get", "/healthz")) },
        sent: false,
    });
    cases
}

#[test]
fn authorizer_match_conditions_send_only_csinode_requests_from_nodes() {
    let webhook = &volume_health_authorizer()["webhook"];
    let mut failures = Vec::new();
    for case in authorization_cases() {
        // The shape the apiserver gives CEL, and the sparser wire shape: the has() guards
        // must make both decide alike and without errors.
        for (shape, request) in [
            ("apiserver", case.review.cel_request()),
            ("wire", case.review.wire_request()),
        ] {
            let sent = authorizer_sends(webhook, request);
            if sent != case.sent {
                failures.push(format!(
                    "  {} ({shape} shape): sent {sent}, want {}",
                    case.what, case.sent
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "authorizer matchConditions:\n{}",
        failures.join("\n")
    );
}

/// Maps a path inside a pod to the host path it comes from, through hostPath mounts.
fn host_path(pod: &Value, container: &Value, path: &str) -> String {
    for mount in array_at(container, "/volumeMounts") {
        let mount_path = str_at(mount, "/mountPath").trim_end_matches('/');
        let Some(rest) = path
            .strip_prefix(mount_path)
            .filter(|r| r.is_empty() || r.starts_with('/'))
        else {
            continue;
        };
        let volume = array_at(&pod["spec"], "/volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("volume {} is not declared", mount["name"]));
        return format!(
            "{}{rest}",
            str_at(volume, "/hostPath/path").trim_end_matches('/')
        );
    }
    panic!("{path} is not inside any hostPath mount")
}

#[test]
fn authorizer_static_pod_kubeconfig_and_apiserver_mounts_fit_together() {
    // kube-apiserver: the authorization config and the kubeconfig must be inside a
    // directory kubeadm mounts into the apiserver at the same path.
    let kubeadm = read_single_manifest(KUBEADM);
    let args = array_at(&kubeadm, "/apiServer/extraArgs");
    let config_path = args
        .iter()
        .find(|a| a["name"] == "authorization-config")
        .map(|a| str_at(a, "/value").to_owned())
        .expect("kubeadm passes --authorization-config");
    assert!(
        !args.iter().any(|a| a["name"] == "authorization-mode"),
        "--authorization-mode conflicts with --authorization-config"
    );
    let apiserver_sees = |path: &str| {
        array_at(&kubeadm, "/apiServer/extraVolumes")
            .iter()
            .any(|v| {
                let mount = str_at(v, "/mountPath");
                path.starts_with(&format!("{mount}/"))
                    && str_at(v, "/hostPath") == mount
                    && v["readOnly"] == true
            })
    };
    assert!(
        apiserver_sees(&config_path),
        "the apiserver cannot read {config_path}"
    );
    assert!(
        config_path.ends_with(AUTHORIZATION_CONFIG.trim_start_matches("authz")),
        "{config_path} names another file"
    );

    let kubeconfig_path = str_at(
        &volume_health_authorizer(),
        "/webhook/connectionInfo/kubeConfigFile",
    )
    .to_owned();
    assert!(
        apiserver_sees(&kubeconfig_path),
        "the apiserver cannot read {kubeconfig_path}"
    );
    assert!(
        kubeconfig_path.ends_with(AUTHORIZER_KUBECONFIG.trim_start_matches("authz")),
        "{kubeconfig_path} names another file"
    );

    // The kubeconfig: current context -> cluster and user, server URL, files.
    let kubeconfig = read_single_manifest(AUTHORIZER_KUBECONFIG);
    let named = |list: &str, name: &str| -> Value {
        array_at(&kubeconfig, &format!("/{list}"))
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("kubeconfig has no {list} entry {name}"))
            .clone()
    };
    let context = named("contexts", str_at(&kubeconfig, "/current-context"));
    let cluster = named("clusters", str_at(&context, "/context/cluster"));
    let user = named("users", str_at(&context, "/context/user"));
    let server = str_at(&cluster, "/cluster/server");
    let authority = server
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("{server}: the authorizer is called over TLS"));
    let (host_port, path) = authority
        .split_once('/')
        .map(|(hp, p)| (hp, format!("/{p}")))
        .expect("server URL has a path");
    assert_eq!(
        path, AUTHORIZE_PATH,
        "the apiserver posts to the exact URL path"
    );
    let (host, port) = host_port.rsplit_once(':').expect("server URL has a port");
    let port: u16 = port.parse().expect("numeric port");
    assert_eq!(
        cluster["cluster"]["insecure-skip-tls-verify"],
        Value::Null,
        "verify the server"
    );
    let ca = str_at(&cluster, "/cluster/certificate-authority").to_owned();
    for file in [
        ca.clone(),
        str_at(&user, "/user/client-certificate").to_owned(),
        str_at(&user, "/user/client-key").to_owned(),
    ] {
        assert!(apiserver_sees(&file), "the apiserver cannot read {file}");
    }

    // The static pod: loopback on the host network, on the port and route the kubeconfig
    // names, with client certificates checked against the same CA.
    let pod = read_single_manifest(STATIC_POD);
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(
        pod["spec"]["hostNetwork"], true,
        "the authorizer must not depend on the cluster network"
    );
    assert_eq!(pod["metadata"]["namespace"], "kube-system");
    let containers = array_at(&pod["spec"], "/containers");
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let flags = ServerFlags::of(container);
    assert_eq!(
        flags.get("bind-address"),
        Some("127.0.0.1"),
        "only the local apiserver may reach the authorizer"
    );
    assert_eq!(
        host,
        flags.get("bind-address").expect("bind address"),
        "kubeconfig host"
    );
    assert_eq!(
        port,
        flags.port("secure-port"),
        "kubeconfig port must be the static pod's --secure-port"
    );
    for (probe, probe_path) in [
        ("readinessProbe", READINESS_PATH),
        ("livenessProbe", LIVENESS_PATH),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(
            get["host"], "127.0.0.1",
            "{probe}: the server listens on loopback only"
        );
        assert_eq!(get["path"], probe_path, "{probe} path");
        assert_eq!(
            container_port(container, &get["port"]),
            flags.port("health-port"),
            "{probe} port"
        );
    }
    for flag in ["tls-cert-file", "tls-private-key-file", "client-ca-file"] {
        let path = flags
            .get(flag)
            .unwrap_or_else(|| panic!("the authorizer needs --{flag}"));
        host_path(&pod, container, path);
    }
    let client_ca = host_path(
        &pod,
        container,
        flags.get("client-ca-file").expect("client CA"),
    );
    assert_eq!(
        client_ca, ca,
        "the CA in the kubeconfig must also be the authorizer's client CA"
    );
    for mount in array_at(container, "/volumeMounts") {
        assert_eq!(mount["readOnly"], true, "host files are mounted read-only");
    }
    let taken: BTreeSet<u16> = [
        2379, 2380, 2381, 6443, 10248, 10249, 10250, 10256, 10257, 10259,
    ]
    .into();
    for flag in ["secure-port", "health-port"] {
        assert!(
            !taken.contains(&flags.port(flag)),
            "--{flag} clashes with a control-plane component on the host"
        );
    }
    assert_eq!(read_manifest(STATIC_POD).len(), 1);
}

#[test]
fn authorizer_and_admission_webhooks_share_feature_gates() {
    let pod = read_single_manifest(STATIC_POD);
    let authorizer = ServerFlags::of(&array_at(&pod["spec"], "/containers")[0]);
    let gates = authorizer.get("feature-gates").expect("feature gates");
    assert!(
        gates.contains("CSIVolumeHealth="),
        "the authorizer must set CSIVolumeHealth explicitly, has {gates:?}"
    );
    for name in INSTALLABLE {
        let flags = ServerFlags::of(webhook_container(rendering(name)));
        assert_eq!(
            flags.get("feature-gates"),
            Some(gates),
            "{name}: feature gates differ from the authorizer's"
        );
        assert!(
            flags.is_set("feature-gates"),
            "{name}: the gate must be set explicitly"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Optional components
// ---------------------------------------------------------------------------------------

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .expect("matchLabels")
        .iter()
        .all(|(key, value)| labels[key] == *value)
}

#[test]
fn optional_components_fit_every_overlay() {
    let listed: BTreeSet<String> = COMPONENTS.iter().map(|c| (*c).to_owned()).collect();
    assert_eq!(
        component_dirs(),
        listed,
        "every component must be listed (and so rendered and checked)"
    );
    for rendering in rendered() {
        for kind in ["ServiceMonitor", "PrometheusRule", "NetworkPolicy"] {
            assert!(
                rendering.all(kind).is_empty(),
                "{}: {kind} belongs in an optional component",
                rendering.name
            );
        }
    }
    for overlay in INSTALLABLE {
        let objects = render_with_components(overlay, COMPONENTS);
        let alone = rendering(overlay);
        assert_eq!(
            objects.len(),
            alone.objects.len() + 4,
            "{overlay}: the components add a ServiceMonitor, a PrometheusRule, a dashboard and a NetworkPolicy"
        );
        let find = |kind: &str| -> &Value {
            let all: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
            assert_eq!(all.len(), 1, "{overlay}: one {kind}");
            all[0]
        };
        for object in &objects {
            if object["kind"] != "Namespace"
                && !object["kind"]
                    .as_str()
                    .is_some_and(|k| k.ends_with("WebhookConfiguration"))
            {
                assert_eq!(object["metadata"]["namespace"], NAMESPACE, "{object}");
            }
        }

        // The ServiceMonitor scrapes the Service's health port.
        let service = find("Service");
        let monitor = find("ServiceMonitor");
        assert!(labels_match(
            &monitor["spec"]["selector"]["matchLabels"],
            &service["metadata"]["labels"]
        ));
        assert_eq!(
            monitor["spec"]["namespaceSelector"]["matchNames"][0],
            NAMESPACE
        );
        let endpoint = &monitor["spec"]["endpoints"][0];
        let port = array_at(service, "/spec/ports")
            .iter()
            .find(|p| p["name"] == endpoint["port"])
            .expect("the ServiceMonitor's port is a Service port");
        let container = webhook_container(alone);
        let flags = ServerFlags::of(container);
        assert_eq!(
            container_port(container, &port["targetPort"]),
            flags.port("health-port"),
            "{overlay}: the ServiceMonitor scrapes the health port"
        );
        assert_eq!(endpoint["path"], "/metrics");
        // The rules' job label is the Service's name, as the Prometheus Operator sets it.
        let rules = serde_json::to_string(&find("PrometheusRule")["spec"]).expect("JSON");
        let service_name = str_at(service, "/metadata/name");
        assert!(
            rules.contains(&format!(r#"job=\"{service_name}\""#)),
            "{rules}"
        );

        // The dashboard is a labelled ConfigMap holding valid dashboard JSON.
        let dashboard = objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1"
            })
            .expect("a dashboard ConfigMap");
        let json: Value =
            serde_json::from_str(str_at(dashboard, "/data/volume-health-webhook.json"))
                .expect("dashboard JSON");
        assert!(!array_at(&json, "/panels").is_empty());

        // The NetworkPolicy selects the webhook pods; the webhook port is open to all (the
        // apiserver), the health port to the monitoring namespace; nothing goes out.
        let policy = find("NetworkPolicy");
        let pod_labels = serde_json::to_value(pod_labels(alone)).expect("labels");
        assert!(labels_match(
            &policy["spec"]["podSelector"]["matchLabels"],
            &pod_labels
        ));
        let ingress = array_at(policy, "/spec/ingress");
        let ports = |rule: &Value| -> Vec<u64> {
            array_at(rule, "/ports")
                .iter()
                .map(|p| p["port"].as_u64().expect("numeric port"))
                .collect()
        };
        let secure = u64::from(flags.port("secure-port"));
        let health = u64::from(flags.port("health-port"));
        let open: Vec<&Value> = ingress.iter().filter(|r| r["from"].is_null()).collect();
        assert_eq!(open.len(), 1, "{overlay}: one rule open to every source");
        assert_eq!(
            ports(open[0]),
            vec![secure],
            "only the webhook port is open to all"
        );
        assert!(
            ingress
                .iter()
                .any(|r| !r["from"].is_null() && ports(r) == vec![health]),
            "{overlay}: the health port is open to monitoring"
        );
        assert!(strings_at(policy, "/spec/policyTypes").contains(&"Egress".to_owned()));
        assert!(array_at(policy, "/spec/egress").is_empty());
    }
}

/// The Prometheus Operator loads a ServiceMonitor or PrometheusRule only when its selectors
/// match; kube-prometheus-stack selects `release: <its release name>`. The monitoring
/// component carries no such label (a Prometheus that selects everything takes it as it is),
/// the kube-prometheus-stack component adds it to both and to nothing else, and an overlay
/// changes the name, or the NetworkPolicy's Prometheus namespace, with the patches
/// docs/monitoring.md shows.
#[test]
fn monitoring_is_selectable_by_kube_prometheus_stack_and_its_namespace() {
    let selected = |objects: &[Value]| -> Vec<(String, Value)> {
        objects
            .iter()
            .filter(|o| !o["metadata"]["labels"]["release"].is_null())
            .map(|o| {
                (
                    str_at(o, "/kind").to_owned(),
                    o["metadata"]["labels"]["release"].clone(),
                )
            })
            .collect()
    };
    let plain = render_with_components("overlays/cert-manager", &["components/monitoring"]);
    assert!(selected(&plain).is_empty(), "no release label by default");

    let stack = render_with_components(
        "overlays/cert-manager",
        &["components/monitoring", "components/kube-prometheus-stack"],
    );
    let release = json!("kube-prometheus-stack");
    assert_eq!(
        selected(&stack),
        [
            ("PrometheusRule".to_owned(), release.clone()),
            ("ServiceMonitor".to_owned(), release),
        ],
        "the rule and the monitor, labelled for the chart's default release name"
    );

    let patched = render_operator_overlay(
        "resources:
  - ../cert-manager
components:
  - ../../components/monitoring
  - ../../components/kube-prometheus-stack
  - ../../components/network-policy
patches:
  - target:
      group: monitoring.coreos.com
      kind: ServiceMonitor|PrometheusRule
      name: volume-health-webhook
    patch: |-
      - op: replace
        path: /metadata/labels/release
        value: prometheus
  - target:
      kind: NetworkPolicy
      name: volume-health-webhook
    patch: |-
      - op: replace
        path: /spec/ingress/1/from/0/namespaceSelector/matchLabels/kubernetes.io~1metadata.name
        value: prometheus
",
    );
    let release = json!("prometheus");
    assert_eq!(
        selected(&patched),
        [
            ("PrometheusRule".to_owned(), release.clone()),
            ("ServiceMonitor".to_owned(), release),
        ]
    );
    let policy = patched
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("the NetworkPolicy");
    let sources: Vec<&Value> = array_at(policy, "/spec/ingress")
        .iter()
        .flat_map(|rule| array_at(rule, "/from"))
        .collect();
    assert_eq!(
        sources,
        [
            &json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}})
        ],
        "the health port opens to the patched namespace only"
    );
}

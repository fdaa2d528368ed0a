//! The Deployment: replicas, the drain's budget, a restricted pod, the server's flags.

use super::*;

fn deployment(rendering: &Rendered) -> &Value {
    rendering.one("Deployment")
}

fn pod_spec(rendering: &Rendered) -> &Value {
    &deployment(rendering)["spec"]["template"]["spec"]
}

pub(crate) fn webhook_container(rendering: &Rendered) -> &Value {
    let containers = array_at(pod_spec(rendering), "/containers");
    assert_eq!(
        containers.len(),
        1,
        "{}: one container expected",
        rendering.name
    );
    &containers[0]
}

pub(crate) fn pod_labels(rendering: &Rendered) -> std::collections::BTreeMap<String, String> {
    let labels = deployment(rendering)["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("pod template labels");
    labels
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("label value").to_owned()))
        .collect()
}

/// The Secret the webhook container reads its serving certificate from.
pub(crate) fn tls_secret_name(rendering: &Rendered) -> &str {
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
pub(crate) fn container_port(container: &Value, reference: &Value) -> u16 {
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

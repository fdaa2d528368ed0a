//! The authorizer's apiserver-side files, checked against each other.

use super::*;

const AUTHORIZATION_CONFIG: &str = "authz/authorization-config.yaml";
const AUTHORIZATION_CONFIG_MERGED: &str = "authz/authorization-config-with-existing-webhook.yaml";
const AUTHORIZER_KUBECONFIG: &str = "authz/authorizer-kubeconfig.yaml";
pub(crate) const STATIC_POD: &str = "authz/volume-health-authz.yaml";
const KUBEADM: &str = "authz/kubeadm-cluster-configuration.yaml";

fn authorization_config() -> Value {
    read_single_manifest(AUTHORIZATION_CONFIG)
}

pub(crate) fn volume_health_authorizer() -> Value {
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

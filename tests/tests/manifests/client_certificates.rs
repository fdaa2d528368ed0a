//! Who can connect: the NetworkPolicy's named apiserver addresses, the client-ca component, the
//! apiserver's AdmissionConfiguration and kubeconfig that present the client certificate, and
//! the doctor's NetworkPolicy.

use super::*;

const ADMISSION_CONFIGURATION: &str = "admission/admission-configuration.yaml";
const ADMISSION_KUBECONFIG: &str = "admission/admission-kubeconfig.yaml";

fn deployment(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the Deployment")
}

/// The patch the network-policy component documents admits the named CIDRs only: no rule is
/// left open to every source.
#[test]
fn named_apiserver_cidrs_close_the_webhook_port_to_other_sources() {
    let objects = render_operator_overlay(
        "resources:
  - ../cert-manager
components:
  - ../../components/network-policy
patches:
  - target:
      kind: NetworkPolicy
      name: volume-health-webhook
    patch: |-
      - op: add
        path: /spec/ingress/0/from
        value:
          - ipBlock:
              cidr: 10.0.0.0/24
",
    );
    let policy = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("the NetworkPolicy");
    let flags = ServerFlags::of(webhook_container(rendering("overlays/cert-manager")));
    let secure = u64::from(flags.port("secure-port"));
    let rules = array_at(policy, "/spec/ingress");
    assert!(rules.iter().all(|r| !r["from"].is_null()), "{rules:?}");
    let webhook = rules
        .iter()
        .find(|r| r["ports"][0]["port"].as_u64() == Some(secure))
        .expect("the webhook port's rule");
    assert_eq!(
        webhook["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}])
    );
    let documented = std::fs::read_to_string(
        manifests_dir().join("components/network-policy/kustomization.yaml"),
    )
    .expect("the component");
    assert!(
        documented.contains("path: /spec/ingress/0/from"),
        "the component documents this patch"
    );
}

/// The client-ca component mounts the Secret the docs name and passes the server a
/// --client-ca-file inside that mount; with kustomize's generator the Secret's hashed name
/// reaches the volume.
#[test]
fn the_client_ca_component_mounts_the_ca_the_server_reads() {
    let objects = render_operator_overlay(
        "resources:
  - ../cert-manager
components:
  - ../../components/client-ca
",
    );
    let deployment = deployment(&objects);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = strings_at(container, "/args");
    let file = args
        .iter()
        .find_map(|a| a.strip_prefix("--client-ca-file="))
        .expect("--client-ca-file");
    let mount = array_at(container, "/volumeMounts")
        .iter()
        .find(|m| file.starts_with(&format!("{}/", str_at(m, "/mountPath"))))
        .expect("the CA file is inside a mount");
    assert_eq!(mount["readOnly"], true);
    let volume = array_at(deployment, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_eq!(
        volume["secret"]["secretName"],
        "volume-health-webhook-client-ca"
    );
    assert!(file.ends_with("/ca.crt"), "{file}");
    ServerFlags::of(container);
}

/// The AdmissionConfiguration gives both webhook plugins the kubeconfig, whose one user is
/// named after the Service the webhook configurations call, so the apiserver presents the
/// certificate to these webhooks.
#[test]
fn the_admission_configuration_presents_a_certificate_to_the_webhook_service() {
    let configuration = read_single_manifest(ADMISSION_CONFIGURATION);
    assert_eq!(configuration["kind"], "AdmissionConfiguration");
    let plugins: Vec<(&str, &str)> = array_at(&configuration, "/plugins")
        .iter()
        .map(|p| {
            assert_eq!(
                p["configuration"]["kind"], "WebhookAdmissionConfiguration",
                "{p}"
            );
            (
                str_at(p, "/name"),
                str_at(p, "/configuration/kubeConfigFile"),
            )
        })
        .collect();
    let names: BTreeSet<&str> = plugins.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        BTreeSet::from(["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"])
    );
    for (_, file) in &plugins {
        assert!(
            file.ends_with(ADMISSION_KUBECONFIG.trim_start_matches("admission")),
            "{file}"
        );
    }
    let kubeconfig = read_single_manifest(ADMISSION_KUBECONFIG);
    let users = array_at(&kubeconfig, "/users");
    assert_eq!(users.len(), 1);
    assert!(!users[0]["user"]["client-certificate"].is_null());
    assert!(!users[0]["user"]["client-key"].is_null());
    for overlay in INSTALLABLE {
        for configuration in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            for webhook in array_at(rendering(overlay).one(configuration), "/webhooks") {
                let service = &webhook["clientConfig"]["service"];
                let port = service["port"].as_u64().unwrap_or(443);
                let host = format!(
                    "{}.{}.svc",
                    str_at(service, "/name"),
                    str_at(service, "/namespace")
                );
                let want = if port == 443 {
                    host
                } else {
                    format!("{host}:{port}")
                };
                assert_eq!(
                    users[0]["name"],
                    want.as_str(),
                    "{overlay}: {configuration}"
                );
            }
        }
    }
}

/// Both doctor installs carry a NetworkPolicy over every doctor pod: the metrics port from
/// monitoring only, nothing else in, nothing out (the doctor calls no API).
#[test]
fn the_doctor_admits_only_monitoring_and_calls_nothing() {
    for dir in ["doctor", "doctor/daemonset"] {
        let objects = support::kustomize(&manifests_dir().join(dir));
        let policies: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "NetworkPolicy")
            .collect();
        assert_eq!(policies.len(), 1, "{dir}");
        let policy = policies[0];
        let selector = policy["spec"]["podSelector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        for workload in objects
            .iter()
            .filter(|o| o["kind"] == "DaemonSet" || o["kind"] == "Job")
        {
            let labels = &workload["spec"]["template"]["metadata"]["labels"];
            assert!(
                selector.iter().all(|(k, v)| labels[k] == *v),
                "{dir}: the policy selects the doctor's pods"
            );
            assert_eq!(
                workload["spec"]["template"]["spec"]["automountServiceAccountToken"], false,
                "{dir}: no API access, so no egress to allow"
            );
        }
        assert_eq!(
            strings_at(policy, "/spec/policyTypes"),
            ["Ingress", "Egress"]
        );
        assert!(array_at(policy, "/spec/egress").is_empty());
        assert_eq!(
            policy["spec"]["ingress"],
            json!([{
                "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                "ports": [{"port": 9809, "protocol": "TCP"}],
            }]),
            "{dir}"
        );
        if let Some(daemonset) = objects.iter().find(|o| o["kind"] == "DaemonSet") {
            let port = &daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0];
            assert_eq!(port["containerPort"], 9809, "the metrics port");
        }
    }
}

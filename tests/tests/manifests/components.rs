//! The optional components: each fits every overlay; kube-prometheus-stack finds monitoring.

use super::*;

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .expect("matchLabels")
        .iter()
        .all(|(key, value)| labels[key] == *value)
}

#[test]
fn optional_components_fit_every_overlay() {
    let listed: BTreeSet<String> = COMPONENTS
        .iter()
        .chain(UNDOING_COMPONENTS)
        .chain(AUDIT_COMPONENTS)
        .map(|c| (*c).to_owned())
        .collect();
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

        // The writer list's entry is trusted as the others are (the provided-certs overlays
        // copied their CA before the component added it) and calls the same endpoint.
        let validating = find("ValidatingWebhookConfiguration");
        let webhooks = array_at(validating, "/webhooks");
        let writers = webhooks
            .iter()
            .find(|w| w["name"] == "pvc-writers.validate.volume-health.github.io")
            .expect("the writer list's entry");
        assert_eq!(
            writers["clientConfig"], webhooks[0]["clientConfig"],
            "{overlay}: the writer list's entry is trusted and addressed as the first one"
        );
        let env = &container_env(find("Deployment"));
        assert!(
            env.iter()
                .any(|(name, _)| name == "VOLUME_HEALTH_PVC_HEALTH_WRITERS"),
            "{overlay}: the server gets the writer list"
        );

        // The repair entries (the base's; components/repair only says so again) likewise, in
        // the mutating configuration: all three, trusted and addressed as its first entry (the
        // same Service and path, /mutate), and the server repairs.
        let mutating = find("MutatingWebhookConfiguration");
        let webhooks = array_at(mutating, "/webhooks");
        let repairs: Vec<&Value> = webhooks
            .iter()
            .filter(|w| str_at(w, "/name").contains(".repair."))
            .collect();
        assert_eq!(repairs.len(), 3, "{overlay}: one repair entry per resource");
        for entry in repairs {
            assert_eq!(
                entry["clientConfig"], webhooks[0]["clientConfig"],
                "{overlay}: {} is trusted and addressed as the first entry",
                entry["name"]
            );
        }
        assert!(
            env.iter()
                .any(|(name, value)| name == "VOLUME_HEALTH_REPAIR" && value == "true"),
            "{overlay}: the server repairs"
        );
    }
}

/// The webhook container's environment, as (name, value) pairs.
fn container_env(deployment: &Value) -> Vec<(String, String)> {
    array_at(deployment, "/spec/template/spec/containers/0/env")
        .iter()
        .map(|e| {
            (
                str_at(e, "/name").to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
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

#[test]
fn no_repair_turns_the_switch_and_the_entries_off_on_every_overlay() {
    for overlay in INSTALLABLE {
        let with = rendering(overlay);
        let without = render_with_components(overlay, UNDOING_COMPONENTS);
        assert_eq!(
            with.objects.len(),
            without.len(),
            "{overlay}: the same objects"
        );
        let find = |objects: &[Value], kind: &str| -> Value {
            objects
                .iter()
                .find(|o| o["kind"] == kind)
                .cloned()
                .unwrap_or_else(|| panic!("{overlay}: no {kind}"))
        };
        let names = |configuration: &Value| -> Vec<String> {
            array_at(configuration, "/webhooks")
                .iter()
                .map(|w| str_at(w, "/name").to_owned())
                .collect()
        };
        let repairing = names(&find(&with.objects, "MutatingWebhookConfiguration"));
        assert_eq!(
            repairing.iter().filter(|n| n.contains(".repair.")).count(),
            3,
            "{overlay}: repair is on in the base"
        );
        let left = names(&find(&without, "MutatingWebhookConfiguration"));
        let expected: Vec<String> = repairing
            .into_iter()
            .filter(|n| !n.contains(".repair."))
            .collect();
        assert_eq!(
            left, expected,
            "{overlay}: only the repair entries are removed"
        );
        let env = container_env(&find(&without, "Deployment"));
        assert!(
            env.iter()
                .any(|(name, value)| name == "VOLUME_HEALTH_REPAIR" && value == "false"),
            "{overlay}: the server does not repair: {env:?}"
        );
        assert_eq!(
            container_env(&find(&with.objects, "Deployment"))
                .iter()
                .filter(|(name, _)| name != "VOLUME_HEALTH_REPAIR")
                .collect::<Vec<_>>(),
            env.iter()
                .filter(|(name, _)| name != "VOLUME_HEALTH_REPAIR")
                .collect::<Vec<_>>(),
            "{overlay}: nothing else in the environment changes"
        );
    }
}

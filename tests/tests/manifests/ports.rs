//! Probes, Service and webhooks against the server's ports and routes.

use super::*;

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

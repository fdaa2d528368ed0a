//! What is installed: this project's webhook entries and native policy bindings, read from the
//! apiserver as they are stored.

use serde_json::Value;

use crate::apiserver::{Apiserver, RequestError};

/// The label every native policy and binding of this project carries.
const POLICY_LABEL: &str = "app.kubernetes.io/name=volume-health-webhook";

/// One webhook entry of a configuration.
#[derive(Clone, Debug)]
pub(crate) struct WebhookEntry {
    /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
    pub(crate) kind: &'static str,
    /// The entry's name.
    pub(crate) name: String,
    /// Its `clientConfig`, as stored: the probe copies it whole.
    pub(crate) client_config: Value,
    /// Its `timeoutSeconds` (10, the API's default, when unset).
    pub(crate) timeout_seconds: i64,
}

impl WebhookEntry {
    /// True for an entry of a mutating configuration.
    pub(crate) fn mutating(&self) -> bool {
        self.kind == MUTATING.kind
    }

    /// Where the apiserver calls it, for a line of the report.
    pub(crate) fn target(&self) -> String {
        describe_client_config(&self.client_config)
    }
}

/// A ValidatingAdmissionPolicyBinding or MutatingAdmissionPolicyBinding of this project.
#[derive(Clone, Debug)]
pub(crate) struct Binding {
    /// `ValidatingAdmissionPolicyBinding` or `MutatingAdmissionPolicyBinding`.
    pub(crate) kind: &'static str,
    /// The binding's name.
    pub(crate) name: String,
    /// The policy it binds.
    pub(crate) policy: String,
    /// Its `validationActions` (empty for a mutating binding).
    pub(crate) actions: Vec<String>,
}

/// Everything of this project the apiserver holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Installed {
    /// The webhook entries, mutating first.
    pub(crate) webhooks: Vec<WebhookEntry>,
    /// The policy bindings.
    pub(crate) bindings: Vec<Binding>,
}

/// A configuration kind and where it is read.
struct ConfigurationKind {
    kind: &'static str,
    path: &'static str,
}

const MUTATING: ConfigurationKind = ConfigurationKind {
    kind: "MutatingWebhookConfiguration",
    path: "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
};
const VALIDATING: ConfigurationKind = ConfigurationKind {
    kind: "ValidatingWebhookConfiguration",
    path: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
};

/// Where the policy bindings are read, newest version first: MutatingAdmissionPolicy is v1
/// from Kubernetes v1.36, v1beta1 before.
const BINDING_PATHS: [(&str, &str); 3] = [
    (
        "ValidatingAdmissionPolicyBinding",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    ),
    (
        "MutatingAdmissionPolicyBinding",
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    ),
    (
        "MutatingAdmissionPolicyBinding",
        "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings",
    ),
];

impl Installed {
    /// Reads the webhook configurations named `name` and the bindings labelled as this
    /// project's.
    pub(crate) async fn read(api: &Apiserver, name: &str) -> Result<Self, RequestError> {
        let mut installed = Installed::default();
        for kind in [MUTATING, VALIDATING] {
            let Some(configuration) = api.get(&format!("{}/{name}", kind.path)).await? else {
                continue;
            };
            let entries = configuration.get("webhooks").and_then(Value::as_array);
            for entry in entries.into_iter().flatten() {
                installed.webhooks.push(WebhookEntry {
                    kind: kind.kind,
                    name: text(entry, "name"),
                    client_config: entry.get("clientConfig").cloned().unwrap_or(Value::Null),
                    timeout_seconds: entry
                        .get("timeoutSeconds")
                        .and_then(Value::as_i64)
                        .unwrap_or(10),
                });
            }
        }
        let mut mutating_found = false;
        for (kind, path) in BINDING_PATHS {
            if kind == "MutatingAdmissionPolicyBinding" && mutating_found {
                continue;
            }
            let Some(list) = api
                .get(&format!("{path}?labelSelector={POLICY_LABEL}"))
                .await?
            else {
                continue;
            };
            // A version the apiserver does not serve answers 404 (None above); any other
            // answer that is not a list is an error the caller sees as "nothing found".
            let Some(items) = list.get("items").and_then(Value::as_array) else {
                continue;
            };
            mutating_found |= kind == "MutatingAdmissionPolicyBinding";
            for item in items {
                let spec = item.get("spec").cloned().unwrap_or(Value::Null);
                installed.bindings.push(Binding {
                    kind,
                    name: item
                        .get("metadata")
                        .map(|m| text(m, "name"))
                        .unwrap_or_default(),
                    policy: text(&spec, "policyName"),
                    actions: spec
                        .get("validationActions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                });
            }
        }
        Ok(installed)
    }
}

/// `object[key]` as a string, or "".
fn text(object: &Value, key: &str) -> String {
    object
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A `clientConfig` in a few words: `service ns/name:port/path` or the URL.
pub(crate) fn describe_client_config(client_config: &Value) -> String {
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        return url.to_owned();
    }
    let Some(service) = client_config.get("service") else {
        return "no service or url".to_owned();
    };
    format!(
        "service {}/{}:{}{}",
        text(service, "namespace"),
        text(service, "name"),
        service.get("port").and_then(Value::as_i64).unwrap_or(443),
        text(service, "path"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::describe_client_config;

    #[test]
    fn a_client_config_is_named_by_its_service_or_url() {
        let service = json!({"service": {"namespace": "volume-health",
            "name": "volume-health-webhook", "path": "/validate", "port": 443}});
        assert_eq!(
            describe_client_config(&service),
            "service volume-health/volume-health-webhook:443/validate"
        );
        // The API's default port is 443.
        let no_port = json!({"service": {"namespace": "n", "name": "s"}});
        assert_eq!(describe_client_config(&no_port), "service n/s:443");
        let url = json!({"url": "https://127.0.0.1:8443/mutate"});
        assert_eq!(
            describe_client_config(&url),
            "https://127.0.0.1:8443/mutate"
        );
    }
}

//! The project's manifests as they ship, changed only where a loopback control plane must:
//! endpoints, ports and certificate files.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::pki::Pki;

/// The repository's `manifests/` directory.
pub fn manifests_dir() -> PathBuf {
    crate::repository().join("manifests")
}

/// One YAML document of `manifests/<relative>`.
pub(crate) fn manifest(relative: &str) -> Result<Value> {
    let path = manifests_dir().join(relative);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The command line and environment of a shipped container.
pub(crate) struct Container {
    /// `args`, after the `command`.
    pub(crate) args: Vec<String>,
    /// `env`, in order.
    pub(crate) env: Vec<(String, String)>,
}

/// The first container of the Deployment or Pod in `manifests/<relative>`.
pub(crate) fn container(relative: &str) -> Result<Container> {
    let object = manifest(relative)?;
    let pod = match object["kind"].as_str() {
        Some("Pod") => &object["spec"],
        _ => &object["spec"]["template"]["spec"],
    };
    let container = &pod["containers"][0];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    if strings(&container["command"]) != ["volume-health-webhook"] {
        bail!("{relative}: the container does not run volume-health-webhook");
    }
    let env = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    Ok(Container {
        args: strings(&container["args"]),
        env,
    })
}

/// The writer list's component: the list the server is given and the validating entry it adds.
pub(crate) const WRITERS_COMPONENT: &str = "components/pvc-health-writers";

/// The environment variable that carries the server's writer list.
pub const WRITERS_ENV: &str = "VOLUME_HEALTH_PVC_HEALTH_WRITERS";

/// The writer list as the component ships it: the server's variable's value.
pub fn shipped_writer_list() -> Result<String> {
    let deployment = manifest(&format!("{WRITERS_COMPONENT}/deployment.yaml"))?;
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == WRITERS_ENV)
        .and_then(|e| e["value"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("{WRITERS_COMPONENT}/deployment.yaml: no {WRITERS_ENV}"))
}

/// The environment variable that turns repair on.
pub const REPAIR_ENV: &str = "VOLUME_HEALTH_REPAIR";

/// The component that turns repair off: its server variable and the entries it removes.
pub(crate) const NO_REPAIR_COMPONENT: &str = "components/no-repair";

/// The component that turns volume health off: the webhook's gate and drop on save's entries.
pub(crate) const VOLUME_HEALTH_OFF_COMPONENT: &str = "components/volume-health-off";

/// The components that add webhook entries: the file of their patch and the configuration it
/// patches.
const ENTRY_COMPONENTS: [(&str, &str, &str); 3] = [
    (
        WRITERS_COMPONENT,
        "webhook.yaml",
        "validatingwebhookconfigurations",
    ),
    (
        VOLUME_HEALTH_OFF_COMPONENT,
        "entries/webhooks.yaml",
        "mutatingwebhookconfigurations",
    ),
    (
        VOLUME_HEALTH_OFF_COMPONENT,
        "entries/validating.yaml",
        "validatingwebhookconfigurations",
    ),
];

/// The entries a component adds to the configuration `plural`: a JSON patch's added values,
/// or a strategic merge patch's entries; and whether they come first, as kustomize puts a
/// strategic merge patch's new entries (a JSON patch's go last).
fn component_entries(component: &str, plural: &str) -> Result<(Vec<Value>, bool)> {
    let Some((_, file, _)) = ENTRY_COMPONENTS
        .iter()
        .find(|(name, _, target)| *name == component && *target == plural)
    else {
        return Ok((Vec::new(), false));
    };
    let patch = manifest(&format!("{component}/{file}"))?;
    let first = !patch.is_array();
    let entries: Vec<Value> = match patch.as_array() {
        Some(operations) => operations
            .iter()
            .filter(|op| op["op"] == "add")
            .map(|op| op["value"].clone())
            .collect(),
        None => patch["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| entry.get("$patch").is_none())
            .cloned()
            .collect(),
    };
    if entries.is_empty() {
        bail!("{component}/{file}: no entry added");
    }
    Ok((entries, first))
}

/// The names of the mutating entries `components/no-repair` removes (its strategic merge
/// patch's `$patch: delete` items).
fn removed_entries(component: &str, plural: &str) -> Result<Vec<String>> {
    if component != NO_REPAIR_COMPONENT || plural != "mutatingwebhookconfigurations" {
        return Ok(Vec::new());
    }
    let patch = manifest(&format!("{component}/webhooks.yaml"))?;
    let names: Vec<String> = patch["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry["$patch"] == "delete")
        .filter_map(|entry| entry["name"].as_str().map(str::to_owned))
        .collect();
    if names.is_empty() {
        bail!("{component}/webhooks.yaml: no entry removed");
    }
    Ok(names)
}

/// The shipped webhook configurations (mutating, then validating) with each webhook's
/// `clientConfig` pointed at `addr` (its path kept) and trusting `ca_pem`, with the entries of
/// `components` (`components/pvc-health-writers`, `components/no-repair`,
/// `components/volume-health-off`) applied as those
/// components apply them: entries added or removed. Answers each object with its resource's plural.
pub(crate) fn webhook_configurations(
    addr: SocketAddr,
    ca_pem: &str,
    components: &[&str],
) -> Result<Vec<(&'static str, Value)>> {
    let mut out = Vec::new();
    for (file, plural) in [
        (
            "base/mutatingwebhookconfiguration.yaml",
            "mutatingwebhookconfigurations",
        ),
        (
            "base/validatingwebhookconfiguration.yaml",
            "validatingwebhookconfigurations",
        ),
    ] {
        let mut configuration = manifest(file)?;
        let webhooks = configuration["webhooks"]
            .as_array_mut()
            .with_context(|| format!("{file}: no webhooks"))?;
        for component in components {
            let (added, first) = component_entries(component, plural)?;
            let at = if first { 0 } else { webhooks.len() };
            webhooks.splice(at..at, added);
            let removed = removed_entries(component, plural)?;
            webhooks.retain(|w| !removed.iter().any(|name| w["name"] == name.as_str()));
        }
        for webhook in webhooks {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .with_context(|| format!("{file}: a webhook without a service path"))?
                .to_owned();
            webhook["clientConfig"] = json!({
                "url": format!("https://{addr}{path}"),
                "caBundle": STANDARD.encode(ca_pem),
            });
        }
        out.push((plural, configuration));
    }
    Ok(out)
}

/// Writes the shipped AuthorizationConfiguration and the authorizer's kubeconfig into `dir`,
/// the kubeconfig pointing at `addr` (its path kept) with a client certificate for the
/// apiserver; answers the configuration's path.
pub(crate) fn authorization_config(dir: &Path, pki: &Pki, addr: SocketAddr) -> Result<PathBuf> {
    let kubeconfig_path = dir.join("authorizer-kubeconfig.json");
    let mut config = manifest("authz/authorization-config.yaml")?;
    let mut ours = 0;
    for authorizer in config["authorizers"]
        .as_array_mut()
        .context("no authorizers")?
    {
        if authorizer["type"] == "Webhook" && authorizer["name"] == "volume-health" {
            authorizer["webhook"]["connectionInfo"]["kubeConfigFile"] = json!(kubeconfig_path);
            ours += 1;
        }
    }
    if ours != 1 {
        bail!("authorization-config.yaml: {ours} volume-health webhook authorizers");
    }

    let client = pki.client("apiserver-authz-client", "kube-apiserver", &[])?;
    let mut kubeconfig = manifest("authz/authorizer-kubeconfig.yaml")?;
    let cluster = &mut kubeconfig["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().context("no server")?;
    let path = server
        .find("://")
        .and_then(|scheme| {
            server[scheme + 3..]
                .find('/')
                .map(|p| &server[scheme + 3 + p..])
        })
        .unwrap_or("")
        .to_owned();
    cluster["server"] = json!(format!("https://{addr}{path}"));
    cluster["certificate-authority"] = json!(pki.ca_file());
    let user = &mut kubeconfig["users"][0]["user"];
    user["client-certificate"] = json!(client.cert);
    user["client-key"] = json!(client.key);
    std::fs::write(&kubeconfig_path, kubeconfig.to_string())?;

    let config_path = dir.join("authorization-config.json");
    std::fs::write(&config_path, config.to_string())?;
    Ok(config_path)
}

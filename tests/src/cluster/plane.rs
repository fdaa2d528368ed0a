//! The shipped control plane: the apiserver authorizing with the shipped
//! AuthorizationConfiguration, the admission webhooks behind the shipped configurations, and
//! the authorizer, each server the release binary with the shipped arguments and environment.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hyper::Method;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{
    Cluster, ClusterOptions, Identity, Role, WebhookServer, bin_dir, free_port, shipped,
    webhook_binary, webhooks::configuration_path,
};

/// The apiserver, the admission webhooks and the authorizer.
pub struct ControlPlane {
    /// etcd and kube-apiserver.
    pub cluster: Cluster,
    /// The Deployment's server: `/mutate` and `/validate`.
    pub admission: WebhookServer,
    /// The control plane's authorizer: `/authorize`.
    pub authorizer: WebhookServer,
    /// What the install's components set in the admission server's environment, kept across
    /// restarts (`components/no-repair`'s switch).
    installed: Vec<(&'static str, &'static str)>,
    /// The components whose entries the installed configurations hold; `None` until they are
    /// installed.
    components: Option<Vec<&'static str>>,
}

impl ControlPlane {
    /// Starts everything with the in-tree `CSIVolumeHealth` gate as given and the webhook's on,
    /// `env` added to the admission server's environment, and waits until the apiserver calls
    /// the webhooks. A writer list in `env` must be the one its component ships, whose
    /// validating entry is then installed too, as the component installs both. Repair's
    /// entries are the base's: `VOLUME_HEALTH_REPAIR=false` in `env` turns the server's repair
    /// off behind them; [`start_without_repair`](Self::start_without_repair) installs as
    /// `components/no-repair` does.
    pub async fn start(in_tree_gate: bool, env: &[(&str, &str)]) -> Result<Self> {
        Self::start_components(in_tree_gate, env, &[]).await
    }

    /// As [`start`](Self::start), installed with `components/no-repair`: the server's repair
    /// off and its entries removed.
    pub async fn start_without_repair(in_tree_gate: bool, env: &[(&str, &str)]) -> Result<Self> {
        Self::start_components(in_tree_gate, env, &[shipped::NO_REPAIR_COMPONENT]).await
    }

    async fn start_components(
        in_tree_gate: bool,
        env: &[(&str, &str)],
        components: &[&'static str],
    ) -> Result<Self> {
        let mut components = components.to_vec();
        if let Some((_, list)) = env.iter().find(|(name, _)| *name == shipped::WRITERS_ENV) {
            let shipped = shipped::shipped_writer_list()?;
            if *list != shipped {
                bail!("the writer list {list:?} is not the component's {shipped:?}");
            }
            components.push(shipped::WRITERS_COMPONENT);
        }
        let authorizer_port = free_port()?;
        let options = ClusterOptions {
            in_tree_gate,
            authorizer: Some(([127, 0, 0, 1], authorizer_port).into()),
        };
        let cluster = Cluster::start(&bin_dir()?, options).await?;
        let bin = webhook_binary()?;
        let admission = WebhookServer::new(Role::Admission, bin.clone(), &cluster, 0)?;
        let authorizer = WebhookServer::new(Role::Authorizer, bin, &cluster, authorizer_port)?;
        let installed = if components.contains(&shipped::NO_REPAIR_COMPONENT) {
            vec![(shipped::REPAIR_ENV, "false")]
        } else {
            Vec::new()
        };
        let mut plane = ControlPlane {
            cluster,
            admission,
            authorizer,
            installed,
            components: None,
        };
        plane.set_webhook(true, env).await?;
        plane
            .admission
            .install_configurations(&plane.cluster, &components)
            .await?;
        plane.components = Some(components);
        plane.wait_admission().await?;
        Ok(plane)
    }

    /// Restarts both servers with the webhook's `CSIVolumeHealth` gate as given (the manifests
    /// keep the two equal), the install's components' environment and `env` added to the
    /// admission server's, as an operator patches the manifests. The gate off is
    /// `components/volume-health-off`: its drop on save entries are installed with it and
    /// removed with it, and this waits until the apiserver calls them or no longer does.
    pub async fn set_webhook(&mut self, gate: bool, env: &[(&str, &str)]) -> Result<()> {
        let gates = format!("CSIVolumeHealth={gate}");
        let mut admission = vec![("VOLUME_HEALTH_FEATURE_GATES", gates.as_str())];
        admission.extend_from_slice(&self.installed);
        admission.extend_from_slice(env);
        self.admission.start(&admission).await?;
        self.authorizer
            .start(&[("VOLUME_HEALTH_FEATURE_GATES", &gates)])
            .await?;
        // Not installed yet, or the entries already match the gate.
        let Some(mut components) = self.components.clone() else {
            return Ok(());
        };
        if components.contains(&shipped::VOLUME_HEALTH_OFF_COMPONENT) != gate {
            return Ok(());
        }
        if gate {
            components.retain(|c| *c != shipped::VOLUME_HEALTH_OFF_COMPONENT);
        } else {
            components.push(shipped::VOLUME_HEALTH_OFF_COMPONENT);
        }
        self.admission
            .replace_configurations(&self.cluster, &components)
            .await?;
        self.components = Some(components);
        self.wait_drop_on_save(!gate).await
    }

    /// Waits until a new pod report is dropped (`dropped`) or stored: the apiserver's webhook
    /// manager has the configurations just written.
    async fn wait_drop_on_save(&self, dropped: bool) -> Result<()> {
        let client = self.cluster.client(Identity::Admin).await?;
        let pods: Api<Pod> = Api::namespaced(client, PROBE_NAMESPACE);
        let give_up = Instant::now() + Duration::from_secs(30);
        for round in 0.. {
            let clear = json!({"status": {"volumeHealth": null}});
            let first = volume_health(&format!("switch {round}"));
            for patch in [clear, first] {
                pods.patch_status("probe", &PatchParams::default(), &Patch::Strategic(patch))
                    .await?;
            }
            let stored = pods.get_status("probe").await?;
            let health = stored.status.and_then(|s| s.volume_health);
            if health.is_none() == dropped {
                return Ok(());
            }
            if Instant::now() > give_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("the apiserver never applied the new configurations (drop on save {dropped})")
    }

    /// The shipped ValidatingWebhookConfiguration as installed: pointed at the admission
    /// server, without any component's entries.
    pub fn validating_configuration(&self) -> Result<Value> {
        shipped::webhook_configurations(self.admission.addr(), self.cluster.pki().ca_pem(), &[])?
            .into_iter()
            .find(|(plural, _)| *plural == "validatingwebhookconfigurations")
            .map(|(_, configuration)| configuration)
            .ok_or_else(|| anyhow::anyhow!("no validating configuration"))
    }

    /// Deletes the installed ValidatingWebhookConfiguration.
    pub async fn delete_validating_configuration(&self) -> Result<()> {
        let configuration = self.validating_configuration()?;
        let path = configuration_path("validatingwebhookconfigurations", &configuration);
        let (code, body) = self
            .cluster
            .api
            .send(Method::DELETE, &path, None, None)
            .await?;
        if code != 200 {
            bail!("deleting {path}: {code} {body}");
        }
        Ok(())
    }

    /// Creates a ValidatingWebhookConfiguration.
    pub async fn create_configuration(&self, configuration: &Value) -> Result<()> {
        let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
        let (code, body) = self
            .cluster
            .api
            .send(Method::POST, path, Some(configuration), None)
            .await?;
        if code != 201 {
            bail!("creating a validating configuration: {code} {body}");
        }
        Ok(())
    }

    /// Waits until the apiserver calls the admission webhooks: their configurations reach its
    /// webhook manager through a watch.
    async fn wait_admission(&self) -> Result<()> {
        let client = self.cluster.client(Identity::Admin).await?;
        create_namespace(&client, PROBE_NAMESPACE).await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), PROBE_NAMESPACE);
        pods.create(&PostParams::default(), &bound_pod("probe", "nobody")?)
            .await?;
        let csinodes: Api<CSINode> = Api::all(client);
        let csinode = json!({"metadata": {"name": "webhook-probe"}, "spec": {"drivers": []}});
        csinodes
            .create(&PostParams::default(), &serde_json::from_value(csinode)?)
            .await?;
        let give_up = Instant::now() + Duration::from_secs(30);
        for round in 0.. {
            let before = self.reviews().await?;
            // Sent in every install: a pod report to repair (two entries for one volume) to
            // the repair entries, a changed storage report to the validating entry. Each is
            // set and cleared in turn.
            let (report, storage) = if round % 2 == 0 {
                let condition = json!({"status": "Degraded", "reason": "Probe",
                    "message": format!("probe {round}")});
                (
                    json!({"status": {"volumeHealth": [
                        {"name": "vol", "healthConditions": [condition]},
                        {"name": "vol", "healthConditions": [condition]}]}}),
                    json!({"status": {"storageHealth": [{"name": "probe.example.com",
                        "healthConditions": [{"status": "StorageDegraded", "reason": "Probe"}]}]}}),
                )
            } else {
                (
                    json!({"status": {"volumeHealth": null}}),
                    json!({"status": {"storageHealth": null}}),
                )
            };
            let _ = pods
                .patch_status("probe", &PatchParams::default(), &Patch::Merge(report))
                .await;
            let _ = csinodes
                .patch_status(
                    "webhook-probe",
                    &PatchParams::default(),
                    &Patch::Merge(storage),
                )
                .await;
            if self.reviews().await? > before {
                return Ok(());
            }
            if Instant::now() > give_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("the apiserver never called the webhooks")
    }

    /// The reviews the admission server has received, on every endpoint (its metrics).
    pub async fn reviews(&self) -> Result<f64> {
        self.admission
            .metric("volume_health_webhook_requests_total", &[])
            .await
    }
}

/// The namespace of the pod the control plane probes its webhooks with.
const PROBE_NAMESPACE: &str = "webhook-probe";

/// Creates namespace `name`.
pub async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(())
}

/// A pod bound to `node`, its volume `vol` the claim `claim`: the Node authorizer relates the
/// node to both.
pub fn bound_pod(name: &str, node: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": "claim"}}]}}))?)
}

/// A valid `status.volumeHealth` for volume `vol`, as a patch.
pub fn volume_health(message: &str) -> Value {
    json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
        {"status": "Degraded", "reason": "DiskSlow", "message": message}]}]}})
}

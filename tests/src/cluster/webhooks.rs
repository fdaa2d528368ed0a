//! The project's server as the manifests run it: the admission webhooks (the Deployment) and
//! the authorizer (the control-plane static pod), each the release binary with the shipped
//! arguments and environment, on loopback ports with certificates of the cluster's CA.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hyper::Method;

use super::pki::KeyPairFiles;
use super::{Cluster, Process, api, free_port, shipped};

/// A restarted server is ready well within this (it starts in milliseconds).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Which shipped process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `manifests/base/deployment.yaml`: `/mutate` and `/validate`.
    Admission,
    /// `manifests/authz/volume-health-authz.yaml`: `/authorize`, client certificates required.
    Authorizer,
}

impl Role {
    fn manifest(self) -> &'static str {
        match self {
            Role::Admission => "base/deployment.yaml",
            Role::Authorizer => "authz/volume-health-authz.yaml",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Admission => "webhook",
            Role::Authorizer => "authorizer",
        }
    }
}

/// One server process, restartable on the same ports with another environment.
pub struct WebhookServer {
    role: Role,
    bin: PathBuf,
    dir: PathBuf,
    secure: SocketAddr,
    health: SocketAddr,
    serving: KeyPairFiles,
    client_ca: PathBuf,
    process: Option<Process>,
    starts: usize,
}

impl WebhookServer {
    /// A server of `role` for `cluster`, not started, its TLS port `secure_port` (0: any free
    /// port).
    pub fn new(role: Role, bin: PathBuf, cluster: &Cluster, secure_port: u16) -> Result<Self> {
        let secure_port = match secure_port {
            0 => free_port()?,
            port => port,
        };
        Ok(WebhookServer {
            role,
            bin,
            dir: cluster.dir().to_owned(),
            secure: SocketAddr::from((Ipv4Addr::LOCALHOST, secure_port)),
            health: SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)),
            serving: cluster.pki().serving(role.name())?,
            client_ca: cluster.pki().ca_file(),
            process: None,
            starts: 0,
        })
    }

    /// The TLS address.
    pub fn addr(&self) -> SocketAddr {
        self.secure
    }

    /// (Re)starts the server with the shipped arguments and environment, `env` replacing or
    /// adding variables (as an operator's patch of the manifest would), and waits until it is
    /// ready. A running process is killed first.
    pub async fn start(&mut self, env: &[(&str, &str)]) -> Result<()> {
        self.process = None;
        let shipped = shipped::container(self.role.manifest())?;
        let mut args: Vec<String> = Vec::new();
        let ours = [
            ("--bind-address", "127.0.0.1".to_owned()),
            ("--secure-port", self.secure.port().to_string()),
            ("--health-port", self.health.port().to_string()),
            ("--tls-cert-file", self.serving.cert.display().to_string()),
            (
                "--tls-private-key-file",
                self.serving.key.display().to_string(),
            ),
            // The apiserver reaches it on loopback, by the name its certificate carries, not
            // by the Service's DNS name the manifests give.
            ("--tls-server-name", "localhost".to_owned()),
        ];
        for arg in &shipped.args {
            let flag = arg.split('=').next().unwrap_or("");
            if ours.iter().any(|(name, _)| *name == flag) {
                continue;
            }
            if flag == "--client-ca-file" {
                args.push(format!("--client-ca-file={}", self.client_ca.display()));
            } else {
                args.push(arg.clone());
            }
        }
        args.extend(ours.iter().map(|(name, value)| format!("{name}={value}")));

        let mut command = Command::new(&self.bin);
        command.args(&args).env_clear();
        for (name, value) in &shipped.env {
            command.env(name, value);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        self.starts += 1;
        let name = format!("{}-{}", self.role.name(), self.starts);
        let mut process = Process::start(&name, &self.dir, &mut command)?;
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            process.check_running()?;
            if let Ok((200, _)) = api::get_text(self.health, "/readyz").await {
                break;
            }
            if Instant::now() > give_up {
                bail!("{name} was not ready after {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.process = Some(process);
        Ok(())
    }

    /// The running server's process ID, to read its CPU time and memory from `/proc`.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    /// Stops the server (SIGKILL): the apiserver finds nothing listening.
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// The server's `/metrics`, as text.
    pub async fn scrape(&self) -> Result<String> {
        let (code, text) = api::get_text(self.health, "/metrics").await?;
        if code != 200 {
            bail!("/metrics: {code}");
        }
        Ok(text)
    }

    /// The sum of the samples of the server's metric `name` whose labels contain every one of
    /// `labels` (`key="value"`).
    pub async fn metric(&self, name: &str, labels: &[&str]) -> Result<f64> {
        let text = self.scrape().await?;
        Ok(text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' '))
            .filter(|(series, _)| {
                series.split('{').next() == Some(name)
                    && labels.iter().all(|label| series.contains(label))
            })
            .filter_map(|(_, value)| value.parse::<f64>().ok())
            .sum())
    }

    /// The shipped webhook configurations with the entries of `components`, pointed at this
    /// server: (plural, object).
    fn configurations(
        &self,
        cluster: &Cluster,
        components: &[&str],
    ) -> Result<Vec<(&'static str, serde_json::Value)>> {
        shipped::webhook_configurations(self.secure, cluster.pki().ca_pem(), components)
    }

    /// Creates the shipped webhook configurations, pointed at this server, in `cluster`, with
    /// the entries of `components`.
    pub async fn install_configurations(
        &self,
        cluster: &Cluster,
        components: &[&str],
    ) -> Result<()> {
        for (plural, configuration) in self.configurations(cluster, components)? {
            let path = format!("/apis/admissionregistration.k8s.io/v1/{plural}");
            let (code, body) = cluster
                .api
                .send(Method::POST, &path, Some(&configuration), None)
                .await?;
            if code != 201 {
                bail!("creating {plural}: {code} {body}");
            }
        }
        Ok(())
    }

    /// Replaces the installed configurations with the shipped ones with the entries of
    /// `components`, as `kubectl apply` of an overlay that adds or removes a component does.
    pub async fn replace_configurations(
        &self,
        cluster: &Cluster,
        components: &[&str],
    ) -> Result<()> {
        for (plural, mut configuration) in self.configurations(cluster, components)? {
            let path = configuration_path(plural, &configuration);
            let (code, body) = cluster.api.send(Method::GET, &path, None, None).await?;
            if code != 200 {
                bail!("reading {path}: {code} {body}");
            }
            configuration["metadata"]["resourceVersion"] =
                body["metadata"]["resourceVersion"].clone();
            let (code, body) = cluster
                .api
                .send(Method::PUT, &path, Some(&configuration), None)
                .await?;
            if code != 200 {
                bail!("replacing {path}: {code} {body}");
            }
        }
        Ok(())
    }

    /// Deletes what [`install_configurations`](Self::install_configurations) created: the
    /// cluster then has no configuration of this project's.
    pub async fn uninstall_configurations(
        &self,
        cluster: &Cluster,
        components: &[&str],
    ) -> Result<()> {
        for (plural, configuration) in self.configurations(cluster, components)? {
            let path = configuration_path(plural, &configuration);
            let (code, body) = cluster.api.send(Method::DELETE, &path, None, None).await?;
            if code != 200 {
                bail!("deleting {path}: {code} {body}");
            }
        }
        Ok(())
    }
}

/// The API path of a webhook configuration of resource `plural`.
pub(crate) fn configuration_path(plural: &str, configuration: &serde_json::Value) -> String {
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    format!("/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
}

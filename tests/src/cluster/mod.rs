//! A real control plane on loopback: etcd and kube-apiserver from the pinned binaries, the
//! project's webhook server as the manifests ship it, certificates for every identity, and
//! clients (kube-rs, and a small HTTPS client for what kube-rs does not do).

mod api;
mod audit;
mod controller_manager;
mod cpu_group;
mod kubelet;
mod pki;
mod plane;
mod shipped;
mod webhooks;
mod writes;

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hyper::Method;
use serde_json::{Value, json};

pub use api::{ADMIN, Api, User};
pub use audit::{AuditMark, StatusWrite};
pub use controller_manager::{
    ControllerManager, NAMESPACE_CONTROLLER, POLICY_STATUS_CONTROLLER, PV_BINDER_CONTROLLER,
};
pub use kubelet::{
    HollowFleet, HollowNode, KUBELET_PROBE_PERIOD, Periods, Served, create_pod, create_pod_of_claim,
};
pub use pki::{KeyPairFiles, Pki};
pub use plane::{ControlPlane, bound_pod, create_namespace, volume_health};
pub use shipped::{REPAIR_ENV, WRITERS_ENV, manifests_dir, shipped_writer_list};
pub use webhooks::{Role, WebhookServer};
pub use writes::{Written, patch_retrying};

/// The API collection of an admission policy or binding of `kind`.
pub fn policy_collection(kind: &str) -> String {
    let plural = match kind {
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        other => panic!("{other} is not an admission policy or binding"),
    };
    format!("/apis/admissionregistration.k8s.io/v1/{plural}")
}

/// A cold kube-apiserver on a loaded 2-core machine needs some 20 s to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A started process, killed by its PID when dropped; its output goes to `<dir>/<name>.log`.
pub(crate) struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    pub(crate) fn start(name: &str, dir: &Path, command: &mut Command) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out = File::options().create(true).append(true).open(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Process {
            name: name.to_owned(),
            child,
            log,
        })
    }

    pub(crate) fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("{} exited: {status}", self.name),
            None => Ok(()),
        }
    }

    /// The process's ID, to read its CPU time and memory from `/proc`.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the process's log, for a failed test.
    pub(crate) fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- last lines of {} ({}):\n{}",
            self.name,
            self.log.display(),
            lines[lines.len().saturating_sub(60)..].join("\n")
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // `Child::kill` signals this child's PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}", self.tail());
        }
    }
}

/// A free TCP port on loopback, below Linux's ephemeral range (32768 and up): a port is
/// chosen before its server binds it, and meanwhile any outgoing connection (the apiserver's
/// to etcd, a kubelet's) may take an ephemeral one.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Spread the processes of parallel suites apart, then walk the range.
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(LOW + offset).unwrap_or(0);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The directory of the pinned binaries: `VOLUME_HEALTH_E2E_BIN`, which `make e2e` sets.
pub fn bin_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("VOLUME_HEALTH_E2E_BIN")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("VOLUME_HEALTH_E2E_BIN is not set: run `make e2e`"))?;
    for bin in ["kube-apiserver", "etcd"] {
        if !dir.join(bin).exists() {
            bail!(
                "{} is missing: `make e2e` builds it",
                dir.join(bin).display()
            );
        }
    }
    Ok(dir)
}

/// The project's release binary: `VOLUME_HEALTH_E2E_WEBHOOK`, which `make e2e` sets.
pub fn webhook_binary() -> Result<PathBuf> {
    let bin = std::env::var_os("VOLUME_HEALTH_E2E_WEBHOOK")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("VOLUME_HEALTH_E2E_WEBHOOK is not set: run `make e2e`"))?;
    if !bin.exists() {
        bail!("{} is missing: `make e2e` builds it", bin.display());
    }
    Ok(bin)
}

/// The audit log's file name in the cluster's directory.
const AUDIT_LOG: &str = "audit.log";

/// How the apiserver is started.
#[derive(Clone, Copy, Debug)]
pub struct ClusterOptions {
    /// The in-tree `CSIVolumeHealth` gate.
    pub in_tree_gate: bool,
    /// Authorize with the shipped AuthorizationConfiguration (Node, the project's webhook at
    /// this address, RBAC) instead of `--authorization-mode=Node,RBAC`.
    pub authorizer: Option<SocketAddr>,
}

/// Whom a kube-rs client authenticates as.
#[derive(Clone, Copy, Debug)]
pub enum Identity<'a> {
    /// `system:admin` in `system:masters`, by client certificate.
    Admin,
    /// The kubelet of this node: `system:node:<name>` in `system:nodes`, by client certificate.
    Node(&'a str),
    /// A bearer token (a service account's, from a TokenRequest).
    Token(&'a str),
}

/// etcd and kube-apiserver, their temporary directory, the CA and an admin client.
pub struct Cluster {
    // Dropped in this order: the apiserver before its etcd, then the directory.
    apiserver: Process,
    etcd: Process,
    /// The admin's HTTPS client.
    pub api: Api,
    /// The apiserver's address.
    pub addr: SocketAddr,
    etcd_addr: SocketAddr,
    pki: Pki,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test keeps its certificates, kubeconfigs and every process's log.
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("kept {}", self.dir.path().display());
        }
    }
}

impl Cluster {
    /// Starts etcd and kube-apiserver from `bin` and waits until the apiserver is ready.
    pub async fn start(bin: &Path, options: ClusterOptions) -> Result<Self> {
        Self::start_with_admission_config(bin, options, None).await
    }

    /// As [`start`](Self::start), the apiserver given `admission_config` as its
    /// `--admission-control-config-file`.
    pub async fn start_with_admission_config(
        bin: &Path,
        options: ClusterOptions,
        admission_config: Option<&Path>,
    ) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("volume-health-e2e")
            .tempdir()?;
        let pki = Pki::new(dir.path())?;
        let serving = pki.serving("apiserver")?;
        let admin = pki.client("admin", ADMIN, &["system:masters"])?;
        let sa_key = rcgen::KeyPair::generate()?;
        std::fs::write(dir.path().join("sa.key"), sa_key.serialize_pem())?;
        std::fs::write(dir.path().join("sa.pub"), sa_key.public_key_pem())?;

        let (client, peer, secure) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let etcd = Process::start(
            "etcd",
            dir.path(),
            Command::new(bin.join("etcd"))
                .arg("--name=e2e")
                .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=e2e={peer_url}"))
                // Nothing here outlives the test: no fsync per write.
                .arg("--unsafe-no-fsync"),
        )?;
        let file = |name: &str| dir.path().join(name).display().to_string();
        // An audit log of CSINode, claim and pod status writes only (where the native policies'
        // Audit bindings and the repair webhooks record their annotations), at Metadata level,
        // which carries the annotations.
        std::fs::write(
            dir.path().join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
             - level: Metadata\n  verbs: [update, patch]\n  resources:\n\
             \x20 - group: storage.k8s.io\n    resources: [csinodes, csinodes/status]\n\
             \x20 - group: \"\"\n    resources: [persistentvolumeclaims/status, pods/status]\n\
             - level: None\n",
        )?;
        let mut command = Command::new(bin.join("kube-apiserver"));
        command
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={secure}"))
            .arg(format!("--tls-cert-file={}", serving.cert.display()))
            .arg(format!("--tls-private-key-file={}", serving.key.display()))
            .arg(format!("--client-ca-file={}", pki.ca_file().display()))
            .arg(format!("--service-account-key-file={}", file("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                file("sa.key")
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            // The in-tree rules the project mirrors: NodeRestriction and the gated fields'
            // validation (the Node authorizer below).
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg(format!(
                "--feature-gates=CSIVolumeHealth={}",
                options.in_tree_gate
            ))
            .arg("--runtime-config=api/all=true")
            // Loopback only: no `kubernetes` service endpoints to reconcile.
            .arg("--endpoint-reconciler-type=none")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            // JSON in etcd, so that stored objects the API refuses today can be written
            // straight into etcd.
            .arg("--storage-media-type=application/json")
            .arg(format!("--cert-dir={}", file("certs")))
            .arg(format!("--audit-policy-file={}", file("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", file(AUDIT_LOG)))
            // One file, never rotated: the suites' marks are byte offsets into it. The
            // apiserver's default rotates it at 100 MB, which a 100-node run passes.
            .arg("--audit-log-maxsize=0")
            .arg("--audit-log-mode=blocking");
        if let Some(config) = admission_config {
            command.arg(format!(
                "--admission-control-config-file={}",
                config.display()
            ));
        }
        match options.authorizer {
            None => command.arg("--authorization-mode=Node,RBAC"),
            Some(addr) => {
                let config = shipped::authorization_config(dir.path(), &pki, addr)?;
                command.arg(format!("--authorization-config={}", config.display()))
            }
        };
        let apiserver = Process::start("kube-apiserver", dir.path(), &mut command)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, secure));
        let api = Api::new(addr, &pki.ca_file(), &admin)?;
        let mut cluster = Cluster {
            apiserver,
            etcd,
            api,
            addr,
            etcd_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, client)),
            pki,
            dir,
        };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            self.etcd.check_running()?;
            self.apiserver.check_running()?;
            if let Ok((200, _)) = self.api.send(Method::GET, "/readyz", None, None).await {
                return Ok(());
            }
            if Instant::now() > give_up {
                bail!("kube-apiserver was not ready after {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The apiserver's audit log: one JSON event a line, for the writes of CSINodes and of
    /// claims' and pods' status.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.path().join(AUDIT_LOG)
    }

    /// The apiserver's process ID, to read its CPU time and memory from `/proc`.
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.pid()
    }

    /// The temporary directory of the certificates, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's CA.
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Creates the admission policy or binding `object` as the admin; fails unless it is
    /// created.
    pub async fn create_policy(&self, object: &Value) -> Result<()> {
        let kind = object["kind"].as_str().unwrap_or_default();
        let (code, body) = self
            .api
            .send(Method::POST, &policy_collection(kind), Some(object), None)
            .await?;
        if code != 201 {
            bail!(
                "creating {} {}: {code} {body}",
                kind,
                object["metadata"]["name"]
            );
        }
        Ok(())
    }

    /// Deletes the admission policy or binding `object` names, as the admin; fails unless it
    /// is deleted.
    pub async fn delete_policy(&self, object: &Value) -> Result<()> {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let path = format!("{}/{name}", policy_collection(kind));
        let (code, body) = self.api.send(Method::DELETE, &path, None, None).await?;
        if code != 200 {
            bail!("deleting {kind} {name}: {code} {body}");
        }
        Ok(())
    }

    /// Writes `object` under `key` straight into etcd, through its JSON gateway.
    pub async fn etcd_put(&self, key: &str, object: &Value) -> Result<()> {
        let body = json!({
            "key": STANDARD.encode(key),
            "value": STANDARD.encode(object.to_string()),
        });
        let (status, answer) =
            api::send_plain(self.etcd_addr, Method::POST, "/v3/kv/put", Some(&body)).await?;
        if status != 200 {
            bail!("etcd put {key}: {status} {answer}");
        }
        Ok(())
    }

    /// A kube-rs client of this apiserver, authenticated as `identity` (written as a kubeconfig
    /// in the cluster's directory, as kubectl would read it).
    pub async fn client(&self, identity: Identity<'_>) -> Result<kube::Client> {
        let path = self.kubeconfig(identity)?;
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A kubeconfig file for `identity` in the cluster's directory, for kube-rs, kubectl or a
    /// kubelet.
    pub fn kubeconfig(&self, identity: Identity<'_>) -> Result<PathBuf> {
        let (name, user) = match identity {
            Identity::Admin => {
                let files = self.pki.client("admin", ADMIN, &["system:masters"])?;
                ("admin".to_owned(), cert_user(&files))
            }
            Identity::Node(node) => {
                let user = format!("system:node:{node}");
                let files = self
                    .pki
                    .client(&format!("node-{node}"), &user, &["system:nodes"])?;
                (format!("node-{node}"), cert_user(&files))
            }
            Identity::Token(token) => ("token".to_owned(), json!({"token": token})),
        };
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": format!("https://{}", self.addr),
                "certificate-authority": self.pki.ca_file(),
            }}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "e2e", "user": name}}],
            "current-context": name,
        });
        let path = self.dir().join(format!("kubeconfig-{name}.json"));
        std::fs::write(&path, kubeconfig.to_string())?;
        Ok(path)
    }

    /// A token of service account `namespace/name` (created when missing), from a
    /// TokenRequest, as a projected token would be.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String> {
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace}});
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts");
        let (code, body) = self
            .api
            .send(Method::POST, &path, Some(&account), None)
            .await?;
        if code != 201 && code != 409 {
            bail!("service account {namespace}/{name}: {code} {body}");
        }
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}});
        let (code, body) = self
            .api
            .send(
                Method::POST,
                &format!("{path}/{name}/token"),
                Some(&request),
                None,
            )
            .await?;
        body["status"]["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("token of {namespace}/{name}: {code} {body}"))
    }
}

fn cert_user(files: &KeyPairFiles) -> Value {
    json!({"client-certificate": files.cert, "client-key": files.key})
}

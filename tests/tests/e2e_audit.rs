//! `volume-health-webhook audit` against a real kube-apiserver v1.37.2 with the shipped
//! webhooks, as its ServiceAccount with the RBAC of `components/audit` (so that the role is
//! proven enough) and the CRDs of `components/openreports-crds`. While the webhook is down (an
//! outage: its entries fail open) a user stores a CSINode report with two conditions of one
//! identity, which in-tree v1.37.2 accepts and this project's rule refuses; two claims hold
//! values stored before the install (written into etcd). The audit writes a ClusterReport and
//! the claims' namespace's Report, bounded as asked, and after the objects are fixed it
//! deletes both. Slow, so ignored: `make e2e`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyper::Method;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    Cluster, ControlPlane, Identity, bound_pod, create_namespace, manifests_dir, webhook_binary,
};

const NAMESPACE: &str = "volume-health";
const ACCOUNT: &str = "volume-health-audit";
const SHOP: &str = "shop";
const NODE: &str = "node1";
const DRIVER: &str = "csi.example.com";
const REPORTS: &str = "/apis/openreports.io/v1alpha1";

/// What one run of the audit did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the release binary's `audit` with `kubeconfig` and `args`.
async fn audit(kubeconfig: &Path, args: &[&str]) -> Result<Run> {
    let mut child = std::process::Command::new(webhook_binary()?)
        .arg("audit")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            child.kill()?;
            bail!("audit did not end within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = child.wait_with_output()?;
    let run = Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout)?,
        stderr: String::from_utf8(output.stderr)?,
    };
    eprintln!(
        "audit {args:?}: exit {}\n{}{}",
        run.code, run.stdout, run.stderr
    );
    Ok(run)
}

/// The YAML documents of a file of `manifests/`.
fn manifest(relative: &str) -> Result<Vec<Value>> {
    let path = manifests_dir().join(relative);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(document)?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// Creates `object` at `path` as the admin.
async fn create(cluster: &Cluster, path: &str, object: &Value) -> Result<()> {
    let (code, body) = cluster
        .api
        .send(Method::POST, path, Some(object), None)
        .await?;
    if code != 201 {
        bail!("POST {path}: {code} {body}");
    }
    Ok(())
}

/// Installs the OpenReports CRDs as `components/openreports-crds` ships them, and waits until
/// the apiserver serves both kinds.
async fn install_crds(cluster: &Cluster) -> Result<()> {
    for file in [
        "openreports.io_reports.yaml",
        "openreports.io_clusterreports.yaml",
    ] {
        for crd in manifest(&format!("components/openreports-crds/{file}"))? {
            create(
                cluster,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                &crd,
            )
            .await?;
        }
    }
    for _ in 0..300 {
        let (code, discovery) = cluster.api.send(Method::GET, REPORTS, None, None).await?;
        let served = discovery["resources"].to_string();
        if code == 200 && served.contains("\"reports\"") && served.contains("\"clusterreports\"") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the apiserver never served {REPORTS}")
}

/// Creates the audit's ServiceAccount, ClusterRole and ClusterRoleBinding as
/// `components/audit` ships them.
async fn install_rbac(cluster: &Cluster) -> Result<()> {
    for document in manifest("components/audit/serviceaccount.yaml")? {
        create(
            cluster,
            &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
            &document,
        )
        .await?;
    }
    for document in manifest("components/audit/rbac.yaml")? {
        let plural = match document["kind"].as_str() {
            Some("ClusterRole") => "clusterroles",
            Some("ClusterRoleBinding") => "clusterrolebindings",
            other => bail!("rbac.yaml holds {other:?}"),
        };
        create(
            cluster,
            &format!("/apis/rbac.authorization.k8s.io/v1/{plural}"),
            &document,
        )
        .await?;
    }
    Ok(())
}

/// A claim's status report with two conditions of one (status, reason): in-tree refuses it
/// too, so only an earlier apiserver could have stored it.
fn duplicate_claim_health() -> Value {
    json!({"healthConditions": [
        {"status": "Inaccessible", "reason": "VolumeDetached", "message": "one"},
        {"status": "Inaccessible", "reason": "VolumeDetached", "message": "two"}]})
}

/// A CSINode report with one driver's two conditions of one identity: in-tree v1.37.2 stores
/// it, this project's rule refuses it from any writer but the node.
fn duplicate_storage_health() -> Value {
    json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]}]}})
}

/// Writes `health` into claim `name`'s `status.healthStatus` straight into etcd, as an
/// apiserver before the install stored it, and waits until the apiserver serves it.
async fn store_claim_in_etcd(cluster: &Cluster, name: &str, health: &Value) -> Result<()> {
    let path = format!("/api/v1/namespaces/{SHOP}/persistentvolumeclaims/{name}");
    let (code, mut object) = cluster.api.send(Method::GET, &path, None, None).await?;
    if code != 200 {
        bail!("GET {path}: {code} {object}");
    }
    object["metadata"]
        .as_object_mut()
        .context("metadata")?
        .remove("resourceVersion");
    object["status"]["healthStatus"] = health.clone();
    cluster
        .etcd_put(
            &format!("/registry/persistentvolumeclaims/{SHOP}/{name}"),
            &object,
        )
        .await?;
    let mut served = Value::Null;
    for _ in 0..100 {
        served = cluster.api.send(Method::GET, &path, None, None).await?.1;
        // The apiserver adds `lastTransitionTime: null` as it serves the object.
        if served["status"]["healthStatus"]["healthConditions"] == health["healthConditions"] {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the apiserver did not serve what was written into etcd for {name}: {}",
        served["status"]
    )
}

/// GETs `path` as the admin: `None` when it is not found.
async fn get(cluster: &Cluster, path: &str) -> Result<Option<Value>> {
    let (code, body) = cluster.api.send(Method::GET, path, None, None).await?;
    match code {
        200 => Ok(Some(body)),
        404 => Ok(None),
        _ => bail!("GET {path}: {code} {body}"),
    }
}

/// How many objects the list at `path` holds, as the admin sees them.
async fn count(cluster: &Cluster, path: &str) -> Result<usize> {
    let list = get(cluster, path).await?.context("the list")?;
    Ok(list["items"].as_array().map_or(0, Vec::len))
}

fn cluster_report_path() -> String {
    format!("{REPORTS}/clusterreports/volume-health-audit")
}

fn shop_report_path() -> String {
    format!("{REPORTS}/namespaces/{SHOP}/reports/volume-health-audit")
}

/// Every Report in every namespace and every ClusterReport: (namespace, name).
async fn all_reports(cluster: &Cluster) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for path in [
        format!("{REPORTS}/reports"),
        format!("{REPORTS}/clusterreports"),
    ] {
        let list = get(cluster, &path).await?.context("the list")?;
        for item in list["items"].as_array().into_iter().flatten() {
            names.push(format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap_or("-"),
                item["metadata"]["name"].as_str().unwrap_or_default()
            ));
        }
    }
    Ok(names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn the_audit_reports_what_an_outage_let_through_and_clears_it_once_fixed() -> Result<()> {
    let mut plane = ControlPlane::start(true, &[]).await?;
    let cluster = &plane.cluster;
    let admin = cluster.client(Identity::Admin).await?;
    create_namespace(&admin, NAMESPACE).await?;
    create_namespace(&admin, SHOP).await?;
    install_crds(cluster).await?;
    install_rbac(cluster).await?;
    let token = cluster.service_account_token(NAMESPACE, ACCOUNT).await?;
    let kubeconfig = cluster.kubeconfig(Identity::Token(&token))?;

    // A pod, three claims and the node's CSINode, all valid.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), SHOP);
    for name in ["claim", "data", "cache"] {
        let claim = serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?;
        claims.create(&PostParams::default(), &claim).await?;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SHOP);
    pods.create(&PostParams::default(), &bound_pod("web", NODE)?)
        .await?;
    let nodes: Api<CSINode> = Api::all(admin.clone());
    let node: CSINode = serde_json::from_value(json!({"metadata": {"name": NODE},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE}]}}))?;
    let node = nodes.create(&PostParams::default(), &node).await?;
    let node_uid = node.metadata.uid.clone().context("the CSINode's uid")?;

    // A clean cluster: every object checked (the control plane's probe pod and CSINode
    // too), exit 0, and no report is written.
    let run = audit(&kubeconfig, &[]).await?;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let (pods_held, claims_held, nodes_held) = (
        count(cluster, "/api/v1/pods").await?,
        count(cluster, "/api/v1/persistentvolumeclaims").await?,
        count(cluster, "/apis/storage.k8s.io/v1/csinodes").await?,
    );
    for line in [
        format!("pods: {pods_held} checked, 0 with findings"),
        format!("persistentvolumeclaims: {claims_held} checked, 0 with findings"),
        format!("csinodes: {nodes_held} checked, 0 with findings"),
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "{line}: {}",
            run.stdout
        );
    }
    assert!(all_reports(cluster).await?.is_empty());

    // While the webhook serves, the report is never stored as sent: refused, or repaired to
    // one condition by the base's repair entry.
    let params = PatchParams::default();
    let served = nodes
        .patch_status(NODE, &params, &Patch::Merge(duplicate_storage_health()))
        .await;
    if let Ok(stored) = served {
        let health = stored.status.unwrap().storage_health.unwrap();
        let conditions = health[0].health_conditions.as_ref().unwrap();
        assert_eq!(
            conditions.len(),
            1,
            "stored as sent while the webhook serves"
        );
    }

    // The outage: the webhook is down, its entries fail open, and the same write is stored
    // as sent. Two claims hold values stored before the install.
    plane.admission.stop();
    let stored = nodes
        .patch_status(NODE, &params, &Patch::Merge(duplicate_storage_health()))
        .await?;
    let health = stored.status.unwrap().storage_health.unwrap();
    let conditions = health[0].health_conditions.as_ref().unwrap();
    assert_eq!(conditions.len(), 2, "the outage let the duplicate through");
    let cluster = &plane.cluster;
    store_claim_in_etcd(cluster, "data", &duplicate_claim_health()).await?;
    store_claim_in_etcd(cluster, "cache", &duplicate_claim_health()).await?;
    plane.set_webhook(true, &[]).await?;
    let cluster = &plane.cluster;

    // A ServiceAccount without the audit's role may list nothing: the role is what lets it.
    let stranger = cluster.service_account_token(NAMESPACE, "stranger").await?;
    let run = audit(&cluster.kubeconfig(Identity::Token(&stranger))?, &[]).await?;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("listing csinodes: 403"),
        "{}",
        run.stderr
    );
    let kubeconfig = cluster.kubeconfig(Identity::Token(&token))?;

    // --dry-run: the findings printed, nothing written.
    let run = audit(&kubeconfig, &["--dry-run"]).await?;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "CSINode/{NODE}: status.storageHealth[0].healthConditions[1]: Duplicate value"
        )),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("reports: none written (--dry-run); would write 1 Report, 1 ClusterReport"),
        "{}",
        run.stdout
    );
    assert!(all_reports(cluster).await?.is_empty());

    // One result per report: the namespace's second finding is counted, not written.
    let metrics_dir = tempfile::tempdir()?;
    let metrics = metrics_dir.path().join("volume-health-audit.prom");
    let run = audit(
        &kubeconfig,
        &[
            "--max-results=1",
            &format!("--metrics-file={}", metrics.display()),
        ],
    )
    .await?;
    assert_eq!(run.code, 1, "{}", run.stderr);
    for line in [
        format!("persistentvolumeclaims: {claims_held} checked, 2 with findings (2 errors)"),
        format!("csinodes: {nodes_held} checked, 1 with findings (1 error)"),
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "{line}: {}",
            run.stdout
        );
    }
    assert!(
        run.stdout.contains(
            "reports: 2 written (1 Report, 1 ClusterReport), 0 deleted; 1 findings left out"
        ),
        "{}",
        run.stdout
    );
    let mut names = all_reports(cluster).await?;
    names.sort();
    assert_eq!(
        names,
        ["-/volume-health-audit", "shop/volume-health-audit"],
        "one Report for the namespace with findings, one ClusterReport, none per object"
    );
    let report = get(cluster, &shop_report_path()).await?.unwrap();
    assert_eq!(report["summary"]["fail"], 2, "{report:#}");
    assert_eq!(report["results"].as_array().unwrap().len(), 1);
    assert_eq!(
        report["metadata"]["annotations"]["volume-health.github.io/results-left-out"],
        "1"
    );
    assert_eq!(report["configuration"]["limits"]["maxResults"], 1);
    let text = std::fs::read_to_string(&metrics)?;
    for line in [
        "volume_health_audit_objects_with_findings{resource=\"persistentvolumeclaims\"} 2",
        "volume_health_audit_results_left_out 1",
        "volume_health_audit_success 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // The default bounds: every finding written, each naming its object.
    let run = audit(&kubeconfig, &[]).await?;
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = get(cluster, &cluster_report_path()).await?.unwrap();
    assert_eq!(report["kind"], "ClusterReport");
    assert_eq!(report["source"], "volume-health");
    assert_eq!(
        report["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "volume-health-audit"
    );
    assert_eq!(report["summary"]["fail"], 1);
    let result = &report["results"][0];
    assert_eq!(result["result"], "fail");
    assert_eq!(result["source"], "volume-health");
    assert_eq!(result["policy"], "csinodes.status.storageHealth");
    assert_eq!(
        result["rule"],
        "status.storageHealth[0].healthConditions[1]"
    );
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .starts_with("status.storageHealth[0].healthConditions[1]: Duplicate value"),
        "{result:#}"
    );
    assert_eq!(result["properties"]["type"], "FieldValueDuplicate");
    assert_eq!(
        result["resources"],
        json!([{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "name": NODE, "uid": node_uid}])
    );
    let report = get(cluster, &shop_report_path()).await?.unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report:#}");
    let mut named: Vec<&str> = results
        .iter()
        .map(|r| r["resources"][0]["name"].as_str().unwrap())
        .collect();
    named.sort_unstable();
    assert_eq!(named, ["cache", "data"]);
    assert!(
        results
            .iter()
            .all(|r| r["resources"][0]["kind"] == "PersistentVolumeClaim"
                && r["resources"][0]["namespace"] == SHOP
                && r["resources"][0]["uid"].is_string())
    );
    assert_eq!(
        report["metadata"]["annotations"]["volume-health.github.io/results-left-out"],
        "0"
    );
    let managers: Vec<&str> = report["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["volume-health-audit"]);

    // Fixed: one condition for the node's driver, and each claim's report rewritten by its
    // monitor. The next run finds nothing and deletes both reports.
    nodes
        .patch_status(
            NODE,
            &params,
            &Patch::Merge(
                json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"}]}]}}),
            ),
        )
        .await?;
    for name in ["data", "cache"] {
        claims
            .patch_status(
                name,
                &params,
                &Patch::Merge(json!({"status": {"healthStatus": {"healthConditions": [
                    {"status": "Inaccessible", "reason": "VolumeDetached", "message": "one"}]}}})),
            )
            .await?;
    }
    let run = audit(&kubeconfig, &[]).await?;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("reports: 0 written (0 Report, 0 ClusterReport), 2 deleted"),
        "{}",
        run.stdout
    );
    assert!(all_reports(cluster).await?.is_empty());
    Ok(())
}

//! The static policies (`volume-health-webhook policies` writes them to
//! `manifests/static-policies`) on a real kube-apiserver v1.37.2 started with their
//! AdmissionConfiguration: the rules answer the first write after the apiserver is ready, the
//! repair policy repairs the next, the objects cannot be deleted through the API, the rules
//! still answer after a try, and `verify` finds them by their answers. Slow, so ignored: `make e2e` runs it.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use anyhow::Result;
use hyper::Method;
use serde_json::{Value, json};
use volume_health_policies::{self as policies, Action};
use volume_health_tests::cluster::{Cluster, ClusterOptions, Identity, bin_dir, webhook_binary};

/// A CSINode status write whose driver entry has two conditions nothing tells apart: the
/// identity rule refuses it for a writer other than a node. `padded`: with more driver entries
/// than the repair policy reads, which leaves the pair to the identity rule; otherwise repair
/// keeps the first.
async fn indistinct_write(cluster: &Cluster, name: &str, padded: bool) -> Result<(u16, Value)> {
    let path = format!("/apis/storage.k8s.io/v1/csinodes/{name}");
    let (_, mut csinode) = cluster.api.send(Method::GET, &path, None, None).await?;
    let mut entries = vec![json!({"name": "csi.example.com", "healthConditions": [
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "a"},
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "b"}]})];
    if padded {
        entries.extend((0..policies::MAX_REPAIRED_ENTRIES).map(|i| {
            json!({"name": format!("pad-{i}.example.com"), "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolFull"}]})
        }));
    }
    csinode["status"] = json!({"storageHealth": entries});
    cluster
        .api
        .send(Method::PUT, &format!("{path}/status"), Some(&csinode), None)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn static_policies_answer_from_the_start_and_cannot_be_deleted() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let host_dir = dir.path().to_str().unwrap().to_owned();
    // The writer list names a monitor: verify's own claim write is refused by it.
    let writers = ["system:serviceaccount:kube-system:csi-health-monitor"];
    for (name, text) in policies::static_files(&writers, Action::Deny, &host_dir) {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap())?;
        std::fs::write(path, text)?;
    }
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start_with_admission_config(
        &bin_dir()?,
        options,
        Some(&dir.path().join("admission-configuration.yaml")),
    )
    .await?;

    // The first write after the apiserver is ready: a CSINode, then its refused status.
    let csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node-1"}, "spec": {"drivers": []}});
    let (code, body) = cluster
        .api
        .send(
            Method::POST,
            "/apis/storage.k8s.io/v1/csinodes",
            Some(&csinode),
            None,
        )
        .await?;
    assert_eq!(code, 201, "{body}");
    let identity = format!(
        "ValidatingAdmissionPolicy '{}{}'",
        policies::storage_condition_identity_name(),
        policies::STATIC_SUFFIX
    );
    let (code, body) = indistinct_write(&cluster, "node-1", true).await?;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(&identity),
        "{body}"
    );
    eprintln!(
        "ok   the first write is refused by the static policy: {}",
        body["message"]
    );
    // Within the repair policy's bound, the static repair policy keeps the first of the pair.
    let (code, body) = indistinct_write(&cluster, "node-1", false).await?;
    assert_eq!(code, 200, "{body}");
    let stored = &body["status"]["storageHealth"][0]["healthConditions"];
    assert_eq!(stored.as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(stored[0]["message"], "a", "{body}");
    eprintln!("ok   the next, within the bound, is repaired by the static repair policy");

    // Not objects of the API: a delete of the binding finds nothing to delete, and a binding
    // of that name cannot be made there either.
    let binding = format!(
        "{}{}",
        policies::binding_name(&policies::storage_condition_identity_name(), Action::Deny),
        policies::STATIC_SUFFIX
    );
    let bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
    let (code, body) = cluster
        .api
        .send(Method::DELETE, &format!("{bindings}/{binding}"), None, None)
        .await?;
    assert_eq!(code, 404, "{body}");
    let replacement = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": binding},
        "spec": {"policyName": format!("{}{}", policies::storage_condition_identity_name(), policies::STATIC_SUFFIX),
            "validationActions": ["Audit"]}});
    let (code, body) = cluster
        .api
        .send(Method::POST, bindings, Some(&replacement), None)
        .await?;
    assert!(
        code >= 400,
        "a binding with the reserved suffix was created: {body}"
    );
    eprintln!(
        "ok   the API neither deletes nor shadows the static binding: {code} {}",
        body["message"]
    );

    let (code, body) = indistinct_write(&cluster, "node-1", true).await?;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains(&identity),
        "{body}"
    );
    eprintln!("ok   the rule still answers");

    // verify finds them by their answers alone: they are not objects of the API.
    let kubeconfig = cluster.kubeconfig(Identity::Admin)?;
    let output = std::process::Command::new(webhook_binary()?)
        .args(["verify", "--output", "json", "--wait", "5s"])
        .env("KUBECONFIG", &kubeconfig)
        .output()?;
    let report: Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(report["mode"], "static", "{report:#}");
    let names: Vec<&str> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "volume-health-storage-condition-identity-deny.static.k8s.io",
            "volume-health-pvc-health-writers-deny.static.k8s.io"
        ],
        "{report:#}"
    );
    eprintln!("ok   verify: {report}");
    Ok(())
}

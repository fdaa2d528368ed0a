//! `volume-health-webhook verify` against a real kube-apiserver v1.37.2 with the shipped
//! configurations: a good install answers every entry (exit 0), and two broken ones are told
//! with the apiserver's own reason (exit 1): entries whose caBundle is another CA's, and
//! entries calling a Service with no endpoints. Slow, so ignored: `make e2e` runs it.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use base64::{Engine, engine::general_purpose::STANDARD};
use hyper::Method;
use serde_json::{Value, json};
use volume_health_tests::cluster::{ControlPlane, Identity, Pki, create_namespace, webhook_binary};

const NAMESPACE: &str = "volume-health";
const CONFIGURATIONS: [&str; 2] = [
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/volume-health",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/volume-health",
];

/// Runs `verify` with `kubeconfig`; its exit code and standard output.
async fn verify(kubeconfig: &Path, args: &[&str]) -> Result<(i32, String)> {
    let mut child = std::process::Command::new(webhook_binary()?)
        .arg("verify")
        .args(["--wait", "10s"])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            child.kill()?;
            bail!("verify did not end within 180 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8(output.stdout)?;
    eprintln!(
        "verify {args:?}: exit {:?}\n{stdout}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.code().unwrap_or(-1), stdout))
}

/// Rewrites every entry of both installed configurations with `change`.
async fn rewrite_entries(plane: &ControlPlane, change: impl Fn(&mut Value)) -> Result<()> {
    for path in CONFIGURATIONS {
        let (code, mut configuration) = plane
            .cluster
            .api
            .send(Method::GET, path, None, None)
            .await?;
        if code != 200 {
            bail!("GET {path}: {code} {configuration}");
        }
        for entry in configuration["webhooks"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            change(entry);
        }
        let (code, body) = plane
            .cluster
            .api
            .send(Method::PUT, path, Some(&configuration), None)
            .await?;
        if code != 200 {
            bail!("PUT {path}: {code} {body}");
        }
    }
    Ok(())
}

/// What verify stored and left: probe objects and probe entries.
async fn leftovers(plane: &ControlPlane) -> Result<usize> {
    let mut count = 0;
    for path in [
        "/apis/storage.k8s.io/v1/csinodes",
        "/api/v1/namespaces/volume-health/persistentvolumeclaims",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    ] {
        let (_, list) = plane
            .cluster
            .api
            .send(
                Method::GET,
                &format!("{path}?labelSelector=volume-health.github.io/verify"),
                None,
                None,
            )
            .await?;
        // A deleted claim waits for the PVC protection controller, which this control plane
        // does not run, to remove its finalizer: deleted is what verify can do.
        count += list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["metadata"]["deletionTimestamp"].is_null())
            .count();
    }
    Ok(count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn verify_tells_a_good_install_from_a_broken_one() -> Result<()> {
    let plane = ControlPlane::start(true, &[]).await?;
    let admin = plane.cluster.client(Identity::Admin).await?;
    create_namespace(&admin, NAMESPACE).await?;
    let kubeconfig = plane.cluster.kubeconfig(Identity::Admin)?;

    // The shipped install: every entry answered, repair on seen in the answers. The installed
    // CSINode repair entry repairs the validating probe's write first, so the validating
    // entry's answer changes nothing: the apiserver's count shows the call, and enforcement
    // is not seen.
    let (code, json_report) = verify(&kubeconfig, &["--output", "json"]).await?;
    let report: Value = serde_json::from_str(&json_report)?;
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["mode"], "webhooks");
    assert_eq!(report["seen"]["repair"], true, "{report:#}");
    assert_eq!(report["seen"]["enforcement"], Value::Null, "{report:#}");
    let validate = &report["entries"][3];
    assert_eq!(validate["name"], "csinode.validate.volume-health.github.io");
    assert!(
        validate["evidence"]
            .as_str()
            .unwrap()
            .contains("the apiserver counted the call"),
        "{report:#}"
    );
    let entries = report["entries"].as_array().unwrap();
    // The base's three repair entries and its one validating entry.
    assert_eq!(entries.len(), 4, "{report:#}");
    assert!(
        entries.iter().all(|e| e["outcome"] == "answered"),
        "{report:#}"
    );
    assert_eq!(
        leftovers(&plane).await?,
        0,
        "verify left probe objects or entries"
    );

    // The entries trust another CA: the apiserver's TLS handshake fails.
    let saved: Vec<Value> = {
        let mut saved = Vec::new();
        for path in CONFIGURATIONS {
            saved.push(
                plane
                    .cluster
                    .api
                    .send(Method::GET, path, None, None)
                    .await?
                    .1,
            );
        }
        saved
    };
    let other = tempfile::tempdir()?;
    let other_ca = STANDARD.encode(Pki::new(other.path())?.ca_pem());
    rewrite_entries(&plane, |entry| {
        entry["clientConfig"]["caBundle"] = json!(other_ca);
    })
    .await?;
    let (code, text) = verify(&kubeconfig, &[]).await?;
    assert_eq!(code, 1, "{text}");
    assert_eq!(text.matches("FAILED ").count(), 4, "{text}");
    assert!(
        text.contains("x509: certificate signed by unknown authority"),
        "{text}"
    );
    assert!(
        text.contains("verify: 0 answered, 4 failed, 0 unshown"),
        "{text}"
    );
    assert_eq!(
        leftovers(&plane).await?,
        0,
        "verify left probe objects or entries"
    );

    // The entries call a Service with no endpoints.
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "volume-health-webhook", "namespace": NAMESPACE},
        "spec": {"selector": {"app.kubernetes.io/name": "volume-health-webhook"},
                 "ports": [{"port": 443, "targetPort": 8443}]}});
    let (status, body) = plane
        .cluster
        .api
        .send(
            Method::POST,
            &format!("/api/v1/namespaces/{NAMESPACE}/services"),
            Some(&service),
            None,
        )
        .await?;
    assert_eq!(status, 201, "{body}");
    for (path, mut configuration) in CONFIGURATIONS.iter().zip(saved) {
        // The saved configurations, with their trust back and a Service for the URL.
        let (_, current) = plane
            .cluster
            .api
            .send(Method::GET, path, None, None)
            .await?;
        configuration["metadata"]["resourceVersion"] =
            current["metadata"]["resourceVersion"].clone();
        for entry in configuration["webhooks"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let url = entry["clientConfig"]["url"].as_str().unwrap().to_owned();
            let webhook_path = &url[url.rfind('/').unwrap()..];
            entry["clientConfig"] = json!({
                "caBundle": entry["clientConfig"]["caBundle"],
                "service": {"namespace": NAMESPACE, "name": "volume-health-webhook",
                            "port": 443, "path": webhook_path}});
        }
        let (code, body) = plane
            .cluster
            .api
            .send(Method::PUT, path, Some(&configuration), None)
            .await?;
        assert_eq!(code, 200, "{body}");
    }
    let (code, text) = verify(&kubeconfig, &[]).await?;
    assert_eq!(code, 1, "{text}");
    assert_eq!(text.matches("FAILED ").count(), 4, "{text}");
    assert!(
        text.contains("service volume-health/volume-health-webhook:443/mutate"),
        "{text}"
    );
    assert!(
        text.contains("hint: Service volume-health/volume-health-webhook has no ready endpoints"),
        "{text}"
    );
    assert_eq!(
        leftovers(&plane).await?,
        0,
        "verify left probe objects or entries"
    );

    // Nothing installed: exit 1, said so.
    for path in CONFIGURATIONS {
        plane
            .cluster
            .api
            .send(Method::DELETE, path, None, None)
            .await?;
    }
    let (code, text) = verify(&kubeconfig, &[]).await?;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("nothing of volume health is installed"),
        "{text}"
    );
    Ok(())
}

/// Runs `verify` until it exits with `code` (a new policy, or a param deleted, takes the
/// apiserver a moment to load): the last report.
async fn verify_until(kubeconfig: &Path, code: i32) -> Result<Value> {
    let give_up = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (got, out) = verify(kubeconfig, &["--output", "json"]).await?;
        if got == code || std::time::Instant::now() > give_up {
            assert_eq!(got, code, "{out}");
            return Ok(serde_json::from_str(&out)?);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Native mode: the policies' Deny bindings answer the probe writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn verify_answers_native_mode() -> Result<()> {
    use volume_health_policies::{self as policies, Action};
    use volume_health_tests::cluster::{Cluster, ClusterOptions, bin_dir};

    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir()?, options).await?;
    let admin = cluster.client(Identity::Admin).await?;
    create_namespace(&admin, NAMESPACE).await?;
    // The writer list names another user: verify's own write is refused by it.
    let objects: Vec<Value> = policies::policies(&["system:serviceaccount:kube-system:monitor"])
        .into_iter()
        .chain(policies::bindings(Action::Deny))
        .collect();
    for object in &objects {
        cluster.create_policy(object).await?;
    }
    let kubeconfig = cluster.kubeconfig(Identity::Admin)?;

    let report = verify_until(&kubeconfig, 0).await?;
    assert_eq!(report["mode"], "native", "{report:#}");
    let entries = report["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{report:#}");
    for entry in entries {
        assert_eq!(
            entry["kind"], "ValidatingAdmissionPolicyBinding",
            "{report:#}"
        );
        assert_eq!(entry["outcome"], "answered", "{report:#}");
        assert!(
            entry["evidence"]
                .as_str()
                .unwrap()
                .starts_with("denied the probe write"),
            "{report:#}"
        );
    }

    Ok(())
}

/// `kubectl` with `kubeconfig`, from the repository's root; fails the test when it fails.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .current_dir(volume_health_tests::repository())
        .output()
        .expect("kubectl on PATH");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "kubectl {args:?}: {text}");
    text
}

/// Native mode as the README installs it, one command in and one out: the shipped overlay's
/// Warn bindings answer (the identity rule warns; the writer list, empty, lets verify's own
/// write through, so its answer is not shown: exit 3), its repair bindings repair, and after
/// the delete nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn native_mode_installs_and_uninstalls_in_one_command_each() -> Result<()> {
    use volume_health_tests::cluster::{Cluster, ClusterOptions, bin_dir};

    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir()?, options).await?;
    let kubeconfig = cluster.kubeconfig(Identity::Admin)?;
    kubectl(
        &kubeconfig,
        &["apply", "-k", "manifests/overlays/native-warn"],
    );

    // The apiserver loads new policies within moments: until then verify sees no answer.
    let give_up = std::time::Instant::now() + Duration::from_secs(90);
    let report = loop {
        let (code, out) = verify(&kubeconfig, &["--output", "json"]).await?;
        let report: Value = serde_json::from_str(&out)?;
        let warned = entries_named(&report, "volume-health-storage-condition-identity-warn")["outcome"]
            == "answered";
        if warned || std::time::Instant::now() > give_up {
            assert_eq!(code, 3, "{report:#}");
            break report;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(report["mode"], "native", "{report:#}");
    let identity = entries_named(&report, "volume-health-storage-condition-identity-warn");
    assert_eq!(identity["outcome"], "answered", "{report:#}");
    assert!(
        identity["evidence"]
            .as_str()
            .unwrap()
            .starts_with("warned: "),
        "{report:#}"
    );
    let writers = entries_named(&report, "volume-health-pvc-health-writers-warn");
    assert_eq!(writers["outcome"], "unshown", "{report:#}");
    // The overlay repairs: each repair binding shows in what is stored of its probe write.
    for resource in volume_health_validation::HealthResource::ALL {
        let repair = entries_named(&report, &volume_health_policies::repair_name(resource));
        assert_eq!(repair["outcome"], "answered", "{report:#}");
        assert!(
            repair["evidence"]
                .as_str()
                .unwrap()
                .starts_with("repaired the probe write"),
            "{report:#}"
        );
    }

    kubectl(
        &kubeconfig,
        &["delete", "-k", "manifests/overlays/native-warn"],
    );
    let left = kubectl(
        &kubeconfig,
        &[
            "get",
            "validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies",
            "-l",
            "app.kubernetes.io/name=volume-health-webhook",
            "-o",
            "name",
        ],
    );
    assert!(
        left.trim().is_empty() || left.contains("No resources found"),
        "{left}"
    );
    let report = verify_until(&kubeconfig, 1).await?;
    assert_eq!(report["mode"], "none", "{report:#}");
    Ok(())
}

fn entries_named<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no entry {name}: {report:#}"))
}

/// The install's settings as the answers show them: without repair (`components/no-repair`:
/// no mutating entry) and in `warn`, the validating entry's warning is seen, and no repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn verify_sees_warn_without_repair() -> Result<()> {
    let plane =
        ControlPlane::start_without_repair(true, &[("VOLUME_HEALTH_ENFORCEMENT_ACTION", "warn")])
            .await?;
    let admin = plane.cluster.client(Identity::Admin).await?;
    create_namespace(&admin, NAMESPACE).await?;
    let kubeconfig = plane.cluster.kubeconfig(Identity::Admin)?;
    let (code, out) = verify(&kubeconfig, &["--output", "json"]).await?;
    let report: Value = serde_json::from_str(&out)?;
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["seen"]["enforcement"], "warn", "{report:#}");
    assert_eq!(report["seen"]["repair"], Value::Null, "{report:#}");
    let validate = entries_named(&report, "csinode.validate.volume-health.github.io");
    assert!(
        validate["evidence"]
            .as_str()
            .unwrap()
            .contains("which warned: "),
        "{report:#}"
    );
    assert_eq!(report["entries"].as_array().unwrap().len(), 1, "{report:#}");
    Ok(())
}

//! The cost of the webhook hop, measured through a real kube-apiserver v1.37.2: `pods/status`
//! writes carrying `volumeHealth`, by the pod's kubelet over kube-rs, with the shipped
//! configuration installed, alternating between a pod the webhooks are called for and one in
//! the `volume-health` namespace, which the configurations' namespaceSelector leaves out. Both
//! pods are on the same apiserver, node and connection, so the difference between the two
//! series is the hop (the calls to `/mutate` and `/validate`, TLS and all), and machine noise
//! hits both alike. Prints p50 and p99 of each, and their differences and ratios.
//!
//! Native mode in the same run: the generated policies are created and bound (drop on save
//! with an `objectSelector`), and a third pod in `volume-health`, labelled for the bindings, is
//! written in turn with the other two; its pod kind and stored field are the baseline pod's, so
//! the difference from the baseline is the apiserver evaluating the policies in process.
//!
//! Needs the e2e binaries (`VOLUME_HEALTH_E2E_BIN`) and the release server
//! (`VOLUME_HEALTH_E2E_WEBHOOK`); `make bench` builds and passes both. `--quick`: fewer writes.

// A benchmark: a failed setup step should stop the run loudly.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    Cluster, ControlPlane, Identity, bound_pod, create_namespace, volume_health,
};
use volume_health_webhooks::policies::{self, Action};

const NODE: &str = "node-1";
/// The label the native bindings select pods by.
const NATIVE_LABEL: &str = "volume-health.example/native-policies";

/// Creates `object` (a policy or a binding) through the admin client.
async fn create(cluster: &Cluster, object: &Value) {
    let plural = match object["kind"].as_str().unwrap() {
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        other => panic!("no path for {other}"),
    };
    let path = format!("/apis/admissionregistration.k8s.io/v1/{plural}");
    let (code, body) = cluster
        .api
        .send(hyper::Method::POST, &path, Some(object), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
}

/// Every generated policy, and the bindings with `Deny`; the drop-on-save bindings select the
/// labelled pod only.
async fn bind_native(cluster: &Cluster) {
    for object in policies::policies()
        .iter()
        .chain(&policies::bindings(Action::Deny))
    {
        create(cluster, object).await;
    }
    for mut binding in policies::drop_on_save_bindings() {
        binding["spec"]["matchResources"] =
            json!({"objectSelector": {"matchLabels": {NATIVE_LABEL: "true"}}});
        create(cluster, &binding).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (warmup, writes) = if quick { (20, 100) } else { (100, 1000) };
    let plane = ControlPlane::start(true, &[]).await.unwrap();
    let admin = plane.cluster.client(Identity::Admin).await.unwrap();
    // `volume-health` is where the server itself runs: the configurations never call it there.
    let namespaces = ["app", "volume-health"];
    for ns in namespaces {
        create_namespace(&admin, ns).await.unwrap();
        let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
        pods.create(&PostParams::default(), &bound_pod("app", NODE).unwrap())
            .await
            .unwrap();
    }
    // The native pod: the baseline's kind, labelled for the drop-on-save bindings.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "volume-health");
    let mut native_pod = bound_pod("native", NODE).unwrap();
    native_pod.metadata.labels = Some([(NATIVE_LABEL.to_owned(), "true".to_owned())].into());
    pods.create(&PostParams::default(), &native_pod)
        .await
        .unwrap();
    let kubelet = plane.cluster.client(Identity::Node(NODE)).await.unwrap();
    let [hop, direct] = namespaces.map(|ns| Api::<Pod>::namespaced(kubelet.clone(), ns));
    // Each pod's volumeHealth is stored before the policies are bound: in use, it is kept, as
    // a kubelet's later reports are.
    for (pods, name) in [(&direct, "app"), (&direct, "native"), (&hop, "app")] {
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(volume_health("first")),
        )
        .await
        .unwrap();
    }
    bind_native(&plane.cluster).await;
    wait_native(&pods, &direct).await;
    let before = plane
        .admission
        .metric("volume_health_webhook_requests_total", &[])
        .await
        .unwrap();

    let mut series = [
        Vec::with_capacity(writes),
        Vec::with_capacity(writes),
        Vec::with_capacity(writes),
    ];
    for round in 0..warmup + writes {
        // Rotate which goes first, so that none always follows another.
        let order = [[0, 1, 2], [1, 2, 0], [2, 0, 1]][round % 3];
        for which in order {
            let (pods, name) = [(&hop, "app"), (&direct, "app"), (&direct, "native")][which];
            let patch = Patch::Strategic(volume_health(&format!("write {round}")));
            let started = Instant::now();
            let stored = pods
                .patch_status(name, &PatchParams::default(), &patch)
                .await
                .unwrap();
            let took = started.elapsed();
            assert!(
                serde_json::to_value(&stored).unwrap()["status"]["volumeHealth"].is_array(),
                "the stored volumeHealth is kept"
            );
            if round >= warmup {
                series[which].push(took);
            }
        }
    }
    let reviews = plane
        .admission
        .metric("volume_health_webhook_requests_total", &[])
        .await
        .unwrap()
        - before;
    // Every write of the webhook pod was reviewed (the first also by `/mutate`; the apiserver
    // reviews a patch again when it retries it on a conflict), the other pod's never: fewer
    // than one review per write of both.
    let sent = warmup + writes;
    assert!(
        (sent..2 * sent).contains(&(reviews as usize)),
        "{reviews} reviews for {sent} writes of each pod"
    );

    for s in &mut series {
        s.sort();
    }
    let [with, without, native] = &series;
    println!(
        "apiserver hop: {writes} pods/status writes each, sequential, by the kubelet through kube-rs ({reviews} reviews)"
    );
    for (name, s) in [
        ("with the webhooks     ", with),
        ("without (excluded ns) ", without),
        ("native policies bound ", native),
    ] {
        println!(
            "  {name}: p50 {:.2} ms, p99 {:.2} ms",
            ms(percentile(s, 0.5)),
            ms(percentile(s, 0.99))
        );
    }
    for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (percentile(with, p), percentile(without, p));
        println!(
            "  hop {label}: {:+.2} ms ({:.2}x)",
            ms(a) - ms(b),
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
    for (label, p) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (percentile(native, p), percentile(without, p));
        println!(
            "  native policies {label}: {:+.2} ms ({:.2}x)",
            ms(a) - ms(b),
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
}

/// Waits until the apiserver applies the drop-on-save bindings: a new volumeHealth of a
/// labelled probe pod is dropped, and the baseline pod's is not.
async fn wait_native(admin_pods: &Api<Pod>, kubelet_pods: &Api<Pod>) {
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        // A new pod each round: one stored before the bindings applied has the field in use.
        let name = format!("probe-{round}");
        let mut probe = bound_pod(&name, NODE).unwrap();
        probe.metadata.labels = Some([(NATIVE_LABEL.to_owned(), "true".to_owned())].into());
        admin_pods
            .create(&PostParams::default(), &probe)
            .await
            .unwrap();
        let patch = Patch::Strategic(volume_health("probe"));
        let stored = kubelet_pods
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
            .unwrap();
        if serde_json::to_value(&stored).unwrap()["status"]["volumeHealth"].is_null() {
            return;
        }
        assert!(Instant::now() < give_up, "drop on save was never applied");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

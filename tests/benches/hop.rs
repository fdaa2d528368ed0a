//! The cost of the webhook hop, measured through a real kube-apiserver v1.37.2: `pods/status`
//! writes carrying `volumeHealth`, by the pod's kubelet over kube-rs, with the shipped
//! configuration installed, alternating between a pod the webhooks are called for and one in
//! the `volume-health` namespace, which the configurations' namespaceSelector leaves out. Both
//! pods are on the same apiserver, node and connection, so the difference between the two
//! series is the hop (the calls to `/mutate` and `/validate`, TLS and all), and machine noise
//! hits both alike. Prints p50 and p99 of each, and their differences and ratios.
//!
//! Needs the e2e binaries (`VOLUME_HEALTH_E2E_BIN`) and the release server
//! (`VOLUME_HEALTH_E2E_WEBHOOK`); `make bench` builds and passes both. `--quick`: fewer writes.

// A benchmark: a failed setup step should stop the run loudly.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use volume_health_tests::cluster::{
    ControlPlane, Identity, bound_pod, create_namespace, volume_health,
};

const NODE: &str = "node-1";

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
    let kubelet = plane.cluster.client(Identity::Node(NODE)).await.unwrap();
    let [hop, direct] = namespaces.map(|ns| Api::<Pod>::namespaced(kubelet.clone(), ns));
    let before = plane
        .admission
        .metric("volume_health_webhook_requests_total", &[])
        .await
        .unwrap();

    let mut series = [Vec::with_capacity(writes), Vec::with_capacity(writes)];
    for round in 0..warmup + writes {
        // Alternate which goes first, so that neither always follows the other.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let pods = [&hop, &direct][which];
            let patch = Patch::Strategic(volume_health(&format!("write {round}")));
            let started = Instant::now();
            pods.patch_status("app", &PatchParams::default(), &patch)
                .await
                .unwrap();
            if round >= warmup {
                series[which].push(started.elapsed());
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
    let [with, without] = &series;
    println!(
        "apiserver hop: {writes} pods/status writes each, sequential, by the kubelet through kube-rs ({reviews} reviews)"
    );
    for (name, s) in [
        ("with the webhooks   ", with),
        ("without (excluded ns)", without),
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
            "  hop {label}: +{:.2} ms ({:.2}x)",
            ms(a) - ms(b),
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
}

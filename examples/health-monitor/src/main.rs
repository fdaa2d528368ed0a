//! A health monitor of one PersistentVolumeClaim: each line of stdin is one probe's result, a
//! JSON list of conditions (`[]` when the volume is healthy); each is repaired, skipped when it
//! changes nothing, and written to the claim's `status.healthStatus`.
//!
//! ```text
//! cargo run -p volume-health-example-monitor -- <namespace> <claim>
//! [{"status":"Degraded","reason":"IOPSThrottled","message":"throttled"}]
//! [{"status":"Degraded","reason":"IOPSThrottled","message":"throttled"}]
//! []
//! ```
//!
//! A probe every minute is a loop that prints one line a minute into it. The kubeconfig (or the
//! pod's service account) is read as kube-rs does; the monitor needs `get` and `patch` on
//! `persistentvolumeclaims/status`.

use anyhow::bail;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tokio::io::{AsyncBufReadExt, BufReader};
use volume_health_example_monitor::monitor;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [namespace, claim] = args.as_slice() else {
        bail!("usage: volume-health-example-monitor <namespace> <claim> < probes.jsonl");
    };
    let client = kube::Client::try_default().await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, namespace);
    let mut monitor = monitor(claims, claim);

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        // A bad probe or a failed write is logged and the loop goes on: the next probe is the
        // retry, as in a monitor that probes on a timer.
        let conditions: Vec<VolumeHealthCondition> = match serde_json::from_str(&line) {
            Ok(conditions) => conditions,
            Err(err) => {
                eprintln!("{namespace}/{claim}: probe skipped, not a list of conditions: {err}");
                continue;
            }
        };
        match monitor.report(conditions, &Time(Timestamp::now())).await {
            Ok(reported) => {
                for repair in &reported.repairs {
                    eprintln!("{namespace}/{claim}: repaired: {repair}");
                }
                println!("{namespace}/{claim}: {}", reported.outcome);
            }
            Err(err) => eprintln!("{namespace}/{claim}: not written: {err}"),
        }
    }
    Ok(())
}

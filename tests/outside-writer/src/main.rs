//! A claim health writer in a few lines: one probe's conditions written to a claim.
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use volume_health_validation::writer::ClaimHealthWriter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let claims = kube::Api::<PersistentVolumeClaim>::namespaced(client, "default");
    let mut writer = ClaimHealthWriter::new(claims, "data-0", "my-health-monitor");
    let probe: Vec<VolumeHealthCondition> =
        serde_json::from_str(&std::env::args().nth(1).unwrap_or("[]".into()))?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    println!("{}", writer.report(probe, &now).await?.outcome);
    Ok(())
}

//! The differential table: requests beyond the admission fixtures, kept as data in
//! `tests/fixtures/differential/requests.json` (its README says where they come from and what
//! each group probes). No expectation is written down: the apiserver's answer is compared with
//! the library's.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use volume_health_validation::{HealthResource, Operation};

use super::Replay;

const REQUESTS: &str = include_str!("../../fixtures/differential/requests.json");

/// The table's requests, in the file's order.
pub(crate) fn requests() -> Result<Vec<Replay>> {
    let table: Value = serde_json::from_str(REQUESTS)?;
    let users = &table["users"];
    let mut replays = Vec::new();
    for group in table["groups"].as_array().context("no groups")? {
        for request in group["requests"]
            .as_array()
            .context("a group without requests")?
        {
            replays.push(
                replay(request, users)
                    .with_context(|| format!("{} in group {}", request["id"], group["group"]))?,
            );
        }
    }
    Ok(replays)
}

fn replay(request: &Value, users: &Value) -> Result<Replay> {
    let text = |key: &str| request[key].as_str().with_context(|| format!("no {key}"));
    let resource = match text("resource")? {
        "pods" => HealthResource::Pods,
        "persistentvolumeclaims" => HealthResource::PersistentVolumeClaims,
        "csinodes" => HealthResource::CsiNodes,
        other => bail!("unknown resource {other}"),
    };
    let operation = Operation::parse(text("operation")?).context("unknown operation")?;
    let user = &users[text("user")?];
    if user.is_null() {
        bail!("unknown user {}", request["user"]);
    }
    let object = |key: &str| request.get(key).cloned();
    Ok(Replay::new(
        text("id")?.to_owned(),
        resource,
        operation,
        text("subresource")?.to_owned(),
        user.clone(),
        object("object"),
        object("oldObject"),
    ))
}

//! A status write as a kubelet or a health monitor sends it through kube-rs, with all of the
//! answer a test reads: the code, the body, and the `Warning` headers' texts.

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::Value;

/// A write's answer.
pub struct Written {
    /// The HTTP code.
    pub code: u16,
    /// The body (`Null` when it is not JSON).
    pub body: Value,
    /// The `Warning` headers' texts, unquoted as the apiserver quoted them.
    pub warnings: Vec<String>,
}

/// PATCHes `path` as `client` (`content_type` names the patch), retrying while the Node
/// authorizer has not yet related a node to its new pod: its 403 names `node: `.
pub async fn patch_retrying(
    client: &kube::Client,
    path: &str,
    content_type: &str,
    body: &Value,
) -> Result<Written> {
    for _ in 0..20 {
        let request = http::Request::patch(path)
            .header("content-type", content_type)
            .body(serde_json::to_vec(body)?)?;
        let response = client.send(request.map(Into::into)).await?;
        let code = response.status().as_u16();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(volume_health_cluster::warning_text)
            .collect();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await?
            .to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let unrelated = code == 403 && body["message"].as_str().unwrap_or("").contains("node: ");
        if !unrelated {
            return Ok(Written {
                code,
                body,
                warnings,
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!("the Node authorizer never related the node to {path}")
}

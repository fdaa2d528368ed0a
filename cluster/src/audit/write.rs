//! Writing the reports: server-side apply with the audit's own field manager (one request per
//! report, whatever was there before), and the deletion of the audit's reports whose findings
//! are gone.

use super::report::{GROUP, MANAGED_BY, REPORT_NAME, Report, VERSION};
use crate::apiserver::{Apiserver, RequestError};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

/// The field manager of every write: what `managedFields` names as the audit.
const FIELD_MANAGER: &str = "volume-health-audit";

/// How many of the audit's reports are listed at a time, to find the stale ones.
const LIST_LIMIT: u32 = 500;

/// A report that could not be written or deleted.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind} {name}")]
pub struct WriteError {
    /// `writing` or `deleting`.
    pub action: &'static str,
    /// `Report` or `ClusterReport`.
    pub kind: &'static str,
    /// `namespace/name`, or the name of a ClusterReport.
    pub name: String,
    /// What the apiserver said.
    #[source]
    pub source: kube::Error,
}

/// The two kinds of report.
fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

fn reports() -> ApiResource {
    resource("Report", "reports")
}

fn cluster_reports() -> ApiResource {
    resource("ClusterReport", "clusterreports")
}

/// `namespace/name`, or `name`.
fn display(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// Whether the apiserver serves both kinds: `None` when it does, else what is missing.
pub(crate) async fn missing_kinds(apiserver: &Apiserver) -> Result<Option<String>, RequestError> {
    let Some(discovery) = apiserver.get(&format!("/apis/{GROUP}/{VERSION}")).await? else {
        return Ok(Some(format!("{GROUP}/{VERSION}")));
    };
    let served: Vec<&str> = discovery["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    let missing: Vec<String> = ["reports", "clusterreports"]
        .into_iter()
        .filter(|plural| !served.contains(plural))
        .map(|plural| format!("{plural}.{GROUP}"))
        .collect();
    Ok((!missing.is_empty()).then(|| missing.join(", ")))
}

/// What a write of one report came to.
#[derive(Debug)]
pub(crate) enum Applied {
    /// Stored.
    Written,
    /// Its namespace is gone or going (deleted since its objects were listed): so are its
    /// findings.
    NamespaceGone,
}

/// Applies `report` as the audit's (the whole object: the fields it left out are removed).
pub(crate) async fn apply(
    client: &kube::Client,
    report: &Report,
    max_results: usize,
) -> Result<Applied, WriteError> {
    let object = report.object(max_results);
    let api: Api<DynamicObject> = match &report.namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &reports()),
        None => Api::all_with(client.clone(), &cluster_reports()),
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api
        .patch(REPORT_NAME, &params, &Patch::Apply(&object))
        .await
    {
        Ok(_) => Ok(Applied::Written),
        Err(kube::Error::Api(status)) if report.namespace.is_some() && namespace_gone(&status) => {
            Ok(Applied::NamespaceGone)
        }
        Err(source) => Err(WriteError {
            action: "writing",
            kind: report.kind(),
            name: display(report.namespace.as_deref(), REPORT_NAME),
            source,
        }),
    }
}

/// A 404 for the namespace itself, or the refusal of new objects in a namespace being deleted.
fn namespace_gone(status: &kube::core::Status) -> bool {
    let details = status.details.as_ref();
    let terminating = details.is_some_and(|d| {
        d.causes
            .iter()
            .any(|cause| cause.reason == "NamespaceTerminating")
    });
    let no_namespace = status.code == 404 && details.is_some_and(|d| d.kind == "namespaces");
    terminating || no_namespace
}

/// The audit's reports in the cluster (labelled [`MANAGED_BY`]): (namespace, name), `None` for
/// ClusterReports.
pub(crate) async fn existing(
    client: &kube::Client,
) -> Result<Vec<(Option<String>, String)>, kube::Error> {
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let mut found = Vec::new();
    for resource in [reports(), cluster_reports()] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().labels(&selector).limit(LIST_LIMIT);
            if let Some(token) = &token {
                params = params.continue_token(token);
            }
            let page = api.list_metadata(&params).await?;
            found.extend(page.items.into_iter().map(|item| {
                (
                    item.metadata.namespace,
                    item.metadata.name.unwrap_or_default(),
                )
            }));
            match page.metadata.continue_ {
                Some(next) if !next.is_empty() && token.as_deref() != Some(next.as_str()) => {
                    token = Some(next)
                }
                _ => break,
            }
        }
    }
    Ok(found)
}

/// Deletes one of the audit's reports; one already gone is no error.
pub(crate) async fn delete(
    client: &kube::Client,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), WriteError> {
    let (api, kind): (Api<DynamicObject>, _) = match namespace {
        Some(namespace) => (
            Api::namespaced_with(client.clone(), namespace, &reports()),
            "Report",
        ),
        None => (
            Api::all_with(client.clone(), &cluster_reports()),
            "ClusterReport",
        ),
    };
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(WriteError {
            action: "deleting",
            kind,
            name: display(namespace, name),
            source,
        }),
    }
}

//! The e2e suite's cluster, and one admission request replayed both as a real write through
//! kube-apiserver and in-process through the validation library.

pub(crate) mod generate;
pub(crate) mod table;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hyper::Method;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::{AdmissionRequest, HealthResource, Operation, Settings, UserInfo};

use volume_health_tests::cluster::{Cluster, User};

/// How many old objects were written straight into etcd, the API refusing them: a run's count
/// shows that ratcheting of stored invalid values was exercised.
pub(crate) static STORED_IN_ETCD: AtomicUsize = AtomicUsize::new(0);

/// Waits for the apiserver's cache: up to 10 s, in steps of 100 ms.
const POLLS: u32 = 100;
const POLL: Duration = Duration::from_millis(100);

/// An answer to a write: allowed, or a denial with its code, message and
/// `details.causes` (`field: message`, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Allowed,
    Denied {
        code: i64,
        message: String,
        causes: Vec<String>,
    },
}

impl Answer {
    /// The answer a `metav1.Status` body gives.
    fn from_status(code: i64, status: &Value) -> Self {
        let causes = status["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|cause| {
                format!(
                    "{}: {}",
                    cause["field"].as_str().unwrap_or(""),
                    cause["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        Answer::Denied {
            code: status["code"].as_i64().unwrap_or(code),
            message: status["message"].as_str().unwrap_or("").to_owned(),
            causes,
        }
    }

    pub(crate) fn code(&self) -> Option<i64> {
        match self {
            Answer::Allowed => None,
            Answer::Denied { code, .. } => Some(*code),
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            Answer::Allowed => "",
            Answer::Denied { message, .. } => message,
        }
    }
}

/// One admission request: what the library is asked, and what is written to the apiserver.
pub(crate) struct Replay {
    pub(crate) id: String,
    pub(crate) resource: HealthResource,
    pub(crate) operation: Operation,
    pub(crate) subresource: String,
    pub(crate) user: Value,
    pub(crate) object: Option<Value>,
    pub(crate) old_object: Option<Value>,
    /// A pod created beside the object first, as the admin: a claim's user, so that the Node
    /// authorizer relates the claim to the pod's node.
    pub(crate) related: Option<Value>,
}

impl Replay {
    pub(crate) fn new(
        id: String,
        resource: HealthResource,
        operation: Operation,
        subresource: String,
        user: Value,
        object: Option<Value>,
        old_object: Option<Value>,
    ) -> Self {
        Replay {
            id,
            resource,
            operation,
            subresource,
            user,
            object,
            old_object,
            related: None,
        }
    }

    /// The request, with `pod` created beside its object first.
    pub(crate) fn with_related(mut self, pod: Value) -> Self {
        self.related = Some(pod);
        self
    }

    /// The request of an admission fixture case; `None` for a resource without rules.
    pub(crate) fn from_case(case: &Value) -> Option<Self> {
        let request = &case["body"]["request"];
        let resource = HealthResource::from_group_resource(
            request["resource"]["group"].as_str()?,
            request["resource"]["resource"].as_str()?,
        )?;
        let object = |key: &str| Some(request[key].clone()).filter(|v| !v.is_null());
        Some(Replay::new(
            case["id"].as_str()?.to_owned(),
            resource,
            Operation::parse(request["operation"].as_str()?)?,
            request["subResource"].as_str().unwrap_or("").to_owned(),
            request["userInfo"].clone(),
            object("object"),
            object("oldObject"),
        ))
    }

    /// The request as JSON, to be read in a failure and replayed.
    pub(crate) fn describe(&self) -> Value {
        json!({
            "id": self.id,
            "resource": self.resource.resource(),
            "operation": self.operation.as_str(),
            "subresource": self.subresource,
            "user": self.user,
            "object": self.object,
            "oldObject": self.old_object,
            "related": self.related,
        })
    }

    pub(crate) fn name(&self) -> &str {
        let object = self.object.as_ref().or(self.old_object.as_ref());
        object
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or("")
    }

    pub(crate) fn username(&self) -> &str {
        self.user["username"].as_str().unwrap_or("")
    }

    pub(crate) fn is_node(&self) -> bool {
        self.username().starts_with("system:node:")
    }

    /// The library's answer, with the storage condition identity rule as given.
    pub(crate) fn library(&self, identity: ConditionIdentity) -> Result<Answer> {
        let user_json = self.user.to_string();
        let user: UserInfo<'_> = serde_json::from_str(&user_json)?;
        let raw = |v: &Option<Value>| -> Result<Option<Box<RawValue>>> {
            Ok(match v {
                Some(v) => Some(serde_json::value::to_raw_value(v)?),
                None => None,
            })
        };
        let (object, old_object) = (raw(&self.object)?, raw(&self.old_object)?);
        let request = AdmissionRequest::new(self.resource, self.operation)
            .with_subresource(self.subresource.as_str())
            .with_name(self.name())
            .with_user(user)
            .with_objects(object.as_deref(), old_object.as_deref());
        let policy = Settings {
            storage_condition_identity: identity,
            ..Settings::with_gate(true)
        };
        let verdict = request
            .validate(&policy)
            .with_context(|| format!("{}: the library could not read it", self.id))?;
        Ok(match verdict.status() {
            None => Answer::Allowed,
            Some(status) => Answer::from_status(0, &serde_json::to_value(status)?),
        })
    }

    fn namespaced(&self) -> bool {
        self.resource != HealthResource::CsiNodes
    }

    fn plural(&self) -> &'static str {
        match self.resource {
            HealthResource::Pods => "pods",
            HealthResource::PersistentVolumeClaims => "persistentvolumeclaims",
            HealthResource::CsiNodes => "csinodes",
        }
    }

    fn path(&self, ns: &str, name: Option<&str>, subresource: &str) -> String {
        let mut path = if self.namespaced() {
            format!("/api/v1/namespaces/{ns}/{}", self.plural())
        } else {
            format!("/apis/storage.k8s.io/v1/{}", self.plural())
        };
        if let Some(name) = name {
            path = format!("{path}/{name}");
            if !subresource.is_empty() {
                path = format!("{path}/{subresource}");
            }
        }
        path
    }

    fn user(&self) -> User {
        User {
            name: self.username().to_owned(),
            groups: self.user["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect(),
        }
    }

    /// An object as it is written: without what the apiserver sets, in namespace `ns`.
    fn clean(&self, object: &Value, ns: &str) -> Value {
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            for key in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "managedFields",
            ] {
                metadata.remove(key);
            }
            if self.namespaced() {
                metadata.insert("namespace".into(), json!(ns));
            }
        }
        object
    }

    /// Writes the request to the apiserver, as the case's user, after storing its old object
    /// (straight into etcd when the API refuses it today); answers the apiserver's answer. An
    /// error is a setup that did not work out: nothing was compared.
    pub(crate) async fn apiserver(&self, cluster: &Cluster, index: usize) -> Result<Answer> {
        let api = &cluster.api;
        let ns = format!("case-{index}");
        let name = self.name().to_owned();
        if self.namespaced() {
            let namespace =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let (code, body) = api
                .send(Method::POST, "/api/v1/namespaces", Some(&namespace), None)
                .await?;
            if code != 201 {
                bail!("namespace {ns}: {code} {body}");
            }
        } else {
            // CSINodes are cluster-wide: remove the previous case's.
            api.send(Method::DELETE, &self.path(&ns, Some(&name), ""), None, None)
                .await?;
            let path = self.path(&ns, Some(&name), "");
            let mut tries = 0;
            while api.send(Method::GET, &path, None, None).await?.0 != 404 {
                tries += 1;
                if tries == POLLS {
                    bail!("the previous CSINode is still there");
                }
                tokio::time::sleep(POLL).await;
            }
        }
        if let Some(pod) = &self.related {
            let mut pod = pod.clone();
            pod["metadata"]["namespace"] = json!(ns);
            let path = format!("/api/v1/namespaces/{ns}/pods");
            let (code, body) = api.send(Method::POST, &path, Some(&pod), None).await?;
            if code != 201 {
                bail!("creating the related pod: {code} {body}");
            }
        }
        let user = self.user();
        let Some(old) = &self.old_object else {
            let new = self.clean(self.object.as_ref().context("no object")?, &ns);
            let (code, body) = api
                .send(
                    Method::POST,
                    &self.path(&ns, None, ""),
                    Some(&new),
                    Some(&user),
                )
                .await?;
            return Ok(answer(code, &body));
        };
        let (code, mut current) = api
            .send(
                Method::POST,
                &self.path(&ns, None, ""),
                Some(&self.clean(old, &ns)),
                None,
            )
            .await?;
        if code != 201 {
            bail!("creating the old object: {code} {current}");
        }
        let old_status = old
            .get("status")
            .filter(|s| s.as_object().is_some_and(|s| !s.is_empty()));
        if let Some(old_status) = old_status {
            let mut want = current.clone();
            want["status"] = old_status.clone();
            let path = self.path(&ns, Some(&name), "status");
            let (code, body) = api.send(Method::PUT, &path, Some(&want), None).await?;
            current = match code {
                200 => body,
                422 => self.store_in_etcd(cluster, &ns, &name, want).await?,
                _ => bail!("writing the old status: {code} {body}"),
            };
            let (stored, given) = (health(&current), health(old));
            if stored != given {
                bail!("the old status was not stored as given: {stored} instead of {given}");
            }
        }
        let mut new = self.clean(self.object.as_ref().context("no object")?, &ns);
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        new["metadata"]["uid"] = current["metadata"]["uid"].clone();
        // What the apiserver set on the stored object, sent back as a writer that read it
        // would: NodeRestriction refuses a node's claim write that changes the metadata.
        for key in ["creationTimestamp", "finalizers", "generation"] {
            let stored = &current["metadata"][key];
            if new["metadata"].get(key).is_none() && !stored.is_null() {
                new["metadata"][key] = stored.clone();
            }
        }
        if self.namespaced() && (self.subresource == "status" || new.get("spec").is_none()) {
            // The spec as the apiserver defaulted it, so that only the status differs.
            new["spec"] = current["spec"].clone();
        }
        let path = self.path(&ns, Some(&name), &self.subresource);
        // The Node authorizer learns of a new pod from a watch: until then it finds no relation
        // between the node and its pod, or the claim its pod uses. Other writes have no
        // relation to wait for.
        let node = self.username().strip_prefix("system:node:");
        let bound_here = (self.resource == HealthResource::Pods
            && new["spec"]["nodeName"].as_str() == node)
            || self
                .related
                .as_ref()
                .is_some_and(|pod| pod["spec"]["nodeName"].as_str() == node);
        let mut attempt = 0;
        loop {
            let (code, body) = api
                .send(Method::PUT, &path, Some(&new), Some(&user))
                .await?;
            let answer = answer(code, &body);
            let no_relation = code == 403 && answer.message().contains("no relationship found");
            attempt += 1;
            if !(bound_here && no_relation) || attempt == 10 {
                return Ok(answer);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Writes `object` into etcd and waits until the apiserver serves its health field.
    async fn store_in_etcd(
        &self,
        cluster: &Cluster,
        ns: &str,
        name: &str,
        mut object: Value,
    ) -> Result<Value> {
        object["metadata"]
            .as_object_mut()
            .context("no metadata")?
            .remove("resourceVersion");
        let key = if self.namespaced() {
            format!("/registry/{}/{ns}/{name}", self.plural())
        } else {
            format!("/registry/{}/{name}", self.plural())
        };
        cluster.etcd_put(&key, &object).await?;
        STORED_IN_ETCD.fetch_add(1, Ordering::Relaxed);
        let path = self.path(ns, Some(name), "");
        for _ in 0..POLLS {
            let (_, served) = cluster.api.send(Method::GET, &path, None, None).await?;
            if health(&served) == health(&object) {
                return Ok(served);
            }
            tokio::time::sleep(POLL).await;
        }
        bail!("the apiserver did not serve what was written into etcd")
    }
}

/// The apiserver's answer to a write.
pub(crate) fn answer(code: u16, body: &Value) -> Answer {
    if matches!(code, 200 | 201) {
        Answer::Allowed
    } else {
        Answer::from_status(code.into(), body)
    }
}

/// The gated health fields of an object's status, without null members (the apiserver omits
/// them).
fn health(object: &Value) -> Value {
    let status = &object["status"];
    let fields: serde_json::Map<String, Value> = ["volumeHealth", "healthStatus", "storageHealth"]
        .iter()
        .filter(|k| !status[**k].is_null())
        .map(|k| {
            (
                (*k).to_owned(),
                volume_health_tests::without_nulls(&status[*k]),
            )
        })
        .collect();
    Value::Object(fields)
}

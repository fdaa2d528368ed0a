//! What the kube-apiserver does with the manifests: which webhook of a configuration it
//! calls for a request (rules, namespace selector, matchConditions), and whether it sends
//! a request to the authorization webhook.
//!
//! CEL variables are built the way the apiserver builds them:
//! - admission: `object` and `oldObject` are the objects converted to unstructured (Go's
//!   `omitempty` applies, so empty lists and nil pointers are absent), or null when there
//!   is none (`oldObject` on CREATE); `request` is the AdmissionRequest converted the
//!   same way, so `subResource` and `userInfo.groups` are absent when empty
//!   (k8s.io/apiserver/pkg/admission/plugin/cel/filter.go);
//! - authorization: `request` is the SubjectAccessReview spec in its v1 shape with every
//!   string field present, even empty ones, and `groups` always a list
//!   (k8s.io/apiserver/pkg/authorization/cel/matcher.go, convertObjectToUnstructured).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use cel::{Context, Program};
use serde_json::{Map, Value, json};

/// A write as the admission chain sees it.
#[derive(Clone, Debug)]
pub(crate) struct AdmissionRequest {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) sub_resource: &'static str,
    pub(crate) kind: &'static str,
    /// Empty for cluster-scoped resources.
    pub(crate) namespace: &'static str,
    pub(crate) name: String,
    pub(crate) operation: &'static str,
    pub(crate) username: &'static str,
    pub(crate) groups: &'static [&'static str],
    pub(crate) object: Option<Value>,
    pub(crate) old_object: Option<Value>,
}

impl AdmissionRequest {
    /// `request` as CEL sees it: the AdmissionRequest with empty fields left out.
    fn cel_request(&self) -> Value {
        let mut request = Map::new();
        request.insert("uid".into(), json!("705ab4f5-6393-11e8-b7cc-42010a800002"));
        let kind = json!({"group": self.group, "version": self.version, "kind": self.kind});
        let resource =
            json!({"group": self.group, "version": self.version, "resource": self.resource});
        request.insert("kind".into(), kind.clone());
        request.insert("resource".into(), resource.clone());
        request.insert("requestKind".into(), kind);
        request.insert("requestResource".into(), resource);
        if !self.sub_resource.is_empty() {
            request.insert("subResource".into(), json!(self.sub_resource));
            request.insert("requestSubResource".into(), json!(self.sub_resource));
        }
        if !self.name.is_empty() {
            request.insert("name".into(), json!(self.name));
        }
        if !self.namespace.is_empty() {
            request.insert("namespace".into(), json!(self.namespace));
        }
        request.insert("operation".into(), json!(self.operation));
        let mut user = Map::new();
        if !self.username.is_empty() {
            user.insert("username".into(), json!(self.username));
        }
        if !self.groups.is_empty() {
            user.insert("groups".into(), json!(self.groups));
        }
        request.insert("userInfo".into(), Value::Object(user));
        let options_kind = if self.operation == "CREATE" {
            "CreateOptions"
        } else {
            "UpdateOptions"
        };
        request.insert(
            "options".into(),
            json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind}),
        );
        Value::Object(request)
    }
}

/// The apiserver's decision for one webhook configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dispatch {
    /// No webhook of the configuration is called.
    Skip,
    /// These webhooks are called, each with its failure policy.
    Call(Vec<(String, String)>),
}

/// Decides which webhooks of a Mutating- or ValidatingWebhookConfiguration the apiserver
/// calls for a request. Panics if a matchConditions expression fails to compile or
/// evaluates to an error (which would invoke the failure policy on real traffic).
pub(crate) fn dispatch(configuration: &Value, request: &AdmissionRequest) -> Dispatch {
    let mut calls = Vec::new();
    for webhook in super::array_at(configuration, "/webhooks") {
        let name = super::str_at(webhook, "/name");
        if !rules_match(webhook, request) || !namespace_matches(webhook, request) {
            continue;
        }
        let variables = [
            ("object", request.object.clone().unwrap_or(Value::Null)),
            (
                "oldObject",
                request.old_object.clone().unwrap_or(Value::Null),
            ),
            ("request", request.cel_request()),
        ];
        let context = context(&variables).unwrap_or_else(|e| panic!("{e}"));
        let mut all_true = true;
        for condition in super::array_at(webhook, "/matchConditions") {
            let expression = super::str_at(condition, "/expression");
            match evaluate(expression, &context) {
                Ok(result) => all_true &= result,
                Err(error) => panic!(
                    "webhook {name}, condition {}: {error}\n  expression: {expression}\n  request: {request:?}",
                    condition["name"]
                ),
            }
        }
        if all_true {
            let policy = webhook["failurePolicy"]
                .as_str()
                .unwrap_or("Fail (default)");
            calls.push((name.to_owned(), policy.to_owned()));
        }
    }
    if calls.is_empty() {
        Dispatch::Skip
    } else {
        Dispatch::Call(calls)
    }
}

/// Whether some rule of a webhook covers the request, ignoring namespace and conditions.
pub(crate) fn rules_match(webhook: &Value, request: &AdmissionRequest) -> bool {
    let listed = |rule: &Value, field: &str, value: &str| {
        super::strings_at(rule, &format!("/{field}"))
            .iter()
            .any(|item| item == "*" || item == value)
    };
    super::array_at(webhook, "/rules").iter().any(|rule| {
        let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
            "*" => true,
            "Cluster" => request.namespace.is_empty(),
            "Namespaced" => !request.namespace.is_empty(),
            other => panic!("unknown rule scope {other}"),
        };
        scope_ok
            && listed(rule, "operations", request.operation)
            && listed(rule, "apiGroups", request.group)
            && listed(rule, "apiVersions", request.version)
            && super::strings_at(rule, "/resources").iter().any(|pattern| {
                let (resource, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
                (resource == "*" || resource == request.resource)
                    && (sub == request.sub_resource
                        || (sub == "*" && !request.sub_resource.is_empty())
                        || pattern == "*/*")
            })
    })
}

/// Whether the namespace selector of a webhook lets the request through. The apiserver
/// never filters cluster-scoped objects (other than Namespaces) by namespace.
fn namespace_matches(webhook: &Value, request: &AdmissionRequest) -> bool {
    if request.namespace.is_empty() {
        return true;
    }
    selector_matches(
        &webhook["namespaceSelector"],
        &namespace_labels(request.namespace),
    )
}

/// The labels every namespace carries: its immutable name label.
pub(crate) fn namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "kubernetes.io/metadata.name".to_owned(),
        namespace.to_owned(),
    )])
}

/// Evaluates a metav1.LabelSelector; an absent or empty selector matches everything.
pub(crate) fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector["matchLabels"].as_object().is_none_or(|wanted| {
        wanted
            .iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let expressions_ok = super::array_at(selector, "/matchExpressions")
        .iter()
        .all(|expression| {
            let key = super::str_at(expression, "/key");
            let values = super::strings_at(expression, "/values");
            let value = labels.get(key);
            match super::str_at(expression, "/operator") {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("unknown selector operator {other}"),
            }
        });
    labels_ok && expressions_ok
}

/// A SubjectAccessReview spec (v1), as the apiserver's authorizer chain builds it.
#[derive(Clone, Debug)]
pub(crate) struct AccessReview {
    pub(crate) user: &'static str,
    pub(crate) groups: &'static [&'static str],
    pub(crate) resource: Option<ResourceAttributes>,
    /// `(verb, path)` of a non-resource request.
    pub(crate) non_resource: Option<(&'static str, &'static str)>,
}

/// `spec.resourceAttributes` of a SubjectAccessReview.
#[derive(Clone, Debug)]
pub(crate) struct ResourceAttributes {
    pub(crate) verb: &'static str,
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) subresource: &'static str,
    pub(crate) namespace: &'static str,
    pub(crate) name: &'static str,
}

impl AccessReview {
    /// `request` as the authorizer's CEL sees it: every string field present.
    pub(crate) fn cel_request(&self) -> Value {
        let mut spec = json!({"user": self.user, "groups": self.groups, "uid": "", "extra": {}});
        if let Some(r) = &self.resource {
            spec["resourceAttributes"] = json!({
                "namespace": r.namespace, "verb": r.verb, "group": r.group, "version": r.version,
                "resource": r.resource, "subresource": r.subresource, "name": r.name,
            });
        }
        if let Some((verb, path)) = self.non_resource {
            spec["nonResourceAttributes"] = json!({"verb": verb, "path": path});
        }
        spec
    }

    /// The same spec as JSON on the wire (empty fields left out), a stricter shape for
    /// the has() guards.
    pub(crate) fn wire_request(&self) -> Value {
        fn prune(value: &mut Value) {
            if let Value::Object(map) = value {
                map.values_mut().for_each(prune);
                map.retain(|_, v| match v {
                    Value::String(s) => !s.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                });
            }
        }
        let mut spec = self.cel_request();
        prune(&mut spec);
        spec
    }
}

/// Whether the apiserver sends a SubjectAccessReview to a Webhook authorizer, given its
/// matchConditions and the `request` variable. Panics on an expression error (which
/// would invoke the failure policy on real traffic).
pub(crate) fn authorizer_sends(webhook: &Value, request: Value) -> bool {
    let context = context(&[("request", request.clone())]).unwrap_or_else(|e| panic!("{e}"));
    let mut all_true = true;
    for condition in super::array_at(webhook, "/matchConditions") {
        let expression = super::str_at(condition, "/expression");
        match evaluate(expression, &context) {
            Ok(result) => all_true &= result,
            Err(error) => panic!(
                "authorizer condition failed: {error}\n  expression: {expression}\n  request: {request}"
            ),
        }
    }
    all_true
}

/// A CEL context binding JSON values to variable names.
pub(crate) fn context(variables: &[(&str, Value)]) -> Result<Context<'static, 'static>, String> {
    let mut context = Context::default();
    for (name, value) in variables {
        let value = cel::to_value(value).map_err(|e| format!("cannot convert {name}: {e}"))?;
        context
            .add_variable(*name, value)
            .map_err(|e| format!("cannot bind {name}: {e}"))?;
    }
    Ok(context)
}

/// Compiles (once) and evaluates one boolean CEL expression.
pub(crate) fn evaluate(expression: &str, context: &Context<'_, '_>) -> Result<bool, String> {
    thread_local! {
        static COMPILED: RefCell<HashMap<String, Rc<Program>>> = RefCell::new(HashMap::new());
    }
    let cached = COMPILED.with_borrow(|compiled| compiled.get(expression).cloned());
    let program = match cached {
        Some(program) => program,
        None => {
            let program = Rc::new(
                Program::compile(expression).map_err(|e| format!("does not compile: {e}"))?,
            );
            COMPILED.with_borrow_mut(|compiled| {
                compiled.insert(expression.to_owned(), Rc::clone(&program))
            });
            program
        }
    };
    match program.execute(context) {
        Ok(cel::Value::Bool(result)) => Ok(result),
        Ok(other) => Err(format!("evaluated to {other:?}, not a bool")),
        Err(error) => Err(format!("evaluation error: {error}")),
    }
}

/// Fields of the typed `request` variable of admission matchConditions (AdmissionRequest).
/// Kubernetes type-checks `request`, so any other field is a compile error there.
pub(crate) const ADMISSION_REQUEST_FIELDS: &[&str] = &[
    "uid",
    "kind",
    "kind.group",
    "kind.version",
    "kind.kind",
    "resource",
    "resource.group",
    "resource.version",
    "resource.resource",
    "subResource",
    "requestKind",
    "requestKind.group",
    "requestKind.version",
    "requestKind.kind",
    "requestResource",
    "requestResource.group",
    "requestResource.version",
    "requestResource.resource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "userInfo.username",
    "userInfo.uid",
    "userInfo.groups",
    "userInfo.extra",
    "dryRun",
    "options",
];

/// Fields of the typed `request` variable of authorizer matchConditions
/// (SubjectAccessReviewSpec, v1).
pub(crate) const ACCESS_REVIEW_FIELDS: &[&str] = &[
    "user",
    "groups",
    "uid",
    "extra",
    "resourceAttributes",
    "resourceAttributes.namespace",
    "resourceAttributes.verb",
    "resourceAttributes.group",
    "resourceAttributes.version",
    "resourceAttributes.resource",
    "resourceAttributes.subresource",
    "resourceAttributes.name",
    "resourceAttributes.fieldSelector",
    "resourceAttributes.labelSelector",
    "nonResourceAttributes",
    "nonResourceAttributes.path",
    "nonResourceAttributes.verb",
];

/// The identifiers of an expression outside string literals, each with whether it is a
/// function call (`name(`), a member (`.name`) or a root (variable or keyword), and for
/// roots the dotted member path that follows.
pub(crate) fn identifiers(expression: &str) -> Vec<Identifier> {
    let chars: Vec<char> = expression.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            let before = chars[..start].iter().rev().find(|c| !c.is_whitespace());
            let after = chars[i..].iter().find(|c| !c.is_whitespace());
            let role = if after == Some(&'(') {
                Role::Call
            } else if before == Some(&'.') {
                Role::Member
            } else {
                Role::Root
            };
            let mut path = String::new();
            if role == Role::Root {
                let mut j = i;
                while j < chars.len() && chars[j] == '.' {
                    let segment_start = j + 1;
                    let mut k = segment_start;
                    while k < chars.len() && (chars[k].is_ascii_alphanumeric() || chars[k] == '_') {
                        k += 1;
                    }
                    let segment: String = chars[segment_start..k].iter().collect();
                    if chars[k..].iter().find(|c| !c.is_whitespace()) == Some(&'(') {
                        break;
                    }
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&segment);
                    j = k;
                }
            }
            found.push(Identifier { name, role, path });
        } else {
            i += 1;
        }
    }
    found
}

/// One identifier of a CEL expression.
#[derive(Debug)]
pub(crate) struct Identifier {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// For a root: the member path after it (`userInfo.groups` for `request.userInfo.groups`).
    pub(crate) path: String,
}

/// Where an identifier stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Call,
    Member,
    Root,
}

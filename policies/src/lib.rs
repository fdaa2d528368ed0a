//! Native mode: this project's own rules as MutatingAdmissionPolicy and
//! ValidatingAdmissionPolicy objects, which kube-apiserver evaluates in process, with no webhook
//! hop. A library of its own, so the server crate holds no CEL: `volume-health-webhook policies`
//! only writes [`files`].
//!
//! Only the rules in-tree Kubernetes v1.37.2 lacks are here: beside an apiserver with
//! `CSIVolumeHealth` on, its own validation, NodeRestriction and the Node authorizer answer every
//! upstream rule first. The policies are generated from the validation library's own names,
//! limits, renderings and messages, so a policy's message is the webhook's (the apiserver wraps
//! it: `... is forbidden: ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
//! request: <message>`).
//!
//! Every policy matches one resource, with explicit `v1` and the main resource listed: the
//! admission-policy status controller skips type checking otherwise.

mod repair;

pub use repair::{
    MAX_REPAIRED_CONDITIONS, MAX_REPAIRED_ENTRIES, needs_repair, repair, repair_bindings,
    repair_name, repair_policies,
};

use serde_json::{Value, json};
use volume_health_validation::field::{ErrorKind, FieldPath, GoJson};
use volume_health_validation::identity::{NODE_USER_PREFIX, NODES_GROUP};
use volume_health_validation::restriction::Restricted;
use volume_health_validation::rules::MAX_HEALTH_CONDITIONS;
use volume_health_validation::status::{forbidden_status, invalid_message};
use volume_health_validation::{FieldError, HealthResource};

/// The prefix of every generated object's name.
pub const PREFIX: &str = "volume-health";
/// The namespace of the webhooks. Native mode stores nothing there: the writer list is
/// written into its policy, so deleting the namespace (a webhook overlay's uninstall) never
/// changes what the policies answer.
pub const NAMESPACE: &str = "volume-health";
/// A message longer than this many bytes is discarded by the apiserver (5 KiB); longer ones
/// are cut to it.
pub const MAX_MESSAGE_BYTES: usize = 5 * 1024;
/// The duplicates a denial spells out; the webhook lists every one, a policy's message has room
/// for this many conditions with 1024-byte messages.
pub const MAX_LISTED_DUPLICATES: usize = 4;

/// A duplicate's entry and condition index as one int: `entry * PAIR + condition`, conditions
/// being fewer than [`MAX_HEALTH_CONDITIONS`].
const PAIR: usize = 100;
/// The variables the identity rule's work is split over.
const CHUNKS: usize = 8;

/// How a binding enforces its policy: the bindings' `validationActions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Refuse the write.
    Deny,
    /// Allow it, with the denial as a warning.
    Warn,
    /// Allow it, and record the denial in the audit log.
    Audit,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 3] = [Action::Deny, Action::Warn, Action::Audit];

    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
            Action::Audit => "Audit",
        }
    }

    /// The lower-case form, in file and object names.
    pub fn lower(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::Audit => "audit",
        }
    }
}

/// The component's `kustomization.yaml`: written with the policies, so that a folder written
/// with another writer list is a component as it is.
const KUSTOMIZATION: &str = r#"# This project's own rules as native admission policies, which kube-apiserver evaluates in
# process (no webhook hop); see docs/native-policies.md. Add it to an overlay with
#   components:
#     - ../../components/native-policies
# Needs kube-apiserver v1.37 or later with CSIVolumeHealth on (its in-tree rules answer every
# upstream rule first) and admissionregistration.k8s.io/v1 MutatingAdmissionPolicy served.
#
# Every file here, this one too, is generated: `volume-health-webhook policies` writes them,
# and a test fails when they differ from its output.
# - policies.yaml: drop on save and repair per resource (MutatingAdmissionPolicy, inert until
#   bound), storage condition identity and the claim health writers (ValidatingAdmissionPolicy).
#   The writer list is written into its policy (empty: any user but nodes):
#   `volume-health-webhook policies --pvc-health-writers <users> --out-dir <dir>` writes
#   another list, or an overlay patches `/spec/variables/0/expression` of policy
#   volume-health-pvc-health-writers (docs/native-policies.md). Nothing here is namespaced,
#   so no namespace, ConfigMap or other object can go missing and turn a rule into "refuse
#   every claim status write".
# - bindings-deny.yaml: the validating policies enforced. bindings-warn.yaml and
#   bindings-audit.yaml bind them with Warn or Audit instead: list one of the three.
# - repair-bindings.yaml: repair on, as in every install (docs/repair.md): a report in-tree
#   would refuse for ever is stored repaired. Leave it out to turn repair off.
# - drop-on-save-bindings.yaml: not listed; adding it turns the gated fields off, as the
#   webhook's CSIVolumeHealth=false does.
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources:
  - policies.yaml
  - bindings-deny.yaml
  - repair-bindings.yaml
"#;

/// The files of `manifests/components/native-policies`, by name, each a YAML stream, with
/// `writers` as the writer list of claims' `status.healthStatus` (as `--pvc-health-writers`
/// takes it; empty: any user but nodes).
pub fn files(writers: &[&str]) -> Vec<(String, String)> {
    let mut files = vec![
        ("kustomization.yaml".to_owned(), KUSTOMIZATION.to_owned()),
        ("policies.yaml".to_owned(), yaml_stream(&policies(writers))),
        (
            "drop-on-save-bindings.yaml".to_owned(),
            yaml_stream(&drop_on_save_bindings()),
        ),
        (
            "repair-bindings.yaml".to_owned(),
            yaml_stream(&repair_bindings()),
        ),
    ];
    for action in Action::ALL {
        files.push((
            format!("bindings-{}.yaml", action.lower()),
            yaml_stream(&bindings(action)),
        ));
    }
    files
}

/// Every policy: a drop-on-save MutatingAdmissionPolicy per resource, a repair one per
/// resource, then the ValidatingAdmissionPolicies, the claim health writers' with `writers` as
/// its list.
pub fn policies(writers: &[&str]) -> Vec<Value> {
    let mut objects: Vec<Value> = HealthResource::ALL
        .iter()
        .map(|r| drop_on_save(*r))
        .collect();
    objects.extend(repair_policies());
    objects.push(storage_condition_identity());
    objects.push(pvc_health_writers(writers));
    objects
}

/// The name of the drop-on-save policy of `resource`.
pub fn drop_on_save_name(resource: HealthResource) -> String {
    format!("{PREFIX}-drop-{}", resource.resource())
}

/// The name of the storage condition identity policy.
pub fn storage_condition_identity_name() -> String {
    format!("{PREFIX}-storage-condition-identity")
}

/// The name of the claim health writers policy.
pub fn pvc_health_writers_name() -> String {
    format!("{PREFIX}-pvc-health-writers")
}

/// The name of a validating policy's binding with `action`.
pub fn binding_name(policy: &str, action: Action) -> String {
    format!("{policy}-{}", action.lower())
}

/// A CEL string literal of `s`.
fn lit(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            ' '..='~' => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('\'');
    out
}

/// A placeholder that no rendering of the library changes, to cut its messages into templates.
const HOLE: &str = "VOLUMEHEALTHHOLE";

/// `template` with each [`HOLE`] replaced by a CEL expression, in order, as one CEL
/// concatenation.
fn fill(template: &str, holes: &[&str]) -> String {
    let parts: Vec<&str> = template.split(HOLE).collect();
    assert_eq!(parts.len(), holes.len() + 1, "holes of {template:?}");
    let mut terms = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if !part.is_empty() {
            terms.push(lit(part));
        }
        if let Some(hole) = holes.get(i) {
            terms.push(format!("({hole})"));
        }
    }
    terms.join(" + ")
}

/// Go's `%q` of a string expression: cel-go formats a string inside a list with `%q`. (The
/// apiserver's CEL has no `cel.bind`: the expression is written twice, it is short.)
fn go_quoted(expr: &str) -> String {
    let listed = format!("'%s'.format([[{expr}]])");
    format!("{listed}.substring(1, size({listed}) - 1)")
}

/// Go's `json.Marshal` of a string expression, as the library's [`GoJson`] writes it: every
/// character [`GoJson`] escapes, replaced in turn (the backslash first).
fn go_json(expr: &str) -> String {
    let mut out = format!("{expr}.replace('\\\\', '\\\\\\\\')");
    let candidates = (0u32..0x80)
        .chain([0x2028, 0x2029])
        .filter_map(char::from_u32);
    for c in candidates.filter(|c| *c != '\\') {
        let one = c.to_string();
        let rendered = GoJson(&one).to_string();
        let inner = &rendered[1..rendered.len() - 1];
        if inner != one {
            out = format!("{out}.replace({}, {})", lit(&one), lit(inner));
        }
    }
    format!("'\"' + {out} + '\"'")
}

/// Cuts a message expression to [`MAX_MESSAGE_BYTES`]: a longer one would be discarded.
fn bounded(expr: &str) -> String {
    // A character is at most 4 bytes: a quarter of the limit in characters always fits.
    format!(
        "size(bytes({expr})) <= {MAX_MESSAGE_BYTES} ? ({expr}) : ({expr}).substring(0, {})",
        MAX_MESSAGE_BYTES / 4
    )
}

/// The `v1` rule of `resource` and its status subresource, for `operations`.
fn resource_rules(resource: HealthResource, operations: &[&str]) -> Value {
    json!([{
        "apiGroups": [resource.group()],
        "apiVersions": ["v1"],
        "operations": operations,
        "resources": [resource.resource(), format!("{}/status", resource.resource())],
    }])
}

/// `has()` of a dotted path below `root`, each step guarded (has() over a missing parent is an
/// error).
fn has_path(root: &str, dotted: &str) -> String {
    let mut steps = Vec::new();
    let mut prefix = root.to_owned();
    for part in dotted.split('.') {
        prefix = format!("{prefix}.{part}");
        steps.push(format!("has({prefix})"));
    }
    steps.join(" && ")
}

/// Whether `root` uses the gated field of `resource`, as drop on save reads it: a claim's
/// `healthStatus` present, a non-empty list otherwise.
fn gated_in_use(resource: HealthResource, root: &str) -> String {
    let field = resource.gated_field();
    let present = has_path(root, field);
    match resource {
        HealthResource::PersistentVolumeClaims => present,
        _ => format!("{present} && size({root}.{field}) > 0"),
    }
}

fn labels() -> Value {
    json!({"app.kubernetes.io/name": "volume-health-webhook", "app.kubernetes.io/component": "native-policies"})
}

/// Drop on save for `resource`: while bound, a new value of the gated field is removed unless
/// the old object already uses it (the webhook's `/mutate` with the gate off).
pub fn drop_on_save(resource: HealthResource) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": drop_on_save_name(resource), "labels": labels()},
        "spec": {
            // Constant cost: presence and a list's size.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": resource_rules(resource, &["CREATE", "UPDATE"])},
            "matchConditions": [
                {"name": "adds-gated-field", "expression": format!(
                    "{} && (oldObject == null || !({}))",
                    gated_in_use(resource, "object"), gated_in_use(resource, "oldObject"),
                )},
            ],
            "mutations": [{
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": format!(
                    "[JSONPatch{{op: 'remove', path: {}}}]", lit(resource.gated_pointer())
                )},
            }],
        },
    })
}

/// This project's storage condition identity rule ([`volume_health_validation::rules::ConditionIdentity`]):
/// within one `storageHealth` entry, a later condition with the (status, reason, accessMode,
/// volumeMode) of an earlier one is a Duplicate; an entry whose conditions equal the old entry's
/// of the same name is not checked. A node's write of its CSINode is not checked either: a
/// kubelet would retry a refused report for ever, so repair enforces the rule there.
///
/// In-tree validation has already passed when it runs, so names are unique, statuses, modes and
/// reasons are from their sets and formats (only a message needs JSON escaping), and an entry
/// has at most [`MAX_HEALTH_CONDITIONS`] conditions. Cost is linear in the object, with small
/// constants (cel-go charges a comparison of lists or maps by their length, not their depth,
/// and `indexOf` by one traversal of its list's strings at a tenth of their bytes):
/// - per entry, one comparison with the old entry at its position when the names line up (the
///   map of the old entries by name is built only when some entry's name does not);
/// - per changed entry of 2 to [`MAX_HEALTH_CONDITIONS`] conditions, the list of its reasons
///   and, per condition, one `indexOf` in the earlier reasons; only a condition whose reason
///   repeats an earlier one is compared field by field (the reason last) with the earlier ones.
pub fn storage_condition_identity() -> Value {
    let resource = HealthResource::CsiNodes;
    // The reason last: it is the longest, and a candidate's reason repeats an earlier one's.
    let same = "d.status == c.status && \
        has(d.accessMode) == has(c.accessMode) && (!has(d.accessMode) || d.accessMode == c.accessMode) && \
        has(d.volumeMode) == has(c.volumeMode) && (!has(d.volumeMode) || d.volumeMode == c.volumeMode) && \
        d.reason == c.reason"
        .replace("c.", "e.healthConditions[j].");
    // The old entry of an entry's name: the one at its position when the names line up (the
    // kubelet writes entries in a stable order, and names are unique in a stored object), else
    // a lookup in the map of the old entries, built only when some entry needs it.
    let old = "variables.old";
    let ratcheted = format!(
        "(p < size({old}) && {old}[p].name == e.name ? \
         (has({old}[p].healthConditions) ? {old}[p].healthConditions : []) == e.healthConditions : \
         e.name in variables.oldConditions && variables.oldConditions[e.name] == e.healthConditions)"
    );
    // A condition can repeat an earlier one only if its reason does: `indexOf` in the earlier
    // reasons (one traversal, a tenth of a cost unit per byte) finds the candidates, the four
    // fields decide.
    let duplicates_of = format!(
        "[e.healthConditions.map(c, c.reason)].map(r, lists.range(size(r)).filter(j, \
         r.slice(0, j).indexOf(r[j]) >= 0 && e.healthConditions.slice(0, j).exists(d, {same})).map(j, p * {PAIR} + j))"
    );
    // Each duplicate as entry * PAIR + condition: one int, no nested lists.
    // Each variable is its own program with its own cost limit: the entries are split into
    // CHUNKS contiguous runs, one variable each, concatenated in order.
    let entries = "variables.entries";
    let chunk = |k: usize| {
        let (lo, hi) = (
            format!("size({entries}) * {k} / {CHUNKS}"),
            format!("size({entries}) * {} / {CHUNKS}", k + 1),
        );
        format!(
            "{entries}.slice({lo}, {hi}).transformList(n, e, \
             has(e.healthConditions) && size(e.healthConditions) >= 2 && \
             size(e.healthConditions) <= {MAX_HEALTH_CONDITIONS}, \
             [{lo} + n].map(p, {ratcheted} ? [] : {duplicates_of}[0])[0]).flatten()"
        )
    };
    let chunks: Vec<Value> = (0..CHUNKS)
        .map(|k| json!({"name": format!("duplicates{k}"), "expression": chunk(k)}))
        .collect();
    let duplicates = (0..CHUNKS)
        .map(|k| format!("variables.duplicates{k}"))
        .collect::<Vec<_>>()
        .join(" + ");
    // One Duplicate as the library prints it, for the pair p = [entry, condition].
    let path = FieldPath::root("status");
    let list = path.child("storageHealth");
    let item = list.index(0);
    let conds = item.child("healthConditions");
    let error = FieldError::new(
        &conds.index(1),
        ErrorKind::Duplicate {
            rendered: HOLE.to_owned(),
        },
    )
    .to_string()
    .replace("storageHealth[0]", &format!("storageHealth[{HOLE}]"))
    .replace("healthConditions[1]", &format!("healthConditions[{HOLE}]"));
    let c = &format!("variables.entries[p / {PAIR}].healthConditions[p % {PAIR}]");
    let rendered = format!(
        "'{{\"status\":\"' + {c}.status + '\",\"reason\":\"' + {c}.reason + '\"' + \
         (has({c}.message) && {c}.message != '' ? ',\"message\":' + {message} : '') + \
         (has({c}.accessMode) ? ',\"accessMode\":\"' + {c}.accessMode + '\"' : '') + \
         (has({c}.volumeMode) ? ',\"volumeMode\":\"' + {c}.volumeMode + '\"' : '') + \
         ',\"lastTransitionTime\":' + (has({c}.lastTransitionTime) && {c}.lastTransitionTime != null ? '\"' + string({c}.lastTransitionTime) + '\"' : 'null') + '}}'",
        message = go_json(&format!("{c}.message")),
    );
    let one = fill(
        &error,
        &[
            &format!("string(p / {PAIR})"),
            &format!("string(p % {PAIR})"),
            &rendered,
        ],
    );
    let single = FieldError::new(
        &FieldPath::root("x"),
        ErrorKind::Duplicate {
            rendered: String::new(),
        },
    );
    let message_one = invalid_message(resource, HOLE, std::slice::from_ref(&single));
    let head = message_one
        .strip_suffix(&single.to_string())
        .unwrap_or(&message_one);
    let name = "object.metadata.name";
    let listed = format!(
        "variables.duplicates.slice(0, size(variables.duplicates) < {MAX_LISTED_DUPLICATES} ? size(variables.duplicates) : {MAX_LISTED_DUPLICATES}).map(p, {one})"
    );
    let head = fill(head, &[name]);
    let joined = format!("{listed}.join(', ')");
    let message =
        format!("{head} + (size(variables.duplicates) == 1 ? {joined} : '[' + {joined} + ']')");
    let mut variables = vec![
        json!({"name": "entries", "expression": "object.status.storageHealth"}),
        json!({"name": "old", "expression": format!(
            "{} ? oldObject.status.storageHealth : []",
            has_path("oldObject", resource.gated_field()),
        )}),
        json!({"name": "oldConditions", "expression": format!(
            "{} ? oldObject.status.storageHealth.transformMapEntry(i, e, {{e.name: has(e.healthConditions) ? e.healthConditions : []}}) : {{}}",
            has_path("oldObject", resource.gated_field()),
        )}),
    ];
    variables.extend(chunks);
    variables.push(json!({"name": "duplicates", "expression": duplicates}));
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": storage_condition_identity_name(), "labels": labels()},
        "spec": {
            // Linear, split over variables, and tested within budget at the e2e suite's floor:
            // failing closed keeps the rule exact (Ignore would store an object unchecked).
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": resource_rules(resource, &["UPDATE"])},
            "matchConditions": [
                {"name": "status-subresource", "expression": "request.subResource == 'status'"},
                {"name": "has-storage-health", "expression": has_path("object", resource.gated_field())},
                // The rule never refuses a kubelet's own report, which it would retry every
                // probe tick: on a node's write, repair enforces it.
                {"name": "not-a-node", "expression": format!("!({})", is_node())},
            ],
            "variables": variables,
            "validations": [{
                "expression": "size(variables.duplicates) == 0",
                "messageExpression": bounded(&message),
                "reason": "Invalid",
            }],
        },
    })
}

/// Whether the request comes from a node, as the library tells one: a `system:node:` user in
/// the `system:nodes` group.
fn is_node() -> String {
    format!(
        "request.userInfo.username.startsWith({}) && has(request.userInfo.groups) && {} in request.userInfo.groups",
        lit(NODE_USER_PREFIX),
        lit(NODES_GROUP)
    )
}

/// The claim health rule of NodeRestriction style with this project's wording, and the writer
/// list (`--pvc-health-writers`), written into the policy: a node never changes a claim's
/// `status.healthStatus`, a user outside the list neither; an empty list is any user but
/// nodes.
///
/// The list is a CEL literal, not a param: the apiserver resolves a binding's param before
/// any matchCondition, so a param object that is missing (its namespace deleted, say) would
/// refuse every claim status write the policy matches, the PV controller's binding included.
pub fn pvc_health_writers(writers: &[&str]) -> Value {
    let resource = HealthResource::PersistentVolumeClaims;
    let field = resource.gated_field();
    let forbidden = |reason: Restricted| {
        let status = forbidden_status(resource, HOLE, &reason.to_string());
        status.message.unwrap_or_default()
    };
    // The library's messages, with its quoting of the hole cut out.
    let quoted_hole = format!("\"{HOLE}\"");
    let by_node =
        forbidden(Restricted::ClaimHealthByNode(HOLE.to_owned())).replace(&quoted_hole, HOLE);
    let by_user =
        forbidden(Restricted::ClaimHealthByUser(HOLE.to_owned())).replace(&quoted_hole, HOLE);
    let name = "'\"' + object.metadata.name + '\"'";
    let username = "request.userInfo.username";
    let is_node = is_node();
    let node_name = format!("{username}.substring({})", NODE_USER_PREFIX.len());
    let (new, old) = (has_path("object", field), has_path("oldObject", field));
    let changed = format!("({new}) != ({old}) || ({new} && object.{field} != oldObject.{field})");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": pvc_health_writers_name(), "labels": labels()},
        "spec": {
            // Constant cost: nothing to fail on but the apiserver's own errors.
            "failurePolicy": "Fail",
            // The main resource is listed for the type checker and excluded here (which the
            // type checker does not read): a claim's spec and finalizers are never matched.
            "matchConstraints": {
                "resourceRules": resource_rules(resource, &["UPDATE"]),
                "excludeResourceRules": [{
                    "apiGroups": [resource.group()],
                    "apiVersions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": [resource.resource()],
                }],
            },
            "matchConditions": [
                {"name": "status-subresource", "expression": "request.subResource == 'status'"},
                {"name": "health-status-changed", "expression": changed},
            ],
            "variables": [
                // The one line an overlay patches to list its writers
                // (`/spec/variables/0/expression`), or `policies --pvc-health-writers`.
                {"name": "writers", "expression": writers_literal(writers)},
            ],
            // Node first, as the webhook checks it.
            "validations": [
                {
                    "expression": format!("!({is_node})"),
                    "messageExpression": bounded(&fill(&by_node, &[name, &go_quoted(&node_name)])),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("size(variables.writers) == 0 || {username} in variables.writers"),
                    "messageExpression": bounded(&fill(&by_user, &[name, &go_quoted(username)])),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// `writers` as a CEL list of strings, trimmed, empty names left out (as the webhook reads
/// `--pvc-health-writers`).
fn writers_literal(writers: &[&str]) -> String {
    let items: Vec<String> = writers
        .iter()
        .map(|w| w.trim())
        .filter(|w| !w.is_empty())
        .map(lit)
        .collect();
    format!("[{}]", items.join(", "))
}

/// The suffix kube-apiserver reserves for objects it loads from static manifests
/// (`staticManifestsDir`, KEP-5793): such names cannot be created, changed or deleted through
/// the API.
pub const STATIC_SUFFIX: &str = ".static.k8s.io";

/// Where `static_files` puts the validating policies, under the static folder.
pub const STATIC_VALIDATING_DIR: &str = "validating";
/// Where `static_files` puts the repair policies, under the static folder.
pub const STATIC_MUTATING_DIR: &str = "mutating";

/// The static manifests of the validating policies and their bindings with `action` (the
/// writer list `writers`), of the repair policies and their bindings, and the
/// AdmissionConfiguration that loads them: files by path under a folder that the apiserver
/// reads at `host_dir` (an absolute path on the control plane host). Loaded from files, the
/// rules answer before the apiserver serves, and no API client can turn them off. The
/// drop-on-save policies are left out: their bindings are the runtime switch, made through the
/// API.
pub fn static_files(writers: &[&str], action: Action, host_dir: &str) -> Vec<(String, String)> {
    let rename = |mut object: Value| {
        let name = format!(
            "{}{STATIC_SUFFIX}",
            object["metadata"]["name"].as_str().unwrap_or_default()
        );
        object["metadata"]["name"] = json!(name);
        if let Some(policy) = object["spec"]["policyName"].as_str().map(str::to_owned) {
            object["spec"]["policyName"] = json!(format!("{policy}{STATIC_SUFFIX}"));
        }
        object
    };
    let objects: Vec<Value> = [storage_condition_identity(), pvc_health_writers(writers)]
        .into_iter()
        .chain(bindings(action))
        .map(rename)
        .collect();
    let repairs: Vec<Value> = repair_policies()
        .into_iter()
        .chain(repair_bindings())
        .map(rename)
        .collect();
    let host_dir = host_dir.trim_end_matches('/');
    let configuration = json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{
            "name": "ValidatingAdmissionPolicy",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyConfiguration",
                "staticManifestsDir": format!("{host_dir}/{STATIC_VALIDATING_DIR}"),
            },
        }, {
            "name": "MutatingAdmissionPolicy",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyConfiguration",
                "staticManifestsDir": format!("{host_dir}/{STATIC_MUTATING_DIR}"),
            },
        }],
    });
    vec![
        (
            format!("{STATIC_VALIDATING_DIR}/volume-health.yaml"),
            static_yaml_stream(&objects),
        ),
        (
            format!("{STATIC_MUTATING_DIR}/volume-health.yaml"),
            static_yaml_stream(&repairs),
        ),
        (
            "admission-configuration.yaml".to_owned(),
            static_yaml_stream(&[configuration]),
        ),
    ]
}

/// Objects as one YAML stream for kube-apiserver's own loaders: no separator before the first
/// document, since they read a comment-only document as an object without a kind (and refuse
/// to start).
fn static_yaml_stream(objects: &[Value]) -> String {
    let stream = yaml_stream(objects);
    stream.replacen("\n---\n", "\n", 1)
}

/// The bindings of the validating policies with `action`.
pub fn bindings(action: Action) -> Vec<Value> {
    let identity = storage_condition_identity_name();
    let writers = pvc_health_writers_name();
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": binding_name(&identity, action), "labels": labels()},
            "spec": {"policyName": identity, "validationActions": [action.as_str()]},
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": binding_name(&writers, action), "labels": labels()},
            "spec": {"policyName": writers, "validationActions": [action.as_str()]},
        }),
    ]
}

/// The drop-on-save bindings: bound, the gated fields are off (as the webhook with
/// `CSIVolumeHealth=false`); a `matchResources.namespaceSelector` limits a namespaced one.
pub fn drop_on_save_bindings() -> Vec<Value> {
    HealthResource::ALL
        .iter()
        .map(|resource| mutating_binding(&drop_on_save_name(*resource)))
        .collect()
}

/// The binding of the mutating policy `policy`, of its name: bound, it applies everywhere.
fn mutating_binding(policy: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": labels()},
        "spec": {"policyName": policy},
    })
}

/// Objects as one YAML stream, with the generator's header.
pub fn yaml_stream(objects: &[Value]) -> String {
    let mut out = String::from(
        "# Generated by `volume-health-webhook policies` from the validation library's rules;\n# do not edit: regenerate.\n",
    );
    for object in objects {
        out.push_str("---\n");
        // A `Value` always serializes.
        out.push_str(&serde_yaml::to_string(object).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_literals_escape_quotes_and_non_ascii() {
        assert_eq!(lit("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(lit("\u{1}é"), r"'\u0001\u00e9'");
    }

    #[test]
    fn json_escaping_covers_every_character_go_escapes() {
        let expr = go_json("m");
        for escaped in [
            r"\u003c", r"\u003e", r"\u0026", r"\u2028", r"\u2029", r"\\n",
        ] {
            assert!(expr.contains(escaped), "{escaped} in {expr}");
        }
        assert!(
            expr.starts_with(r#"'"' + m.replace('\\', '\\\\')"#),
            "{expr}"
        );
    }

    #[test]
    fn static_manifests_carry_the_reserved_suffix_and_point_at_their_folder() {
        let files = static_files(
            &["alice"],
            Action::Deny,
            "/etc/kubernetes/volume-health/static-policies/",
        );
        // The validating policies and their bindings, then the repair policies and theirs.
        for ((path, text), (folder, count)) in files
            .iter()
            .zip([(STATIC_VALIDATING_DIR, 4), (STATIC_MUTATING_DIR, 6)])
        {
            assert_eq!(*path, format!("{folder}/volume-health.yaml"));
            assert!(
                !text.starts_with("---") && !text.contains("regenerate.\n---"),
                "{text}"
            );
            let objects: Vec<Value> = text
                .split("\n---\n")
                .map(|doc| serde_yaml::from_str(doc).unwrap())
                .collect();
            assert_eq!(objects.len(), count, "{path}");
            for object in &objects {
                let name = object["metadata"]["name"].as_str().unwrap();
                assert!(name.ends_with(STATIC_SUFFIX), "{name}");
                if let Some(policy) = object["spec"]["policyName"].as_str() {
                    assert!(policy.ends_with(STATIC_SUFFIX), "{policy}");
                    assert!(objects.iter().any(|o| o["metadata"]["name"] == policy));
                }
                assert!(object["spec"].get("paramKind").is_none());
                assert!(object["spec"].get("paramRef").is_none());
            }
        }
        let (path, configuration) = &files[2];
        assert_eq!(path, "admission-configuration.yaml");
        for folder in [STATIC_VALIDATING_DIR, STATIC_MUTATING_DIR] {
            assert!(
                configuration.contains(&format!(
                    "staticManifestsDir: /etc/kubernetes/volume-health/static-policies/{folder}\n"
                )),
                "{configuration}"
            );
        }
    }

    #[test]
    fn the_writer_list_is_a_literal_in_the_policy() {
        let expression = |writers: &[&str]| {
            pvc_health_writers(writers)["spec"]["variables"][0]["expression"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(expression(&[]), "[]");
        assert_eq!(
            expression(&[" system:serviceaccount:kube-system:monitor", "", "o'brien "]),
            r"['system:serviceaccount:kube-system:monitor', 'o\'brien']"
        );
        let policy = pvc_health_writers(&["alice"]);
        assert!(policy["spec"].get("paramKind").is_none(), "{policy}");
        for binding in bindings(Action::Deny) {
            assert!(binding["spec"].get("paramRef").is_none(), "{binding}");
        }
    }

    #[test]
    fn messages_are_the_librarys() {
        let writers = pvc_health_writers(&[]).to_string();
        assert!(writers.contains("is not allowed to update status.healthStatus"));
        assert!(writers.contains("persistentvolumeclaims "));
        let identity = storage_condition_identity().to_string();
        assert!(identity.contains("CSINode.storage.k8s.io "));
        assert!(identity.contains("Duplicate value: "));
        assert!(!identity.contains(HOLE) && !writers.contains(HOLE));
    }

    #[test]
    fn every_policy_lists_v1_and_its_main_resource() {
        for policy in policies(&[]) {
            let rules = &policy["spec"]["matchConstraints"]["resourceRules"];
            let rule = &rules[0];
            assert_eq!(rules.as_array().map(Vec::len), Some(1));
            assert_eq!(rule["apiVersions"], json!(["v1"]));
            let resources = rule["resources"].as_array().unwrap();
            assert!(!resources[0].as_str().unwrap().contains('/'));
        }
    }
}

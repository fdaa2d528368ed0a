//! Repair as MutatingAdmissionPolicies: the library's repairs (`volume_health_validation::repair`)
//! written in CEL, so that an apiserver running admission policies stores a report a driver
//! cannot get right (kubernetes#142280's duplicate pair) with no webhook hop.
//!
//! A policy matches what the webhook's repair entry matches ([`needs_repair`], the same
//! expression), within a bound ([`MAX_REPAIRED_ENTRIES`], [`MAX_REPAIRED_CONDITIONS`]) that
//! keeps its quadratic comparisons far inside the apiserver's CEL budget. Past the bound, or on
//! any error, it fails open: in-tree validation answers the write as it would without repair.
//!
//! The repairs, in the library's order, per list of conditions: a condition whose status is
//! outside its set is dropped; a reason that can never be valid becomes `InvalidReason`, and an
//! impossible access or volume mode is unset, each original kept in the message; a later
//! condition with the identity of an earlier one is dropped; the most severe
//! [`MAX_HEALTH_CONDITIONS`] are kept, the earlier of equally severe ones; a message over its
//! limit is cut at a character boundary. Entries: a pod entry naming no volume of the pod is
//! dropped, a CSINode entry whose name is not a CSI driver name is dropped, and later entries
//! of one name are merged into the first. The patch replaces each changed entry's conditions
//! whole and removes the dropped and merged entries, one operation each, so the apiserver
//! applies it in time linear in the report.
//!
//! What the policies cannot do as the library does is named in `docs/repair.md`: they read no
//! stored condition (the library keeps what the apiserver ratchets: a stored reason, message or
//! unnamed entry written before the rules), they lower-case a driver name in ASCII only (Go's
//! `strings.ToLower` also maps U+0130 and U+212A), and they send no warning and count nothing.

use serde_json::{Value, json};
use volume_health_validation::HealthResource;
use volume_health_validation::repair::REPLACED_REASON;
use volume_health_validation::rules::{
    ACCESS_MODES, MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES, MAX_STORAGE_REASON_BYTES,
    MAX_VOLUME_MESSAGE_BYTES, MAX_VOLUME_REASON_BYTES, STORAGE_HEALTH_STATUSES,
    VOLUME_HEALTH_STATUSES, VOLUME_MODES,
};

use super::{PREFIX, labels, lit, mutating_binding, resource_rules};

/// The most entries of a pod's or a CSINode's report the policies repair.
pub const MAX_REPAIRED_ENTRIES: usize = 64;
/// The most conditions of one report (all entries together) the policies repair.
pub const MAX_REPAIRED_CONDITIONS: usize = 128;

/// A condition reason's format, as in-tree validation and the library's `is_condition_reason`
/// read it.
const REASON_FORMAT: &str = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// A DNS-1123 subdomain, which a CSI driver name is once lower-cased.
const DRIVER_NAME_FORMAT: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The longest CSI driver name, in bytes.
const MAX_DRIVER_NAME_BYTES: usize = 63;

/// The name of the repair policy of `resource` (and of its binding).
pub fn repair_name(resource: HealthResource) -> String {
    format!("{PREFIX}-repair-{}", resource.resource())
}

/// A CEL list literal of string literals.
fn list_of(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|s| lit(s)).collect();
    format!("[{}]", items.join(", "))
}

/// `body` with `name` bound to `value`: the apiserver's CEL has no `cel.bind`, so a
/// one-element list's `map` stands for it.
fn bind(name: &str, value: &str, body: &str) -> String {
    format!("[{value}].map({name}, {body})[0]")
}

/// The condition list of an entry: `healthConditions`, or none.
fn conditions_of(entry: &str) -> String {
    format!("(has({entry}.healthConditions) ? {entry}.healthConditions : [])")
}

/// Whether one list of conditions `list` needs repair, as the webhook's entries test it:
/// too many, one impossible or over a limit, or two with one identity (`volume`: the
/// (status, reason) of a claim's or pod's; otherwise a CSINode's four fields).
fn list_needs_repair(list: &str, volume: bool) -> String {
    let (statuses, reason_max, message_max) = if volume {
        (
            VOLUME_HEALTH_STATUSES,
            MAX_VOLUME_REASON_BYTES,
            MAX_VOLUME_MESSAGE_BYTES,
        )
    } else {
        (
            STORAGE_HEALTH_STATUSES,
            MAX_STORAGE_REASON_BYTES,
            MAX_STORAGE_MESSAGE_BYTES,
        )
    };
    let modes = if volume {
        String::new()
    } else {
        format!(
            " || (has(c.accessMode) && !(c.accessMode in {})) || (has(c.volumeMode) && !(c.volumeMode in {}))",
            list_of(ACCESS_MODES),
            list_of(VOLUME_MODES)
        )
    };
    let same_modes = if volume {
        ""
    } else {
        " && (has(d.accessMode) ? d.accessMode : '') == (has(c.accessMode) ? c.accessMode : '') \
         && (has(d.volumeMode) ? d.volumeMode : '') == (has(c.volumeMode) ? c.volumeMode : '') "
    };
    format!(
        "(size({list}) > {MAX_HEALTH_CONDITIONS} || {list}.exists(c, !has(c.status) \
         || !(c.status in {statuses}) || !has(c.reason) || size(c.reason) > {reason_max} \
         || !c.reason.matches({format}) || (has(c.message) && size(bytes(c.message)) > {message_max}){modes} \
         || {list}.filter(d, has(d.status) && has(d.reason) && d.status == c.status && d.reason == c.reason{same_modes}).size() > 1))",
        statuses = list_of(statuses),
        format = lit(REASON_FORMAT),
    )
}

/// The gated field of `root` (`object` or `oldObject`), or its empty value.
fn gated_or_empty(resource: HealthResource, root: &str) -> String {
    let field = resource.gated_field();
    let empty = match resource {
        HealthResource::PersistentVolumeClaims => "null",
        _ => "[]",
    };
    let present = format!("has({root}.status) && has({root}.{field})");
    let guard = if root == "oldObject" {
        format!("oldObject != null && {present}")
    } else {
        present
    };
    format!("({guard} ? {root}.{field} : {empty})")
}

/// Whether a write of `resource` may need repair: the webhook's repair entry's `needs-repair`
/// condition (`manifests/base` holds the same text, and a test keeps them equal). The gated
/// field changed, and some entry or condition breaks a rule repair enforces. It reads the
/// sizes before anything quadratic, so a long list costs a comparison and a size.
pub fn needs_repair(resource: HealthResource) -> String {
    let changed = format!(
        "{} != {}",
        gated_or_empty(resource, "object"),
        gated_or_empty(resource, "oldObject")
    );
    match resource {
        HealthResource::PersistentVolumeClaims => {
            let list = "object.status.healthStatus.healthConditions";
            format!(
                "{changed} && has(object.status) && has(object.status.healthStatus) && has({list}) && {}",
                list_needs_repair(list, true)
            )
        }
        HealthResource::Pods => {
            let entries = "object.status.volumeHealth";
            format!(
                "{changed} && has(object.status) && has({entries}) && (size({entries}) > {MAX_HEALTH_CONDITIONS} \
                 || {entries}.exists(e, !has(e.name) || e.name == '' || !(has(object.spec) && has(object.spec.volumes) \
                 && object.spec.volumes.exists(v, v.name == e.name)) \
                 || {entries}.filter(f, has(f.name) && f.name == e.name).size() > 1 \
                 || (has(e.healthConditions) && {})))",
                list_needs_repair("e.healthConditions", true)
            )
        }
        HealthResource::CsiNodes => {
            let entries = "object.status.storageHealth";
            format!(
                "{changed} && has(object.status) && has({entries}) && (size({entries}) > {MAX_HEALTH_CONDITIONS} \
                 || {entries}.exists(e, !has(e.name) || size(e.name) > {MAX_DRIVER_NAME_BYTES} \
                 || !e.name.matches({format}) \
                 || {entries}.filter(f, has(f.name) && f.name == e.name).size() > 1 \
                 || (has(e.healthConditions) && {})))",
                list_needs_repair("e.healthConditions", false),
                format = lit(&DRIVER_NAME_FORMAT.replace("a-z0-9", "A-Za-z0-9")),
            )
        }
    }
}

/// Whether a report is within what the policy repairs: at most [`MAX_REPAIRED_ENTRIES`]
/// entries and [`MAX_REPAIRED_CONDITIONS`] conditions, read in one pass.
fn within_bound(resource: HealthResource) -> String {
    match resource {
        HealthResource::PersistentVolumeClaims => format!(
            "has(object.status) && has(object.status.healthStatus) \
             && has(object.status.healthStatus.healthConditions) \
             && size(object.status.healthStatus.healthConditions) <= {MAX_REPAIRED_CONDITIONS}"
        ),
        _ => {
            let entries = format!("object.{}", resource.gated_field());
            format!(
                "has(object.status) && has({entries}) && size({entries}) <= {MAX_REPAIRED_ENTRIES} \
                 && {entries}.map(e, has(e.healthConditions) ? size(e.healthConditions) : 0).sum() \
                 <= {MAX_REPAIRED_CONDITIONS}"
            )
        }
    }
}

/// The string `message` (an identifier) cut to at most `max` bytes at a character boundary:
/// the longest prefix of whole characters that fits, found by a binary search over the number
/// of characters, unrolled (CEL has no loop). A character is 1 to 4 bytes, so the answer lies
/// between `max / 4` characters and `max`.
fn cut(message: &str, max: usize) -> String {
    let low = max / 4;
    let mut steps = 0;
    while (1usize << steps) < max - low + 1 {
        steps += 1;
    }
    // r<k> is [lo, hi]: the prefix of lo characters fits, and none longer than hi does.
    let mut body = format!("{message}.substring(0, r{steps}[0])");
    for k in (1..=steps).rev() {
        let previous = format!("r{}", k - 1);
        let step = bind(
            "mid",
            &format!("({previous}[0] + {previous}[1] + 1) / 2"),
            &format!(
                "size(bytes({message}.substring(0, mid))) <= {max} ? [mid, {previous}[1]] : [{previous}[0], mid - 1]"
            ),
        );
        body = bind(&format!("r{k}"), &step, &body);
    }
    let first = format!("[{low}, size({message}) < {max} ? size({message}) : {max}]");
    format!(
        "size(bytes({message})) <= {max} ? {message} : {}",
        bind("r0", &first, &body)
    )
}

/// The message a repaired condition `c` carries: its own, with `notes` (a string expression,
/// the originals of replaced fields; empty when none) added as the library adds them, cut.
fn repaired_message(notes: &str, max: usize) -> String {
    let full = format!(
        "{notes} == '' ? (has(c.message) ? c.message : '') : \
         (has(c.message) && c.message != '' ? c.message + ' (' + {notes} + ')' : {notes})"
    );
    bind("full", &full, &cut("full", max))
}

/// The repaired claim or pod condition of `c` (whose status is in its set), as a map. Every
/// value is made a string: the apiserver types a condition it has no schema for as `dyn`, and
/// a map literal's values must be of one type.
fn volume_condition() -> String {
    let reason = "(has(c.reason) ? c.reason : '')";
    let bad = format!(
        "(r == '' || size(r) > {MAX_VOLUME_REASON_BYTES} || !r.matches({}))",
        lit(REASON_FORMAT)
    );
    let note = format!("({bad} && r != '' ? 'reason: ' + r : '')");
    let message = repaired_message("note", MAX_VOLUME_MESSAGE_BYTES);
    let built = format!(
        "{{'status': string(c.status), 'reason': {bad} ? {replaced} : string(r), ?'message': has(c.message) || note != '' \
         ? optional.of(string({message})) : optional.none()}}",
        replaced = lit(REPLACED_REASON),
    );
    bind("r", reason, &bind("note", &note, &built))
}

/// The repaired CSINode condition of `c` (whose status is in its set), as a map. Its
/// `lastTransitionTime` is kept; the apiserver hands an unset one to CEL as `null`.
fn storage_condition() -> String {
    let reason = "(has(c.reason) ? c.reason : '')";
    let bad_reason = format!(
        "(r == '' || size(r) > {MAX_STORAGE_REASON_BYTES} || !r.matches({}))",
        lit(REASON_FORMAT)
    );
    let bad_access = format!(
        "(has(c.accessMode) && !(c.accessMode in {}))",
        list_of(ACCESS_MODES)
    );
    let bad_volume = format!(
        "(has(c.volumeMode) && !(c.volumeMode in {}))",
        list_of(VOLUME_MODES)
    );
    let notes = format!(
        "[{bad_reason} && r != '' ? 'reason: ' + r : '', \
         {bad_access} && c.accessMode != '' ? 'accessMode: ' + c.accessMode : '', \
         {bad_volume} && c.volumeMode != '' ? 'volumeMode: ' + c.volumeMode : ''].filter(x, x != '').join('; ')"
    );
    let message = repaired_message("notes", MAX_STORAGE_MESSAGE_BYTES);
    let built = format!(
        "{{'status': string(c.status), 'reason': {bad_reason} ? {replaced} : string(r), \
         ?'message': has(c.message) || notes != '' ? optional.of(string({message})) : optional.none(), \
         ?'accessMode': has(c.accessMode) && !{bad_access} ? optional.of(string(c.accessMode)) : optional.none(), \
         ?'volumeMode': has(c.volumeMode) && !{bad_volume} ? optional.of(string(c.volumeMode)) : optional.none(), \
         ?'lastTransitionTime': has(c.lastTransitionTime) && c.lastTransitionTime != null \
         ? optional.of(string(c.lastTransitionTime)) : optional.none()}}",
        replaced = lit(REPLACED_REASON),
    );
    bind("r", reason, &bind("notes", &notes, &built))
}

/// The repaired list of the conditions `list` (of typed conditions): impossible ones dropped
/// or fixed, later ones of an earlier identity dropped, the most severe kept in their order.
fn repaired_list(list: &str, volume: bool) -> String {
    let (statuses, condition, severity, same) = if volume {
        (
            VOLUME_HEALTH_STATUSES,
            volume_condition(),
            "f.status == 'DataLoss' ? 3 : (f.status == 'Inaccessible' ? 2 : 1)",
            "d.status == f.status && d.reason == f.reason",
        )
    } else {
        (
            STORAGE_HEALTH_STATUSES,
            storage_condition(),
            "f.status == 'StorageUnreachable' ? 2 : 1",
            "d.status == f.status && d.reason == f.reason \
             && (has(d.accessMode) ? d.accessMode : '') == (has(f.accessMode) ? f.accessMode : '') \
             && (has(d.volumeMode) ? d.volumeMode : '') == (has(f.volumeMode) ? f.volumeMode : '')",
        )
    };
    let fixed = format!(
        "{list}.filter(c, has(c.status) && c.status in {}).map(c, {condition})",
        list_of(statuses)
    );
    let distinct = format!("fixed.transformList(i, f, !fixed.exists(j, d, j < i && {same}), f)");
    // The most severe: fewer than the limit are more severe, or as severe and earlier.
    let kept = format!(
        "distinct.transformList(i, f, severity.transformList(j, s, s > severity[i] \
         || (s == severity[i] && j < i), s).size() < {MAX_HEALTH_CONDITIONS}, f)"
    );
    bind(
        "fixed",
        &fixed,
        &bind(
            "distinct",
            &distinct,
            &bind("severity", &format!("distinct.map(f, {severity})"), &kept),
        ),
    )
}

/// Whether the entry name `name` is kept for a CSINode: a CSI driver name.
fn driver_name(name: &str) -> String {
    format!(
        "{name} != '' && size(bytes({name})) <= {MAX_DRIVER_NAME_BYTES} && {name}.lowerAscii().matches({})",
        lit(DRIVER_NAME_FORMAT)
    )
}

/// The repair policy of `resource`.
pub fn repair(resource: HealthResource) -> Value {
    let (variables, patch) = match resource {
        HealthResource::PersistentVolumeClaims => (
            json!([]),
            format!(
                "[JSONPatch{{op: 'replace', path: '/status/healthStatus/healthConditions', value: {}}}]",
                repaired_list("object.status.healthStatus.healthConditions", true)
            ),
        ),
        _ => {
            let volume = resource == HealthResource::Pods;
            let entries = format!("object.{}", resource.gated_field());
            let pointer = resource.gated_pointer();
            // The first entry of each name is kept, if its name is a volume of the pod or a
            // driver name; the others are merged into it or dropped.
            let keep = if volume {
                "name != '' && name in variables.volumes && variables.names.indexOf(name) == i"
                    .to_owned()
            } else {
                format!(
                    "{} && variables.names.indexOf(name) == i",
                    driver_name("name")
                )
            };
            let mut variables = vec![
                json!({"name": "entries", "expression": entries}),
                json!({"name": "names", "expression": "variables.entries.map(e, has(e.name) ? e.name : '')"}),
            ];
            if volume {
                variables.push(json!({"name": "volumes", "expression":
                    "has(object.spec.volumes) ? object.spec.volumes.map(v, v.name) : []"}));
            }
            variables.push(json!({"name": "kept", "expression":
                format!("variables.names.transformList(i, name, {keep})")}));
            let merged = "variables.names.filter(x, x == variables.names[i]).size() > 1";
            let entry = "variables.entries[i]";
            let changed = format!(
                "variables.kept[i] && ({merged} || (has({entry}.healthConditions) && {}))",
                list_needs_repair(&format!("{entry}.healthConditions"), volume)
            );
            let conditions = format!(
                "variables.entries.filter(e, has(e.name) && e.name == variables.names[i]).map(e, {}).flatten()",
                conditions_of("e")
            );
            let patch = format!(
                "lists.range(size(variables.entries)).filter(i, {changed}).map(i, JSONPatch{{op: 'add', \
                 path: '{pointer}/' + string(i) + '/healthConditions', value: {}}}) \
                 + lists.range(size(variables.entries)).map(k, size(variables.entries) - 1 - k) \
                 .filter(i, !variables.kept[i]).map(i, JSONPatch{{op: 'remove', path: '{pointer}/' + string(i)}})",
                repaired_list(&conditions, volume)
            );
            (Value::Array(variables), patch)
        }
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": repair_name(resource), "labels": labels()},
        "spec": {
            // Fails open: past the bound or on an error, in-tree answers as without repair.
            "failurePolicy": "Ignore",
            // Another mutation may change the report: look again, a repaired one is left as is.
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": resource_rules(resource, &["UPDATE"])},
            "matchConditions": [
                {"name": "needs-repair", "expression": needs_repair(resource)},
                {"name": "within-bound", "expression": within_bound(resource)},
            ],
            "variables": variables,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
        },
    })
}

/// The repair policies, one per resource.
pub fn repair_policies() -> Vec<Value> {
    HealthResource::ALL.iter().map(|r| repair(*r)).collect()
}

/// The repair policies' bindings: bound, every write they match is repaired.
pub fn repair_bindings() -> Vec<Value> {
    HealthResource::ALL
        .iter()
        .map(|resource| mutating_binding(&repair_name(*resource)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The webhook's repair entries in `manifests/base` match what the policies match: one
    /// text, written here.
    #[test]
    fn the_webhook_entries_match_what_the_policies_match() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/base/mutatingwebhookconfiguration.yaml"
        );
        let text = std::fs::read_to_string(path).expect("the base's mutating configuration");
        let config: Value = serde_yaml::from_str(&text).expect("YAML");
        let entries = config["webhooks"].as_array().expect("webhooks");
        for (entry, resource) in [
            (
                "pod-status.repair.volume-health.github.io",
                HealthResource::Pods,
            ),
            (
                "pvc.repair.volume-health.github.io",
                HealthResource::PersistentVolumeClaims,
            ),
            (
                "csinode.repair.volume-health.github.io",
                HealthResource::CsiNodes,
            ),
        ] {
            let hook = entries
                .iter()
                .find(|h| h["name"] == entry)
                .unwrap_or_else(|| panic!("no entry {entry}"));
            let condition = hook["matchConditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["name"] == "needs-repair"))
                .unwrap_or_else(|| panic!("{entry} has no needs-repair condition"));
            assert_eq!(
                condition["expression"].as_str(),
                Some(needs_repair(resource).as_str()),
                "{entry}'s needs-repair differs from the policies'"
            );
        }
    }

    /// The cut's binary search spans every answer: from a quarter of the limit in characters
    /// (four bytes each) to the limit (one byte each).
    #[test]
    fn the_cut_searches_every_length_it_can_find() {
        let text = cut("m", 1024);
        assert!(text.contains("r10"), "{text}");
        assert!(!text.contains("r11"), "{text}");
        assert!(text.starts_with("size(bytes(m)) <= 1024 ? m : "), "{text}");
    }
}

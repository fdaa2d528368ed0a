//! The decision table, spoofing attempts, both API versions, malformed bodies, and an exhaustive
//! check that nothing outside the table is ever allowed.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use volume_health_authz::{
    AuthzPolicy, CSINODE_OTHER_NODE, Decision, REASON_STATUS_GATED, REASON_STATUS_VERBS,
    REASON_SUBRESOURCES, REASON_VERBS, ReviewError, review,
};

const GATE_ON: AuthzPolicy = AuthzPolicy {
    gate_enabled: true,
    deny_on_mismatch: false,
};
const GATE_OFF: AuthzPolicy = AuthzPolicy {
    gate_enabled: false,
    deny_on_mismatch: false,
};
const DENY_MISMATCH: AuthzPolicy = AuthzPolicy {
    gate_enabled: true,
    deny_on_mismatch: true,
};
const NODE_GROUPS: &[&str] = &["system:nodes", "system:authenticated"];

fn sar(
    user: &str,
    groups: &[&str],
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    name: &str,
) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {"creationTimestamp": null},
        "spec": {"user": user, "groups": groups, "extra": {}, "uid": "u",
                 "resourceAttributes": {"namespace": "", "verb": verb, "group": group, "version": "v1",
                                        "resource": resource, "subresource": sub, "name": name}},
        "status": {"allowed": false}
    })
}

fn node1(verb: &str, sub: &str, name: &str) -> Value {
    sar(
        "system:node:node1",
        NODE_GROUPS,
        verb,
        "storage.k8s.io",
        "csinodes",
        sub,
        name,
    )
}

/// Sends `body` and returns (decision, the response's status object).
fn ask(body: &Value, policy: &AuthzPolicy) -> (Decision, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let answer = review(&bytes, policy).unwrap();
    // What the answer was about, for logs and metrics.
    let spec = &body["spec"];
    assert_eq!(answer.user, spec["user"].as_str().unwrap_or(""));
    match &answer.resource {
        Some(attrs) => {
            let want = &spec["resourceAttributes"];
            assert_eq!(attrs.verb, want["verb"].as_str().unwrap_or(""));
            assert_eq!(attrs.group, want["group"].as_str().unwrap_or(""));
            assert_eq!(attrs.resource, want["resource"].as_str().unwrap_or(""));
            assert_eq!(
                attrs.subresource,
                want["subresource"].as_str().unwrap_or("")
            );
            assert_eq!(attrs.name, want["name"].as_str().unwrap_or(""));
        }
        None => assert!(spec["resourceAttributes"].is_null()),
    }
    let response: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(
        response["apiVersion"], body["apiVersion"],
        "apiVersion is echoed"
    );
    assert_eq!(response["kind"], "SubjectAccessReview");
    let status = response["status"].clone();
    // The wire form must say exactly what the decision says.
    match &answer.decision {
        Decision::Allow => {
            assert_eq!(status["allowed"], true);
            assert!(status.get("denied").is_none());
        }
        Decision::NoOpinion(reason) => {
            assert_eq!(status["allowed"], false);
            assert!(status.get("denied").is_none());
            assert_eq!(
                status.get("reason").and_then(Value::as_str).unwrap_or(""),
                reason
            );
        }
        Decision::Deny(reason) => {
            assert_eq!(status["allowed"], false);
            assert_eq!(status["denied"], true);
            assert_eq!(status["reason"], &**reason);
        }
    }
    (answer.decision, status)
}

fn no_opinion(reason: &str) -> Decision {
    Decision::NoOpinion(reason.to_owned().into())
}

#[test]
fn spec_table() {
    let rows: &[(Value, AuthzPolicy, Decision)] = &[
        // 1. a node identity with an empty name
        (
            sar(
                "system:node:",
                NODE_GROUPS,
                "update",
                "storage.k8s.io",
                "csinodes",
                "status",
                "node1",
            ),
            GATE_ON,
            no_opinion("unknown node for user \"system:node:\""),
        ),
        // ... and outside the CSINode table, nothing to say.
        (
            sar("system:node:", NODE_GROUPS, "get", "", "pods", "", "foo"),
            GATE_ON,
            no_opinion(""),
        ),
        // 2. verbs of the object itself
        (node1("list", "", ""), GATE_ON, no_opinion(REASON_VERBS)),
        (node1("watch", "", ""), GATE_ON, no_opinion(REASON_VERBS)),
        (
            node1("deletecollection", "", ""),
            GATE_ON,
            no_opinion(REASON_VERBS),
        ),
        // 3. status: the gate, then its verbs
        (
            node1("update", "status", "node1"),
            GATE_OFF,
            no_opinion(REASON_STATUS_GATED),
        ),
        (
            node1("get", "status", "node1"),
            GATE_OFF,
            no_opinion(REASON_STATUS_GATED),
        ),
        (
            node1("list", "status", ""),
            GATE_OFF,
            no_opinion(REASON_STATUS_GATED),
        ),
        (
            node1("escalate", "status", "node1"),
            GATE_ON,
            no_opinion(REASON_STATUS_VERBS),
        ),
        (
            node1("list", "status", ""),
            GATE_ON,
            no_opinion(REASON_STATUS_VERBS),
        ),
        // 4. other subresources, whatever the verb
        (
            node1("get", "finalizers", "node1"),
            GATE_ON,
            no_opinion(REASON_SUBRESOURCES),
        ),
        (
            node1("watch", "foo", "node1"),
            GATE_ON,
            no_opinion(REASON_SUBRESOURCES),
        ),
        (
            node1("deletecollection", "foo", ""),
            GATE_OFF,
            no_opinion(REASON_SUBRESOURCES),
        ),
        // status verbs
        (
            node1("create", "status", "node1"),
            GATE_ON,
            no_opinion(REASON_STATUS_VERBS),
        ),
        (
            node1("delete", "status", "node1"),
            GATE_ON,
            no_opinion(REASON_STATUS_VERBS),
        ),
        // 5. another node's CSINode
        (
            node1("update", "status", "node2"),
            GATE_ON,
            no_opinion(CSINODE_OTHER_NODE),
        ),
        (
            node1("get", "", "node2"),
            GATE_ON,
            no_opinion(CSINODE_OTHER_NODE),
        ),
        (
            node1("delete", "", "node2"),
            GATE_ON,
            no_opinion(CSINODE_OTHER_NODE),
        ),
        (
            node1("update", "status", "node2"),
            DENY_MISMATCH,
            Decision::Deny(CSINODE_OTHER_NODE.into()),
        ),
        (
            node1("patch", "", "node2"),
            DENY_MISMATCH,
            Decision::Deny(CSINODE_OTHER_NODE.into()),
        ),
        // 6. allowed
        (node1("get", "status", "node1"), GATE_ON, Decision::Allow),
        (node1("update", "status", "node1"), GATE_ON, Decision::Allow),
        (node1("patch", "status", "node1"), GATE_ON, Decision::Allow),
        (
            node1("update", "status", "node1"),
            DENY_MISMATCH,
            Decision::Allow,
        ),
        (node1("get", "", "node1"), GATE_OFF, Decision::Allow),
        (node1("update", "", "node1"), GATE_OFF, Decision::Allow),
        (node1("delete", "", "node1"), GATE_ON, Decision::Allow),
        (node1("create", "", ""), GATE_ON, Decision::Allow),
        (node1("create", "", "node2"), GATE_ON, Decision::Allow),
        // everything else: no opinion, empty reason
        (
            sar(
                "system:admin",
                &["system:masters"],
                "update",
                "storage.k8s.io",
                "csinodes",
                "status",
                "node1",
            ),
            GATE_ON,
            no_opinion(""),
        ),
        (
            sar(
                "system:node:node1",
                NODE_GROUPS,
                "update",
                "",
                "nodes",
                "status",
                "node1",
            ),
            GATE_ON,
            no_opinion(""),
        ),
        (
            sar(
                "system:node:node1",
                NODE_GROUPS,
                "get",
                "storage.k8s.io",
                "csidrivers",
                "",
                "x",
            ),
            GATE_ON,
            no_opinion(""),
        ),
    ];
    for (body, policy, want) in rows {
        let (got, _) = ask(body, policy);
        assert_eq!(&got, want, "{}", body["spec"]);
    }
}

#[test]
fn spoofed_identities_get_no_opinion() {
    let spoofs: &[(&str, &[&str])] = &[
        ("system:node:node1", &["system:authenticated"]),
        ("system:node:node1", &[]),
        ("node1", NODE_GROUPS),
        ("System:Node:node1", NODE_GROUPS),
        ("system:node:node1", &["System:Nodes"]),
        (
            "system:serviceaccount:kube-system:system:node:node1",
            NODE_GROUPS,
        ),
    ];
    for (user, groups) in spoofs {
        let body = sar(
            user,
            groups,
            "update",
            "storage.k8s.io",
            "csinodes",
            "status",
            "node1",
        );
        assert_eq!(
            ask(&body, &DENY_MISMATCH).0,
            no_opinion(""),
            "{user} {groups:?}"
        );
    }
    // A trailing space is part of the name: node "node1 " is not node1.
    let body = sar(
        "system:node:node1 ",
        NODE_GROUPS,
        "update",
        "storage.k8s.io",
        "csinodes",
        "status",
        "node1",
    );
    assert_eq!(ask(&body, &GATE_ON).0, no_opinion(CSINODE_OTHER_NODE));
    // csinodes in the core group is not storage.k8s.io's CSINode.
    let body = sar(
        "system:node:node1",
        NODE_GROUPS,
        "update",
        "",
        "csinodes",
        "status",
        "node1",
    );
    assert_eq!(ask(&body, &GATE_ON).0, no_opinion(""));
    let body = sar(
        "system:node:node1",
        NODE_GROUPS,
        "update",
        "storage.k8s.io",
        "CSINodes",
        "status",
        "node1",
    );
    assert_eq!(ask(&body, &GATE_ON).0, no_opinion(""));
}

#[test]
fn v1beta1_reads_groups_from_group() {
    let mut body = node1("update", "status", "node1");
    body["apiVersion"] = json!("authorization.k8s.io/v1beta1");
    // v1beta1 with `groups` only: the node group is not where v1beta1 keeps it.
    assert_eq!(ask(&body, &GATE_ON).0, no_opinion(""));
    let groups = body["spec"]["groups"].take();
    body["spec"]["group"] = groups;
    body["spec"].as_object_mut().unwrap().remove("groups");
    assert_eq!(ask(&body, &GATE_ON).0, Decision::Allow);
    // And v1 does not read `group`.
    body["apiVersion"] = json!("authorization.k8s.io/v1");
    assert_eq!(ask(&body, &GATE_ON).0, no_opinion(""));
}

#[test]
fn fixtures_as_the_apiserver_sends_them() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/sar");
    let cases = [
        ("v1-kubelet-own-csinode-status.json", Decision::Allow),
        ("v1beta1-kubelet-own-csinode-status.json", Decision::Allow),
        (
            "v1-kubelet-other-csinode-status.json",
            no_opinion(CSINODE_OTHER_NODE),
        ),
        ("v1-non-resource.json", no_opinion("")),
    ];
    for (file, want) in cases {
        let body: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{file}")).unwrap())
                .unwrap();
        assert_eq!(ask(&body, &GATE_ON).0, want, "{file}");
    }
}

#[test]
fn malformed_bodies_are_errors() {
    let bad: &[(&[u8], &str)] = &[
        (b"", "request body is not a SubjectAccessReview"),
        (b"not json", "request body is not a SubjectAccessReview"),
        // A JSON array is not an object, though serde's derived structs read one field by field:
        // this one would otherwise be a review of a node reading its own CSINode status.
        (b"[]", "request body is not a SubjectAccessReview"),
        (br#"["authorization.k8s.io/v1","SubjectAccessReview",["system:node:n1",["system:nodes"],null,{"verb":"get","group":"storage.k8s.io","resource":"csinodes","subresource":"status","name":"n1"}]]"#,
         "request body is not a SubjectAccessReview"),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":["system:node:n1",["system:nodes"],null,["get","storage.k8s.io","csinodes","status","n1"]]}"#,
         "request body is not a SubjectAccessReview"),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:node:n1","groups":["system:nodes"],"resourceAttributes":["get","storage.k8s.io","csinodes","status","n1"]}}"#,
         "request body is not a SubjectAccessReview"),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":5}}"#,
         "request body is not a SubjectAccessReview"),
        (br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
         r#"expected kind SubjectAccessReview in authorization.k8s.io/v1 or authorization.k8s.io/v1beta1, got "AdmissionReview" in "admission.k8s.io/v1""#),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{}}"#,
         r#"expected kind SubjectAccessReview in authorization.k8s.io/v1 or authorization.k8s.io/v1beta1, got "SelfSubjectAccessReview" in "authorization.k8s.io/v1""#),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview"}"#, "SubjectAccessReview has no spec"),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u"}}"#,
         "exactly one of spec.resourceAttributes and spec.nonResourceAttributes must be set"),
        (br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"u","resourceAttributes":{},"nonResourceAttributes":{}}}"#,
         "exactly one of spec.resourceAttributes and spec.nonResourceAttributes must be set"),
    ];
    for (body, message) in bad {
        let err: ReviewError = review(body, &GATE_ON).unwrap_err();
        assert_eq!(
            err.to_string(),
            *message,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

/// Every combination of identity, verb, group, resource, subresource and name under every
/// policy: whatever is allowed must be a row 6 of the table.
#[test]
fn nothing_outside_the_table_is_allowed() {
    let identities: &[(&str, &[&str])] = &[
        ("system:node:node1", NODE_GROUPS),
        ("system:node:", NODE_GROUPS),
        ("system:node:node1", &["system:authenticated"]),
        ("node1", NODE_GROUPS),
        ("system:admin", &["system:masters"]),
        (
            "system:serviceaccount:kube-system:csi",
            &["system:serviceaccounts"],
        ),
    ];
    let verbs = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
        "impersonate",
        "*",
        "",
    ];
    let groups = ["storage.k8s.io", "", "*"];
    let resources = ["csinodes", "nodes", "pods", "csidrivers", "*"];
    let subresources = ["", "status", "finalizers", "*"];
    let names = ["node1", "node2", "", "node1 ", "NODE1"];
    let mut allowed = 0;
    let mut checked = 0;
    for policy in [GATE_ON, GATE_OFF, DENY_MISMATCH] {
        for (user, user_groups) in identities {
            for verb in verbs {
                for group in groups {
                    for resource in resources {
                        for sub in subresources {
                            for name in names {
                                let body = sar(user, user_groups, verb, group, resource, sub, name);
                                let decision = review(&serde_json::to_vec(&body).unwrap(), &policy)
                                    .unwrap()
                                    .decision;
                                checked += 1;
                                if decision != Decision::Allow {
                                    continue;
                                }
                                allowed += 1;
                                let own = *user == "system:node:node1"
                                    && user_groups.contains(&"system:nodes");
                                let csinodes = group == "storage.k8s.io" && resource == "csinodes";
                                let main_ok = sub.is_empty()
                                    && (verb == "create"
                                        || (["get", "update", "patch", "delete"].contains(&verb)
                                            && name == "node1"));
                                let status_ok = sub == "status"
                                    && policy.gate_enabled
                                    && ["get", "update", "patch"].contains(&verb)
                                    && name == "node1";
                                assert!(
                                    own && csinodes && (main_ok || status_ok),
                                    "allowed outside the table: {user} {user_groups:?} {verb} {group}/{resource}/{sub} {name:?} gate={}",
                                    policy.gate_enabled
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 6 * 11 * 3 * 5 * 4 * 5);
    // The table's allow rows do occur: own CSINode get/update/patch/delete (+status with the
    // gate), and create with any name.
    assert!(allowed > 20, "only {allowed} allowed");
}

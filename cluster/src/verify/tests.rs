//! The answers the apiserver gives, read as `verify` reads them. The messages are kube-apiserver
//! v1.37.2's (`k8s.io/apiserver` `pkg/admission/plugin/webhook/errors` and
//! `pkg/admission/plugin/policy/validating`), as `make e2e` shows them.

use serde_json::json;

use super::*;

const PROBE: &str = "probe-1.verify.volume-health.github.io";

fn answer(code: u16, message: &str, warnings: &[&str]) -> Answer {
    Answer {
        code,
        warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
        body: json!({"kind": "Status", "message": message}),
    }
}

#[test]
fn an_answer_shows_the_probe_entry_failed_denied_warned_repaired_or_nothing() {
    let failed = answer(
        500,
        &format!(
            "Internal error occurred: failed calling webhook \"{PROBE}\": failed to call webhook: \
             Post \"https://127.0.0.1:1/validate?timeout=3s\": tls: failed to verify certificate: \
             x509: certificate signed by unknown authority"
        ),
        &[],
    );
    let denied = answer(
        422,
        &format!(
            "admission webhook \"{PROBE}\" denied the request: CSINode.storage.k8s.io \"n\" is invalid: status.storageHealth[0].healthConditions[1]: Duplicate value: {{}}"
        ),
        &[],
    );
    let warned = answer(
        200,
        "",
        &[
            "CSINode.storage.k8s.io \"n\" is invalid: status.storageHealth[0].healthConditions[1]: Duplicate value: {}",
        ],
    );
    let policy_warned = answer(
        200,
        "",
        &[
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': status.storageHealth[0].healthConditions[1]: Duplicate value",
        ],
    );
    let repaired = answer(
        200,
        "",
        &[
            "status.healthStatus repaired (1): later duplicate conditions removed: status.healthStatus.healthConditions[1]",
        ],
    );
    // An installed repair entry repaired the write before the probe entry saw it.
    let storage_repaired = answer(
        200,
        "",
        &[
            "status.storageHealth repaired (1): condition dropped: an earlier condition has its status, reason, accessMode and volumeMode: status.storageHealth[0].healthConditions[1]",
        ],
    );
    let dropped = answer(
        200,
        "",
        &["status.healthStatus was dropped: feature gate CSIVolumeHealth is disabled"],
    );
    let other_entry = answer(
        500,
        "Internal error occurred: failed calling webhook \"other.example.com\": timeout",
        &[],
    );
    let cases = [
        (
            &failed,
            Write::CsiNodeIndistinct,
            Some("x509: certificate signed by unknown authority"),
        ),
        (&denied, Write::CsiNodeIndistinct, Some("denied")),
        (&warned, Write::CsiNodeIndistinct, Some("warned")),
        (&policy_warned, Write::CsiNodeIndistinct, None),
        (&repaired, Write::ClaimDuplicate, Some("repaired")),
        (&dropped, Write::ClaimDuplicate, Some("dropped")),
        (&repaired, Write::CsiNodeIndistinct, None),
        (&storage_repaired, Write::CsiNodeIndistinct, None),
        (&other_entry, Write::ClaimDuplicate, None),
    ];
    for (answer, write, expected) in cases {
        let called = shown(answer, PROBE, write);
        let kind = called.as_ref().map(|c| match c {
            Called::Failed(reason) => {
                assert!(
                    reason.starts_with("failed to call webhook: Post"),
                    "{reason}"
                );
                "x509: certificate signed by unknown authority"
            }
            Called::Answered(Shown::Denied(_)) => "denied",
            Called::Answered(Shown::Warned(_)) => "warned",
            Called::Answered(Shown::Repaired(_)) => "repaired",
            Called::Answered(Shown::Dropped(_)) => "dropped",
            Called::Silent | Called::Unshown(_) => "other",
        });
        assert_eq!(kind, expected, "{answer:?}");
    }
}

#[test]
fn what_an_answer_shows_of_the_server_is_recorded() {
    let mut seen = Seen::default();
    Called::Answered(Shown::Repaired(String::new())).record(true, &mut seen);
    Called::Answered(Shown::Denied(String::new())).record(false, &mut seen);
    assert_eq!(
        seen,
        Seen {
            repair: Some(true),
            gate: None,
            enforcement: Some("deny".to_owned())
        }
    );
    let mut seen = Seen::default();
    Called::Silent.record(true, &mut seen);
    Called::Answered(Shown::Warned(String::new())).record(false, &mut seen);
    assert_eq!(seen.repair, Some(false));
    assert_eq!(seen.enforcement.as_deref(), Some("warn"));
    // A validating entry answering nothing visible says nothing of enforcement (dryrun, or
    // nothing to refuse).
    let mut seen = Seen::default();
    Called::Silent.record(false, &mut seen);
    assert_eq!(seen, Seen::default());
}

fn binding(policy: &str, name: &str, actions: &[&str]) -> Binding {
    Binding {
        kind: "ValidatingAdmissionPolicyBinding",
        name: name.to_owned(),
        policy: policy.to_owned(),
        actions: actions.iter().map(|a| (*a).to_owned()).collect(),
    }
}

#[test]
fn a_binding_is_shown_by_its_policys_answer() {
    let deny = binding(
        IDENTITY_POLICY,
        "volume-health-storage-condition-identity-deny",
        &["Deny"],
    );
    let warn = binding(
        IDENTITY_POLICY,
        "volume-health-storage-condition-identity-warn",
        &["Warn"],
    );
    let audit = binding(
        IDENTITY_POLICY,
        "volume-health-storage-condition-identity-audit",
        &["Audit"],
    );
    let writers = binding(
        WRITERS_POLICY,
        "volume-health-pvc-health-writers-deny",
        &["Deny"],
    );
    let accepted = answer(200, "", &[]);

    let denied = answer(
        422,
        "csinodes.storage.k8s.io \"n\" is forbidden: ValidatingAdmissionPolicy \
         'volume-health-storage-condition-identity' with binding \
         'volume-health-storage-condition-identity-deny' denied request: CSINode...",
        &[],
    );
    assert_eq!(
        check_binding(&deny, &denied, &accepted).outcome,
        Outcome::Answered
    );
    let warned = answer(
        200,
        "",
        &[
            "Validation failed for ValidatingAdmissionPolicy 'volume-health-storage-condition-identity' \
           with binding 'volume-health-storage-condition-identity-warn': CSINode...",
        ],
    );
    assert_eq!(
        check_binding(&warn, &warned, &accepted).outcome,
        Outcome::Answered
    );
    assert_eq!(
        check_binding(&audit, &accepted, &accepted).outcome,
        Outcome::Unshown
    );
    assert_eq!(
        check_binding(&deny, &accepted, &accepted).outcome,
        Outcome::Unshown
    );

    // The writer list's parameters missing: every claim status write is refused.
    let no_params = answer(
        403,
        "persistentvolumeclaims \"n\" is forbidden: ValidatingAdmissionPolicy \
         'volume-health-pvc-health-writers' with binding 'volume-health-pvc-health-writers-deny' \
         denied request: failed to configure binding: no params found for policy binding with \
         `Deny` parameterNotFoundAction",
        &[],
    );
    let check = check_binding(&writers, &accepted, &no_params);
    assert_eq!(check.outcome, Outcome::Failed, "{check:?}");
    let refused = answer(
        403,
        "persistentvolumeclaims \"n\" is forbidden: ValidatingAdmissionPolicy \
         'volume-health-pvc-health-writers' with binding 'volume-health-pvc-health-writers-deny' \
         denied request: persistentvolumeclaims \"n\" is forbidden: user \"admin\" is not allowed \
         to update status.healthStatus",
        &[],
    );
    assert_eq!(
        check_binding(&writers, &accepted, &refused).outcome,
        Outcome::Answered
    );
}

#[test]
fn the_mode_names_what_is_installed() {
    let entry = WebhookEntry {
        kind: "ValidatingWebhookConfiguration",
        name: "csinode.validate.volume-health.github.io".to_owned(),
        client_config: json!({"url": "https://127.0.0.1/validate"}),
        timeout_seconds: 3,
    };
    let policy = binding(IDENTITY_POLICY, "b", &["Deny"]);
    let cases = [
        (vec![], vec![], "none"),
        (vec![entry.clone()], vec![], "webhooks"),
        (vec![], vec![policy.clone()], "native"),
        (vec![entry], vec![policy], "webhooks+native"),
    ];
    for (webhooks, bindings, expected) in cases {
        assert_eq!(mode(&Installed { webhooks, bindings }, &[]), expected);
    }
    let static_answer = answer(
        422,
        "csinodes.storage.k8s.io \"n\" is forbidden: ValidatingAdmissionPolicy \
         'volume-health-storage-condition-identity.static.k8s.io' with binding \
         'volume-health-storage-condition-identity-deny.static.k8s.io' denied request: ...",
        &[],
    );
    let warned_by_api_binding = answer(
        200,
        "",
        &[
            "Validation failed for ValidatingAdmissionPolicy 'volume-health-pvc-health-writers' \
           with binding 'volume-health-pvc-health-writers-warn': ...",
        ],
    );
    let found = static_bindings(&[&static_answer, &warned_by_api_binding, &static_answer]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].name,
        "volume-health-storage-condition-identity-deny.static.k8s.io"
    );
    assert_eq!(
        mode(&Installed::default(), &found),
        "static",
        "only static policies answered"
    );
}

/// A repair binding answered when what was stored of its write holds one of the pair; the
/// pods' binding reads the claim's write.
#[test]
fn a_repair_binding_shows_in_what_is_stored() {
    let stored = |body: Value| Answer {
        code: 200,
        warnings: Vec::new(),
        body,
    };
    let condition = json!({"status": "Degraded", "reason": "VolumeHealthVerify"});
    let claim_repaired =
        stored(json!({"status": {"healthStatus": {"healthConditions": [condition.clone()]}}}));
    let claim_as_sent = stored(
        json!({"status": {"healthStatus": {"healthConditions": [condition.clone(), condition.clone()]}}}),
    );
    let node_repaired = stored(
        json!({"status": {"storageHealth": [{"name": "d", "healthConditions": [condition]}]}}),
    );
    let refused = answer(
        422,
        "PersistentVolumeClaim \"n\" is invalid: Duplicate value",
        &[],
    );
    for resource in HealthResource::ALL {
        let name = volume_health_policies::repair_name(resource);
        assert_eq!(repaired_resource(&name), Some(resource));
        let binding = Binding {
            kind: "MutatingAdmissionPolicyBinding",
            name: name.clone(),
            policy: name,
            actions: Vec::new(),
        };
        let (repaired, as_sent) = match resource {
            HealthResource::CsiNodes => (&node_repaired, &claim_repaired),
            _ => (&claim_repaired, &node_repaired),
        };
        let (claim, csinode) = match resource {
            HealthResource::CsiNodes => (as_sent, repaired),
            _ => (repaired, as_sent),
        };
        let check = check_repair_binding(&binding, resource, claim, csinode);
        assert_eq!(check.outcome, Outcome::Answered, "{check:?}");
        let check = check_repair_binding(&binding, resource, &claim_as_sent, &refused);
        assert_eq!(check.outcome, Outcome::Unshown, "{check:?}");
        let check = check_repair_binding(&binding, resource, &refused, &claim_as_sent);
        assert_eq!(check.outcome, Outcome::Unshown, "{check:?}");
    }
    assert_eq!(repaired_resource("volume-health-drop-pods"), None);
}

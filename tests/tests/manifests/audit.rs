//! The audit's components: the CronJob runs the webhook's image with flags the binary takes,
//! restricted, with the least RBAC; the vendored OpenReports CRDs hold every member the audit
//! writes.

use clap::Parser;
use volume_health_cluster::audit::report::{
    GROUP, ObjectReference, Report, ReportResult, SOURCE, Timestamp, VERSION,
};
use volume_health_webhooks::config::{Cli, Command};

use super::*;

/// Renders `overlay` with both audit components.
fn with_audit(overlay: &str) -> Vec<Value> {
    render_with_components(overlay, AUDIT_COMPONENTS)
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let all: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(all.len(), 1, "one {kind}");
    all[0]
}

#[test]
fn the_audit_fits_every_overlay_and_runs_the_webhooks_image() {
    for overlay in INSTALLABLE {
        let objects = with_audit(overlay);
        let alone = rendering(overlay);
        assert_eq!(
            objects.len(),
            alone.objects.len() + 6,
            "{overlay}: a ServiceAccount, a ClusterRole and its binding, a CronJob and two CRDs"
        );
        let cronjob = find(&objects, "CronJob");
        assert_eq!(cronjob["metadata"]["namespace"], NAMESPACE);
        let pod = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        let container = &array_at(pod, "/containers")[0];
        assert_eq!(
            container["image"],
            webhook_container(alone)["image"],
            "{overlay}: the audit runs the webhook's image"
        );
        let argv: Vec<String> = strings_at(container, "/command")
            .into_iter()
            .chain(strings_at(container, "/args"))
            .collect();
        let cli = Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{overlay}: the binary refuses {argv:?}: {e}"));
        assert!(matches!(cli.command, Command::Audit(_)), "{argv:?}");

        // One run at a time; findings fail the Job at once, errors are retried.
        let spec = &cronjob["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Forbid");
        let job = &spec["jobTemplate"]["spec"];
        let rules = array_at(job, "/podFailurePolicy/rules");
        let fail = rules
            .iter()
            .find(|r| r["action"] == "FailJob")
            .expect("a FailJob rule");
        assert_eq!(fail["onExitCodes"]["containerName"], container["name"]);
        assert_eq!(fail["onExitCodes"]["values"], json!([1]));
        assert_eq!(pod["restartPolicy"], "Never", "podFailurePolicy needs it");

        // Restricted, as the webhook's pods, but with its token: it calls the apiserver.
        let pod_context = &pod["securityContext"];
        assert_eq!(pod_context["runAsNonRoot"], true);
        assert_ne!(pod_context["runAsUser"], 0);
        assert_eq!(pod_context["seccompProfile"]["type"], "RuntimeDefault");
        let context = &container["securityContext"];
        assert_eq!(
            context,
            &webhook_container(alone)["securityContext"],
            "{overlay}: the container runs as the webhook's does"
        );
        let resources = &container["resources"];
        assert!(resources["requests"]["cpu"].is_string());
        assert!(resources["limits"]["memory"].is_string());
        assert_eq!(pod["automountServiceAccountToken"], true);
        let account_name = str_at(pod, "/serviceAccountName");
        let account = objects
            .iter()
            .find(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == account_name)
            .expect("the audit's ServiceAccount");
        assert_eq!(
            account["automountServiceAccountToken"], false,
            "only the audit's pod spec mounts the token"
        );

        // The binding gives the role to that account.
        let binding = find(&objects, "ClusterRoleBinding");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": account_name, "namespace": NAMESPACE}])
        );
        let role = find(&objects, "ClusterRole");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    }
}

/// Read only on what it checks; writes only its reports; nothing on Secrets or anything else.
#[test]
fn the_audit_may_read_what_it_checks_and_write_only_its_reports() {
    let objects = with_audit("overlays/cert-manager");
    let role = find(&objects, "ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in array_at(role, "/rules") {
        assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
        for group in strings_at(rule, "/apiGroups") {
            for resource in strings_at(rule, "/resources") {
                for verb in strings_at(rule, "/verbs") {
                    granted.insert(format!("{group}/{resource}/{verb}"));
                }
            }
        }
    }
    let mut expected = BTreeSet::new();
    for resource in [
        "/pods",
        "/persistentvolumeclaims",
        "storage.k8s.io/csinodes",
    ] {
        for verb in ["get", "list"] {
            expected.insert(format!("{resource}/{verb}"));
        }
    }
    for resource in ["reports", "clusterreports"] {
        for verb in ["create", "update", "patch", "delete", "list"] {
            expected.insert(format!("{GROUP}/{resource}/{verb}"));
        }
    }
    assert_eq!(granted, expected);
}

/// The vendored CRDs serve the version the audit writes, and their schema holds every member
/// of the reports it builds, so that the apiserver prunes nothing.
#[test]
fn the_vendored_schema_holds_every_member_the_audit_writes() {
    let objects = with_audit("overlays/cert-manager");
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    let mut namespaced = Report::new(Some("shop".to_owned()));
    namespaced.results.push(ReportResult {
        source: SOURCE,
        policy: "persistentvolumeclaims.status.healthStatus",
        rule: Some("status.healthStatus.healthConditions[1]".to_owned()),
        category: "volume health",
        result: "fail",
        timestamp: Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        },
        message: "status.healthStatus.healthConditions[1]: Duplicate value: {}".to_owned(),
        resources: [ObjectReference {
            api_version: "v1",
            kind: "PersistentVolumeClaim",
            namespace: Some("shop".to_owned()),
            name: "data".to_owned(),
            uid: Some("0b0e3f8e-8f1c-4d1e-9a57-6d1f5e1c2a3b".to_owned()),
        }],
        properties: [("type", "FieldValueDuplicate")].into(),
    });
    namespaced.found = 2;
    let cluster = Report::new(None);
    for (report, plural, scope) in [
        (&namespaced, "reports", "Namespaced"),
        (&cluster, "clusterreports", "Cluster"),
    ] {
        let object = report.object(1000);
        let crd = crds
            .iter()
            .find(|c| c["metadata"]["name"] == format!("{plural}.{GROUP}"))
            .unwrap_or_else(|| panic!("the CRD of {plural}"));
        assert_eq!(crd["spec"]["group"], GROUP);
        assert_eq!(crd["spec"]["scope"], scope);
        assert_eq!(crd["spec"]["names"]["kind"], object["kind"]);
        let version = array_at(crd, "/spec/versions")
            .iter()
            .find(|v| v["name"] == VERSION)
            .expect("the version the audit writes");
        assert_eq!(version["served"], true);
        let schema = &version["schema"]["openAPIV3Schema"];
        let mut body = object.clone();
        body.as_object_mut().expect("an object").remove("metadata");
        within(schema, &body, "");
    }
}

/// `value` is what `schema` (a structural schema) allows: every member declared, of its type,
/// within its enum, required members present.
fn within(schema: &Value, value: &Value, path: &str) {
    let declared = schema["type"].as_str().unwrap_or("object");
    let fits = match declared {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        other => panic!("{path}: type {other} not handled"),
    };
    assert!(fits, "{path}: {value} is not {declared}");
    if let Some(allowed) = schema["enum"].as_array() {
        assert!(
            allowed.contains(value),
            "{path}: {value} not in {allowed:?}"
        );
    }
    if let Some(members) = value.as_object() {
        for required in strings_at(schema, "/required") {
            assert!(
                members.contains_key(&required),
                "{path}: {required} is required"
            );
        }
        for (name, member) in members {
            let at = format!("{path}/{name}");
            match (&schema["properties"][name], &schema["additionalProperties"]) {
                (Value::Null, Value::Null) => panic!("{at}: not in the schema, would be pruned"),
                (Value::Null, additional) => within(additional, member, &at),
                (declared, _) => within(declared, member, &at),
            }
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            within(&schema["items"], item, &format!("{path}/{i}"));
        }
    }
}

/// An operator's `images:` entry moves the audit's image with the webhook's.
#[test]
fn the_images_entry_moves_the_audits_image_too() {
    let objects = render_operator_overlay(
        "resources:
  - ../../overlays/cert-manager
components:
  - ../../components/audit
images:
  - name: ghcr.io/volume-health/volume-health-webhook
    newName: registry.example.com/storage/volume-health-webhook
    newTag: v9.9.9
",
    );
    let cronjob = find(&objects, "CronJob");
    assert_eq!(
        cronjob
            .pointer("/spec/jobTemplate/spec/template/spec/containers/0/image")
            .expect("the image"),
        "registry.example.com/storage/volume-health-webhook:v9.9.9"
    );
}

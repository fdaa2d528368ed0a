//! A real kube-apiserver v1.37.2 and etcd on loopback, with `CSIVolumeHealth` on and no webhook
//! installed: the admission fixtures and a table of differential requests are replayed as real
//! writes, and SubjectAccessReviews are posted, and each in-tree answer is compared with the
//! library's (validation and authorizer) for the same request. Slow, so ignored: `make e2e`
//! builds the binaries and runs it with `--ignored`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod e2e_support;

use hyper::Method;
use serde_json::{Value, json};
use volume_health_authz::{AuthzPolicy, Decision};
use volume_health_validation::HealthResource;
use volume_health_validation::rules::ConditionIdentity;

use e2e_support::{Answer, Replay, table};
use volume_health_tests::cluster::{Cluster, ClusterOptions, bin_dir};

/// The project's own rules: where its answer differs from in-tree's on purpose. Every
/// difference the suite finds must be one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnRule {
    /// Two conditions of one driver with the same status, reason, accessMode and volumeMode:
    /// the project refuses them (the kubelet could not tell them apart), in-tree accepts them.
    StorageConditionIdentity,
    /// A node writing what it has no relation to (another node's CSINode, a claim's status):
    /// in a real apiserver the Node authorizer answers first, with its own text, before the
    /// NodeRestriction-style check the project answers with.
    AuthorizerFirst,
    /// A node changing a claim's `status.healthStatus`: refused with the project's own text.
    ClaimHealthByNode,
}

impl OwnRule {
    /// The rule that explains why `library` differs from `apiserver`, if any.
    fn explaining(
        replay: &Replay,
        apiserver: &Answer,
        library: &Answer,
        in_tree: &Answer,
    ) -> Option<Self> {
        if replay.resource == HealthResource::CsiNodes && library != in_tree && in_tree == apiserver
        {
            return Some(OwnRule::StorageConditionIdentity);
        }
        if !replay.is_node() || library.code() != Some(403) {
            return None;
        }
        if replay.resource == HealthResource::PersistentVolumeClaims
            && library
                .message()
                .ends_with("is not allowed to update status.healthStatus")
        {
            return Some(OwnRule::ClaimHealthByNode);
        }
        // The authorizer's denial names the user; NodeRestriction's does not.
        let authorizer = format!("is forbidden: User \"{}\" cannot ", replay.username());
        (apiserver.code() == Some(403) && apiserver.message().contains(&authorizer))
            .then_some(OwnRule::AuthorizerFirst)
    }
}

fn fixture_cases() -> Vec<Value> {
    [
        include_str!("../fixtures/admission/cases.json"),
        include_str!("../fixtures/admission/upstream-v1.37.2.json"),
    ]
    .iter()
    .flat_map(|text| serde_json::from_str::<Vec<Value>>(text).unwrap())
    .collect()
}

/// The replayable admission requests: the fixtures' `validate` cases with the gate on (the
/// apiserver runs with it on), then the differential table.
fn admission_requests() -> Vec<Replay> {
    let fixtures = fixture_cases()
        .into_iter()
        .filter(|case| case["endpoint"] == "validate" && case["profile"] == "gate-on")
        .filter_map(|case| Replay::from_case(&case));
    fixtures.chain(table::requests().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn in_tree_answers_match_the_library() {
    // Bounded: a hung step fails the suite instead of holding CI.
    tokio::time::timeout(std::time::Duration::from_secs(900), in_tree())
        .await
        .expect("the suite did not finish within 15 minutes");
}

async fn in_tree() {
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir().unwrap(), options).await.unwrap();
    eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());

    let requests = admission_requests();
    let (mut agree, mut own, mut differ, mut setup_failed) = (0, 0, Vec::new(), Vec::new());
    for (index, replay) in requests.iter().enumerate() {
        let library = replay.library(ConditionIdentity::Unique).unwrap();
        let in_tree = replay.library(ConditionIdentity::InTree).unwrap();
        let apiserver = match replay.apiserver(&cluster, index).await {
            Ok(answer) => answer,
            Err(err) => {
                eprintln!("SETUP {}: {err:#}", replay.id);
                setup_failed.push(replay.id.clone());
                continue;
            }
        };
        if apiserver == library {
            agree += 1;
            eprintln!("ok   {}", replay.id);
        } else if let Some(rule) = OwnRule::explaining(replay, &apiserver, &library, &in_tree) {
            own += 1;
            eprintln!("own  {} ({rule:?})", replay.id);
        } else {
            eprintln!(
                "DIFF {}\n     apiserver {apiserver:?}\n     library   {library:?}",
                replay.id
            );
            differ.push(replay.id.clone());
        }
    }

    let (sar_agree, sar_differ) = subject_access_reviews(&cluster).await;
    let compared = agree + own + differ.len() + sar_agree + sar_differ.len();
    eprintln!(
        "{compared} requests compared ({} writes, {} SubjectAccessReviews): {} agree, {own} differ by the project's own rules, {} differ",
        agree + own + differ.len(),
        sar_agree + sar_differ.len(),
        agree + sar_agree,
        differ.len() + sar_differ.len(),
    );
    assert!(setup_failed.is_empty(), "not replayed: {setup_failed:?}");
    assert!(differ.is_empty(), "in-tree answers differ: {differ:?}");
    assert!(
        sar_differ.is_empty(),
        "authorizer answers differ: {sar_differ:?}"
    );
    assert!(
        agree > requests.len() / 2,
        "most writes are answered as in-tree"
    );
}

/// The authorization fixtures (gate on, no deny on mismatch: the Node authorizer's own
/// behaviour) and a table of requests, posted as SubjectAccessReviews; the apiserver prefixes
/// the Node authorizer's reason with `node: `, and gives none when no authorizer has one.
async fn subject_access_reviews(cluster: &Cluster) -> (usize, Vec<String>) {
    let mut reviews: Vec<(String, Value)> = fixture_cases()
        .into_iter()
        .filter(|case| case["endpoint"] == "authorize" && case["profile"] == "gate-on")
        .map(|case| {
            (
                case["id"].as_str().unwrap().to_owned(),
                case["body"].clone(),
            )
        })
        .collect();
    for (user, verb, subresource, name) in [
        ("system:node:node1", "list", "status", ""),
        ("system:node:node1", "watch", "foo", "node1"),
        ("system:node:node1", "get", "status", "node2"),
        ("system:node:node1", "get", "status", "node1"),
        ("system:node:node1", "update", "status", "node1"),
        ("system:node:node1", "patch", "status", "node2"),
        ("system:node:node1", "create", "status", "node1"),
        ("system:node:node1", "delete", "status", "node1"),
        ("system:node:node1", "escalate", "status", "node1"),
        ("system:node:node1", "list", "", ""),
        ("system:node:node1", "create", "", "node2"),
        ("system:node:node1", "update", "", "node2"),
        ("system:node:node1", "deletecollection", "foo", ""),
        ("system:node:", "get", "", "x"),
        ("system:node:", "update", "status", "x"),
        ("alice", "update", "status", "node1"),
    ] {
        let groups = if user == "alice" {
            json!([])
        } else {
            json!(["system:nodes"])
        };
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {"verb": verb,
                "group": "storage.k8s.io", "version": "v1", "resource": "csinodes",
                "subresource": subresource, "name": name}}});
        reviews.push((
            format!("sar {user} {verb} csinodes/{subresource} {name}"),
            body,
        ));
    }
    let policy = AuthzPolicy {
        gate_enabled: true,
        deny_on_mismatch: false,
    };
    let (mut agree, mut differ) = (0, Vec::new());
    for (id, body) in reviews {
        // The apiserver serves v1 only; v1beta1 bodies are the same review.
        let mut v1 = body.clone();
        v1["apiVersion"] = json!("authorization.k8s.io/v1");
        if let Some(groups) = v1["spec"].as_object_mut().unwrap().remove("group") {
            v1["spec"]["groups"] = groups;
        }
        let (code, answer) = cluster
            .api
            .send(
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                Some(&v1),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, 201, "{id}: {answer}");
        let apiserver = &answer["status"];
        let decision = volume_health_authz::review(body.to_string().as_bytes(), &policy)
            .unwrap()
            .decision;
        let reason = Some(decision.reason())
            .filter(|r| !r.is_empty())
            .map(|r| format!("node: {r}"));
        let library = json!({
            "allowed": decision == Decision::Allow,
            "denied": matches!(decision, Decision::Deny(_)),
            "reason": reason,
        });
        let got = json!({
            "allowed": apiserver["allowed"].as_bool().unwrap_or(false),
            "denied": apiserver["denied"].as_bool().unwrap_or(false),
            "reason": apiserver["reason"],
        });
        // Outside the table (no opinion, no reason) the later authorizers answer
        // (system:masters, RBAC): then the Node authorizer must have had nothing to say either.
        let outside = decision == Decision::NoOpinion("".into());
        let same = if outside {
            !apiserver["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("node: ")
        } else {
            got == library
        };
        if same {
            agree += 1;
            eprintln!("ok   {id}");
        } else {
            eprintln!("DIFF {id}\n     apiserver {got}\n     library   {library}");
            differ.push(id);
        }
    }
    (agree, differ)
}

//! A real kube-apiserver v1.37.2 and etcd on loopback, with `CSIVolumeHealth` on and no webhook
//! installed: the admission fixtures, the differential table and seeded generated writes are
//! replayed as real writes, and SubjectAccessReviews are posted, and each in-tree answer is
//! compared with the library's (validation and authorizer) for the same request. Each phase is
//! reported on its own. Slow, so ignored: `make e2e` builds the binaries and runs it with
//! `--ignored`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod e2e_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use volume_health_authz::{AuthzPolicy, Decision};
use volume_health_validation::HealthResource;
use volume_health_validation::rules::ConditionIdentity;

use e2e_support::{Answer, Replay, generate, table};
use volume_health_tests::cluster::{Cluster, ClusterOptions, bin_dir};
use volume_health_tests::phases::Phases;
use volume_health_tests::seeded;

/// The project's own rules: where its answer differs from in-tree's on purpose. Every
/// difference the suite finds must be one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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

/// How many generated writes a run replays.
const GENERATED: usize = 2_000;
/// How many generated writes are in flight at once: the apiserver answers them side by side,
/// and each waits on its own round trips.
const IN_FLIGHT: usize = 8;

/// How many failed requests are printed whole; the others by their id.
const SHOWN: usize = 5;

/// The namespaces of generated writes are numbered after the recorded ones'.
const GENERATED_NAMESPACES: usize = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn in_tree_answers_match_the_library() {
    // Bounded: a hung step fails the suite instead of holding CI.
    tokio::time::timeout(Duration::from_secs(900), in_tree())
        .await
        .expect("the suite did not finish within 15 minutes");
}

async fn in_tree() {
    let mut phases = Phases::new("e2e", Duration::from_secs(300));
    let start = async {
        let options = ClusterOptions {
            in_tree_gate: true,
            authorizer: None,
        };
        let cluster = Cluster::start(&bin_dir()?, options).await?;
        eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());
        anyhow::Ok(Arc::new(cluster))
    };
    let Some(cluster) = phases.phase("control plane").run(start).await else {
        return phases.finish();
    };
    phases
        .phase("recorded writes")
        .run(recorded_writes(cluster.clone()))
        .await;
    phases
        .phase("SubjectAccessReviews")
        .run(subject_access_reviews(cluster.clone()))
        .await;
    phases
        .phase("generated writes")
        .run(generated_writes(cluster))
        .await;
    phases.finish();
}

/// How one write's answers compare.
enum Outcome {
    Agree,
    Own(OwnRule),
    /// The library's answer, which differs.
    Differ(Answer),
}

fn compare(replay: &Replay, apiserver: &Answer) -> Outcome {
    let library = replay.library(ConditionIdentity::Unique).unwrap();
    let in_tree = replay.library(ConditionIdentity::InTree).unwrap();
    if *apiserver == library {
        Outcome::Agree
    } else if let Some(rule) = OwnRule::explaining(replay, apiserver, &library, &in_tree) {
        Outcome::Own(rule)
    } else {
        Outcome::Differ(library)
    }
}

/// The outcomes of a phase's writes.
#[derive(Default)]
struct Tally {
    agree: usize,
    own: BTreeMap<OwnRule, usize>,
    differ: Vec<String>,
    setup_failed: Vec<String>,
}

impl Tally {
    fn add(&mut self, id: &str, outcome: &Outcome) {
        match outcome {
            Outcome::Agree => self.agree += 1,
            Outcome::Own(rule) => *self.own.entry(*rule).or_default() += 1,
            Outcome::Differ(_) => self.differ.push(id.to_owned()),
        }
    }

    fn compared(&self) -> usize {
        self.agree + self.own.values().sum::<usize>() + self.differ.len()
    }

    fn summary(&self) -> String {
        let own: Vec<String> = self
            .own
            .iter()
            .map(|(rule, n)| format!("{n} {rule:?}"))
            .collect();
        format!(
            "{} compared: {} agree, {} own rules ({}), {} differ, {} not replayed",
            self.compared(),
            self.agree,
            self.own.values().sum::<usize>(),
            own.join(", "),
            self.differ.len(),
            self.setup_failed.len(),
        )
    }

    fn assert_clean(&self, phase: &str) {
        assert!(
            self.setup_failed.is_empty(),
            "{phase}: not replayed: {:?}",
            self.setup_failed
        );
        assert!(
            self.differ.is_empty(),
            "{phase}: in-tree answers differ: {:?}",
            self.differ
        );
    }
}

/// The admission fixtures and the differential table, one write after another.
async fn recorded_writes(cluster: Arc<Cluster>) {
    let requests = admission_requests();
    let mut tally = Tally::default();
    for (index, replay) in requests.iter().enumerate() {
        let apiserver = match replay.apiserver(&cluster, index).await {
            Ok(answer) => answer,
            Err(err) => {
                eprintln!("SETUP {}: {err:#}", replay.id);
                tally.setup_failed.push(replay.id.clone());
                continue;
            }
        };
        let outcome = compare(replay, &apiserver);
        match &outcome {
            Outcome::Agree => eprintln!("ok   {}", replay.id),
            Outcome::Own(rule) => eprintln!("own  {} ({rule:?})", replay.id),
            Outcome::Differ(library) => eprintln!(
                "DIFF {}\n     apiserver {apiserver:?}\n     library   {library:?}",
                replay.id
            ),
        }
        tally.add(&replay.id, &outcome);
    }
    eprintln!("recorded writes: {}", tally.summary());
    tally.assert_clean("recorded writes");
    assert!(
        tally.agree > requests.len() / 2,
        "most writes are answered as in-tree"
    );
}

/// `text` cut to a line's worth, for the long values of generated writes.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(400) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// One generated write of the seed, `VOLUME_HEALTH_E2E_WRITE=gen-<index>`, to replay it alone.
fn only_write() -> Option<usize> {
    let id = std::env::var("VOLUME_HEALTH_E2E_WRITE").ok()?;
    let index = id.trim_start_matches("gen-").parse().ok();
    assert!(
        index.is_some_and(|i| i < GENERATED),
        "VOLUME_HEALTH_E2E_WRITE={id}: not a generated write's id (gen-0 to gen-{})",
        GENERATED - 1
    );
    index
}

/// Seeded generated writes, several in flight at once: every answer is the library's, or
/// differs by an own rule. A difference prints the seed and the request, to be replayed.
async fn generated_writes(cluster: Arc<Cluster>) {
    let seed = seeded::seed();
    eprintln!("generated writes: seed {seed} (VOLUME_HEALTH_E2E_SEED={seed} replays them)");
    let only = only_write();
    let writes: Vec<(usize, generate::Generated)> = match only {
        Some(index) => vec![(index, generate::write(seed, index))],
        None => generate::writes(seed, GENERATED)
            .into_iter()
            .enumerate()
            .collect(),
    };
    let mut coverage: BTreeMap<&str, usize> = BTreeMap::new();
    for tag in writes.iter().flat_map(|(_, w)| &w.tags) {
        *coverage.entry(tag).or_default() += 1;
    }

    let stored_before = e2e_support::STORED_IN_ETCD.load(Ordering::Relaxed);
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = JoinSet::new();
    for (index, write) in writes {
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        let cluster = cluster.clone();
        tasks.spawn(async move {
            let answer = write
                .replay
                .apiserver(&cluster, GENERATED_NAMESPACES + index)
                .await;
            drop(permit);
            (index, write.replay, answer)
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = tasks.join_next().await {
        answers.push(done.unwrap());
    }
    answers.sort_by_key(|(index, _, _)| *index);

    let mut tally = Tally::default();
    let (mut accepted, mut refused) = (0, 0);
    let mut codes: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, replay, answer) in &answers {
        let apiserver = match answer {
            Ok(answer) => answer,
            Err(err) => {
                eprintln!(
                    "SETUP seed {seed} {}: {}",
                    replay.id,
                    shortened(&format!("{err:#}"))
                );
                if tally.setup_failed.len() < SHOWN {
                    eprintln!("     request {}", replay.describe());
                }
                tally.setup_failed.push(replay.id.clone());
                continue;
            }
        };
        match apiserver.code() {
            None => accepted += 1,
            Some(code) => {
                refused += 1;
                *codes.entry(code).or_default() += 1;
            }
        }
        let outcome = compare(replay, apiserver);
        if let Outcome::Differ(library) = &outcome {
            eprintln!(
                "DIFF seed {seed} {id} (VOLUME_HEALTH_E2E_SEED={seed} VOLUME_HEALTH_E2E_WRITE={id} \
                 replays it alone)\n     apiserver {apiserver:?}\n     library   {library:?}",
                id = replay.id,
            );
            if tally.differ.len() < SHOWN {
                eprintln!("     request   {}", replay.describe());
            }
        } else if only.is_some() {
            eprintln!(
                "{} seed {seed}\n     request   {}\n     apiserver {apiserver:?}",
                replay.id,
                replay.describe()
            );
        }
        tally.add(&replay.id, &outcome);
    }
    if only.is_some() {
        eprintln!("generated writes: seed {seed}: {}", tally.summary());
        tally.assert_clean(&format!("generated write of seed {seed}"));
        return;
    }

    eprintln!("generated writes: coverage of {GENERATED} writes:");
    for category in generate::CATEGORIES {
        eprintln!(
            "     {:>5} {category}",
            coverage.get(category).copied().unwrap_or(0)
        );
    }
    eprintln!(
        "generated writes: the apiserver accepted {accepted} and refused {refused} (by code: {codes:?}); {} old objects were written into etcd",
        e2e_support::STORED_IN_ETCD.load(Ordering::Relaxed) - stored_before
    );
    eprintln!("generated writes: seed {seed}: {}", tally.summary());
    tally.assert_clean(&format!("generated writes of seed {seed}"));
    let missing: Vec<&&str> = generate::CATEGORIES
        .iter()
        .filter(|c| !coverage.contains_key(**c))
        .collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: never generated: {missing:?}"
    );
    let stored = e2e_support::STORED_IN_ETCD.load(Ordering::Relaxed) - stored_before;
    assert!(
        stored >= GENERATED / 20,
        "seed {seed}: only {stored} old objects were stored invalid, through etcd"
    );
    // Neither side of the rules may be starved.
    let replayed = accepted + refused;
    assert!(
        accepted * 4 >= replayed && refused * 4 >= replayed,
        "seed {seed}: {accepted} accepted and {refused} refused: each should be a quarter at least"
    );
}

/// The authorization fixtures (gate on, no deny on mismatch: the Node authorizer's own
/// behaviour) and a table of requests, posted as SubjectAccessReviews; the apiserver prefixes
/// the Node authorizer's reason with `node: `, and gives none when no authorizer has one.
async fn subject_access_reviews(cluster: Arc<Cluster>) {
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
    eprintln!(
        "SubjectAccessReviews: {} compared: {agree} agree, {} differ",
        agree + differ.len(),
        differ.len()
    );
    assert!(differ.is_empty(), "authorizer answers differ: {differ:?}");
}

/// The generator without a cluster: one seed gives the same writes, another seed other ones,
/// and every run reaches every category with both answers well represented.
#[test]
fn generated_writes_are_seeded_and_cover_every_category() {
    let describe = |seed| -> Vec<Value> {
        generate::writes(seed, GENERATED)
            .iter()
            .map(|w| w.replay.describe())
            .collect()
    };
    let first = describe(7);
    assert_eq!(first, describe(7), "a seed replays its writes");
    assert_ne!(first, describe(8), "another seed writes other requests");
    for seed in [7, 8, 9] {
        let writes = generate::writes(seed, GENERATED);
        let tags: std::collections::BTreeSet<&str> =
            writes.iter().flat_map(|w| w.tags.iter().copied()).collect();
        for category in generate::CATEGORIES {
            assert!(tags.contains(category), "seed {seed}: never {category}");
        }
        let allowed = writes
            .iter()
            .filter(|w| w.replay.library(ConditionIdentity::InTree).unwrap() == Answer::Allowed)
            .count();
        eprintln!("seed {seed}: the library allows {allowed} of {GENERATED}");
        assert!(
            (GENERATED / 4..=GENERATED * 3 / 4).contains(&allowed),
            "seed {seed}: {allowed} of {GENERATED} allowed"
        );
    }
}

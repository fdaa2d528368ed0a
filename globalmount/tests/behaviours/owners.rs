//! The pods behind a volume found only through its claim: a pod on this node
//! that uses the PV's claim is named once, however often it lists the
//! claim; a pod on another node, or using another claim, is not.

use csi_globalmount::ExtraInputs;
use csi_globalmount::api::ApiDump;

use crate::fixture::{FixtureNode, gm};

#[test]
fn pods_using_the_claim_on_this_node_are_the_volumes_pods() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs("ebs.csi.aws.com", "vol-0claim", Some("pvc-claim"));
    node.mount("259:1", "/", gm(&global));
    let pod = |uid: &str, node_name: &str, claims: &[&str]| {
        let volumes: Vec<String> = claims
            .iter()
            .map(|c| format!(r#"{{"name":"v","persistentVolumeClaim":{{"claimName":"{c}"}}}}"#))
            .collect();
        format!(
            r#"{{"kind":"Pod","metadata":{{"uid":"{uid}","namespace":"shop","name":"pod-{uid}"}},"spec":{{"nodeName":"{node_name}","volumes":[{}]}}}}"#,
            volumes.join(",")
        )
    };
    let dump = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[
          {{"kind":"PersistentVolume","metadata":{{"name":"pvc-claim"}},"spec":{{"csi":{{"driver":"ebs.csi.aws.com","volumeHandle":"vol-0claim"}},"claimRef":{{"namespace":"shop","name":"data"}}}}}},
          {},{},{},{}]}}"#,
        pod("uid-here", crate::fixture::NODE, &["data", "data"]),
        pod("uid-elsewhere", "node-b", &["data"]),
        pod("uid-other-claim", crate::fixture::NODE, &["logs"]),
        pod("uid-here-too", crate::fixture::NODE, &["logs", "data"]),
    );
    let mut api = ApiDump::default();
    api.add(dump.as_bytes()).expect("dump");
    let report = node.diagnose_extra(
        None,
        None,
        &ExtraInputs {
            persistent_volumes: Some(api.persistent_volumes.clone()),
            pods: Some(api.pods.clone()),
            ..ExtraInputs::default()
        },
    );
    let owner = &report.global_volumes[0].owner;
    assert_eq!(owner.claim.as_deref(), Some("shop/data"));
    let named: Vec<(&str, &str)> = owner
        .pods
        .iter()
        .map(|p| (p.uid.as_str(), p.seen_in))
        .collect();
    assert_eq!(named, [("uid-here", "claim"), ("uid-here-too", "claim")]);
}

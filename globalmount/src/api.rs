//! The API objects the doctor cross-checks against, read from
//! `kubectl get ... -o json` output: the Node's `volumesInUse` and
//! `volumesAttached`, and VolumeAttachments.

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

/// Why API JSON could not be used.
#[derive(Debug, Error)]
pub enum ApiError {
    /// Not JSON, or not the expected shape.
    #[error("{what} is not valid")]
    Decode {
        /// Which input.
        what: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A list of nodes where the node to use cannot be told.
    #[error("node JSON holds {count} nodes; pass the node name to choose one")]
    AmbiguousNode {
        /// How many nodes the list holds.
        count: usize,
    },
    /// The requested node is not in the input.
    #[error("node {0:?} is not in the node JSON")]
    NodeNotFound(String),
    /// The object is not a Node or a list of them.
    #[error("expected a Node or a List of Nodes, got kind {0:?}")]
    NotANode(String),
}

/// One entry of `node.status.volumesAttached`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedVolume {
    /// Unique volume name.
    pub name: String,
    /// Device path reported by the attacher.
    #[serde(default)]
    pub device_path: String,
}

/// The parts of a Node the doctor uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    /// `metadata.name`.
    pub name: String,
    /// `status.volumesInUse`; empty when absent.
    pub volumes_in_use: Vec<String>,
    /// `status.volumesAttached`; empty when absent.
    pub volumes_attached: Vec<AttachedVolume>,
    /// `status.nodeInfo.kubeletVersion`, when present.
    pub kubelet_version: Option<String>,
}

impl NodeView {
    /// Whether `unique_name` is in `volumesInUse`, the attach/detach
    /// controller's only guard against detaching a staged volume.
    pub fn in_use(&self, unique_name: &str) -> bool {
        self.volumes_in_use.iter().any(|v| v == unique_name)
    }

    /// The `volumesAttached` entry for `unique_name`.
    pub fn attached(&self, unique_name: &str) -> Option<&AttachedVolume> {
        self.volumes_attached.iter().find(|v| v.name == unique_name)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Metadata {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NodeStatus {
    volumes_in_use: Option<Vec<String>>,
    volumes_attached: Option<Vec<AttachedVolume>>,
    node_info: NodeInfo,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NodeInfo {
    kubelet_version: Option<String>,
}

#[derive(Deserialize)]
struct NodeObject {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    status: NodeStatus,
}

impl From<NodeObject> for NodeView {
    fn from(node: NodeObject) -> Self {
        Self {
            name: node.metadata.name,
            volumes_in_use: node.status.volumes_in_use.unwrap_or_default(),
            volumes_attached: node.status.volumes_attached.unwrap_or_default(),
            kubelet_version: node
                .status
                .node_info
                .kubelet_version
                .filter(|v| !v.is_empty()),
        }
    }
}

fn decode<T: for<'de> Deserialize<'de>>(what: &'static str, value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|source| ApiError::Decode { what, source })
}

fn items_or_single(what: &'static str, json: &[u8]) -> Result<Vec<Value>, ApiError> {
    let value: Value =
        serde_json::from_slice(json).map_err(|source| ApiError::Decode { what, source })?;
    match value {
        Value::Object(mut object) if object.contains_key("items") => match object.remove("items") {
            Some(Value::Array(items)) => Ok(items),
            Some(Value::Null) | None => Ok(Vec::new()),
            Some(other) => decode::<Vec<Value>>(what, other),
        },
        other => Ok(vec![other]),
    }
}

/// Reads `kubectl get node NAME -o json` or `kubectl get nodes -o json`.
/// From a list, the node named `node_name` is taken, or the only one.
pub fn parse_node(json: &[u8], node_name: Option<&str>) -> Result<NodeView, ApiError> {
    let mut nodes = Vec::new();
    for item in items_or_single("node JSON", json)? {
        let node: NodeObject = decode("node JSON", item)?;
        if let Some(kind) = node.kind.as_deref().filter(|k| *k != "Node") {
            return Err(ApiError::NotANode(kind.to_owned()));
        }
        nodes.push(NodeView::from(node));
    }
    match node_name {
        Some(name) => nodes
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| ApiError::NodeNotFound(name.to_owned())),
        None if nodes.len() == 1 => Ok(nodes.remove(0)),
        None => Err(ApiError::AmbiguousNode { count: nodes.len() }),
    }
}

/// The parts of a VolumeAttachment the doctor uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeAttachmentView {
    /// `metadata.name` (`csi-<sha256(handle+driver+node)>`).
    pub name: String,
    /// `spec.nodeName`.
    pub node_name: String,
    /// `spec.attacher` (the driver).
    pub attacher: String,
    /// `spec.source.persistentVolumeName`, when set.
    pub persistent_volume_name: Option<String>,
    /// `status.attached`; false when there is no status yet.
    pub attached: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct VaSource {
    persistent_volume_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct VaSpec {
    node_name: String,
    attacher: String,
    source: VaSource,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VaStatus {
    attached: bool,
}

#[derive(Deserialize)]
struct VaObject {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: VaSpec,
    #[serde(default)]
    status: VaStatus,
}

/// Reads `kubectl get volumeattachments -o json` (or a single VolumeAttachment).
pub fn parse_volume_attachments(json: &[u8]) -> Result<Vec<VolumeAttachmentView>, ApiError> {
    items_or_single("VolumeAttachment JSON", json)?
        .into_iter()
        .map(|item| {
            let va: VaObject = decode("VolumeAttachment JSON", item)?;
            Ok(volume_attachment(va))
        })
        .collect()
}

/// The parts of a PersistentVolume the doctor uses to name a volume's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentVolumeView {
    /// `metadata.name`.
    pub name: String,
    /// `spec.csi.driver`.
    pub driver: String,
    /// `spec.csi.volumeHandle`.
    pub volume_handle: String,
    /// `spec.claimRef` as `namespace/name`, when bound.
    pub claim: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PvCsi {
    driver: String,
    volume_handle: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObjectRef {
    namespace: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PvSpec {
    csi: Option<PvCsi>,
    claim_ref: Option<ObjectRef>,
}

#[derive(Deserialize)]
struct PvObject {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: PvSpec,
}

/// The parts of a Pod the doctor uses to name who used a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// `metadata.uid`: the name of the pod's directory under `pods/`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.nodeName`.
    pub node_name: String,
    /// Claim names of `spec.volumes[].persistentVolumeClaim`.
    pub claims: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PodMetadata {
    uid: String,
    namespace: String,
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodClaimSource {
    claim_name: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodVolume {
    persistent_volume_claim: Option<PodClaimSource>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PodSpec {
    node_name: String,
    volumes: Option<Vec<PodVolume>>,
}

#[derive(Deserialize)]
struct PodObject {
    #[serde(default)]
    metadata: PodMetadata,
    #[serde(default)]
    spec: PodSpec,
}

/// The part of a CSIDriver the doctor uses: whether its volumes are attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriverView {
    /// `metadata.name`: the driver name.
    pub name: String,
    /// `spec.attachRequired`; Kubernetes defaults it to true.
    pub attach_required: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct CsiDriverSpec {
    attach_required: Option<bool>,
}

#[derive(Deserialize)]
struct CsiDriverObject {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: CsiDriverSpec,
}

/// Objects of every kind the doctor reads, from one or more
/// `kubectl get ... -o json` outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiDump {
    /// Nodes.
    pub nodes: Vec<NodeView>,
    /// VolumeAttachments.
    pub volume_attachments: Vec<VolumeAttachmentView>,
    /// PersistentVolumes with a CSI source.
    pub persistent_volumes: Vec<PersistentVolumeView>,
    /// Pods.
    pub pods: Vec<PodView>,
    /// CSIDrivers.
    pub csi_drivers: Vec<CsiDriverView>,
    /// Which kinds appeared at all, so that "no object of this kind" can be
    /// told apart from "this kind was not given".
    pub kinds_seen: Vec<String>,
}

impl ApiDump {
    /// Whether any object (or an empty list) of `kind` was given.
    pub fn has_kind(&self, kind: &str) -> bool {
        self.kinds_seen.iter().any(|k| k == kind)
    }

    /// Adds the objects of `json`: one object, a typed list such as
    /// `PersistentVolumeList`, or the mixed `List` that
    /// `kubectl get node,volumeattachments,pv,pods -o json` prints.
    /// Objects of kinds the doctor does not use are ignored.
    pub fn add(&mut self, json: &[u8]) -> Result<(), ApiError> {
        const WHAT: &str = "API JSON";
        let value: Value = serde_json::from_slice(json)
            .map_err(|source| ApiError::Decode { what: WHAT, source })?;
        // A typed list names its items' kind; a mixed List leaves it to each item.
        let list_kind = value
            .get("kind")
            .and_then(Value::as_str)
            .and_then(|k| k.strip_suffix("List"))
            .filter(|k| !k.is_empty())
            .map(str::to_owned);
        if let Some(kind) = &list_kind {
            self.seen(kind);
        }
        for item in items_or_single(WHAT, json)? {
            let kind = item
                .get("kind")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| list_kind.clone())
                .unwrap_or_default();
            self.seen(&kind);
            match kind.as_str() {
                "Node" => self
                    .nodes
                    .push(NodeView::from(decode::<NodeObject>(WHAT, item)?)),
                "VolumeAttachment" => self
                    .volume_attachments
                    .push(volume_attachment(decode(WHAT, item)?)),
                "PersistentVolume" => {
                    let pv: PvObject = decode(WHAT, item)?;
                    if let Some(csi) = pv.spec.csi {
                        self.persistent_volumes.push(PersistentVolumeView {
                            name: pv.metadata.name,
                            driver: csi.driver,
                            volume_handle: csi.volume_handle,
                            claim: pv
                                .spec
                                .claim_ref
                                .filter(|c| !c.name.is_empty())
                                .map(|c| format!("{}/{}", c.namespace, c.name)),
                        });
                    }
                }
                "Pod" => {
                    let pod: PodObject = decode(WHAT, item)?;
                    self.pods.push(PodView {
                        uid: pod.metadata.uid,
                        namespace: pod.metadata.namespace,
                        name: pod.metadata.name,
                        node_name: pod.spec.node_name,
                        claims: pod
                            .spec
                            .volumes
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|v| v.persistent_volume_claim.map(|c| c.claim_name))
                            .collect(),
                    });
                }
                "CSIDriver" => {
                    let driver: CsiDriverObject = decode(WHAT, item)?;
                    self.csi_drivers.push(CsiDriverView {
                        name: driver.metadata.name,
                        attach_required: driver.spec.attach_required.unwrap_or(true),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn seen(&mut self, kind: &str) {
        if !kind.is_empty() && !self.has_kind(kind) {
            self.kinds_seen.push(kind.to_owned());
        }
    }
}

fn volume_attachment(va: VaObject) -> VolumeAttachmentView {
    VolumeAttachmentView {
        name: va.metadata.name,
        node_name: va.spec.node_name,
        attacher: va.spec.attacher,
        persistent_volume_name: va.spec.source.persistent_volume_name,
        attached: va.status.attached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a"},
        "status":{"volumesInUse":["kubernetes.io/csi/d^h1"],
                  "volumesAttached":[{"name":"kubernetes.io/csi/d^h1","devicePath":"/dev/xvdb"}]}}"#;

    #[test]
    fn reads_a_single_node() {
        let node = parse_node(NODE.as_bytes(), None).unwrap();
        assert_eq!(node.name, "node-a");
        assert!(node.in_use("kubernetes.io/csi/d^h1"));
        assert!(!node.in_use("kubernetes.io/csi/d^h2"));
        assert_eq!(
            node.attached("kubernetes.io/csi/d^h1")
                .map(|a| a.device_path.as_str()),
            Some("/dev/xvdb")
        );
    }

    #[test]
    fn absent_status_lists_are_empty() {
        let node = parse_node(
            br#"{"kind":"Node","metadata":{"name":"n"},"status":{}}"#,
            None,
        )
        .unwrap();
        assert!(node.volumes_in_use.is_empty());
        assert!(node.volumes_attached.is_empty());
        let bare = parse_node(br#"{"metadata":{"name":"n"}}"#, Some("n")).unwrap();
        assert_eq!(bare.name, "n");
    }

    #[test]
    fn picks_the_named_node_from_a_list() {
        let list = format!(
            r#"{{"kind":"List","items":[{NODE},{{"kind":"Node","metadata":{{"name":"node-b"}}}}]}}"#
        );
        assert_eq!(
            parse_node(list.as_bytes(), Some("node-b")).unwrap().name,
            "node-b"
        );
        assert!(matches!(
            parse_node(list.as_bytes(), None),
            Err(ApiError::AmbiguousNode { count: 2 })
        ));
        assert!(matches!(
            parse_node(list.as_bytes(), Some("node-c")),
            Err(ApiError::NodeNotFound(_))
        ));
    }

    #[test]
    fn rejects_other_kinds_and_bad_json() {
        assert!(matches!(
            parse_node(br#"{"kind":"Pod","metadata":{"name":"p"}}"#, None),
            Err(ApiError::NotANode(_))
        ));
        assert!(matches!(
            parse_node(b"{", None),
            Err(ApiError::Decode { .. })
        ));
        assert!(matches!(
            parse_node(br#"{"kind":"Node","status":{"volumesInUse":"x"}}"#, None),
            Err(ApiError::Decode { .. })
        ));
    }

    #[test]
    fn reads_volume_attachments() {
        let list = br#"{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachmentList","items":[
            {"metadata":{"name":"csi-aaa"},"spec":{"attacher":"d","nodeName":"node-a",
              "source":{"persistentVolumeName":"pvc-1"}},"status":{"attached":true}},
            {"metadata":{"name":"csi-bbb"},"spec":{"attacher":"d","nodeName":"node-b","source":{}}}]}"#;
        let vas = parse_volume_attachments(list).unwrap();
        assert_eq!(vas.len(), 2);
        assert_eq!(vas[0].name, "csi-aaa");
        assert!(vas[0].attached);
        assert_eq!(vas[0].persistent_volume_name.as_deref(), Some("pvc-1"));
        assert_eq!(vas[1].node_name, "node-b");
        assert!(!vas[1].attached);
        assert!(
            parse_volume_attachments(br#"{"items":null}"#)
                .unwrap()
                .is_empty()
        );
    }
}

#[cfg(test)]
mod dump_tests {
    use super::*;

    #[test]
    fn a_mixed_list_is_sorted_by_kind() {
        // The shape of `kubectl get node,volumeattachments,pv,pods,csidrivers -o json`.
        let json = br#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a"},"status":{"volumesInUse":["kubernetes.io/csi/d^h"]}},
            {"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"csi-1"},
             "spec":{"attacher":"d","nodeName":"node-a","source":{"persistentVolumeName":"pvc-1"}},"status":{"attached":true}},
            {"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pvc-1"},
             "spec":{"csi":{"driver":"d","volumeHandle":"h"},"claimRef":{"kind":"PersistentVolumeClaim","namespace":"shop","name":"data"}}},
            {"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"nfs-static"},"spec":{"nfs":{"server":"x","path":"/"}}},
            {"apiVersion":"v1","kind":"Pod","metadata":{"uid":"uid-1","namespace":"shop","name":"web-0"},
             "spec":{"nodeName":"node-a","volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"data"}},{"name":"tmp","emptyDir":{}}]}},
            {"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","metadata":{"name":"cephfs.csi.ceph.com"},"spec":{"attachRequired":false}},
            {"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","metadata":{"name":"d"},"spec":{}},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"ignored"}}]}"#;
        let mut dump = ApiDump::default();
        dump.add(json).unwrap();
        assert_eq!(dump.nodes.len(), 1);
        assert_eq!(
            dump.volume_attachments[0].persistent_volume_name.as_deref(),
            Some("pvc-1")
        );
        assert_eq!(
            dump.persistent_volumes.len(),
            1,
            "only CSI volumes are kept"
        );
        assert_eq!(
            dump.persistent_volumes[0].claim.as_deref(),
            Some("shop/data")
        );
        assert_eq!(dump.pods[0].claims, ["data"]);
        assert_eq!(dump.pods[0].uid, "uid-1");
        assert_eq!(
            dump.csi_drivers,
            [
                CsiDriverView {
                    name: "cephfs.csi.ceph.com".into(),
                    attach_required: false
                },
                CsiDriverView {
                    name: "d".into(),
                    attach_required: true
                },
            ]
        );
        assert!(dump.has_kind("Pod") && !dump.has_kind("Secret"));
    }

    #[test]
    fn a_typed_empty_list_still_counts_as_given() {
        let mut dump = ApiDump::default();
        dump.add(br#"{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriverList","items":[]}"#)
            .unwrap();
        assert!(dump.has_kind("CSIDriver"));
        assert!(dump.csi_drivers.is_empty());
        assert!(matches!(dump.add(b"[1"), Err(ApiError::Decode { .. })));
    }
}

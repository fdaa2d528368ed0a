//! NodeRestriction-style rules for writes of volume health, as pure decisions.

use std::collections::HashSet;

use crate::field::GoQuoted;
use crate::identity::UserInfo;
use crate::resource::{HealthResource, Operation};

/// Upstream NodeRestriction's reason for a CSINode of another node.
pub const CSINODE_OTHER_NODE: &str =
    "can only access CSINode with the same name as the requesting node";
/// Upstream NodeRestriction's reason for a node writing `csinodes/status` while
/// `CSIVolumeHealth` is off (`admitCSINode`, checked after the name).
pub const CSINODE_STATUS_GATED: &str = "CSIVolumeHealth feature gate is disabled";

/// What the rules read of the objects written; the rest they read of the request itself.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Written<'a> {
    /// `metadata.name` of `object`: the name a CREATE is checked against.
    pub(crate) object_name: Option<&'a str>,
    /// `spec.nodeName` of the old pod (pods only).
    pub(crate) old_pod_node_name: Option<&'a str>,
    /// Whether `status.healthStatus` differs between the old and new claim (claims only).
    pub(crate) health_status_changed: bool,
}

/// The node restriction's settings. The field rules' are beside them in
/// [`Settings`](crate::admission::Settings).
#[derive(Clone, Debug, Default)]
pub struct RestrictionPolicy {
    /// Whether the `CSIVolumeHealth` feature gate is on (a node may write `csinodes/status`).
    pub gate_enabled: bool,
    /// When set, only these usernames may change a claim's `status.healthStatus`.
    pub pvc_health_writers: Option<HashSet<String>>,
}

/// Why an entry of the claim writer list is refused. The list is written into CEL strings in
/// a YAML block by the chart and into a flag by the server: an entry that is blank, holds the
/// list's separator or a character that is not printable (a control, a format character, a
/// separator other than the ASCII space, such as U+0085, U+2028 or U+2029, which YAML reads as
/// a line break) could be read as another list by one of them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadWriterName {
    /// Nothing but spaces: it names nobody.
    #[error("a blank entry names nobody; list usernames separated by commas")]
    Blank,
    /// A comma: the list's separator.
    #[error("a username cannot hold a comma, the list's separator")]
    Comma,
    /// A character Go's `strconv.IsPrint` refuses, as `U+XXXX`.
    #[error("a username cannot hold {0}, which is not printable")]
    NotPrintable(String),
}

/// An entry of the claim writer list (`--pvc-health-writers`, the chart's `pvcHealthWriters`)
/// as a username: without its surrounding spaces, or why it is refused. The chart refuses the
/// same entries: printable characters are what Go's `strconv.IsPrint` takes, which its
/// templates test with the same Unicode tables.
///
/// ```
/// use volume_health_validation::restriction::{BadWriterName, writer_name};
///
/// let monitor = writer_name(" system:serviceaccount:kube-system:csi-health-monitor ");
/// assert_eq!(monitor, Ok("system:serviceaccount:kube-system:csi-health-monitor"));
/// // A comma would split the list; U+2028 would end a YAML line.
/// assert_eq!(writer_name("a,b"), Err(BadWriterName::Comma));
/// assert_eq!(writer_name("a\u{2028}b"), Err(BadWriterName::NotPrintable("U+2028".into())));
/// assert_eq!(writer_name("  "), Err(BadWriterName::Blank));
/// ```
pub fn writer_name(entry: &str) -> Result<&str, BadWriterName> {
    if let Some(c) = entry.chars().find(|&c| !crate::field::is_go_printable(c)) {
        return Err(BadWriterName::NotPrintable(format!(
            "U+{:04X}",
            u32::from(c)
        )));
    }
    if entry.contains(',') {
        return Err(BadWriterName::Comma);
    }
    match entry.trim_matches(' ') {
        "" => Err(BadWriterName::Blank),
        name => Ok(name),
    }
}

/// Why the node restriction refuses a write: the reason of its 403, as upstream words it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Restricted {
    /// A node user whose name has no node in it.
    #[error("could not determine node from user {}", GoQuoted(.0))]
    UnknownNode(String),
    /// A node writing `csinodes/status` while `CSIVolumeHealth` is off.
    #[error("{}", CSINODE_STATUS_GATED)]
    CsiNodeStatusGated,
    /// A node writing another node's CSINode.
    #[error("{}", CSINODE_OTHER_NODE)]
    CsiNodeOfOtherNode,
    /// A node updating the status of a pod not bound to it (the node's name).
    #[error(
        "node {} can only update pod status for pods with spec.nodeName set to itself",
        GoQuoted(.0)
    )]
    PodOfOtherNode(String),
    /// A node changing a claim's `status.healthStatus` (the node's name).
    #[error("node {} is not allowed to update status.healthStatus", GoQuoted(.0))]
    ClaimHealthByNode(String),
    /// A user outside `--pvc-health-writers` changing a claim's `status.healthStatus`.
    #[error("user {} is not allowed to update status.healthStatus", GoQuoted(.0))]
    ClaimHealthByUser(String),
}

/// What the node restriction reads of a request: the write asked for and who asks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked<'r> {
    /// The resource written.
    pub(crate) resource: HealthResource,
    /// `subResource`, `""` when absent.
    pub(crate) subresource: &'r str,
    /// `operation`.
    pub(crate) operation: Operation,
    /// `name`, `""` when absent.
    pub(crate) name: &'r str,
    /// `userInfo`.
    pub(crate) user: &'r UserInfo<'r>,
}

/// Checks a write; `Err` holds the reason of the 403 (see
/// [`crate::status::forbidden_status`]).
pub(crate) fn check_restrictions(
    asked: &Asked<'_>,
    written: &Written<'_>,
    policy: &RestrictionPolicy,
) -> Result<(), Restricted> {
    let Written {
        object_name,
        old_pod_node_name,
        health_status_changed,
    } = *written;
    let Asked {
        resource,
        subresource,
        operation,
        name,
        user,
    } = *asked;
    let username = &*user.username;
    let node = user.node_name();
    // A CREATE names its object in the object; other operations in the request.
    let target_name = match operation {
        Operation::Create => object_name.unwrap_or(name),
        _ => name,
    };
    match (resource, subresource) {
        (HealthResource::CsiNodes, "" | "status") => {
            let Some(node) = node else { return Ok(()) };
            if node.is_empty() {
                return Err(unknown_node(username));
            }
            // As `admitCSINode` (plugin/pkg/admission/noderestriction/admission.go): the name
            // first, then the gate.
            if target_name != node {
                return Err(Restricted::CsiNodeOfOtherNode);
            }
            if subresource == "status" && !policy.gate_enabled {
                return Err(Restricted::CsiNodeStatusGated);
            }
            Ok(())
        }
        (HealthResource::Pods, "status") if operation == Operation::Update => {
            let Some(node) = node else { return Ok(()) };
            if node.is_empty() {
                return Err(unknown_node(username));
            }
            if old_pod_node_name != Some(node) {
                return Err(Restricted::PodOfOtherNode(node.to_owned()));
            }
            Ok(())
        }
        (HealthResource::PersistentVolumeClaims, "status") if health_status_changed => {
            if let Some(node) = node {
                return Err(Restricted::ClaimHealthByNode(node.to_owned()));
            }
            match &policy.pvc_health_writers {
                Some(writers) if !writers.contains(username) => {
                    Err(Restricted::ClaimHealthByUser(username.to_owned()))
                }
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

fn unknown_node(username: &str) -> Restricted {
    Restricted::UnknownNode(username.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_names_are_printable_and_not_blank() {
        assert_eq!(
            writer_name(" system:serviceaccount:kube-system:monitor "),
            Ok("system:serviceaccount:kube-system:monitor")
        );
        assert_eq!(
            writer_name("oidc:josé@example.com"),
            Ok("oidc:josé@example.com")
        );
        assert_eq!(writer_name("o'brien\\x"), Ok("o'brien\\x"));
        assert_eq!(writer_name("  "), Err(BadWriterName::Blank));
        assert_eq!(writer_name("a,b"), Err(BadWriterName::Comma));
        // The line breaks of YAML, other separators, controls and format characters.
        for (bad, code) in [
            ("a\u{85}        expression: size(\"\") == 1 //", "U+0085"),
            ("a\u{2028}b", "U+2028"),
            ("a\u{2029}b", "U+2029"),
            ("a\nb", "U+000A"),
            ("a\tb", "U+0009"),
            ("a\u{a0}b", "U+00A0"),
            ("a\u{200b}b", "U+200B"),
            ("a\u{202e}b", "U+202E"),
            ("a\u{feff}", "U+FEFF"),
            ("a\u{e000}", "U+E000"),
        ] {
            assert_eq!(
                writer_name(bad),
                Err(BadWriterName::NotPrintable(code.to_owned())),
                "{bad:?}"
            );
        }
    }

    /// One write, as the tests vary it.
    #[derive(Clone)]
    struct Case {
        resource: HealthResource,
        subresource: &'static str,
        operation: Operation,
        user: UserInfo<'static>,
        name: &'static str,
        written: Written<'static>,
    }

    fn input(resource: HealthResource, subresource: &'static str) -> Case {
        Case {
            resource,
            subresource,
            operation: Operation::Update,
            user: UserInfo::node("node1"),
            name: "node1",
            written: Written {
                object_name: None,
                old_pod_node_name: Some("node1"),
                health_status_changed: false,
            },
        }
    }

    fn user(username: &'static str) -> UserInfo<'static> {
        UserInfo::new(username, &["system:authenticated"])
    }

    /// The check's answer with the reason as the 403 prints it.
    fn reason(case: &Case, policy: &RestrictionPolicy) -> Result<(), String> {
        let asked = Asked {
            resource: case.resource,
            subresource: case.subresource,
            operation: case.operation,
            name: case.name,
            user: &case.user,
        };
        check_restrictions(&asked, &case.written, policy).map_err(|r| r.to_string())
    }

    fn gate_on() -> RestrictionPolicy {
        RestrictionPolicy {
            gate_enabled: true,
            pvc_health_writers: None,
        }
    }

    #[test]
    fn csinode_rules() {
        let policy = gate_on();
        for sub in ["", "status"] {
            let own = input(HealthResource::CsiNodes, sub);
            assert_eq!(reason(&own, &policy), Ok(()));
            let other = Case {
                name: "node2",
                ..own.clone()
            };
            assert_eq!(reason(&other, &policy), Err(CSINODE_OTHER_NODE.to_owned()));
            let delete = Case {
                operation: Operation::Delete,
                ..other.clone()
            };
            assert!(reason(&delete, &policy).is_err());
            let admin = Case {
                user: user("system:admin"),
                ..other.clone()
            };
            assert_eq!(reason(&admin, &policy), Ok(()));
            let nameless = Case {
                user: UserInfo::new("system:node:", &["system:nodes"]),
                ..own.clone()
            };
            assert_eq!(
                reason(&nameless, &policy),
                Err("could not determine node from user \"system:node:\"".to_owned())
            );
        }
    }

    /// A CREATE is checked against the object's name, other operations against the request's.
    #[test]
    fn a_create_names_its_csinode_in_the_object() {
        let policy = gate_on();
        let create = Case {
            operation: Operation::Create,
            name: "",
            written: Written {
                object_name: Some("node1"),
                ..Written::default()
            },
            ..input(HealthResource::CsiNodes, "")
        };
        assert_eq!(reason(&create, &policy), Ok(()));
        let other = Case {
            written: Written {
                object_name: Some("node2"),
                ..Written::default()
            },
            ..create.clone()
        };
        assert_eq!(reason(&other, &policy), Err(CSINODE_OTHER_NODE.to_owned()));
        let update = Case {
            operation: Operation::Update,
            name: "node1",
            ..other
        };
        assert_eq!(reason(&update, &policy), Ok(()));
    }

    /// `admitCSINode` (plugin/pkg/admission/noderestriction/admission.go): the name is checked
    /// before the gate, and the gate's text is upstream's.
    #[test]
    fn csinode_status_is_closed_to_nodes_while_gated() {
        let gate_off = RestrictionPolicy::default();
        let own = input(HealthResource::CsiNodes, "status");
        assert_eq!(
            reason(&own, &gate_off),
            Err("CSIVolumeHealth feature gate is disabled".to_owned())
        );
        let other = Case {
            name: "node2",
            ..own.clone()
        };
        assert_eq!(
            reason(&other, &gate_off),
            Err(CSINODE_OTHER_NODE.to_owned()),
            "another node's CSINode: the name first"
        );
        let main = input(HealthResource::CsiNodes, "");
        assert_eq!(reason(&main, &gate_off), Ok(()));
        let admin = Case {
            user: user("system:admin"),
            ..own
        };
        assert_eq!(reason(&admin, &gate_off), Ok(()));
    }

    #[test]
    fn pod_status_only_for_own_pods() {
        let policy = gate_on();
        let own = input(HealthResource::Pods, "status");
        assert_eq!(reason(&own, &policy), Ok(()));
        for old in [Some("node2"), Some(""), None] {
            let other = Case {
                written: Written {
                    old_pod_node_name: old,
                    ..own.written
                },
                ..own.clone()
            };
            assert_eq!(
                reason(&other, &policy),
                Err("node \"node1\" can only update pod status for pods with spec.nodeName set to itself".to_owned())
            );
        }
        let create = Case {
            operation: Operation::Create,
            subresource: "",
            written: Written::default(),
            ..own
        };
        assert_eq!(reason(&create, &policy), Ok(()));
    }

    #[test]
    fn claim_health_is_never_written_by_nodes() {
        let policy = gate_on();
        let unchanged = input(HealthResource::PersistentVolumeClaims, "status");
        assert_eq!(reason(&unchanged, &policy), Ok(()));
        let changed = Case {
            written: Written {
                health_status_changed: true,
                ..unchanged.written
            },
            ..unchanged
        };
        assert_eq!(
            reason(&changed, &policy),
            Err("node \"node1\" is not allowed to update status.healthStatus".to_owned())
        );
    }

    #[test]
    fn claim_health_writers_when_configured() {
        let monitor = "system:serviceaccount:kube-system:csi-health-monitor";
        let policy = RestrictionPolicy {
            gate_enabled: true,
            pvc_health_writers: Some(HashSet::from([monitor.to_owned()])),
        };
        let base = input(HealthResource::PersistentVolumeClaims, "status");
        let changed = Written {
            health_status_changed: true,
            ..base.written
        };
        let by_monitor = Case {
            user: user(monitor),
            written: changed,
            ..base.clone()
        };
        assert_eq!(reason(&by_monitor, &policy), Ok(()));
        let by_other = Case {
            user: user("alice"),
            written: changed,
            ..base
        };
        assert_eq!(
            reason(&by_other, &policy),
            Err("user \"alice\" is not allowed to update status.healthStatus".to_owned())
        );
        let unchanged = Case {
            written: Written {
                health_status_changed: false,
                ..changed
            },
            ..by_other.clone()
        };
        assert_eq!(reason(&unchanged, &policy), Ok(()));
        assert_eq!(reason(&by_other, &gate_on()), Ok(()), "off by default");
    }
}

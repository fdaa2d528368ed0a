//! Node identity, as the Node authorizer and NodeRestriction recognise it.

use std::borrow::Cow;

use serde::Deserialize;

/// The username prefix of node credentials.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node credential carries.
pub const NODES_GROUP: &str = "system:nodes";

/// The node name of a user, when the user is a node: the username is `system:node:<name>` **and**
/// the groups contain `system:nodes` (both case-sensitive). The name may be empty, which callers
/// must treat as "a node, but which one is unknown".
///
/// ```
/// use volume_health_validation::identity::node_name;
/// assert_eq!(node_name("system:node:node1", &["system:nodes"]), Some("node1"));
/// assert_eq!(node_name("system:node:node1", &["system:authenticated"]), None);
/// assert_eq!(node_name("node1", &["system:nodes"]), None);
/// ```
pub fn node_name<'a, S: AsRef<str>>(username: &'a str, groups: &[S]) -> Option<&'a str> {
    Groups::of(groups).node_name(username)
}

/// A user's groups as the rules read them: whether [`NODES_GROUP`] is one of them.
///
/// Read from a review, the list is walked and no group is kept, so a list of millions of groups
/// costs no memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    nodes: bool,
}

impl Groups {
    /// The groups of `names`.
    ///
    /// ```
    /// use volume_health_validation::identity::Groups;
    ///
    /// assert!(Groups::of(&["system:authenticated", "system:nodes"]).has_nodes_group());
    /// // Group names are compared exactly, case included.
    /// assert!(!Groups::of(&["System:Nodes"]).has_nodes_group());
    /// ```
    pub fn of<S: AsRef<str>>(names: &[S]) -> Self {
        Groups {
            nodes: names.iter().any(|g| g.as_ref() == NODES_GROUP),
        }
    }

    pub(crate) fn with_nodes_group(nodes: bool) -> Self {
        Groups { nodes }
    }

    /// Whether [`NODES_GROUP`] is one of them.
    ///
    /// ```
    /// use volume_health_validation::identity::{Groups, NODES_GROUP};
    ///
    /// assert!(Groups::of(&[NODES_GROUP]).has_nodes_group());
    /// assert!(!Groups::of::<&str>(&[]).has_nodes_group());
    /// ```
    pub fn has_nodes_group(self) -> bool {
        self.nodes
    }

    /// The node name of `username` in these groups: see [`node_name`].
    ///
    /// ```
    /// use volume_health_validation::identity::Groups;
    ///
    /// let nodes = Groups::of(&["system:nodes"]);
    /// assert_eq!(nodes.node_name("system:node:node-1"), Some("node-1"));
    /// // A node's username without the group is no node.
    /// assert_eq!(Groups::of(&["system:authenticated"]).node_name("system:node:node-1"), None);
    /// ```
    pub fn node_name(self, username: &str) -> Option<&str> {
        let name = username.strip_prefix(NODE_USER_PREFIX)?;
        self.nodes.then_some(name)
    }
}

/// `userInfo` of an admission request: who writes.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo<'a> {
    /// The username.
    #[serde(borrow, default)]
    pub username: Cow<'a, str>,
    /// The groups, as far as the rules read them.
    #[serde(default)]
    pub groups: Groups,
}

impl<'a> UserInfo<'a> {
    /// A user with these groups.
    ///
    /// ```
    /// use volume_health_validation::UserInfo;
    ///
    /// let monitor = UserInfo::new(
    ///     "system:serviceaccount:kube-system:csi-health-monitor",
    ///     &["system:serviceaccounts", "system:authenticated"],
    /// );
    /// assert_eq!(monitor.username, "system:serviceaccount:kube-system:csi-health-monitor");
    /// // Of the groups, the rules keep only whether `system:nodes` is one.
    /// assert!(!monitor.groups.has_nodes_group());
    /// assert_eq!(monitor.node_name(), None);
    /// ```
    pub fn new<S: AsRef<str>>(username: impl Into<Cow<'a, str>>, groups: &[S]) -> Self {
        UserInfo {
            username: username.into(),
            groups: Groups::of(groups),
        }
    }

    /// The kubelet of node `name`: `system:node:<name>` in `system:nodes`.
    ///
    /// ```
    /// use volume_health_validation::UserInfo;
    ///
    /// assert_eq!(UserInfo::node("node-1").node_name(), Some("node-1"));
    /// // The name alone does not make a node: NodeRestriction's test needs the group too.
    /// let impostor = UserInfo::new("system:node:node-1", &["system:authenticated"]);
    /// assert_eq!(impostor.node_name(), None);
    /// ```
    pub fn node(name: &str) -> UserInfo<'static> {
        UserInfo {
            username: format!("{NODE_USER_PREFIX}{name}").into(),
            groups: Groups { nodes: true },
        }
    }

    /// The node name when this user is a node (see [`node_name`]).
    ///
    /// ```
    /// use volume_health_validation::UserInfo;
    ///
    /// let kubelet = UserInfo::new("system:node:node-1", &["system:nodes"]);
    /// assert_eq!(kubelet.node_name(), Some("node-1"));
    /// // A node user without a name is still a node: the rules refuse its writes.
    /// assert_eq!(UserInfo::new("system:node:", &["system:nodes"]).node_name(), Some(""));
    /// ```
    pub fn node_name(&self) -> Option<&str> {
        self.groups.node_name(&self.username)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities() {
        let nodes: &[&str] = &["system:nodes", "system:authenticated"];
        let cases: &[(&str, &[&str], Option<&str>)] = &[
            ("system:node:node1", nodes, Some("node1")),
            ("system:node:", nodes, Some("")),
            ("system:node:node1 ", nodes, Some("node1 ")),
            ("system:node:node1", &["system:authenticated"], None),
            ("system:node:node1", &[], None),
            ("System:Node:node1", nodes, None),
            ("system:nodes:node1", nodes, None),
            ("node1", nodes, None),
            ("system:serviceaccount:kube-system:node1", nodes, None),
            ("system:node:node1", &["System:Nodes"], None),
            ("system:node:node1", &["system:nodes "], None),
        ];
        for (user, groups, want) in cases {
            assert_eq!(node_name(user, groups), *want, "{user:?} {groups:?}");
        }
    }
}

//! Node identity, as the Node authorizer and NodeRestriction recognise it.

/// The username prefix of node credentials.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node credential carries.
pub const NODES_GROUP: &str = "system:nodes";

/// The node name of a user, when the user is a node: the username is `system:node:<name>` **and**
/// the groups contain `system:nodes` (both case-sensitive). The name may be empty, which callers
/// must treat as "a node, but which one is unknown".
///
/// ```
/// use volume_health_validation::node_name;
/// assert_eq!(node_name("system:node:node1", &["system:nodes"]), Some("node1"));
/// assert_eq!(node_name("system:node:node1", &["system:authenticated"]), None);
/// assert_eq!(node_name("node1", &["system:nodes"]), None);
/// ```
pub fn node_name<'a, S: AsRef<str>>(username: &'a str, groups: &[S]) -> Option<&'a str> {
    let name = username.strip_prefix(NODE_USER_PREFIX)?;
    groups
        .iter()
        .any(|g| g.as_ref() == NODES_GROUP)
        .then_some(name)
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

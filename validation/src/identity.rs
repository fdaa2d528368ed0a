//! Node identity, as the Node authorizer and NodeRestriction recognise it.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

use crate::json::Borrowed;

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
    pub fn of<S: AsRef<str>>(names: &[S]) -> Self {
        Groups {
            nodes: names.iter().any(|g| g.as_ref() == NODES_GROUP),
        }
    }

    /// Whether [`NODES_GROUP`] is one of them.
    pub fn has_nodes_group(self) -> bool {
        self.nodes
    }

    /// The groups that matter to the rules, as names: `[system:nodes]` or none.
    pub fn names(self) -> &'static [&'static str] {
        if self.nodes { &[NODES_GROUP] } else { &[] }
    }

    /// The node name of `username` in these groups: see [`node_name`].
    pub fn node_name(self, username: &str) -> Option<&str> {
        let name = username.strip_prefix(NODE_USER_PREFIX)?;
        self.nodes.then_some(name)
    }
}

/// A JSON list of strings, or `null` for none.
impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;

        impl<'de> Visitor<'de> for Names {
            type Value = Groups;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence of strings")
            }

            fn visit_none<E: de::Error>(self) -> Result<Groups, E> {
                Ok(Groups::default())
            }

            fn visit_unit<E: de::Error>(self) -> Result<Groups, E> {
                Ok(Groups::default())
            }

            fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Groups, D::Error> {
                deserializer.deserialize_seq(self)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Groups, A::Error> {
                let mut nodes = false;
                // Borrowed: a `Cow<str>` element would copy every group name.
                while let Some(group) = seq.next_element::<Borrowed<'de>>()? {
                    nodes |= group.0 == NODES_GROUP;
                }
                Ok(Groups { nodes })
            }
        }

        deserializer.deserialize_option(Names)
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

    #[test]
    fn groups_read_from_json() {
        let cases: &[(&str, Result<bool, &str>)] = &[
            (r#"["system:authenticated","system:nodes"]"#, Ok(true)),
            // Escaped: decoded, not borrowed, and still the nodes group.
            (r#"["system:node\u0073"]"#, Ok(true)),
            (r#"["system:nodes "]"#, Ok(false)),
            ("[]", Ok(false)),
            ("null", Ok(false)),
            (
                r#"["system:nodes",5]"#,
                Err("invalid type: integer `5`, expected a string at line 1 column 17"),
            ),
            (
                r#"{"0":"system:nodes"}"#,
                Err("invalid type: map, expected a sequence of strings at line 1 column 0"),
            ),
        ];
        for (json, want) in cases {
            let got = crate::json::from_str::<Groups>(json)
                .map(Groups::has_nodes_group)
                .map_err(|e| e.to_string());
            assert_eq!(
                got.as_ref().copied().map_err(String::as_str),
                *want,
                "{json}"
            );
        }
    }
}

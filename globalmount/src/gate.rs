//! Whether this node's kubelet has KEP-6058's feature gate, so that a plan offers to enable
//! it only where that works.
//!
//! A kubelet given a feature gate it does not know refuses to start: a plan that says
//! "restart kubelet with `--feature-gates=CSIGlobalMountReconstruction=true`" to a kubelet
//! without the gate takes the node down. No released kubelet has it (v1.37.2's
//! `pkg/features/kube_features.go` does not name it; KEP-6058 targets alpha in v1.38), so
//! the gate step is offered only on evidence: the kubelet binary names the gate.

use std::io::{self, Read};

use serde::Serialize;

/// KEP-6058's kubelet feature gate.
pub const GATE: &str = "CSIGlobalMountReconstruction";

/// The newest kubelet minor version (of major 1) known to lack the gate.
pub const LAST_MINOR_WITHOUT_GATE: u64 = 37;

/// Whether the kubelet has [`GATE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// It has it: a plan may enable it.
    Has,
    /// It does not: enabling it would stop kubelet from starting.
    Lacks,
    /// Nothing told: plans do without it.
    Unknown,
}

/// What the doctor knows of the kubelet's gate, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletGate {
    /// Always [`GATE`].
    pub gate: &'static str,
    /// Whether kubelet has it.
    pub support: Support,
    /// The input that decided, in words.
    pub evidence: String,
}

impl Default for KubeletGate {
    fn default() -> Self {
        Self {
            gate: GATE,
            support: Support::Unknown,
            evidence: "no kubelet version or binary was given: pass --kubelet-binary, \
                       --kubelet-version or --node-json"
                .to_owned(),
        }
    }
}

impl KubeletGate {
    /// Whether a plan may offer to enable the gate.
    pub fn has(&self) -> bool {
        self.support == Support::Has
    }

    /// Why a plan does without the gate, when it does.
    pub fn why_not(&self) -> String {
        match self.support {
            Support::Has => String::new(),
            Support::Lacks => format!("kubelet will not: {}", self.evidence),
            Support::Unknown => format!(
                "kubelet may lack {GATE}, and one given a gate it lacks does not start: {}",
                self.evidence
            ),
        }
    }

    /// From what the kubelet binary holds (`names_gate`, read from `binary`): a Go binary
    /// holds the name of every feature gate it knows, so the answer is either way.
    pub fn from_binary(binary: &str, names_gate: bool) -> Self {
        let (support, holds) = if names_gate {
            (Support::Has, "names")
        } else {
            (Support::Lacks, "does not name")
        };
        Self {
            gate: GATE,
            support,
            evidence: format!("the kubelet binary {binary} {holds} {GATE}"),
        }
    }

    /// From a kubelet version (`v1.37.2`, as `status.nodeInfo.kubeletVersion` spells it),
    /// read from `source`. Up to v1.[`LAST_MINOR_WITHOUT_GATE`] it lacks the gate; a later
    /// or unreadable version may have it, and only its binary can tell.
    pub fn from_version(version: &str, source: &str) -> Self {
        let support = match minor_of(version) {
            Some(minor) if minor <= LAST_MINOR_WITHOUT_GATE => Support::Lacks,
            _ => Support::Unknown,
        };
        let evidence = match support {
            Support::Lacks => format!(
                "kubelet {version} ({source}): no kubelet through \
                 v1.{LAST_MINOR_WITHOUT_GATE} has {GATE}"
            ),
            _ => format!(
                "kubelet {version} ({source}) may have {GATE}; pass --kubelet-binary to tell"
            ),
        };
        Self {
            gate: GATE,
            support,
            evidence,
        }
    }
}

/// The minor version of a Kubernetes version of major 1 (`v1.37.2`, `1.38.0-alpha.1+abc`).
fn minor_of(version: &str) -> Option<u64> {
    let rest = version.strip_prefix('v').unwrap_or(version);
    let rest = rest.strip_prefix("1.")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// Whether `binary` holds [`GATE`]'s name, read in pieces: memory stays bounded whatever
/// the binary's size.
pub fn binary_names_gate(mut binary: impl Read) -> io::Result<bool> {
    let needle = GATE.as_bytes();
    let mut buffer = vec![0_u8; 64 * 1024];
    // The tail of the previous piece is kept, so a name split across two reads is found.
    let mut kept = 0;
    loop {
        let read = match binary.read(&mut buffer[kept..]) {
            Ok(0) => return Ok(false),
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let filled = kept + read;
        if buffer[..filled].windows(needle.len()).any(|w| w == needle) {
            return Ok(true);
        }
        kept = (needle.len() - 1).min(filled);
        buffer.copy_within(filled - kept..filled, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for (version, support) in [
            ("v1.37.2", Support::Lacks),
            ("v1.30.0", Support::Lacks),
            ("v1.37.0-rc.1", Support::Lacks),
            ("1.29.4-gke.1043000", Support::Lacks),
            ("v1.38.0", Support::Unknown),
            ("v1.40.1", Support::Unknown),
            ("v2.0.0", Support::Unknown),
            ("", Support::Unknown),
            ("latest", Support::Unknown),
        ] {
            let gate = KubeletGate::from_version(version, "test");
            assert_eq!(gate.support, support, "{version}");
            assert!(!gate.has(), "{version}: a version alone never tells Has");
        }
    }

    #[test]
    fn a_binary_tells_either_way() {
        let has = KubeletGate::from_binary("/usr/bin/kubelet", true);
        assert!(has.has());
        assert_eq!(
            has.evidence,
            "the kubelet binary /usr/bin/kubelet names CSIGlobalMountReconstruction"
        );
        assert_eq!(
            KubeletGate::from_binary("/usr/bin/kubelet", false).support,
            Support::Lacks
        );
    }

    /// Reads one byte at a time at most `step`, so names fall across reads.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(out.len()).min(self.1);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn the_name_is_found_wherever_the_reads_split_it() {
        let mut binary = vec![0_u8; 200 * 1024];
        let at = 64 * 1024 - 7;
        binary[at..at + GATE.len()].copy_from_slice(GATE.as_bytes());
        for step in [1, 5, 4096, 64 * 1024, usize::MAX] {
            assert!(binary_names_gate(Trickle(&binary, step)).unwrap(), "{step}");
        }
        let mut without = binary.clone();
        without[at] = b'c';
        assert!(!binary_names_gate(Trickle(&without, 4096)).unwrap());
        assert!(!binary_names_gate(&b""[..]).unwrap());
        assert!(!binary_names_gate(&GATE.as_bytes()[1..]).unwrap());
        assert!(binary_names_gate(GATE.as_bytes()).unwrap());
    }
}

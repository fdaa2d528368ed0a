//! Identities whose names are not single path components: a block
//! `specVolID` such as `a/../../x` escapes to a directory name that matches
//! (`a~..~..~x`), and a driver name such as `d/.` cleans to the directory it
//! sits in. Joined into the staging and publish paths, or named in a plan,
//! they point outside the tree, so the identity check refuses them.

use csi_globalmount::SkipReason;
use csi_globalmount::layout::escape_qualified_name;
use csi_globalmount::voldata::VOL_DATA_FILE;

use crate::fixture::{FixtureNode, gm, s};

const EBS: &str = "ebs.csi.aws.com";

/// A staged block volume whose file says `spec_vol_id`, in the directory
/// kubelet's escaping gives it.
fn block_volume_named(node: &FixtureNode, spec_vol_id: &str) -> String {
    let name = escape_qualified_name(spec_vol_id);
    let dir = node.layout.block_dir().join(&name);
    node.voldata(
        dir.join("data"),
        &[
            ("driverName", EBS),
            ("specVolID", spec_vol_id),
            ("volumeHandle", "vol-0trav"),
        ],
    );
    node.mkdir(node.layout.block_dir().join("staging").join(&name));
    s(dir)
}

#[test]
fn a_block_spec_vol_id_that_is_not_one_component_never_passes_the_identity_check() {
    for spec_vol_id in ["a/../../x", "a/b", "x/.", "../x"] {
        let node = FixtureNode::new();
        let dir = block_volume_named(&node, spec_vol_id);
        let report = node.diagnose();
        assert!(
            report.global_volumes.is_empty(),
            "{spec_vol_id}: {report:#?}"
        );
        let skip = report
            .skipped
            .iter()
            .find(|k| k.path == dir)
            .unwrap_or_else(|| panic!("{spec_vol_id}: {:#?}", report.skipped));
        assert_eq!(skip.reason, SkipReason::IdentityMismatch);
        assert!(
            skip.detail.contains("not a single path component"),
            "{}",
            skip.detail
        );
        // Nothing names a path built from it: no staging target, no plan.
        assert_eq!(
            report.skipped.len(),
            1,
            "{spec_vol_id}: {:#?}",
            report.skipped
        );
        assert!(
            skip.operator_plan
                .iter()
                .all(|step| !step.contains(spec_vol_id))
        );
        assert_eq!(skip.expected, None);
    }
    // The same layout with a plain name is listed, so the refusal is the name's.
    let node = FixtureNode::new();
    block_volume_named(&node, "pvc-plain");
    assert_eq!(node.diagnose().global_volumes.len(), 1);
}

#[test]
fn a_driver_name_that_cleans_to_its_directory_never_passes_the_identity_check() {
    for driver in [format!("{EBS}/."), format!("x/../{EBS}"), format!("{EBS}/")] {
        let node = FixtureNode::new();
        let dir = node.stage_fs(EBS, "vol-0drv", None);
        node.write(
            dir.join(VOL_DATA_FILE),
            format!(r#"{{"driverName":"{driver}","volumeHandle":"vol-0drv"}}"#),
        );
        let report = node.diagnose();
        assert!(report.global_volumes.is_empty(), "{driver}: {report:#?}");
        assert_eq!(report.skipped.len(), 1, "{driver}");
        assert_eq!(report.skipped[0].reason, SkipReason::IdentityMismatch);
        assert_eq!(report.skipped[0].path, s(&dir));
        assert!(gm(&dir).starts_with(node.layout.plugin_dir()));
    }
}

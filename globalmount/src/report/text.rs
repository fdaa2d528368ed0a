//! The plain-text rendering of a [`Report`], for people.

use std::fmt::Write as _;

use serde::Serialize;

use super::Report;
use crate::discover::SpecVolIdSource;
use crate::escape::text as esc;

impl Report {
    /// A plain-text rendering for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(
            out,
            "node: {}  kubelet root: {}  mount table: {}",
            esc(self.node_name.as_deref().unwrap_or("(unknown)")),
            esc(&self.kubelet_root),
            esc(&self.mountinfo_source)
        );
        let _ = writeln!(
            out,
            "kubelet {}: {} ({})",
            self.kubelet_gate.gate,
            serde_plain(&self.kubelet_gate.support),
            esc(&self.kubelet_gate.evidence)
        );
        let _ = writeln!(out, "\nglobal volumes ({}):", self.global_volumes.len());
        for v in &self.global_volumes {
            let flags: Vec<&str> = v.flags.iter().map(|f| f.as_str()).collect();
            let _ = writeln!(
                out,
                "  {:<20} {:?} {}{}",
                v.class.as_str(),
                v.mode,
                esc(&v.unique_volume_name),
                if flags.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", flags.join(", "))
                }
            );
            let _ = writeln!(out, "      path: {}", esc(&v.device_mount_path));
            let _ = writeln!(
                out,
                "      spec name: {} (from {})  mounted: {}  pod refs: {}  pod dirs: {}  kubelet plan: {}",
                esc(&v.spec_name),
                match v.spec_vol_id_source {
                    SpecVolIdSource::File => "specVolID",
                    SpecVolIdSource::Handle => "volumeHandle",
                },
                if v.mounted { "yes" } else { "no" },
                v.pod_refs.len() + v.dev_mounts.len() + v.publish_entries.len(),
                v.pod_dirs.len(),
                v.kubelet_plan.as_str()
            );
            if let Some(pv) = &v.owner.persistent_volume {
                let pods: Vec<String> = v
                    .owner
                    .pods
                    .iter()
                    .map(|p| match (&p.namespace, &p.name) {
                        (Some(ns), Some(name)) => format!("{}/{}", esc(ns), esc(name)),
                        _ => esc(&p.uid).to_string(),
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "      owner: pv {}{}{}",
                    esc(pv),
                    v.owner
                        .claim
                        .as_deref()
                        .map(|c| format!("  claim {}", esc(c)))
                        .unwrap_or_default(),
                    if pods.is_empty() {
                        String::new()
                    } else {
                        format!("  pods {}", pods.join(", "))
                    }
                );
            }
            if let Some(p) = &v.progress {
                let _ = writeln!(
                    out,
                    "      progress: {}  decided by: {}  ({})",
                    serde_plain(&p.state),
                    serde_plain(&p.decided_by),
                    esc(&p.detail)
                );
            }
            if let Some(detail) = &v.kubelet_would_list_detail {
                let _ = writeln!(out, "      kubelet would not list it: {}", esc(detail));
            }
            if let Some(api) = &v.api {
                let in_use = match api.in_volumes_in_use {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "n/a",
                };
                let va = match &api.volume_attachment {
                    None => "n/a".to_owned(),
                    Some(va) if !va.exists => format!("{} absent", esc(&va.name)),
                    Some(va) => format!(
                        "{} attached={} node={}",
                        esc(&va.name),
                        va.attached.unwrap_or(false),
                        esc(va.node_name.as_deref().unwrap_or(""))
                    ),
                };
                let _ = writeln!(out, "      volumesInUse: {in_use}  VolumeAttachment: {va}");
            }
            write_plan(&mut out, &v.operator_plan);
        }
        if !self.pod_local.is_empty() {
            let _ = writeln!(
                out,
                "\npod volume directories with unusable vol_data.json ({}):",
                self.pod_local.len()
            );
            for p in &self.pod_local {
                let _ = writeln!(out, "  {}", esc(&p.path));
                let _ = writeln!(out, "      error: {}", esc(&p.voldata_error));
                match (&p.recovered_from, &p.decline_detail) {
                    (Some(r), _) => {
                        let _ = writeln!(
                            out,
                            "      KEP-6058 fallback recovers {}^{} from {}",
                            esc(&r.driver),
                            esc(&r.volume_handle),
                            esc(&r.global_data_dir)
                        );
                    }
                    (None, detail) => {
                        let _ = writeln!(
                            out,
                            "      KEP-6058 fallback declines: {}",
                            esc(detail.as_deref().unwrap_or(""))
                        );
                    }
                }
                if let Some(paired) = &p.paired_global_volume {
                    let _ = writeln!(out, "      belongs to: {}", esc(paired));
                }
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(
                out,
                "\nskipped by kubelet's listing ({}):",
                self.skipped.len()
            );
            for s in &self.skipped {
                let _ = writeln!(
                    out,
                    "  {:<22} {}{}",
                    s.reason.as_str(),
                    esc(&s.path),
                    if s.mounted { "  [MOUNTED]" } else { "" }
                );
                let _ = writeln!(out, "      {}", esc(&s.detail));
                if let Some(expected) = &s.expected {
                    let _ = writeln!(out, "      expected: {}", esc(expected));
                }
                write_plan(&mut out, &s.operator_plan);
            }
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(out, "\nwarnings:");
            for w in &self.warnings {
                let _ = writeln!(out, "  {}", esc(w));
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\nsummary: {} global volumes ({} in_use, {} tracked_by_pod_dir, {} orphaned_staged, {} staged_unmounted, {} pod_data_unreadable, {} at_risk{}), {} pod-local unreadable, {} skipped ({} mounted); {} findings",
            s.global_volumes,
            s.in_use,
            s.tracked_by_pod_dir,
            s.orphaned_staged,
            s.staged_unmounted,
            s.pod_data_unreadable,
            s.at_risk,
            if s.unstage_in_progress > 0 {
                format!(", {} unstage_in_progress", s.unstage_in_progress)
            } else {
                String::new()
            },
            s.pod_local_unreadable,
            s.skipped,
            s.mounted_skipped,
            s.findings
        );
        out
    }
}

fn write_plan(out: &mut String, plan: &[String]) {
    if plan.is_empty() {
        return;
    }
    let _ = writeln!(out, "      plan:");
    for (i, step) in plan.iter().enumerate() {
        let _ = writeln!(out, "        {}. {}", i + 1, esc(step));
    }
}

/// The serde name of a unit variant, for text output.
fn serde_plain(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

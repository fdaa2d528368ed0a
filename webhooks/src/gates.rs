//! `--feature-gates`, parsed as Kubernetes components parse it (`k8s.io/component-base/featuregate`).

use std::fmt;
use std::str::FromStr;

use crate::parse::parse_bool;

/// The gate this server knows, alpha in Kubernetes v1.37 and so off by default.
pub const CSI_VOLUME_HEALTH: &str = "CSIVolumeHealth";
/// Turns every alpha gate on or off, as in Kubernetes.
const ALL_ALPHA: &str = "AllAlpha";
/// Turns every beta gate on or off; there is none here, but the name is valid.
const ALL_BETA: &str = "AllBeta";

/// The state of the feature gates this server knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `CSIVolumeHealth`.
    pub csi_volume_health: bool,
}

/// A `--feature-gates` value that Kubernetes would refuse too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// A gate name this server does not know.
    #[error("unrecognized feature gate: {0}")]
    Unknown(String),
    /// `Name` without `=value`.
    #[error("missing bool value for {0}")]
    MissingValue(String),
    /// A value Go's `strconv.ParseBool` rejects.
    #[error(
        "invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax"
    )]
    InvalidValue {
        /// The gate.
        name: String,
        /// The value given.
        value: String,
    },
}

/// The gates one `--feature-gates` value sets, before they are resolved. Kubernetes merges
/// repeated flags gate by gate (a later value for the same gate wins) and only then applies
/// `AllAlpha` to the gates no value names, so the raw settings are kept until then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateSettings {
    /// `CSIVolumeHealth=...`, when given.
    pub csi_volume_health: Option<bool>,
    /// `AllAlpha=...`, when given.
    pub all_alpha: Option<bool>,
}

impl GateSettings {
    /// These settings with `later`'s on top: a gate `later` names takes `later`'s value.
    pub fn merge(self, later: GateSettings) -> GateSettings {
        GateSettings {
            csi_volume_health: later.csi_volume_health.or(self.csi_volume_health),
            all_alpha: later.all_alpha.or(self.all_alpha),
        }
    }

    /// The gates' state: an explicit value wins over `AllAlpha`; alpha gates are off by default.
    pub fn resolve(self) -> FeatureGates {
        FeatureGates {
            csi_volume_health: self.csi_volume_health.or(self.all_alpha).unwrap_or(false),
        }
    }
}

impl FromStr for GateSettings {
    type Err = GateError;

    /// Parses `Name=bool,Name=bool`; within one value too, a later item for a gate wins.
    fn from_str(s: &str) -> Result<Self, GateError> {
        let mut settings = GateSettings::default();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let Some((name, value)) = item.split_once('=') else {
                return Err(GateError::MissingValue(item.to_owned()));
            };
            let (name, value) = (name.trim(), value.trim());
            let parsed = parse_bool(value).map_err(|_| GateError::InvalidValue {
                name: name.to_owned(),
                value: value.to_owned(),
            })?;
            match name {
                CSI_VOLUME_HEALTH => settings.csi_volume_health = Some(parsed),
                ALL_ALPHA => settings.all_alpha = Some(parsed),
                ALL_BETA => {}
                _ => return Err(GateError::Unknown(name.to_owned())),
            }
        }
        Ok(settings)
    }
}

impl FeatureGates {
    /// The gates set by `--feature-gates` given once per item of `values`, merged left to right
    /// as Kubernetes components merge a repeated flag.
    pub fn from_flags(values: impl IntoIterator<Item = GateSettings>) -> FeatureGates {
        values
            .into_iter()
            .fold(GateSettings::default(), GateSettings::merge)
            .resolve()
    }
}

impl FromStr for FeatureGates {
    type Err = GateError;

    /// Parses one `--feature-gates` value. Explicit gates win over `AllAlpha` wherever they
    /// appear.
    fn from_str(s: &str) -> Result<Self, GateError> {
        s.parse::<GateSettings>().map(GateSettings::resolve)
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CSI_VOLUME_HEALTH}={}", self.csi_volume_health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(s: &str) -> bool {
        s.parse::<FeatureGates>().unwrap().csi_volume_health
    }

    #[test]
    fn parses_like_kubernetes() {
        assert!(!on(""));
        assert!(on("CSIVolumeHealth=true"));
        assert!(!on("CSIVolumeHealth=false"));
        assert!(on(" CSIVolumeHealth = True , "));
        assert!(on("CSIVolumeHealth=1"));
        assert!(on("CSIVolumeHealth=t"));
        assert!(!on("CSIVolumeHealth=F"));
        assert!(on("AllAlpha=true"));
        assert!(!on("AllAlpha=true,CSIVolumeHealth=false"));
        assert!(!on("CSIVolumeHealth=false,AllAlpha=true"), "explicit wins");
        assert!(!on("AllBeta=true"));
        assert!(
            on("CSIVolumeHealth=false,CSIVolumeHealth=true"),
            "last wins"
        );
    }

    #[test]
    fn repeated_flags_merge_left_to_right() {
        fn merged(values: &[&str]) -> bool {
            FeatureGates::from_flags(values.iter().map(|v| v.parse::<GateSettings>().unwrap()))
                .csi_volume_health
        }
        // (values of --feature-gates in order, CSIVolumeHealth after all of them)
        let table: &[(&[&str], bool)] = &[
            (&[], false),
            (&["CSIVolumeHealth=true"], true),
            (&["CSIVolumeHealth=true", "CSIVolumeHealth=false"], false),
            (&["CSIVolumeHealth=false", "CSIVolumeHealth=true"], true),
            // A later value that names other gates keeps the earlier one's.
            (&["CSIVolumeHealth=true", "AllBeta=false"], true),
            (&["CSIVolumeHealth=true", ""], true),
            // An explicit gate wins over AllAlpha, whichever flag comes first.
            (&["AllAlpha=true", "CSIVolumeHealth=false"], false),
            (&["CSIVolumeHealth=false", "AllAlpha=true"], false),
            (&["AllAlpha=false", "AllAlpha=true"], true),
            (&["AllAlpha=true", "AllAlpha=false"], false),
            (
                &["AllAlpha=true,CSIVolumeHealth=false", "CSIVolumeHealth=1"],
                true,
            ),
        ];
        for (values, want) in table {
            assert_eq!(merged(values), *want, "{values:?}");
        }
    }

    #[test]
    fn refuses_what_kubernetes_refuses() {
        assert_eq!(
            "CSIVolumeHealthy=true".parse::<FeatureGates>(),
            Err(GateError::Unknown("CSIVolumeHealthy".into()))
        );
        assert_eq!(
            "csivolumehealth=true".parse::<FeatureGates>(),
            Err(GateError::Unknown("csivolumehealth".into())),
            "names are case-sensitive"
        );
        assert_eq!(
            "CSIVolumeHealth".parse::<FeatureGates>(),
            Err(GateError::MissingValue("CSIVolumeHealth".into()))
        );
        let err = "CSIVolumeHealth=yes".parse::<FeatureGates>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value of CSIVolumeHealth=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }
}

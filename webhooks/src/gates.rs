//! `--feature-gates`, parsed as Kubernetes components parse it (`k8s.io/component-base/featuregate`).

use std::fmt;
use std::str::FromStr;

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

impl FromStr for FeatureGates {
    type Err = GateError;

    /// Parses `Name=bool,Name=bool`. Explicit gates win over `AllAlpha` wherever they appear.
    fn from_str(s: &str) -> Result<Self, GateError> {
        let mut explicit = None;
        let mut all_alpha = None;
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let Some((name, value)) = item.split_once('=') else {
                return Err(GateError::MissingValue(item.to_owned()));
            };
            let (name, value) = (name.trim(), value.trim());
            let parsed = parse_go_bool(value).ok_or_else(|| GateError::InvalidValue {
                name: name.to_owned(),
                value: value.to_owned(),
            })?;
            match name {
                CSI_VOLUME_HEALTH => explicit = Some(parsed),
                ALL_ALPHA => all_alpha = Some(parsed),
                ALL_BETA => {}
                _ => return Err(GateError::Unknown(name.to_owned())),
            }
        }
        Ok(FeatureGates {
            csi_volume_health: explicit.or(all_alpha).unwrap_or(false),
        })
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CSI_VOLUME_HEALTH}={}", self.csi_volume_health)
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
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

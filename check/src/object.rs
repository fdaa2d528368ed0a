//! One object: what it is, and what the webhooks would answer for a write of it.

use std::borrow::Cow;

use serde::Deserialize;
use serde::Serialize;
use serde_json::value::RawValue;
use volume_health_validation::admission::{DropOnSave, Invalid};
use volume_health_validation::error;
use volume_health_validation::repair::Repair;
use volume_health_validation::{
    AdmissionRequest, ErrorList, HealthResource, Operation, Settings, UserInfo, Verdict,
};

/// The members of an object that say what it is, and the one the node rules read of an old pod.
#[derive(Debug, Default)]
pub(crate) struct Header<'a> {
    pub(crate) api_version: Option<Cow<'a, str>>,
    pub(crate) kind: Option<Cow<'a, str>>,
    pub(crate) metadata: Option<Metadata<'a>>,
    pub(crate) spec: Option<Spec<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Metadata<'a> {
    #[serde(borrow, default)]
    pub(crate) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) namespace: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spec<'a> {
    #[serde(borrow, default)]
    pub(crate) node_name: Option<Cow<'a, str>>,
}

/// A string that borrows from the input unless it has escapes.
#[derive(Deserialize)]
#[serde(transparent)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Reads the header into `out` and stops as soon as it has all of it: kubectl and the
/// apiserver write `apiVersion`, `kind` and `metadata` first, so the bulk of an object (`spec`,
/// `status`) is not read twice. `spec` is read only when `spec` is wanted.
struct HeaderSeed<'o, 'a> {
    out: &'o mut Header<'a>,
    spec: bool,
    /// Set when the visitor stopped early on purpose.
    complete: &'o mut bool,
}

/// The error a visitor returns to stop reading once it has what it needs.
const STOP: &str = "header complete";

impl<'de> serde::de::Visitor<'de> for HeaderSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match &*key.0 {
                "apiVersion" => {
                    self.out.api_version = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0)
                }
                "kind" => self.out.kind = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
                "metadata" => self.out.metadata = map.next_value()?,
                "spec" if self.spec => self.out.spec = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            }
            let header = &*self.out;
            if header.api_version.is_some()
                && header.kind.is_some()
                && header.metadata.is_some()
                && (header.spec.is_some() || !self.spec)
            {
                *self.complete = true;
                return Err(serde::de::Error::custom(STOP));
            }
        }
        Ok(())
    }
}

impl<'a> Header<'a> {
    /// The header of `raw`; with `spec`, also `spec.nodeName`.
    pub(crate) fn parse(raw: &'a RawValue, spec: bool) -> Result<Self, serde_json::Error> {
        use serde::Deserializer as _;
        let mut header = Header::default();
        let mut complete = false;
        let seed = HeaderSeed {
            out: &mut header,
            spec,
            complete: &mut complete,
        };
        match serde_json::Deserializer::from_str(raw.get()).deserialize_map(seed) {
            Ok(()) => Ok(header),
            Err(_) if complete => Ok(header),
            Err(err) => Err(err),
        }
    }

    /// The resource this object is, when it is one with rules here: the kind, and the group of
    /// its `apiVersion`.
    pub(crate) fn resource(&self) -> Option<HealthResource> {
        let kind = self.kind.as_deref()?;
        let group = match self.api_version.as_deref()?.rsplit_once('/') {
            Some((group, _version)) => group,
            None => "",
        };
        HealthResource::ALL
            .into_iter()
            .find(|r| r.kind() == kind && r.group() == group)
    }

    /// What the object is, as a report of skipped objects names it: `Kind (apiVersion)`.
    pub(crate) fn label(&self) -> String {
        match (self.kind.as_deref(), self.api_version.as_deref()) {
            (Some(kind), Some(version)) => format!("{kind} ({version})"),
            (Some(kind), None) => kind.to_owned(),
            (None, _) => "object without a kind".to_owned(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or_default()
    }

    pub(crate) fn namespace(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|m| m.namespace.as_deref())
            .filter(|ns| !ns.is_empty())
    }

    pub(crate) fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
}

/// What the webhooks would answer for one write: what `check` finds for one object. Not a
/// decision in the authorizer's sense (allow, deny or no opinion), hence its own word.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Finding {
    /// The field drop on save would remove (`status.volumeHealth`, ...), with the gate off.
    pub dropped: Option<&'static str>,
    /// The validating webhook's denial, if any.
    pub denial: Option<Denial>,
    /// What `/mutate` repaired with `--repair` before the answer above, which is then the
    /// repaired object's.
    pub repairs: Vec<Repair>,
}

impl Finding {
    /// Whether the write would be admitted (possibly with a field dropped).
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }
}

/// A denial, as the `Status` the webhook returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    /// 422 for field errors, 403 for the node rules, 400 for an object that cannot be decoded.
    pub code: i32,
    /// `Invalid`, `Forbidden` or `BadRequest`.
    pub reason: String,
    /// The message the apiserver prints.
    pub message: String,
    /// The field errors of a 422, in Kubernetes order.
    pub errors: ErrorList,
}

/// Whether an object may carry its resource's volume health field: its name is in the text, or
/// the text has a `\\u` escape that could spell it. An object without it, over an old object
/// without it, is no business of the webhooks: their configurations do not even send them
/// such writes (`matchConditions`), and no field rule has anything to check.
pub(crate) fn may_carry_field(resource: HealthResource, raw: &RawValue) -> bool {
    let field = resource.gated_member();
    let text = raw.get().as_bytes();
    memchr::memmem::find(text, field.as_bytes()).is_some()
        || memchr::memmem::find(text, b"\\u").is_some()
}

/// Decides a write of `object` (a `resource`) over `old_object`, as the mutating webhook and
/// then the validating webhook would: an UPDATE of the `status` subresource by `user`. With
/// the gate off, the field drop on save removes is reported, and the object without it is what
/// validation sees, as in the apiserver.
pub fn decide(
    resource: HealthResource,
    name: &str,
    object: &RawValue,
    old_object: &RawValue,
    user: &UserInfo<'_>,
    settings: &Settings,
) -> Finding {
    let build = |object| {
        AdmissionRequest::new(resource, Operation::Update)
            .with_subresource("status")
            .with_name(name)
            .with_user(user.clone())
            .with_objects(Some(object), Some(old_object))
    };
    let mut finding = Finding::default();
    let without: Box<RawValue>;
    let mut request = build(object);
    if !settings.restriction.gate_enabled {
        match request.gated_field_to_drop(false) {
            Ok(None) => {}
            Ok(Some(drop)) => {
                finding.dropped = Some(drop.field());
                match without_gated_field(drop, object) {
                    Ok(rest) => {
                        without = rest;
                        request = build(&without);
                    }
                    Err(err) => {
                        finding.denial = Some(bad_request(&*err));
                        return finding;
                    }
                }
            }
            Err(err) => {
                finding.denial = Some(bad_request(&err));
                return finding;
            }
        }
    }
    finding.denial = match request.validate(settings) {
        Ok(verdict) => match (verdict.code(), verdict.reason(), verdict.message()) {
            (Some(code), Some(reason), Some(message)) => Some(Denial {
                code,
                reason: reason.to_owned(),
                message,
                errors: match verdict {
                    Verdict::Invalid(Invalid { errors, .. }) => errors,
                    _ => ErrorList::new(),
                },
            }),
            _ => None,
        },
        Err(err) => Some(bad_request(&err)),
    };
    finding
}

/// What `check` finds for `object` as `/mutate` with `--repair` would repair it, with the repairs;
/// `None` when nothing is repaired (or no patch could be made, which the server answers as
/// without repair).
pub(crate) fn repaired(
    resource: HealthResource,
    name: &str,
    object: &RawValue,
    old_object: &RawValue,
    user: &UserInfo<'_>,
    settings: &Settings,
) -> Option<Finding> {
    let request = AdmissionRequest::new(resource, Operation::Update)
        .with_subresource("status")
        .with_name(name)
        .with_user(user.clone())
        .with_objects(Some(object), Some(old_object));
    let mut repairs = Vec::new();
    let made = request
        .repair_reporting(settings, &mut |r| repairs.push(r.clone()))
        .ok()??;
    // The patch `/mutate` sends, applied as the apiserver applies it.
    let mut value: serde_json::Value = serde_json::from_str(object.get()).ok()?;
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::to_value(made.patch()).ok()?).ok()?;
    json_patch::patch(&mut value, &patch).ok()?;
    let patched = serde_json::value::to_raw_value(&value).ok()?;
    let mut finding = decide(resource, name, &patched, old_object, user, settings);
    finding.repairs = repairs;
    Some(finding)
}

/// The object without the gated field: drop on save's patch, the one the mutating webhook
/// sends, applied to the object as the apiserver applies it.
fn without_gated_field(
    drop: DropOnSave,
    object: &RawValue,
) -> Result<Box<RawValue>, Box<dyn std::error::Error>> {
    let mut value: serde_json::Value = serde_json::from_str(object.get())?;
    let patch: json_patch::Patch = serde_json::from_value(serde_json::to_value(drop.patch())?)?;
    json_patch::patch(&mut value, &patch)?;
    Ok(serde_json::value::to_raw_value(&value)?)
}

/// The webhook's 400 for an object it cannot decode: the error and its sources on one line.
fn bad_request(err: &dyn std::error::Error) -> Denial {
    Denial {
        code: 400,
        reason: "BadRequest".to_owned(),
        message: error::chain(err),
        errors: ErrorList::new(),
    }
}

/// The old object a write starts from when none is given: the object's name and, for a pod,
/// the node it is bound to, with no volume health field. Ratcheting has then nothing to keep,
/// drop on save removes any value, and the node rules see the object's own node.
pub(crate) fn blank_old(header: &Header<'_>) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(&Reduced::new(header, None))
}

/// An old object reduced to what the rules read of it: name, `spec.nodeName` and the gated
/// field, so that a large `--old` dump is not held whole in memory.
pub(crate) fn reduce_old(
    resource: HealthResource,
    header: &Header<'_>,
    raw: &RawValue,
) -> Result<Box<RawValue>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Status<'a> {
        #[serde(borrow, default)]
        status: Option<GatedFields<'a>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct GatedFields<'a> {
        #[serde(borrow, default)]
        volume_health: Option<&'a RawValue>,
        #[serde(borrow, default)]
        health_status: Option<&'a RawValue>,
        #[serde(borrow, default)]
        storage_health: Option<&'a RawValue>,
    }
    let status: Status<'_> = serde_json::from_str(raw.get())?;
    let gated = status.status.and_then(|s| match resource {
        HealthResource::Pods => s.volume_health,
        HealthResource::PersistentVolumeClaims => s.health_status,
        HealthResource::CsiNodes => s.storage_health,
    });
    let field = resource.gated_member();
    serde_json::value::to_raw_value(&Reduced::new(header, gated.map(|g| [(field, g)].into())))
}

#[derive(Serialize)]
struct Reduced<'a> {
    metadata: ReducedMeta<'a>,
    spec: ReducedSpec<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<std::collections::BTreeMap<&'a str, &'a RawValue>>,
}

#[derive(Serialize)]
struct ReducedMeta<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReducedSpec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    node_name: Option<&'a str>,
}

impl<'a> Reduced<'a> {
    fn new(
        header: &'a Header<'a>,
        status: Option<std::collections::BTreeMap<&'a str, &'a RawValue>>,
    ) -> Self {
        Reduced {
            metadata: ReducedMeta {
                name: header.name(),
                namespace: header.namespace(),
            },
            spec: ReducedSpec {
                node_name: header.node_name(),
            },
            status,
        }
    }
}

//! For writers: whether a report changes what is stored, and the transition times it keeps.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PodVolumeHealth, VolumeHealthCondition, VolumeHealthStatus};
use k8s_openapi::api::storage::v1::{StorageHealth, StorageHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How a writer tells a new report from the stored one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The kubelet's: the same set of identities ((status, reason); for storage conditions
    /// also accessMode and volumeMode) is no change, whatever the messages, transition times,
    /// order and repeats.
    IgnoreMessages,
    /// external-health-monitor's: the same identities, each as many times, with the same
    /// messages, in any order; transition times are not compared. A message-only change is a
    /// change, and is written.
    CompareMessages,
}

/// A report a writer compares with the stored one: a claim's [`VolumeHealthStatus`], a pod's
/// [`PodVolumeHealth`] entry or list of them, a CSINode's [`StorageHealth`] entry or list.
/// Absent (`None`, or an entry not in a list) is the same as a report without conditions.
pub trait Report: sealed::Sealed {}

impl Report for VolumeHealthStatus {}
impl Report for PodVolumeHealth {}
impl Report for [PodVolumeHealth] {}
impl Report for StorageHealth {}
impl Report for [StorageHealth] {}

/// Whether writing `new` where `old` is stored changes nothing that `policy` compares. With
/// nothing stored, only a report without conditions is unchanged.
///
/// Linear in both reports (conditions compared as hashed sets or counts). Lists of entries are
/// compared entry by entry, by name, the first entry of each name as the apiserver matches them;
/// a single entry is compared by its name and conditions.
///
/// ```
/// use k8s_openapi::api::core::v1::VolumeHealthStatus;
/// use volume_health_validation::repair::{Policy, unchanged};
///
/// let status = |message: &str| -> Result<VolumeHealthStatus, serde_json::Error> {
///     serde_json::from_value(serde_json::json!({"healthConditions": [
///         {"status": "Degraded", "reason": "ReplicaOutOfSync", "message": message}]}))
/// };
/// let stored = status("node-a behind by 12 MiB")?;
/// let probed = status("node-a behind by 9 MiB")?;
/// // The kubelet's policy skips a write whose messages alone changed; the monitor's does not.
/// assert!(unchanged(Some(&stored), &probed, Policy::IgnoreMessages));
/// assert!(!unchanged(Some(&stored), &probed, Policy::CompareMessages));
/// // Nothing stored: a report with conditions is a change.
/// assert!(!unchanged(None, &probed, Policy::IgnoreMessages));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn unchanged<R: Report + ?Sized>(old: Option<&R>, new: &R, policy: Policy) -> bool {
    match old {
        Some(old) => old.summary(policy) == new.summary(policy),
        None => new.summary(policy).is_empty(),
    }
}

/// Sets the `lastTransitionTime`s of `new`, the report about to be written where `old` is
/// stored: the stored time of what did not change, `now` for the rest.
///
/// A claim's `healthStatus` and a pod entry have one time for their whole list of conditions:
/// the stored one when the set of (status, reason) is unchanged (and a time is stored), else
/// `now`. Pod entries are matched by name. A storage condition has its own: the stored time of
/// the first stored condition with its (status, reason, accessMode, volumeMode) in the stored
/// entry of its driver, when it has one, else `now`.
///
/// `now` is cut to the whole second: the apiserver keeps a `Time` to the second, and a writer
/// whose copy holds more than that never finds it equal to what is stored (the v1.37.2
/// kubelet's pod status copy is the case: it then reads the pod again at every sync).
///
/// ```
/// use k8s_openapi::api::core::v1::VolumeHealthStatus;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// use volume_health_validation::repair::carry_transition_times;
///
/// let status = |reason: &str, time: Option<&str>| -> Result<VolumeHealthStatus, serde_json::Error> {
///     serde_json::from_value(serde_json::json!({
///         "healthConditions": [{"status": "Degraded", "reason": reason}],
///         "lastTransitionTime": time,
///     }))
/// };
/// let now = Time("2026-03-01T10:05:00.750Z".parse().expect("a time"));
/// let stored = status("ReplicaOutOfSync", Some("2026-03-01T10:00:00Z"))?;
///
/// // The same (status, reason): the stored time stays.
/// let mut same = status("ReplicaOutOfSync", None)?;
/// carry_transition_times(Some(&stored), &mut same, &now);
/// assert_eq!(same.last_transition_time, stored.last_transition_time);
///
/// // Another reason: `now`, cut to the second as the apiserver stores it.
/// let mut changed = status("NoQuorum", None)?;
/// carry_transition_times(Some(&stored), &mut changed, &now);
/// let expected = Time("2026-03-01T10:05:00Z".parse().expect("a time"));
/// assert_eq!(changed.last_transition_time, Some(expected));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn carry_transition_times<R: Report + ?Sized>(old: Option<&R>, new: &mut R, now: &Time) {
    new.carry(old, &whole_second(now));
}

/// `time` as the apiserver keeps it: to the second, cut (RFC 3339 without a fraction).
fn whole_second(time: &Time) -> Time {
    let second = time.0.as_second();
    // A whole second of a valid timestamp is one too.
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap_or(time.0))
}

/// An identity, and the message when the policy compares messages.
type Key<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

/// What a policy compares of one list of conditions: each key and how often it occurs (always
/// once when repeats do not count).
type Conditions<'a> = HashMap<Key<'a>, usize>;

use sealed::Summary;

impl Summary<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn volume_key(c: &VolumeHealthCondition, policy: Policy) -> Key<'_> {
    (
        &c.status,
        &c.reason,
        None,
        None,
        message(&c.message, policy),
    )
}

fn storage_key(c: &StorageHealthCondition, policy: Policy) -> Key<'_> {
    (
        &c.status,
        &c.reason,
        c.access_mode.as_deref(),
        c.volume_mode.as_deref(),
        message(&c.message, policy),
    )
}

/// An absent message and an empty one are the same text to both writers (Go strings).
fn message(message: &Option<String>, policy: Policy) -> Option<&str> {
    match policy {
        Policy::IgnoreMessages => None,
        Policy::CompareMessages => Some(message.as_deref().unwrap_or_default()),
    }
}

fn conditions<'a, C: 'a>(
    items: Option<&'a [C]>,
    policy: Policy,
    key: impl Fn(&'a C, Policy) -> Key<'a>,
) -> Conditions<'a> {
    let mut counts = HashMap::new();
    for item in items.unwrap_or_default() {
        let count = counts.entry(key(item, policy)).or_insert(0);
        if policy == Policy::CompareMessages || *count == 0 {
            *count += 1;
        }
    }
    counts
}

/// One entry of a summary: none when it has no conditions.
fn entry<'a>(name: &'a str, conditions: Conditions<'a>) -> Summary<'a> {
    let mut entries = HashMap::new();
    if !conditions.is_empty() {
        entries.insert(name, conditions);
    }
    Summary(entries)
}

fn entries<'a, T>(items: &'a [T], one: impl Fn(&'a T) -> (&'a str, Conditions<'a>)) -> Summary<'a> {
    let mut entries = HashMap::new();
    for item in items {
        let (name, conditions) = one(item);
        if !entries.contains_key(name) {
            entries.insert(name, conditions);
        }
    }
    entries.retain(|_, conditions: &mut Conditions<'_>| !conditions.is_empty());
    Summary(entries)
}

/// The stored time when the set of (status, reason) is unchanged, else `now`.
fn list_time(
    old: Option<(&[VolumeHealthCondition], Option<&Time>)>,
    new: &[VolumeHealthCondition],
    now: &Time,
) -> Time {
    let identities = |items| conditions(Some(items), Policy::IgnoreMessages, volume_key);
    old.filter(|(stored, _)| identities(stored) == identities(new))
        .and_then(|(_, time)| time.cloned())
        .unwrap_or_else(|| now.clone())
}

fn carry_entry(old: Option<&PodVolumeHealth>, new: &mut PodVolumeHealth, now: &Time) {
    let old = old.filter(|old| old.name == new.name).map(|old| {
        (
            old.health_conditions.as_deref().unwrap_or_default(),
            old.last_transition_time.as_ref(),
        )
    });
    let conditions = new.health_conditions.as_deref().unwrap_or_default();
    new.last_transition_time = Some(list_time(old, conditions, now));
}

fn carry_storage(old: Option<&StorageHealth>, new: &mut StorageHealth, now: &Time) {
    let mut stored: HashMap<Key<'_>, Option<&Time>> = HashMap::new();
    for c in old
        .filter(|old| old.name == new.name)
        .and_then(|old| old.health_conditions.as_deref())
        .unwrap_or_default()
    {
        stored
            .entry(storage_key(c, Policy::IgnoreMessages))
            .or_insert(c.last_transition_time.as_ref());
    }
    for c in new.health_conditions.iter_mut().flatten() {
        let time = stored
            .get(&storage_key(c, Policy::IgnoreMessages))
            .copied()
            .flatten()
            .cloned();
        c.last_transition_time = Some(time.unwrap_or_else(|| now.clone()));
    }
}

fn first_by_name<'a, T>(items: &'a [T], name: impl Fn(&T) -> &str) -> HashMap<&'a str, &'a T>
where
    T: 'a,
{
    let mut first = HashMap::new();
    for item in items {
        first.entry(name(item)).or_insert(item);
    }
    first
}

/// Keeps [`Report`] to this module's types, and its methods out of the public API.
pub(crate) mod sealed {
    use super::*;

    /// What a policy compares of a report: the conditions of each named entry that has any.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Summary<'a>(pub(super) HashMap<&'a str, Conditions<'a>>);

    pub trait Sealed {
        fn summary(&self, policy: Policy) -> Summary<'_>;
        fn carry(&mut self, old: Option<&Self>, now: &Time);
    }

    impl Sealed for VolumeHealthStatus {
        fn summary(&self, policy: Policy) -> Summary<'_> {
            let items = self.health_conditions.as_deref();
            entry("", conditions(items, policy, volume_key))
        }

        fn carry(&mut self, old: Option<&Self>, now: &Time) {
            let old = old.map(|old| {
                (
                    old.health_conditions.as_deref().unwrap_or_default(),
                    old.last_transition_time.as_ref(),
                )
            });
            let conditions = self.health_conditions.as_deref().unwrap_or_default();
            self.last_transition_time = Some(list_time(old, conditions, now));
        }
    }

    impl Sealed for PodVolumeHealth {
        fn summary(&self, policy: Policy) -> Summary<'_> {
            let items = self.health_conditions.as_deref();
            entry(&self.name, conditions(items, policy, volume_key))
        }

        fn carry(&mut self, old: Option<&Self>, now: &Time) {
            carry_entry(old, self, now);
        }
    }

    impl Sealed for [PodVolumeHealth] {
        fn summary(&self, policy: Policy) -> Summary<'_> {
            entries(self, |e| {
                let items = e.health_conditions.as_deref();
                (e.name.as_str(), conditions(items, policy, volume_key))
            })
        }

        fn carry(&mut self, old: Option<&Self>, now: &Time) {
            let old = first_by_name(old.unwrap_or_default(), |e| &e.name);
            for entry in self {
                carry_entry(old.get(entry.name.as_str()).copied(), entry, now);
            }
        }
    }

    impl Sealed for StorageHealth {
        fn summary(&self, policy: Policy) -> Summary<'_> {
            let items = self.health_conditions.as_deref();
            entry(&self.name, conditions(items, policy, storage_key))
        }

        fn carry(&mut self, old: Option<&Self>, now: &Time) {
            carry_storage(old, self, now);
        }
    }

    impl Sealed for [StorageHealth] {
        fn summary(&self, policy: Policy) -> Summary<'_> {
            entries(self, |e| {
                let items = e.health_conditions.as_deref();
                (e.name.as_str(), conditions(items, policy, storage_key))
            })
        }

        fn carry(&mut self, old: Option<&Self>, now: &Time) {
            let old = first_by_name(old.unwrap_or_default(), |e| &e.name);
            for entry in self {
                carry_storage(old.get(entry.name.as_str()).copied(), entry, now);
            }
        }
    }
}

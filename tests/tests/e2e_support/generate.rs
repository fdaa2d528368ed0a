//! Seeded status writes for the differential: Pods, claims and CSINodes, written by the
//! cluster admin and by kubelets, with values at, below and above each limit, bad enums,
//! duplicates, missing fields, stored invalid old objects, writes of the object itself and
//! creates. The same seed gives the same writes, so a failure can be replayed.
//!
//! The valid values and the limits are written here from the API's documentation, not taken
//! from the library: the apiserver is the oracle, and the library is what is tested.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::{HealthResource, Operation};

use volume_health_tests::seeded::Rng;

use super::{Answer, Replay};

/// One generated write and what it covers.
pub(crate) struct Generated {
    pub(crate) replay: Replay,
    /// The coverage categories this write falls in (see [`CATEGORIES`]).
    pub(crate) tags: BTreeSet<&'static str>,
}

/// Every category the generator must reach in a run.
pub(crate) const CATEGORIES: &[&str] = &[
    "pod",
    "claim",
    "csinode",
    "admin",
    "kubelet own node",
    "kubelet other node",
    "kubelet on a claim",
    "kubelet on a claim its pod uses",
    "status update",
    "main resource update",
    "create",
    "stored invalid old object",
    "unchanged health",
    "changed health beside stored health",
    "reason at limit",
    "reason below limit",
    "reason above limit",
    "reason multibyte over limit in bytes only",
    "bad reason format",
    "missing reason",
    "message at limit",
    "message below limit",
    "message above limit",
    "message multibyte at limit",
    "message multibyte over limit in bytes only",
    "15 conditions",
    "16 conditions",
    "17 conditions",
    "18 conditions",
    "bad status",
    "missing status",
    "bad accessMode",
    "bad volumeMode",
    "duplicate condition",
    "duplicate entry",
    "missing entry name",
    "volume not found",
    "bad driver name",
    "driver name at limit",
    "driver name above limit",
];

/// `count` writes of `seed`.
pub(crate) fn writes(seed: u64, count: usize) -> Vec<Generated> {
    (0..count).map(|index| write(seed, index)).collect()
}

/// Write `index` of `seed`.
pub(crate) fn write(seed: u64, index: usize) -> Generated {
    let mut g = Gen {
        rng: Rng::for_write(seed, index),
        tags: BTreeSet::new(),
        clean: false,
    };
    let replay = g.replay(format!("gen-{index}"), index);
    if stored_invalid(&replay) {
        g.tag("stored invalid old object");
    }
    Generated {
        replay,
        tags: g.tags,
    }
}

/// Whether the old object's health is one the API refuses today (so it is written into etcd):
/// the library's in-tree answer to writing it where there was none.
fn stored_invalid(replay: &Replay) -> bool {
    let Some(old) = &replay.old_object else {
        return false;
    };
    let mut empty = old.clone();
    for field in ["volumeHealth", "healthStatus", "storageHealth"] {
        if let Some(status) = empty["status"].as_object_mut() {
            status.remove(field);
        }
    }
    if &empty == old {
        return false;
    }
    let probe = Replay::new(
        replay.id.clone(),
        replay.resource,
        Operation::Update,
        "status".to_owned(),
        user(ADMIN),
        Some(old.clone()),
        Some(empty),
    );
    probe
        .library(ConditionIdentity::InTree)
        .is_ok_and(|answer| answer != Answer::Allowed)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Pod's or a claim's `healthConditions`.
    Volume,
    /// A CSINode's.
    Storage,
}

/// The writer of one request.
struct Gen {
    rng: Rng,
    tags: BTreeSet<&'static str>,
    /// Only valid values: the write should be accepted, unless duplicates or ratcheting say
    /// otherwise.
    clean: bool,
}

const ADMIN: &str = "system:admin";
const PAST: &str = "2026-01-01T00:00:00Z";

fn user(name: &str) -> Value {
    if name == ADMIN {
        json!({"username": ADMIN, "uid": "u-admin", "groups": ["system:masters", "system:authenticated"]})
    } else {
        json!({"username": name, "uid": format!("u-{name}"), "groups": ["system:nodes", "system:authenticated"]})
    }
}

impl Gen {
    fn tag(&mut self, tag: &'static str) {
        self.tags.insert(tag);
    }

    fn replay(&mut self, id: String, index: usize) -> Replay {
        self.clean = self.rng.percent(30);
        match self.rng.below(100) {
            0..35 => self.pod(id),
            35..65 => self.claim(id),
            _ => self.csinode(id, index),
        }
    }

    /// Who writes, given the object's node: the admin, its kubelet, or another node's.
    fn identity(&mut self, node: &str, admin: usize, own: usize) -> String {
        let roll = self.rng.below(100);
        if roll < admin {
            self.tag("admin");
            ADMIN.to_owned()
        } else if roll < admin + own {
            self.tag("kubelet own node");
            format!("system:node:{node}")
        } else {
            self.tag("kubelet other node");
            format!("system:node:{node}-other")
        }
    }

    /// The operation: an update of `status` (mostly), of the object itself, or a create.
    fn operation(&mut self, creates: bool, mains: bool) -> (Operation, &'static str) {
        match self.rng.below(100) {
            0..10 if creates => {
                self.tag("create");
                (Operation::Create, "")
            }
            10..22 if mains => {
                self.tag("main resource update");
                (Operation::Update, "")
            }
            _ => {
                self.tag("status update");
                (Operation::Update, "status")
            }
        }
    }

    fn pod(&mut self, id: String) -> Replay {
        self.tag("pod");
        let node = if self.rng.percent(50) {
            "node1"
        } else {
            "node2"
        };
        let volumes: Vec<&str> = ["vol", "scratch", "data"]
            .into_iter()
            .filter(|_| self.rng.percent(70))
            .collect();
        // A kubelet may only write its pods' status; creating or updating a pod itself is
        // another admission plugin's business (mirror pods).
        let username = self.identity(node, 60, 30);
        let admin = username == ADMIN;
        let (operation, subresource) = self.operation(admin, admin);
        let old = self.stored(operation, |g| g.pod_health(&volumes));
        let new = self.next_health(old.as_ref(), Kind::Volume, |g| g.pod_health(&volumes));
        let object = |health: Option<Value>| {
            let volumes: Vec<Value> = volumes
                .iter()
                .map(|name| json!({"name": name, "emptyDir": {}}))
                .collect();
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "foo", "namespace": "default"},
                "spec": {"nodeName": node, "volumes": volumes,
                    "containers": [{"name": "ctr", "image": "registry.example/app:1"}]},
                "status": {"phase": "Running"}});
            if let Some(health) = health {
                pod["status"]["volumeHealth"] = health;
            }
            pod
        };
        finish(
            id,
            HealthResource::Pods,
            (operation, subresource),
            user(&username),
            object(new),
            object(old),
        )
    }

    fn claim(&mut self, id: String) -> Replay {
        self.tag("claim");
        // A kubelet writes a claim's status only where one of its pods uses the claim (the
        // Node authorizer's relation). Without one, the authorizer refuses every write, and
        // only a change of the health field says something of the library (which refuses it
        // with its own text).
        let username = if self.rng.percent(92) {
            self.tag("admin");
            ADMIN.to_owned()
        } else {
            self.tag("kubelet on a claim");
            "system:node:node1".to_owned()
        };
        let admin = username == ADMIN;
        let related = !admin && self.rng.percent(60);
        if related {
            self.tag("kubelet on a claim its pod uses");
        }
        let (operation, subresource) = self.operation(admin, admin);
        let old = self.stored(operation, |g| Some(g.claim_health()));
        let mut new = self.next_health(old.as_ref(), Kind::Volume, |g| Some(g.claim_health()));
        if !admin && !related && new == old {
            new = Some(json!({"healthConditions": [{"status": "Degraded", "reason": "ByNode"}]}));
        }
        let object = |health: Option<Value>| {
            let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "claim", "namespace": "default"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Pending"}});
            if let Some(health) = health {
                claim["status"]["healthStatus"] = health;
            }
            claim
        };
        let replay = finish(
            id,
            HealthResource::PersistentVolumeClaims,
            (operation, subresource),
            user(&username),
            object(new),
            object(old),
        );
        if !related {
            return replay;
        }
        replay.with_related(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "user", "namespace": "default"},
            "spec": {"nodeName": "node1",
                "containers": [{"name": "ctr", "image": "registry.example/app:1"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}]}}))
    }

    fn csinode(&mut self, id: String, index: usize) -> Replay {
        self.tag("csinode");
        // CSINodes are cluster-wide: each write its own node, so writes can run side by side.
        let node = format!("gen-{index}");
        let username = self.identity(&node, 40, 50);
        let (operation, subresource) = self.operation(true, true);
        let drivers: Vec<&str> = ["csi.example.com", "b.example.com"]
            .into_iter()
            .filter(|_| self.rng.percent(70))
            .collect();
        let old = self.stored(operation, |g| g.storage_health());
        let new = self.next_health(old.as_ref(), Kind::Storage, |g| g.storage_health());
        // A write of the object itself registers or unregisters a driver.
        let mut new_drivers = drivers.clone();
        if operation == Operation::Update && subresource.is_empty() && new_drivers.pop().is_none() {
            new_drivers.push("csi.example.com");
        }
        let object = |health: Option<Value>, drivers: &[&str]| {
            let drivers: Vec<Value> = drivers
                .iter()
                .map(|name| json!({"name": name, "nodeID": node, "topologyKeys": null}))
                .collect();
            let mut csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                "metadata": {"name": node}, "spec": {"drivers": drivers}});
            if let Some(health) = health {
                csinode["status"] = json!({"storageHealth": health});
            }
            csinode
        };
        finish(
            id,
            HealthResource::CsiNodes,
            (operation, subresource),
            user(&username),
            object(new, &new_drivers),
            object(old, &drivers),
        )
    }

    /// The old object's health field: none, or one as the apiserver would store it (valid, or
    /// invalid and written into etcd). Optional empty strings are left out, as Go's
    /// `omitempty` leaves them out of what is stored.
    fn stored(
        &mut self,
        operation: Operation,
        health: impl Fn(&mut Self) -> Option<Value>,
    ) -> Option<Value> {
        if operation != Operation::Update || self.rng.percent(35) {
            return None;
        }
        let clean = std::mem::replace(&mut self.clean, self.rng.percent(50));
        let value = health(self)
            .map(|v| storable(&v))
            .filter(|v| *v != json!([]));
        self.clean = clean;
        value
    }

    /// The new health field: the old one unchanged, changed a little (a message, a status, a
    /// condition more or less), or a new one.
    fn next_health(
        &mut self,
        old: Option<&Value>,
        kind: Kind,
        fresh: impl Fn(&mut Self) -> Option<Value>,
    ) -> Option<Value> {
        let Some(old) = old else {
            return fresh(self);
        };
        match self.rng.below(100) {
            0..20 => {
                self.tag("unchanged health");
                Some(old.clone())
            }
            20..70 => {
                self.tag("changed health beside stored health");
                let mut new = old.clone();
                self.change(&mut new, kind);
                Some(new)
            }
            _ => fresh(self),
        }
    }

    /// Changes one condition of `health` (anywhere in it): its message or status, or removes
    /// one, or adds one.
    fn change(&mut self, health: &mut Value, kind: Kind) {
        let lists = condition_lists(health);
        if lists.is_empty() {
            return;
        }
        let path = lists[self.rng.below(lists.len())].clone();
        let list = health.pointer_mut(&path).and_then(Value::as_array_mut);
        let Some(list) = list else { return };
        match self.rng.below(4) {
            0 if !list.is_empty() => {
                let i = self.rng.below(list.len());
                list[i]["message"] = json!(self.message());
            }
            1 if !list.is_empty() => {
                let i = self.rng.below(list.len());
                if let Some(status) = self.status(kind) {
                    list[i]["status"] = json!(status);
                }
            }
            2 if !list.is_empty() => {
                let i = self.rng.below(list.len());
                list.remove(i);
            }
            _ => {
                let condition = self.condition(kind, list.len());
                list.push(condition);
            }
        }
    }

    fn pod_health(&mut self, volumes: &[&str]) -> Option<Value> {
        if self.rng.percent(15) {
            return None;
        }
        let mut entries: Vec<Value> = Vec::new();
        for _ in 0..self.rng.below(4) {
            let name = match self.rng.below(100) {
                0..6 if !self.clean => {
                    self.tag("volume not found");
                    "gone".to_owned()
                }
                6..9 if !self.clean => {
                    self.tag("missing entry name");
                    String::new()
                }
                9..13 if !self.clean && !entries.is_empty() => {
                    self.tag("duplicate entry");
                    entries[self.rng.below(entries.len())]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned()
                }
                _ if volumes.is_empty() => {
                    self.tag("volume not found");
                    "vol".to_owned()
                }
                _ => {
                    let name = volumes[self.rng.below(volumes.len())];
                    if self.clean && entries.iter().any(|e| e["name"] == name) {
                        continue;
                    }
                    name.to_owned()
                }
            };
            let mut entry = json!({"name": name});
            if self.rng.percent(85) {
                entry["healthConditions"] = self.conditions(Kind::Volume);
            }
            if self.rng.percent(20) {
                entry["lastTransitionTime"] = json!(PAST);
            }
            entries.push(entry);
        }
        Some(Value::Array(entries))
    }

    fn claim_health(&mut self) -> Value {
        let mut health = json!({});
        if self.rng.percent(92) {
            health["healthConditions"] = self.conditions(Kind::Volume);
        }
        if self.rng.percent(15) {
            health["lastTransitionTime"] = json!(PAST);
        }
        health
    }

    fn storage_health(&mut self) -> Option<Value> {
        if self.rng.percent(10) {
            return None;
        }
        let mut entries: Vec<Value> = Vec::new();
        for _ in 0..self.rng.below(4) {
            let name = if !self.clean && !entries.is_empty() && self.rng.percent(6) {
                self.tag("duplicate entry");
                entries[self.rng.below(entries.len())]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            } else {
                let name = self.driver_name();
                if self.clean && entries.iter().any(|e| e["name"] == name.as_str()) {
                    continue;
                }
                name
            };
            let mut entry = json!({"name": name});
            if self.rng.percent(90) {
                entry["healthConditions"] = self.conditions(Kind::Storage);
            }
            entries.push(entry);
        }
        Some(Value::Array(entries))
    }

    fn driver_name(&mut self) -> String {
        let valid = ["csi.example.com", "b.example.com", "hostpath.csi.k8s.io"];
        if self.clean || self.rng.percent(80) {
            return match self.rng.below(12) {
                0 => {
                    self.tag("driver name at limit");
                    format!("{}.example", "d".repeat(55))
                }
                _ => valid[self.rng.below(valid.len())].to_owned(),
            };
        }
        match self.rng.below(9) {
            0 => {
                self.tag("missing entry name");
                String::new()
            }
            1 => {
                self.tag("driver name above limit");
                format!("{}.example", "d".repeat(56))
            }
            2 => {
                self.tag("driver name above limit");
                "a".repeat(254)
            }
            n => {
                self.tag("bad driver name");
                [
                    "Bad_Name",
                    "CSI.Example.com",
                    "-lead.example.com",
                    "trail.example.com-",
                    "two..dots",
                    "\u{212a}elvin.example.com",
                ][n - 3]
                    .to_owned()
            }
        }
    }

    /// A `healthConditions` list: a few, or a count at and around 16.
    fn conditions(&mut self, kind: Kind) -> Value {
        let count = match self.rng.below(100) {
            0..8 => {
                let count = [15, 16, 17, 18][self.rng.below(4)];
                if self.clean && count > 16 { 16 } else { count }
            }
            8..12 => 0,
            _ => 1 + self.rng.below(3),
        };
        match count {
            15 => self.tag("15 conditions"),
            16 => self.tag("16 conditions"),
            17 => self.tag("17 conditions"),
            18 => self.tag("18 conditions"),
            _ => {}
        }
        let mut list: Vec<Value> = Vec::new();
        for i in 0..count {
            if !self.clean && !list.is_empty() && self.rng.percent(5) {
                self.tag("duplicate condition");
                let twin = list[self.rng.below(list.len())].clone();
                list.push(twin);
                continue;
            }
            list.push(self.condition(kind, i));
        }
        Value::Array(list)
    }

    /// A condition; `i` makes the valid reasons of one list differ, so that a clean list has
    /// no duplicates by chance.
    fn condition(&mut self, kind: Kind, i: usize) -> Value {
        let mut condition = json!({});
        if let Some(status) = self.status(kind) {
            condition["status"] = json!(status);
        }
        if let Some(reason) = self.reason(i) {
            condition["reason"] = json!(reason);
        }
        if self.rng.percent(55) {
            condition["message"] = json!(self.message());
        }
        if kind == Kind::Storage {
            let modes = [
                (
                    "accessMode",
                    &[
                        "ReadWriteOnce",
                        "ReadOnlyMany",
                        "ReadWriteMany",
                        "ReadWriteOncePod",
                    ][..],
                    &["Sometimes", "", "readwriteonce", "Block"][..],
                    "bad accessMode",
                ),
                (
                    "volumeMode",
                    &["Filesystem", "Block"][..],
                    &["", "block", "Raw", "ReadWriteOnce"][..],
                    "bad volumeMode",
                ),
            ];
            for (member, valid, bad, tag) in modes {
                match self.rng.below(100) {
                    0..55 => {}
                    55..92 => condition[member] = json!(self.rng.pick(valid)),
                    _ if self.clean => {}
                    _ => {
                        self.tag(tag);
                        condition[member] = json!(self.rng.pick(bad));
                    }
                }
            }
        }
        condition
    }

    fn status(&mut self, kind: Kind) -> Option<String> {
        let (valid, other): (&[&str], &[&str]) = match kind {
            Kind::Volume => (
                &["DataLoss", "Degraded", "Inaccessible"],
                &["StorageDegraded"],
            ),
            Kind::Storage => (&["StorageDegraded", "StorageUnreachable"], &["Degraded"]),
        };
        if self.clean || self.rng.percent(82) {
            return Some(self.rng.pick(valid).to_owned());
        }
        if self.rng.percent(20) {
            self.tag("missing status");
            return None;
        }
        self.tag("bad status");
        let lower = self.rng.pick(valid).to_lowercase();
        Some(match self.rng.below(4) {
            0 => String::new(),
            1 => lower,
            2 => other[0].to_owned(),
            _ => "Unknown".to_owned(),
        })
    }

    fn reason(&mut self, i: usize) -> Option<String> {
        // Distinct per index: "ReasonA", "ReasonB", ...
        let letter = char::from(b'A' + (i % 26) as u8);
        if self.clean || self.rng.percent(78) {
            return Some(match self.rng.below(20) {
                0 => {
                    self.tag("reason at limit");
                    format!("{letter}{}", "r".repeat(255))
                }
                1 => {
                    self.tag("reason below limit");
                    format!("{letter}{}", "r".repeat(254))
                }
                2 => format!("Lost:{letter}_1,b"),
                _ => format!(
                    "{}{letter}",
                    self.rng.pick(&["PoolFull", "HighLatency", "Slow"])
                ),
            });
        }
        Some(match self.rng.below(8) {
            0 => {
                self.tag("missing reason");
                return None;
            }
            1 => {
                self.tag("missing reason");
                String::new()
            }
            2 => {
                self.tag("reason above limit");
                format!("{letter}{}", "r".repeat(256))
            }
            3 => {
                // 129 characters, 257 bytes.
                self.tag("reason multibyte over limit in bytes only");
                format!("{letter}{}", "é".repeat(128))
            }
            n => {
                self.tag("bad reason format");
                ["bad reason", "1Lives", "A-B", "Trailing:"][n - 4].to_owned()
            }
        })
    }

    /// A message: short, or at, one below or one above 1024 bytes, in ASCII or in two-, three-
    /// and four-byte characters.
    fn message(&mut self) -> String {
        if self.rng.percent(70) {
            return self
                .rng
                .pick(&["slow I/O", "pool 91% full", "é"])
                .to_owned();
        }
        let choices: &[(&str, usize, &str, &'static str)] = &[
            ("m", 1024, "", "message at limit"),
            ("m", 1023, "", "message below limit"),
            ("é", 512, "", "message multibyte at limit"),
            ("€", 341, "", "message below limit"),
            ("😀", 256, "", "message multibyte at limit"),
            ("m", 1025, "", "message above limit"),
            ("é", 512, "x", "message multibyte over limit in bytes only"),
            ("€", 342, "", "message multibyte over limit in bytes only"),
            ("😀", 256, "x", "message multibyte over limit in bytes only"),
        ];
        let valid = 5;
        let n = if self.clean { valid } else { choices.len() };
        let (unit, times, tail, tag) = choices[self.rng.below(n)];
        self.tag(tag);
        format!("{}{tail}", unit.repeat(times))
    }
}

fn finish(
    id: String,
    resource: HealthResource,
    (operation, subresource): (Operation, &str),
    user: Value,
    object: Value,
    old: Value,
) -> Replay {
    let old = (operation == Operation::Update).then_some(old);
    Replay::new(
        id,
        resource,
        operation,
        subresource.to_owned(),
        user,
        Some(object),
        old,
    )
}

/// The paths (JSON pointers) of every `healthConditions` list in a health field.
fn condition_lists(health: &Value) -> Vec<String> {
    match health {
        Value::Array(entries) => entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e["healthConditions"].is_array())
            .map(|(i, _)| format!("/{i}/healthConditions"))
            .collect(),
        Value::Object(_) if health["healthConditions"].is_array() => {
            vec!["/healthConditions".to_owned()]
        }
        _ => Vec::new(),
    }
}

/// `value` as the apiserver serves it once stored: empty optional strings and empty lists left
/// out, a condition's required strings there even when empty (Go's `omitempty` is on some
/// members only). An empty health list is left out too: the caller stores none.
fn storable(value: &Value) -> Value {
    const OPTIONAL: &[&str] = &["message", "accessMode", "volumeMode", "lastTransitionTime"];
    match value {
        Value::Array(items) => Value::Array(items.iter().map(storable).collect()),
        Value::Object(members) => {
            let mut stored: serde_json::Map<String, Value> = members
                .iter()
                .filter(|(k, v)| !(OPTIONAL.contains(&k.as_str()) && *v == "") && *v != &json!([]))
                .map(|(k, v)| (k.clone(), storable(v)))
                .collect();
            if let Some(Value::Array(conditions)) = stored.get_mut("healthConditions") {
                for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
                    for required in ["status", "reason"] {
                        condition.entry(required).or_insert(json!(""));
                    }
                }
            }
            Value::Object(stored)
        }
        other => other.clone(),
    }
}

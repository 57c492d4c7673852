//! The explorer's oracles: what a run must show, with no assertion written by the user.
//!
//! Objects are compared normalised: without what differs from run to run whatever the operator
//! does (uid, resourceVersion, managedFields, timestamps, the namespace of the run), and with
//! `observedGeneration` read as whether it is current, since how many writes a generation took is
//! not the operator's promise.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde_json::Value;

use super::tap::Write;

/// The uids of `objects` by `Kind/name`, to name a uid wherever it appears.
pub(crate) fn uid_names<'a>(objects: impl Iterator<Item = &'a Value>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for object in objects {
        let uid = object.pointer("/metadata/uid").and_then(Value::as_str);
        let kind = object.get("kind").and_then(Value::as_str);
        let name = object.pointer("/metadata/name").and_then(Value::as_str);
        if let (Some(uid), Some(kind), Some(name)) = (uid, kind, name) {
            names.insert(uid.to_string(), format!("<uid of {kind}/{name}>"));
        }
    }
    names
}

/// An object as the oracles compare it. A uid anywhere in it (an owner reference, a label, a
/// value) reads as the object that has it now, `uids` telling, or as a uid of an object gone; the
/// run's namespace (in an object reference, say) as `<namespace>`.
pub(crate) fn normalise(object: &Value, uids: &BTreeMap<String, String>, namespace: &str) -> Value {
    let mut object = object.clone();
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "namespace",
            "selfLink",
        ] {
            metadata.remove(key);
        }
    }
    mark_generations(&mut object, generation);
    blank_times_and_uids(&mut object, uids, namespace);
    object
}

/// Each `observedGeneration` as "current" or "behind".
fn mark_generations(value: &mut Value, generation: Option<i64>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "observedGeneration" {
                    let current = value.as_i64().is_some() && value.as_i64() == generation;
                    *value = Value::String(if current { "current" } else { "behind" }.into());
                } else {
                    mark_generations(value, generation);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| mark_generations(v, generation)),
        _ => {}
    }
}

/// Every RFC 3339 timestamp as `<time>`, every uid as whose it is.
fn blank_times_and_uids(value: &mut Value, uids: &BTreeMap<String, String>, namespace: &str) {
    match value {
        Value::String(text) if text == namespace => *text = "<namespace>".into(),
        Value::String(text) if looks_like_time(text) => *text = "<time>".into(),
        Value::String(text) if looks_like_uid(text) => {
            *text = uids
                .get(text.as_str())
                .cloned()
                .unwrap_or_else(|| "<uid of an object gone>".into());
        }
        Value::String(text) => {
            for (uid, name) in uids {
                if text.contains(uid.as_str()) {
                    *text = text.replace(uid.as_str(), name);
                }
            }
        }
        Value::Object(map) => {
            // A field set to null is a field absent to the API (a status withdrawn whole reads
            // `null`, one never written is not there).
            map.retain(|_, v| !v.is_null());
            map.values_mut()
                .for_each(|v| blank_times_and_uids(v, uids, namespace))
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| blank_times_and_uids(v, uids, namespace)),
        _ => {}
    }
}

/// `8-4-4-4-12` hexadecimal digits.
fn looks_like_uid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn looks_like_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        range
            .into_iter()
            .all(|i| bytes.get(i).is_some_and(u8::is_ascii_digit))
    };
    bytes.len() >= 20
        && digits(0..4)
        && bytes[4] == b'-'
        && digits(5..7)
        && bytes[7] == b'-'
        && digits(8..10)
        && bytes[10] == b'T'
        && digits(11..13)
        && bytes[13] == b':'
}

/// The differences between `expected` and `found`, one line per field: `/spec/replicas: 3 in the
/// reference run, 1 here`.
pub(crate) fn differences(expected: &Value, found: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    diff(
        expected,
        found,
        String::new(),
        ("in the reference run", "here"),
        &mut lines,
    );
    lines
}

/// What differs between `written` (a spec as its user wrote it) and `now`, field by field.
pub(crate) fn changes(written: &Value, now: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    diff(
        written,
        now,
        String::new(),
        ("as written", "now"),
        &mut lines,
    );
    lines
}

/// Each difference of `found` from `expected` under `path`, as "`path`: x (where) y (where)".
fn diff(
    expected: &Value,
    found: &Value,
    path: String,
    (before, after): (&str, &str),
    lines: &mut Vec<String>,
) {
    match (expected, found) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let path = format!("{path}/{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, path, (before, after), lines),
                    (Some(x), None) => {
                        lines.push(format!("{path}: {} {before}, absent {after}", short(x)))
                    }
                    (None, Some(y)) => {
                        lines.push(format!("{path}: absent {before}, {} {after}", short(y)))
                    }
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, format!("{path}/{i}"), (before, after), lines);
            }
        }
        (a, b) if a != b => lines.push(format!(
            "{}: {} {before}, {} {after}",
            if path.is_empty() { "/" } else { &path },
            short(a),
            short(b)
        )),
        _ => {}
    }
}

/// A value for a report line: at most 120 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The objects at the end of a run, normalised, by path without namespace (`apps/v1/deployments/x`);
/// `None` for one written during the run and gone at its end.
pub(crate) type EndState = BTreeMap<String, Option<Value>>;

/// What differs between the reference run's end state and this run's, object by object.
pub(crate) fn state_problems(reference: &EndState, found: &EndState) -> Vec<String> {
    let paths: BTreeSet<&String> = reference.keys().chain(found.keys()).collect();
    let mut problems = Vec::new();
    for path in paths {
        let expected = reference.get(path).cloned().flatten();
        let here = found.get(path).cloned().flatten();
        match (expected, here) {
            (Some(expected), Some(here)) => {
                let lines = differences(&expected, &here);
                if !lines.is_empty() {
                    problems.push(format!(
                        "{path} differs from the reference run:\n      {}",
                        lines.join("\n      ")
                    ));
                }
            }
            (Some(_), None) => problems.push(format!(
                "{path} is missing (the reference run ends with it)"
            )),
            (None, Some(here)) => {
                let owner = controller_of(&here);
                let twin = owner.as_ref().and_then(|owner| {
                    reference.iter().find(|(other, object)| {
                        same_resource(other, path)
                            && object.as_ref().and_then(controller_of).as_ref() == Some(owner)
                    })
                });
                match (owner, twin) {
                    (Some(owner), Some((twin, _))) => problems.push(format!(
                        "{path} is a duplicate child of {owner} (the reference run ends with {twin} only)"
                    )),
                    _ => problems.push(format!("{path} exists (the reference run ends without it)")),
                }
            }
            (None, None) => {}
        }
    }
    problems
}

/// `Kind/name` of an object's controller owner.
fn controller_of(object: &Value) -> Option<String> {
    let owners = object.pointer("/metadata/ownerReferences")?.as_array()?;
    let owner = owners
        .iter()
        .find(|o| o.get("controller") == Some(&Value::Bool(true)))?;
    Some(format!(
        "{}/{}",
        owner.get("kind")?.as_str()?,
        owner.get("name")?.as_str()?
    ))
}

/// Whether two object paths are of one resource (`apps/v1/deployments/a`, `apps/v1/deployments/b`).
fn same_resource(a: &str, b: &str) -> bool {
    a.rsplit_once('/').map(|(r, _)| r) == b.rsplit_once('/').map(|(r, _)| r)
}

/// Deletes made here that the reference run did not make (or made fewer times).
pub(crate) fn unexpected_deletes(reference: &[Write], found: &[Write]) -> Vec<String> {
    let deleted = |writes: &[Write]| -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for write in writes
            .iter()
            .filter(|w| w.verb == "DELETE" && (200..300).contains(&w.code))
        {
            *counts.entry(write.object.clone()).or_default() += 1;
        }
        counts
    };
    let expected = deleted(reference);
    deleted(found)
        .into_iter()
        .filter(|(object, times)| expected.get(object).is_none_or(|e| times > e))
        .map(|(object, times)| {
            let reference = expected.get(&object).copied().unwrap_or_default();
            format!("the operator deleted {object} {times} time(s); the reference run {reference}")
        })
        .collect()
}

/// Writes of an incarnation after another had taken its place, and, under leader election
/// (`leads` given), before it led.
pub(crate) fn second_writers(
    writes: &[Write],
    superseded: &[(usize, Instant)],
    leads: Option<&[(usize, Instant)]>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for write in writes.iter().filter(|w| (200..300).contains(&w.code)) {
        let ended = superseded.iter().find(|(i, _)| *i == write.incarnation);
        if let Some((_, since)) = ended.filter(|(_, since)| write.at > *since) {
            problems.push(format!(
                "two writers at once: manager {} wrote `{}` {:.0?} after another manager had taken over",
                write.incarnation,
                write.describe(),
                write.at.duration_since(*since),
            ));
            continue;
        }
        let Some(leads) = leads else { continue };
        match leads.iter().find(|(i, _)| *i == write.incarnation) {
            Some((_, from)) if write.at >= *from => {}
            _ => problems.push(format!(
                "two writers at once: manager {} wrote `{}` while it did not hold the Lease",
                write.incarnation,
                write.describe(),
            )),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID_A: &str = "6d1f2a3b-0000-4000-8000-00000000000a";
    const UID_B: &str = "6d1f2a3b-0000-4000-8000-00000000000b";

    fn deployment(uid: &str, replicas: i64, generation: i64, observed: i64) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "ns", "uid": uid, "resourceVersion": "7",
                "generation": generation, "creationTimestamp": "2026-12-07T10:00:00Z",
                "ownerReferences": [{ "kind": "Memcached", "name": "web", "uid": uid, "controller": true }],
            },
            "spec": { "replicas": replicas },
            "status": { "observedGeneration": observed, "conditions": [
                { "type": "Available", "lastTransitionTime": format!("2026-12-07T10:0{generation}:00Z") },
            ] },
        })
    }

    #[test]
    fn what_differs_between_runs_anyway_is_normalised_away() {
        let a = normalise(&deployment(UID_A, 3, 2, 2), &BTreeMap::new(), "ns");
        let b = normalise(&deployment(UID_B, 3, 5, 5), &BTreeMap::new(), "ns");
        assert!(differences(&a, &b).is_empty(), "{:?}", differences(&a, &b));
        assert_eq!(
            a.pointer("/status/observedGeneration"),
            Some(&json!("current"))
        );
    }

    #[test]
    fn a_field_set_to_null_reads_as_absent_and_an_empty_one_does_not() {
        let mut withdrawn = deployment(UID_A, 3, 1, 1);
        withdrawn["status"] = Value::Null;
        let mut never_written = deployment(UID_A, 3, 1, 1);
        never_written.as_object_mut().unwrap().remove("status");
        let [withdrawn, never_written] =
            [withdrawn, never_written].map(|o| normalise(&o, &BTreeMap::new(), "ns"));
        assert!(differences(&withdrawn, &never_written).is_empty());
        let mut emptied = deployment(UID_A, 3, 1, 1);
        emptied["status"] = json!({});
        let emptied = normalise(&emptied, &BTreeMap::new(), "ns");
        assert_eq!(differences(&emptied, &never_written).len(), 1);
    }

    #[test]
    fn a_uid_reads_as_whose_it_is_or_as_gone() {
        let owner = json!({ "kind": "Memcached", "metadata": { "name": "web", "uid": UID_A } });
        let uids = uid_names([&owner].into_iter());
        let current = normalise(&deployment(UID_A, 3, 1, 1), &uids, "ns");
        let orphan = normalise(&deployment(UID_B, 3, 1, 1), &uids, "ns");
        let owner_uid = "/metadata/ownerReferences/0/uid";
        assert_eq!(
            current.pointer(owner_uid),
            Some(&json!("<uid of Memcached/web>"))
        );
        assert_eq!(
            orphan.pointer(owner_uid),
            Some(&json!("<uid of an object gone>"))
        );
        let record = json!({ "data": { "owner": format!("owner={UID_A}") } });
        let record = normalise(&record, &uids, "ns");
        assert_eq!(
            record.pointer("/data/owner"),
            Some(&json!("owner=<uid of Memcached/web>"))
        );
    }

    #[test]
    fn deletes_count_per_object() {
        let delete = |object: &str| Write {
            incarnation: 0,
            step: 1,
            verb: "DELETE".into(),
            object: object.into(),
            subresource: String::new(),
            code: 200,
            at: Instant::now(),
        };
        let reference = [delete("v1/configmaps/a")];
        assert!(unexpected_deletes(&reference, &reference).is_empty());
        let twice = [
            delete("v1/configmaps/a"),
            delete("v1/configmaps/a"),
            delete("v1/configmaps/b"),
        ];
        let problems = unexpected_deletes(&reference, &twice);
        assert_eq!(
            problems,
            [
                "the operator deleted v1/configmaps/a 2 time(s); the reference run 1",
                "the operator deleted v1/configmaps/b 1 time(s); the reference run 0",
            ]
        );
    }

    #[test]
    fn a_field_that_differs_is_named_with_both_values() {
        let a = normalise(&deployment(UID_A, 3, 2, 2), &BTreeMap::new(), "ns");
        let b = normalise(&deployment(UID_B, 1, 2, 1), &BTreeMap::new(), "ns");
        assert_eq!(
            differences(&a, &b),
            [
                "/spec/replicas: 3 in the reference run, 1 here",
                "/status/observedGeneration: \"current\" in the reference run, \"behind\" here",
            ]
        );
    }

    #[test]
    fn a_second_child_of_one_owner_is_a_duplicate() {
        let none = BTreeMap::new();
        let web = normalise(&deployment(UID_A, 3, 1, 1), &none, "ns");
        let reference = EndState::from([("apps/v1/deployments/web".to_string(), Some(web))]);
        let mut found = reference.clone();
        let mut twin = normalise(&deployment(UID_B, 3, 1, 1), &none, "ns");
        twin["metadata"]["name"] = json!("web-2");
        found.insert("apps/v1/deployments/web-2".into(), Some(twin));
        let problems = state_problems(&reference, &found);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("duplicate child of Memcached/web"),
            "{problems:?}"
        );
        found.insert("apps/v1/deployments/web".into(), None);
        assert_eq!(state_problems(&reference, &found).len(), 2);
    }

    #[test]
    fn a_write_after_a_takeover_is_a_second_writer() {
        let start = Instant::now();
        let write = |incarnation, millis| Write {
            incarnation,
            step: 1,
            verb: "PATCH".into(),
            object: "apps/v1/deployments/web".into(),
            subresource: String::new(),
            code: 200,
            at: start + std::time::Duration::from_millis(millis),
        };
        let writes = [write(0, 10), write(1, 30), write(0, 40)];
        let superseded = [(0, start + std::time::Duration::from_millis(20))];
        let problems = second_writers(&writes, &superseded, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with(
            "two writers at once: manager 0 wrote `PATCH apps/v1/deployments/web` 20ms after"
        ));

        // Under leader election, manager 1 leads from 25 ms: its write at 5 ms is a second writer's.
        let leads = [
            (0, start),
            (1, start + std::time::Duration::from_millis(25)),
        ];
        let writes = [write(0, 10), write(1, 5), write(1, 30)];
        let problems = second_writers(&writes, &superseded, Some(&leads));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .contains("manager 1 wrote `PATCH apps/v1/deployments/web` while it did not hold")
        );
    }
}

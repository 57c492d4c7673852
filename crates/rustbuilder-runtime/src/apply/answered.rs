//! The API server's answers to this process's applies, for the objects it stores otherwise than
//! [`Comparison`](super::Comparison) expects.
//!
//! Some built-in kinds default fields in code without publishing the default in their schema (a
//! NetworkPolicy port's `protocol`, a webhook rule's `scope`): an atomic list that holds such an
//! item never compares equal to the wanted one, and every reconcile would send an apply that
//! changes nothing. So when the object an apply returns does not hold what was applied by the
//! comparison, the answer is remembered, by the object's uid: the digest of what was applied, and
//! the digest of the answer's fields where it was applied. While the object still has those fields
//! (no one changed them since) and the same object is wanted, there is nothing to apply.
//!
//! Uids are unique across clusters, so one memory serves every cluster of a process. It holds only
//! the objects the comparison misjudges, and starts over when it reaches [`LIMIT`] of them.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{LazyLock, Mutex};

use serde_json::Value;

/// The most objects remembered.
const LIMIT: usize = 16_384;

/// What was applied to an object, and what the answer held where it was applied.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Answer {
    applied: u64,
    answered: u64,
}

static ANSWERS: LazyLock<Mutex<HashMap<String, Answer>>> = LazyLock::new(Mutex::default);

/// Remembers that the API server answered the apply of `wanted` with `stored`.
pub(super) fn remember(stored: &Value, wanted: &Value) {
    let Some(uid) = uid(stored) else {
        return;
    };
    let answer = Answer {
        applied: digest(wanted),
        answered: digest_where(stored, wanted),
    };
    let mut answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
    if answers.len() >= LIMIT && !answers.contains_key(uid) {
        answers.clear();
    }
    answers.insert(uid.to_owned(), answer);
}

/// Whether `current` is, where `wanted` has fields, what the API server answered when `wanted` was
/// last applied to it: applying it again would change nothing.
pub(super) fn already(current: &Value, wanted: &Value) -> bool {
    let Some(uid) = uid(current) else {
        return false;
    };
    let answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(answer) = answers.get(uid).copied() else {
        return false;
    };
    drop(answers);
    answer.applied == digest(wanted) && answer.answered == digest_where(current, wanted)
}

fn uid(object: &Value) -> Option<&str> {
    object.pointer("/metadata/uid").and_then(Value::as_str)
}

/// A digest of `value` that does not depend on the order of its fields.
fn digest(value: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    feed(value, &mut hasher);
    hasher.finish()
}

/// A digest of `actual` where `wanted` has fields: an object field by field as far as `wanted`
/// goes, and below that (a list, a scalar) the whole value, so that a field the API server
/// added to a list item counts.
fn digest_where(actual: &Value, wanted: &Value) -> u64 {
    fn walk(actual: Option<&Value>, wanted: &Value, hasher: &mut DefaultHasher) {
        match (actual, wanted) {
            (Some(Value::Object(actual)), Value::Object(wanted)) => {
                hasher.write_u8(b'{');
                let mut keys: Vec<&String> = wanted.keys().collect();
                keys.sort();
                for key in keys {
                    key.hash(hasher);
                    walk(actual.get(key), &wanted[key], hasher);
                }
            }
            (Some(actual), _) => feed(actual, hasher),
            (None, _) => hasher.write_u8(b'-'),
        }
    }
    let mut hasher = DefaultHasher::new();
    walk(Some(actual), wanted, &mut hasher);
    hasher.finish()
}

fn feed(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Null => hasher.write_u8(b'n'),
        Value::Bool(b) => (b'b', b).hash(hasher),
        Value::Number(n) => (b'#', n.to_string()).hash(hasher),
        Value::String(s) => (b's', s).hash(hasher),
        Value::Array(items) => {
            (b'[', items.len()).hash(hasher);
            items.iter().for_each(|item| feed(item, hasher));
        }
        Value::Object(fields) => {
            (b'{', fields.len()).hash(hasher);
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            for key in keys {
                key.hash(hasher);
                feed(&fields[key], hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(uid: &str, port: Value, extra: Value) -> Value {
        json!({
            "metadata": { "name": "web", "uid": uid, "resourceVersion": "7", "extra": extra },
            "spec": { "ingress": [{ "ports": [port] }] },
        })
    }

    #[test]
    fn an_answer_counts_while_the_applied_fields_stay_as_answered() {
        let wanted = json!({ "metadata": { "name": "web" }, "spec": { "ingress": [{ "ports": [{ "port": 80 }] }] } });
        let stored = policy("u-1", json!({ "port": 80, "protocol": "TCP" }), json!(1));
        assert!(!already(&stored, &wanted), "nothing remembered yet");
        remember(&stored, &wanted);
        assert!(already(&stored, &wanted));
        // Fields the apply did not set (a resourceVersion, a status, another's field) may change.
        let mut later = policy("u-1", json!({ "port": 80, "protocol": "TCP" }), json!(2));
        later["metadata"]["resourceVersion"] = json!("9");
        assert!(already(&later, &wanted));
        // Another's edit where the apply sets fields is a difference again.
        let edited = policy("u-1", json!({ "port": 80, "protocol": "UDP" }), json!(1));
        assert!(!already(&edited, &wanted));
        // So is another wanted object, and the same answer for another object.
        let other = json!({ "metadata": { "name": "web" }, "spec": { "ingress": [{ "ports": [{ "port": 81 }] }] } });
        assert!(!already(&stored, &other));
        let recreated = policy("u-2", json!({ "port": 80, "protocol": "TCP" }), json!(1));
        assert!(!already(&recreated, &wanted));
    }

    #[test]
    fn digests_do_not_depend_on_field_order() {
        let a: Value = serde_json::from_str(r#"{"a": 1, "b": [1, {"x": 1, "y": 2}]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1}], "a": 1}"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        let c: Value = serde_json::from_str(r#"{"a": 1, "b": [{"y": 2, "x": 1}, 1]}"#).unwrap();
        assert_ne!(digest(&a), digest(&c), "list order counts");
    }
}

//! Status conditions as the Kubernetes API conventions describe them: one entry per `type`, whose
//! `lastTransitionTime` moves only when its `status` changes.
//!
//! ```
//! use rustbuilder_runtime::conditions;
//!
//! let mut status_conditions = Vec::new();
//! let available = conditions::new("Available", true, "MinimumReplicasAvailable", "3 of 3 ready", 2);
//! assert!(conditions::set(&mut status_conditions, available));
//! assert!(conditions::is_true(&status_conditions, "Available"));
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The current time, truncated to whole seconds as the API server stores it, so that a time computed
/// here compares equal to the one read back.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// A condition with status `"True"` or `"False"`, stamped [`now`]. `reason` is CamelCase;
/// `observed_generation` is the object's `metadata.generation` the condition was computed from (an
/// `i64` or an `Option<i64>`).
pub fn new(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: impl Into<Option<i64>>,
) -> Condition {
    let status = if status { "True" } else { "False" };
    with_status(type_, status, reason, message, observed_generation)
}

/// A condition with status `"Unknown"`, stamped [`now`]: the controller cannot tell yet.
pub fn unknown(
    type_: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: impl Into<Option<i64>>,
) -> Condition {
    with_status(type_, "Unknown", reason, message, observed_generation)
}

fn with_status(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: impl Into<Option<i64>>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: observed_generation.into(),
        last_transition_time: now(),
    }
}

/// Adds `condition`, or replaces the one of the same type. When the status did not change, the old
/// `lastTransitionTime` is kept, so re-asserting a condition never rewrites the object. Returns whether
/// anything changed.
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(old) => {
            if old.status == condition.status {
                condition.last_transition_time = old.last_transition_time.clone();
            }
            let changed = *old != condition;
            *old = condition;
            changed
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// Whether `after` tells something `before` does not: a condition added or gone, or another status,
/// reason or message. Transition times and observed generations are not compared, so a controller
/// can skip a status write that would only move counts.
pub fn changed(before: &[Condition], after: &[Condition]) -> bool {
    fn verdicts(conditions: &[Condition]) -> Vec<[&str; 4]> {
        let mut verdicts: Vec<_> = conditions
            .iter()
            .map(|c| [&*c.type_, &c.status, &c.reason, &c.message])
            .collect();
        verdicts.sort_unstable();
        verdicts
    }
    verdicts(before) != verdicts(after)
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present with status `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn stamped(mut condition: Condition, time: i64) -> Condition {
        condition.last_transition_time = at(time);
        condition
    }

    #[test]
    fn keeps_transition_time_while_status_holds() {
        let mut conditions = Vec::new();
        assert!(set(
            &mut conditions,
            stamped(new("Ready", false, "Starting", "", 1), 10)
        ));
        assert!(set(
            &mut conditions,
            stamped(new("Ready", false, "Waiting", "", 2), 20)
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].reason, "Waiting");
        assert_eq!(conditions[0].observed_generation, Some(2));

        assert!(set(
            &mut conditions,
            stamped(new("Ready", true, "Done", "", 2), 30)
        ));
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert!(is_true(&conditions, "Ready"));
    }

    #[test]
    fn reasserting_changes_nothing() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            stamped(new("Ready", true, "Done", "ok", 3), 10),
        );
        let before = conditions.clone();
        assert!(!set(
            &mut conditions,
            stamped(new("Ready", true, "Done", "ok", 3), 99)
        ));
        assert_eq!(conditions, before);
    }

    #[test]
    fn one_entry_per_type() {
        let mut conditions = Vec::new();
        set(&mut conditions, new("Available", true, "A", "", None));
        set(&mut conditions, new("Degraded", false, "B", "", None));
        set(&mut conditions, unknown("Available", "C", "", None));
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Available", "Degraded"]);
        assert_eq!(find(&conditions, "Available").unwrap().status, "Unknown");
        assert!(!is_true(&conditions, "Available"));
        assert!(!is_true(&conditions, "Degraded"));
        assert!(!is_true(&conditions, "Missing"));
    }

    #[test]
    fn now_has_whole_seconds() {
        assert_eq!(now().0.subsec_nanosecond(), 0);
    }

    #[test]
    fn a_change_is_a_new_verdict_not_a_new_generation() {
        let before = vec![
            new("Available", true, "A", "serves", Some(1)),
            new("Degraded", false, "B", "", Some(1)),
        ];
        // The same verdicts for a newer generation, in another order: nothing to tell.
        let mut after = vec![
            new("Degraded", false, "B", "", Some(2)),
            new("Available", true, "A", "serves", Some(2)),
        ];
        assert!(!changed(&before, &after));
        after[1].message = "serves again".into();
        assert!(changed(&before, &after));
        assert!(changed(&before, &before[..1]));
        assert!(changed(&[], &before));
    }
}

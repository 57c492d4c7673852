// Copyright The project Authors
// SPDX-License-Identifier: Apache-2.0

//! Status conditions, the way Kubernetes API conventions describe them: one entry per `type`, whose
//! `lastTransitionTime` only moves when its `status` changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The current time, truncated to whole seconds as the API server stores it, so a time we computed
/// compares equal to the one we read back.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Builds a condition. `status` is `"True"`, `"False"` or `"Unknown"`; `reason` is CamelCase.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: now.clone(),
    }
}

/// Adds or replaces the condition of the same type, keeping the old `lastTransitionTime` when the status did
/// not change (like Go's `meta.SetStatusCondition`), so re-asserting a condition never rewrites the object.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
        }
        None => conditions.push(new),
    }
}

/// The condition of a type, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn keeps_transition_time_while_status_holds() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            condition("Ready", "False", "Starting", "", Some(1), &at(10)),
        );
        set_condition(
            &mut conditions,
            condition("Ready", "False", "Waiting", "", Some(2), &at(20)),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].reason, "Waiting");

        set_condition(
            &mut conditions,
            condition("Ready", "True", "Done", "", Some(2), &at(30)),
        );
        assert_eq!(conditions[0].last_transition_time, at(30));
        let ready = find_condition(&conditions, "Ready").unwrap();
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn one_entry_per_type() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            condition("Available", "True", "A", "", None, &at(1)),
        );
        set_condition(
            &mut conditions,
            condition("Degraded", "False", "B", "", None, &at(1)),
        );
        set_condition(
            &mut conditions,
            condition("Available", "False", "C", "", None, &at(2)),
        );
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Available", "Degraded"]);
    }

    #[test]
    fn now_has_whole_seconds() {
        assert_eq!(now().0.subsec_nanosecond(), 0);
    }
}

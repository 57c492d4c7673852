// Copyright The project-basic Authors
// SPDX-License-Identifier: Apache-2.0

//! Status conditions, the way Kubernetes API conventions describe them: one entry per `type`, whose
//! `lastTransitionTime` only moves when its `status` changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Builds a condition; `now` becomes its transition time unless [`set_condition`] keeps an older one.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(now),
    }
}

/// Adds or replaces the condition of the same type, keeping the old `lastTransitionTime` when the status did
/// not change, so that an unchanged object gets a byte-identical status (and no needless API write).
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

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn keeps_transition_time_while_status_holds() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            condition("Ready", false, "Starting", "", Some(1), at(10)),
        );
        set_condition(
            &mut conditions,
            condition("Ready", false, "Waiting", "still", Some(2), at(20)),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
        assert_eq!(conditions[0].reason, "Waiting");

        set_condition(
            &mut conditions,
            condition("Ready", true, "Done", "", Some(2), at(30)),
        );
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
        assert_eq!(
            find_condition(&conditions, "Ready").map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn one_entry_per_type() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            condition("Available", true, "A", "", None, at(1)),
        );
        set_condition(
            &mut conditions,
            condition("Degraded", false, "B", "", None, at(1)),
        );
        set_condition(
            &mut conditions,
            condition("Available", false, "C", "", None, at(2)),
        );
        assert_eq!(
            conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            ["Available", "Degraded"]
        );
    }
}

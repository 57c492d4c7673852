// Copyright The project-cronjob Authors
// SPDX-License-Identifier: Apache-2.0

//! Conversion between `CronJob` v2 (this version, a spoke) and v1, the hub: the version the API
//! server stores. Each version converts to and from the hub only; when a client asks for one spoke
//! and etcd holds another, the conversion webhook goes through the hub.
//!
//! The conversion loses nothing. Most schedules read the same both ways: the v1 string is the five
//! fields joined by spaces, `*` for a field left out. What one version cannot say is kept in an
//! annotation of the other, and read back from it: a v2 field set to `*` (v1 would give it back
//! left out), and a v1 string that is not five fields (`@hourly`, two spaces between fields).

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use super::{ConcurrencyPolicy, CronField, CronJob, CronJobSpec, CronJobStatus, CronSchedule};
use crate::api::v1 as hub;

/// On a v1 object: the v2 schedule its `schedule` string was made from, when the string would read
/// back as another one.
pub const V2_SCHEDULE: &str = "batch.tutorial.kubebuilder.io/v2-schedule";
/// On a v2 object: the v1 string its schedule was read from, when the fields cannot say it.
pub const V1_SCHEDULE: &str = "batch.tutorial.kubebuilder.io/v1-schedule";

/// The v1 string of a v2 schedule: the five fields in cron's order, `*` for one left out.
pub fn to_cron_string(schedule: &CronSchedule) -> String {
    [
        &schedule.minute,
        &schedule.hour,
        &schedule.day_of_month,
        &schedule.month,
        &schedule.day_of_week,
    ]
    .map(|field| field.as_ref().map_or("*", |f| f.0.as_str()))
    .join(" ")
}

/// The v2 schedule of a v1 string: its five space-separated fields, a `*` left out. A string that is
/// not five fields has none: every field is left out (and the string kept in [`V1_SCHEDULE`]).
pub fn from_cron_string(schedule: &str) -> CronSchedule {
    let fields: Vec<&str> = schedule.split(' ').collect();
    let [minute, hour, day_of_month, month, day_of_week] = fields[..] else {
        return CronSchedule::default();
    };
    if fields.iter().any(|f| f.is_empty()) {
        return CronSchedule::default();
    }
    let field = |f: &str| (f != "*").then(|| CronField(f.to_string()));
    CronSchedule {
        minute: field(minute),
        hour: field(hour),
        day_of_month: field(day_of_month),
        month: field(month),
        day_of_week: field(day_of_week),
    }
}

impl From<hub::CronJob> for CronJob {
    fn from(cron_job: hub::CronJob) -> Self {
        let hub::CronJob {
            mut metadata,
            spec,
            status,
        } = cron_job;
        // A v2 schedule kept by an earlier conversion, unless the string was edited at v1 since.
        let kept = take_annotation(&mut metadata, V2_SCHEDULE)
            .and_then(|json| serde_json::from_str::<CronSchedule>(&json).ok())
            .filter(|schedule| to_cron_string(schedule) == spec.schedule);
        let schedule = kept.unwrap_or_else(|| {
            let schedule = from_cron_string(&spec.schedule);
            if to_cron_string(&schedule) != spec.schedule {
                set_annotation(&mut metadata, V1_SCHEDULE, spec.schedule.clone());
            }
            schedule
        });
        Self {
            metadata,
            spec: CronJobSpec {
                schedule,
                time_zone: spec.time_zone,
                starting_deadline_seconds: spec.starting_deadline_seconds,
                concurrency_policy: spec.concurrency_policy.into(),
                suspend: spec.suspend,
                job_template: spec.job_template,
                successful_jobs_history_limit: spec.successful_jobs_history_limit,
                failed_jobs_history_limit: spec.failed_jobs_history_limit,
            },
            status: status.map(|status| CronJobStatus {
                active: status.active,
                last_schedule_time: status.last_schedule_time,
                conditions: status.conditions,
            }),
        }
    }
}

impl From<CronJob> for hub::CronJob {
    fn from(cron_job: CronJob) -> Self {
        let CronJob {
            mut metadata,
            spec,
            status,
        } = cron_job;
        // A v1 string kept by an earlier conversion, unless the fields were edited at v2 since.
        let kept = take_annotation(&mut metadata, V1_SCHEDULE)
            .filter(|string| from_cron_string(string) == spec.schedule);
        let schedule = kept.unwrap_or_else(|| {
            let string = to_cron_string(&spec.schedule);
            if from_cron_string(&string) != spec.schedule {
                let json = serde_json::to_string(&spec.schedule).expect("strings serialise");
                set_annotation(&mut metadata, V2_SCHEDULE, json);
            }
            string
        });
        Self {
            metadata,
            spec: hub::CronJobSpec {
                schedule,
                time_zone: spec.time_zone,
                starting_deadline_seconds: spec.starting_deadline_seconds,
                concurrency_policy: spec.concurrency_policy.into(),
                suspend: spec.suspend,
                job_template: spec.job_template,
                successful_jobs_history_limit: spec.successful_jobs_history_limit,
                failed_jobs_history_limit: spec.failed_jobs_history_limit,
            },
            status: status.map(|status| hub::CronJobStatus {
                active: status.active,
                last_schedule_time: status.last_schedule_time,
                conditions: status.conditions,
            }),
        }
    }
}

impl From<hub::ConcurrencyPolicy> for ConcurrencyPolicy {
    fn from(policy: hub::ConcurrencyPolicy) -> Self {
        match policy {
            hub::ConcurrencyPolicy::Allow => Self::Allow,
            hub::ConcurrencyPolicy::Forbid => Self::Forbid,
            hub::ConcurrencyPolicy::Replace => Self::Replace,
        }
    }
}

impl From<ConcurrencyPolicy> for hub::ConcurrencyPolicy {
    fn from(policy: ConcurrencyPolicy) -> Self {
        match policy {
            ConcurrencyPolicy::Allow => Self::Allow,
            ConcurrencyPolicy::Forbid => Self::Forbid,
            ConcurrencyPolicy::Replace => Self::Replace,
        }
    }
}

/// Removes an annotation and returns its value. No annotations left is none at all, as the API server
/// stores it.
fn take_annotation(metadata: &mut ObjectMeta, key: &str) -> Option<String> {
    let annotations = metadata.annotations.as_mut()?;
    let value = annotations.remove(key);
    if annotations.is_empty() {
        metadata.annotations = None;
    }
    value
}

fn set_annotation(metadata: &mut ObjectMeta, key: &str, value: String) {
    metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobSpec, JobTemplateSpec};
    use k8s_openapi::api::core::v1::{Container, ObjectReference, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::ResourceExt;

    use super::*;

    /// An object's metadata, spec and status, to compare (kube's derive gives the object no `==`).
    macro_rules! parts {
        ($object:expr) => {
            (&$object.metadata, &$object.spec, &$object.status)
        };
    }

    #[test]
    fn five_fields_read_the_same_at_both_versions() {
        let schedule = from_cron_string("*/5 1 * * MON-FRI");
        assert_eq!(schedule.minute, Some(CronField("*/5".into())));
        assert_eq!(schedule.hour, Some(CronField("1".into())));
        assert_eq!(schedule.day_of_month, None);
        assert_eq!(schedule.day_of_week, Some(CronField("MON-FRI".into())));
        assert_eq!(to_cron_string(&schedule), "*/5 1 * * MON-FRI");
    }

    #[test]
    fn what_the_other_version_cannot_say_goes_into_an_annotation() {
        let hourly = hub::CronJob::new("hourly", v1_spec("@hourly"));
        let at_v2 = CronJob::from(hourly.clone());
        assert_eq!(at_v2.spec.schedule, CronSchedule::default());
        assert_eq!(at_v2.annotations()[V1_SCHEDULE], "@hourly");
        let back = hub::CronJob::from(at_v2);
        assert_eq!(parts!(back), parts!(hourly));

        let mut star = CronJob::new("star", v2_spec(CronSchedule::default()));
        star.spec.schedule.minute = Some(CronField("*".into()));
        let at_v1 = hub::CronJob::from(star.clone());
        assert_eq!(at_v1.spec.schedule, "* * * * *");
        assert_eq!(at_v1.annotations()[V2_SCHEDULE], r#"{"minute":"*"}"#);
        let back = CronJob::from(at_v1);
        assert_eq!(parts!(back), parts!(star));
    }

    #[test]
    fn a_schedule_edited_since_the_last_conversion_wins_over_the_annotation() {
        let mut star = CronJob::new("star", v2_spec(CronSchedule::default()));
        star.spec.schedule.minute = Some(CronField("*".into()));
        let mut at_v1 = hub::CronJob::from(star);
        at_v1.spec.schedule = "*/10 * * * *".into();
        let at_v2 = CronJob::from(at_v1);
        assert_eq!(at_v2.spec.schedule.minute, Some(CronField("*/10".into())));
        assert_eq!(at_v2.metadata.annotations, None);
    }

    /// Every object, at either version, comes back the same from a trip through the other: objects
    /// from a small deterministic generator (a seed per case, printed when one fails), among them
    /// the objects a conversion writes, with its annotations.
    #[test]
    fn conversion_round_trips_generated_objects() {
        for seed in 0..5000 {
            let mut rng = Gen(seed);
            let v1 = if rng.below(4) == 0 {
                hub::CronJob::from(rng.v2())
            } else {
                rng.v1()
            };
            let back = hub::CronJob::from(CronJob::from(v1.clone()));
            assert_eq!(parts!(back), parts!(v1), "seed {seed}: v1 -> v2 -> v1");

            let v2 = if rng.below(4) == 0 {
                CronJob::from(rng.v1())
            } else {
                rng.v2()
            };
            let back = CronJob::from(hub::CronJob::from(v2.clone()));
            assert_eq!(parts!(back), parts!(v2), "seed {seed}: v2 -> v1 -> v2");
        }
    }

    fn v1_spec(schedule: &str) -> hub::CronJobSpec {
        hub::CronJobSpec {
            schedule: schedule.into(),
            ..Default::default()
        }
    }

    fn v2_spec(schedule: CronSchedule) -> CronJobSpec {
        CronJobSpec {
            schedule,
            ..Default::default()
        }
    }

    /// SplitMix64: a few lines, the same values on every run.
    /// Time zones a generated CronJob may name.
    const ZONES: &[&str] = &["UTC", "Europe/Berlin", "America/New_York"];

    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn maybe<T>(&mut self, value: impl FnOnce(&mut Self) -> T) -> Option<T> {
            (self.below(3) != 0).then(|| value(self))
        }

        fn pick<T: Clone>(&mut self, values: &[T]) -> T {
            values[self.below(values.len() as u64) as usize].clone()
        }

        /// A cron field, or something close: empty, with spaces, `*`, values, ranges, steps.
        fn field(&mut self) -> String {
            match self.below(6) {
                0 => "*".into(),
                1 => self.below(60).to_string(),
                2 => format!("*/{}", 1 + self.below(15)),
                3 => format!("{}-{}", self.below(10), 10 + self.below(10)),
                4 => self.pick(&["MON-FRI", "JAN", "1,15", "?", "L"]).into(),
                _ => self.pick(&["", " ", "a b", "\t", "@hourly", "**"]).into(),
            }
        }

        /// A v1 schedule: usually five fields, sometimes not (nicknames, junk, extra spaces).
        fn schedule_string(&mut self) -> String {
            match self.below(5) {
                0 => self
                    .pick(&["@hourly", "@daily", "", "* * * *", "0 0 * * * *"])
                    .into(),
                1 => (0..5).map(|_| self.field()).collect::<Vec<_>>().join("  "),
                _ => (0..5).map(|_| self.field()).collect::<Vec<_>>().join(" "),
            }
        }

        fn cron_field(&mut self) -> Option<CronField> {
            self.maybe(|g| CronField(g.field()))
        }

        fn policy(&mut self) -> hub::ConcurrencyPolicy {
            self.pick(&[
                hub::ConcurrencyPolicy::Allow,
                hub::ConcurrencyPolicy::Forbid,
                hub::ConcurrencyPolicy::Replace,
            ])
        }

        fn text(&mut self) -> String {
            format!("t{}", self.below(1000))
        }

        /// Metadata with labels and annotations of the user's (never the conversion's keys).
        fn metadata(&mut self) -> ObjectMeta {
            let map = |g: &mut Self| -> BTreeMap<String, String> {
                (0..1 + g.below(3))
                    .map(|_| (format!("example.com/{}", g.text()), g.text()))
                    .collect()
            };
            ObjectMeta {
                name: Some(self.text()),
                namespace: Some("default".into()),
                labels: self.maybe(map),
                annotations: self.maybe(map),
                generation: self.maybe(|g| g.below(10) as i64),
                ..Default::default()
            }
        }

        fn job_template(&mut self) -> JobTemplateSpec {
            let container = Container {
                name: "run".into(),
                image: Some(format!("busybox:1.{}", self.below(40))),
                args: self.maybe(|g| vec![g.text(), g.text()]),
                ..Default::default()
            };
            JobTemplateSpec {
                metadata: self.maybe(|g| ObjectMeta {
                    labels: Some([("job".to_string(), g.text())].into()),
                    ..Default::default()
                }),
                spec: self.maybe(|g| JobSpec {
                    backoff_limit: g.maybe(|g| g.below(6) as i32),
                    template: PodTemplateSpec {
                        spec: Some(PodSpec {
                            containers: vec![container],
                            restart_policy: Some("OnFailure".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                }),
            }
        }

        fn status(&mut self) -> hub::CronJobStatus {
            let at = |g: &mut Self| {
                Time(Timestamp::from_second(1_700_000_000 + g.below(1 << 24) as i64).unwrap())
            };
            hub::CronJobStatus {
                active: self.maybe(|g| {
                    (0..1 + g.below(3))
                        .map(|_| ObjectReference {
                            kind: Some("Job".into()),
                            name: Some(g.text()),
                            ..Default::default()
                        })
                        .collect()
                }),
                last_schedule_time: self.maybe(at),
                conditions: self.maybe(|g| {
                    vec![Condition {
                        type_: "Ready".into(),
                        status: g.pick(&["True", "False"]).into(),
                        reason: "Checked".into(),
                        message: g.text(),
                        last_transition_time: at(g),
                        observed_generation: g.maybe(|g| g.below(10) as i64),
                    }]
                }),
            }
        }

        fn v1(&mut self) -> hub::CronJob {
            hub::CronJob {
                metadata: self.metadata(),
                spec: hub::CronJobSpec {
                    schedule: self.schedule_string(),
                    time_zone: self.maybe(|g| ZONES[g.below(ZONES.len() as u64) as usize].into()),
                    starting_deadline_seconds: self.maybe(|g| g.below(600) as i64),
                    concurrency_policy: self.policy(),
                    suspend: self.maybe(|g| g.below(2) == 0),
                    job_template: self.job_template(),
                    successful_jobs_history_limit: self.maybe(|g| g.below(5) as i32),
                    failed_jobs_history_limit: self.maybe(|g| g.below(5) as i32),
                },
                status: self.maybe(Self::status),
            }
        }

        fn v2(&mut self) -> CronJob {
            CronJob {
                metadata: self.metadata(),
                spec: CronJobSpec {
                    schedule: CronSchedule {
                        minute: self.cron_field(),
                        hour: self.cron_field(),
                        day_of_month: self.cron_field(),
                        month: self.cron_field(),
                        day_of_week: self.cron_field(),
                    },
                    time_zone: self.maybe(|g| ZONES[g.below(ZONES.len() as u64) as usize].into()),
                    starting_deadline_seconds: self.maybe(|g| g.below(600) as i64),
                    concurrency_policy: self.policy().into(),
                    suspend: self.maybe(|g| g.below(2) == 0),
                    job_template: self.job_template(),
                    successful_jobs_history_limit: self.maybe(|g| g.below(5) as i32),
                    failed_jobs_history_limit: self.maybe(|g| g.below(5) as i32),
                },
                status: self.maybe(|g| {
                    let status = g.status();
                    CronJobStatus {
                        active: status.active,
                        last_schedule_time: status.last_schedule_time,
                        conditions: status.conditions,
                    }
                }),
            }
        }
    }
}

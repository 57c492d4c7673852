//! The explorer: runs an operator's controllers through a workload on a real API server, once
//! without faults (the reference run) and again under each perturbation of a plan, and reports
//! every run whose outcome differs, with the one command that replays it.
//!
//! The perturbations are the ones that break controllers in practice (Sieve, OSDI '22; Acto,
//! SOSP '23), injected in-process and exactly, through the manager's client:
//!
//! | class | perturbation | what the controller meets |
//! |---|---|---|
//! | intermediate state | `crash:write=K` | the manager stops right after its K-th write reached the API server (the answer never comes); a fresh one starts |
//! | stale state | `stale:step=S:resource=R` | before step S a fresh manager starts whose first list of R is served from the revision before step S-1, and whose watch of R catches up only after step S: it acts on the past |
//! | stale state | `delay:step=S:resource=R` | the events of R's watch are held during step S, then delivered late |
//! | unobserved state | `coalesce:step=S:resource=R` | the events of R's watch during step S are dropped and the watch ends with 410 Gone: the cache relists and sees only the last state |
//! | runtime | `relist:step=S:resource=R` | R's watch ends with 410 Gone right after step S |
//! | runtime | `slow-list:step=S:resource=R` | before step S a fresh manager starts whose lists of R take seconds |
//! | runtime | `lease-stall:step=S` | two managers under leader election; before step S the leader's renewal is answered late, then never: the other takes over |
//!
//! The oracles need no assertion from the user: the end state equals the reference run's (each
//! difference named field by field); no duplicate child; no delete the reference run did not
//! make; the run settles (no hot loop); a fresh manager started on the end state writes nothing
//! (progress kept in memory shows here, even when the reference run has the same bug); the spec
//! of each of the workload's objects stays as the workload wrote it; no reconcile panics; no write
//! from a manager after another took its place. Runs go side by side ([`Settings::parallel`]),
//! each in a namespace of its own. Invariants of your own
//! are checked after each step ([`Explorer::invariant`]).
//!
//! ```no_run
//! # #[derive(kube::CustomResource, schemars::JsonSchema, serde::Serialize, serde::Deserialize, Clone, Debug)]
//! # #[kube(group = "cache.example.com", version = "v1alpha1", kind = "Memcached", namespaced)]
//! # struct MemcachedSpec { size: i32 }
//! # mod memcached { pub async fn run(_: rustbuilder_runtime::Manager) {} }
//! # async fn f(client: kube::Client) {
//! use rustbuilder_runtime::testing::explore::Explorer;
//!
//! let sample = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: sample\nspec:\n  size: 1\n";
//! let report = Explorer::new(client, "my-operator")
//!     .controller(memcached::run)
//!     .sample::<Memcached>(sample)
//!     .explore()
//!     .await;
//! report.assert_ok();
//! # }
//! ```
//!
//! `EXPLORE_PLAN=full` runs every perturbation (capped at `EXPLORE_MAX_RUNS`, a seeded sample of
//! them when there are more, `EXPLORE_SEED`); the default short plan runs one of each class.
//! `EXPLORE_REPLAY='crash:write=3'` runs the reference and that one perturbation, as a failure's
//! report says.

mod oracle;
mod tap;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::manager::Manager;
use crate::manager::leader::Timing;
pub use tap::Write;
use tap::{Faults, Gate, LeaseStall, Life, Recorder, Seen};
pub use workload::{Op, Step, Workload};

/// The controllers under test, started on a manager: `|manager| my_controller::run(manager)`.
type Start = Arc<dyn Fn(Manager) -> BoxFuture<'static, ()> + Send + Sync>;
/// A user invariant over the objects of a run.
type Invariant = Arc<dyn Fn(&Snapshot) -> Result<(), String> + Send + Sync>;

/// One perturbation of a run: where and what the explorer injects. Its text (`crash:write=3`) is
/// what `EXPLORE_REPLAY` takes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Perturbation {
    /// The manager stops right after its `write`-th write (1 for the first); a fresh one starts.
    Crash {
        /// Which write.
        write: usize,
    },
    /// Before `step`, a fresh manager whose first list of `resource` shows the state before
    /// `step - 1`, and whose watch of it catches up only once the step has settled.
    Stale {
        /// Which step (2 or later).
        step: usize,
        /// The resource (plural) seen late.
        resource: String,
    },
    /// `resource`'s events during `step` delivered late.
    Delay {
        /// Which step.
        step: usize,
        /// The resource (plural) whose watch is held.
        resource: String,
    },
    /// `resource`'s events during `step` dropped; its watch ends with 410 Gone.
    Coalesce {
        /// Which step.
        step: usize,
        /// The resource (plural) whose watch is held.
        resource: String,
    },
    /// `resource`'s watch ends with 410 Gone right after `step`.
    Relist {
        /// Which step.
        step: usize,
        /// The resource (plural) whose watch expires.
        resource: String,
    },
    /// Before `step`, a fresh manager whose lists of `resource` take seconds.
    SlowList {
        /// Which step.
        step: usize,
        /// The resource (plural) listed slowly.
        resource: String,
    },
    /// Two managers under leader election; before `step` the leader's renewal is answered late,
    /// then never again.
    LeaseStall {
        /// Which step (2 or later).
        step: usize,
    },
}

impl Perturbation {
    /// The class of the perturbation, as the papers name them.
    pub fn class(&self) -> &'static str {
        match self {
            Perturbation::Crash { .. } => "intermediate state",
            Perturbation::Stale { .. } | Perturbation::Delay { .. } => "stale state",
            Perturbation::Coalesce { .. } => "unobserved state",
            Perturbation::Relist { .. }
            | Perturbation::SlowList { .. }
            | Perturbation::LeaseStall { .. } => "runtime",
        }
    }

    /// What it does, in a sentence.
    pub fn describe(&self) -> String {
        match self {
            Perturbation::Crash { write } => format!(
                "the manager stopped right after its write #{write} reached the API server, and a fresh one started"
            ),
            Perturbation::Stale { step, resource } => format!(
                "before step {step}, a fresh manager started whose list of {resource} showed the state before step {}, and caught up only after the step",
                step - 1
            ),
            Perturbation::Delay { step, resource } => {
                format!("the events of {resource} during step {step} arrived late")
            }
            Perturbation::Coalesce { step, resource } => format!(
                "the events of {resource} during step {step} were never seen: the watch ended with 410 Gone and the cache relisted"
            ),
            Perturbation::Relist { step, resource } => {
                format!("the watch of {resource} ended with 410 Gone after step {step}")
            }
            Perturbation::SlowList { step, resource } => format!(
                "before step {step}, a fresh manager started whose lists of {resource} took seconds"
            ),
            Perturbation::LeaseStall { step } => format!(
                "before step {step}, the leader's Lease renewal was answered late and then never again; the standby took over"
            ),
        }
    }

    fn step(&self) -> Option<usize> {
        match self {
            Perturbation::Crash { .. } => None,
            Perturbation::Stale { step, .. }
            | Perturbation::Delay { step, .. }
            | Perturbation::Coalesce { step, .. }
            | Perturbation::Relist { step, .. }
            | Perturbation::SlowList { step, .. }
            | Perturbation::LeaseStall { step } => Some(*step),
        }
    }
}

impl fmt::Display for Perturbation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Perturbation::Crash { write } => write!(f, "crash:write={write}"),
            Perturbation::Stale { step, resource } => {
                write!(f, "stale:step={step}:resource={resource}")
            }
            Perturbation::Delay { step, resource } => {
                write!(f, "delay:step={step}:resource={resource}")
            }
            Perturbation::Coalesce { step, resource } => {
                write!(f, "coalesce:step={step}:resource={resource}")
            }
            Perturbation::Relist { step, resource } => {
                write!(f, "relist:step={step}:resource={resource}")
            }
            Perturbation::SlowList { step, resource } => {
                write!(f, "slow-list:step={step}:resource={resource}")
            }
            Perturbation::LeaseStall { step } => write!(f, "lease-stall:step={step}"),
        }
    }
}

impl FromStr for Perturbation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.trim().split(':');
        let kind = parts.next().unwrap_or_default();
        let mut fields = BTreeMap::new();
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` in `{text}` is no key=value"))?;
            fields.insert(key, value);
        }
        let number = |key: &str| -> Result<usize, String> {
            let value = fields
                .get(key)
                .ok_or_else(|| format!("`{text}` lacks {key}="))?;
            let n: usize = value
                .parse()
                .map_err(|_| format!("{key}={value} is no number"))?;
            (n >= 1)
                .then_some(n)
                .ok_or_else(|| format!("{key} counts from 1"))
        };
        let resource = || -> Result<String, String> {
            fields
                .get("resource")
                .map(|r| r.to_string())
                .ok_or_else(|| format!("`{text}` lacks resource="))
        };
        Ok(match kind {
            "crash" => Perturbation::Crash {
                write: number("write")?,
            },
            "stale" => Perturbation::Stale {
                step: number("step")?.max(2),
                resource: resource()?,
            },
            "delay" => Perturbation::Delay {
                step: number("step")?,
                resource: resource()?,
            },
            "coalesce" => Perturbation::Coalesce {
                step: number("step")?,
                resource: resource()?,
            },
            "relist" => Perturbation::Relist {
                step: number("step")?,
                resource: resource()?,
            },
            "slow-list" => Perturbation::SlowList {
                step: number("step")?,
                resource: resource()?,
            },
            "lease-stall" => Perturbation::LeaseStall {
                step: number("step")?.max(2),
            },
            other => {
                return Err(format!(
                    "unknown perturbation `{other}`: crash, stale, delay, coalesce, relist, slow-list or lease-stall"
                ));
            }
        })
    }
}

/// Which perturbations to run after the reference run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// One perturbation of each class at a seeded place: a minute or less for a small operator.
    Short,
    /// Every perturbation at every place, up to a number of runs (a seeded sample beyond).
    Full {
        /// At most this many perturbed runs.
        max_runs: usize,
    },
    /// Exactly these (a replay).
    Only(Vec<Perturbation>),
}

impl Plan {
    /// From the environment: `EXPLORE_REPLAY=<perturbation>[,<perturbation>…]`, else
    /// `EXPLORE_PLAN=full` (with `EXPLORE_MAX_RUNS`, default 100), else the short plan.
    ///
    /// # Panics
    ///
    /// When `EXPLORE_REPLAY` names no perturbation, or `EXPLORE_PLAN` no plan.
    pub fn from_env() -> Plan {
        if let Ok(replay) = std::env::var("EXPLORE_REPLAY") {
            let parsed: Result<Vec<_>, _> = replay.split(',').map(str::parse).collect();
            return Plan::Only(parsed.unwrap_or_else(|e| panic!("EXPLORE_REPLAY: {e}")));
        }
        match std::env::var("EXPLORE_PLAN").as_deref() {
            Ok("full") => {
                let max_runs = std::env::var("EXPLORE_MAX_RUNS")
                    .ok()
                    .and_then(|n| n.parse().ok());
                Plan::Full {
                    max_runs: max_runs.unwrap_or(100),
                }
            }
            Ok("short") | Err(_) => Plan::Short,
            Ok(other) => panic!("EXPLORE_PLAN={other}: short or full"),
        }
    }
}

/// The seed of the plan's sampling: `EXPLORE_SEED`, else 1.
fn seed_from_env() -> u64 {
    std::env::var("EXPLORE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// A small deterministic generator (xorshift64*), so a seed picks the same places everywhere.
struct Seeded(u64);

impl Seeded {
    fn new(seed: u64) -> Self {
        Seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as usize
    }
}

/// How long the explorer waits, and the lease timing of its leader-election runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A run has settled when nothing was written or reconciled for this long and no work is
    /// queued.
    pub quiet: Duration,
    /// A step that has not settled after this long is a hot loop (or a stuck controller).
    pub settle_timeout: Duration,
    /// The Lease timing of `lease-stall` runs.
    pub lease_timing: Timing,
    /// How late the stalled leader's renewal is answered: past `lease_duration - renew_deadline`
    /// (the standby takes over before a leader that counts from the answer gives up) and before
    /// `renew_deadline - retry_period` (the renewal counts as in time).
    pub renewal_answer_delay: Duration,
    /// How late a slowed list is answered.
    pub slow_list: Duration,
    /// How many perturbed runs go side by side (each in a namespace of its own).
    pub parallel: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            quiet: Duration::from_millis(400),
            settle_timeout: Duration::from_secs(30),
            lease_timing: Timing {
                lease_duration: Duration::from_secs(4),
                renew_deadline: Duration::from_secs(3),
                retry_period: Duration::from_millis(500),
            },
            renewal_answer_delay: Duration::from_millis(2000),
            slow_list: Duration::from_secs(2),
            parallel: 4,
        }
    }
}

/// The objects of a run at one moment, as an invariant sees them: each object the operator wrote
/// and each the workload made, by path without namespace (`apps/v1/deployments/sample`).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The objects that exist, as the API server returns them.
    pub objects: BTreeMap<String, Value>,
}

impl Snapshot {
    /// The objects of one resource (`batch/v1/jobs`).
    pub fn of(&self, resource: &str) -> impl Iterator<Item = &Value> {
        let prefix = format!("{resource}/");
        self.objects
            .iter()
            .filter(move |(path, _)| path.starts_with(&prefix))
            .map(|(_, v)| v)
    }
}

/// Explores an operator's controllers: see the [module](self).
pub struct Explorer {
    client: Client,
    manager_name: String,
    controllers: Vec<Start>,
    workload: Workload,
    plan: Plan,
    seed: u64,
    settings: Settings,
    invariants: Vec<(String, Invariant)>,
    replay_command: String,
}

impl fmt::Debug for Explorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Explorer")
            .field("manager_name", &self.manager_name)
            .field("workload", &self.workload)
            .field("plan", &self.plan)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Explorer {
    /// An explorer of controllers run on a manager named `manager_name` (the field manager of
    /// their writes), on the API server `client` reaches with rights to everything. Add the
    /// controllers with [`Explorer::controller`] and the workload with [`Explorer::sample`] (or
    /// [`Explorer::workload`]). The plan comes from the environment ([`Plan::from_env`]) unless
    /// [`Explorer::plan`] sets one.
    pub fn new(client: Client, manager_name: &str) -> Self {
        Explorer {
            client,
            manager_name: manager_name.to_string(),
            controllers: Vec::new(),
            workload: Workload::default(),
            plan: Plan::from_env(),
            seed: seed_from_env(),
            settings: Settings::default(),
            invariants: Vec::new(),
            replay_command: "cargo test".into(),
        }
    }

    /// A controller the manager of each run runs: `my_controller::run`, or a closure that starts it
    /// on the manager it is given.
    pub fn controller<F, Fut>(mut self, run: F) -> Self
    where
        F: Fn(Manager) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.controllers
            .push(Arc::new(move |manager| Box::pin(run(manager))));
        self
    }

    /// The default workload of `K` ([`Workload::from_sample`]) after the steps so far: its CRD from
    /// its type, its sample as `config/samples` holds it.
    ///
    /// # Panics
    ///
    /// When the sample is no YAML object of `K`.
    pub fn sample<K>(self, sample: &str) -> Self
    where
        K: kube::CustomResourceExt + schemars::JsonSchema,
    {
        let crd = crate::manifests::crd::<K>();
        let workload = Workload::from_sample(&crd, sample)
            .unwrap_or_else(|e| panic!("the sample of {}: {e}", crd.spec.names.kind));
        self.workload(workload)
    }

    /// `workload`'s steps after the steps so far.
    pub fn workload(mut self, workload: Workload) -> Self {
        self.workload = std::mem::take(&mut self.workload).then(workload);
        self
    }

    /// The perturbations to run.
    pub fn plan(mut self, plan: Plan) -> Self {
        self.plan = plan;
        self
    }

    /// The seed of the plan's sampling (default `EXPLORE_SEED`, else 1).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Waits and timings other than the defaults.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Checks `holds` after every step of every run: `Err` says what is wrong.
    pub fn invariant<F>(mut self, name: &str, holds: F) -> Self
    where
        F: Fn(&Snapshot) -> Result<(), String> + Send + Sync + 'static,
    {
        self.invariants.push((name.to_string(), Arc::new(holds)));
        self
    }

    /// The command a failure's report prints to replay it, after `EXPLORE_REPLAY=…` (default
    /// `cargo test`).
    pub fn replay_command(mut self, command: &str) -> Self {
        self.replay_command = command.to_string();
        self
    }

    /// The reference run, then each perturbation of the plan.
    ///
    /// When the reference run cannot finish the workload (a step the API server refuses, a
    /// step that never settles), the report holds its problems and no perturbed run.
    pub async fn explore(self) -> Report {
        let started = Instant::now();
        assert!(
            !self.controllers.is_empty(),
            "the explorer has no controller: add one with Explorer::controller"
        );
        assert!(
            !self.workload.steps.is_empty(),
            "the explorer has no workload: add one with Explorer::sample or Explorer::workload"
        );
        let reference = self.run(0, None, None).await;
        // A reference run that could not finish its workload leaves nothing to compare with: its
        // own problems are the report.
        let finished = reference.states.len() == self.workload.steps.len();
        let plan = match finished {
            true => self.perturbations(&reference),
            false => Vec::new(),
        };
        eprintln!(
            "explore: reference run: {} ({:.1} s); {} perturbed run(s) to go",
            verdict(&reference),
            reference.took.as_secs_f64(),
            plan.len()
        );
        // Each run has a namespace and managers of its own: runs side by side cannot see each
        // other, and a plan takes about as long as its longest runs.
        let (this, reference_run, total) = (&self, &reference, plan.len());
        let runs: Vec<Outcome> = futures::stream::iter(plan.iter().enumerate())
            .map(|(index, perturbation)| async move {
                let outcome = this
                    .run(index + 1, Some(perturbation), Some(reference_run))
                    .await;
                eprintln!(
                    "explore: {}/{total} {perturbation}: {} ({:.1} s)",
                    index + 1,
                    verdict(&outcome),
                    outcome.took.as_secs_f64()
                );
                outcome
            })
            .buffered(self.settings.parallel.max(1))
            .collect()
            .await;
        Report {
            seed: self.seed,
            steps: self
                .workload
                .steps
                .iter()
                .map(|s| s.label.clone())
                .collect(),
            reference,
            runs,
            replay_command: self.replay_command.clone(),
            took: started.elapsed(),
        }
    }

    /// The plan's perturbations, placed from what the reference run did.
    fn perturbations(&self, reference: &Outcome) -> Vec<Perturbation> {
        let steps = self.workload.steps.len();
        let writes = reference
            .writes
            .iter()
            .filter(|w| w.incarnation == 0)
            .count();
        let resources = self.resources(reference);
        let primary = self
            .workload
            .resources()
            .into_iter()
            .next()
            .unwrap_or_default();
        let mut seeded = Seeded::new(self.seed);
        let later_step = |seeded: &mut Seeded| 2 + seeded.below(steps.saturating_sub(1));
        match &self.plan {
            Plan::Only(only) => only.clone(),
            Plan::Short => {
                let mut plan = Vec::new();
                if writes > 0 {
                    plan.push(Perturbation::Crash {
                        write: 1 + seeded.below(writes),
                    });
                }
                if steps >= 2 {
                    let resource = primary.clone();
                    plan.push(Perturbation::Stale {
                        step: later_step(&mut seeded),
                        resource,
                    });
                }
                // The first kind's object deleted and created at once: unobserved, the old
                // object's end is never seen.
                let recreated = self.workload.steps.iter().rposition(|step| {
                    matches!(step.op, Op::Recreate) && step.resource.plural == primary
                });
                plan.push(Perturbation::Coalesce {
                    step: recreated.map_or(steps, |index| index + 1),
                    resource: primary,
                });
                if steps >= 2 {
                    plan.push(Perturbation::LeaseStall {
                        step: later_step(&mut seeded),
                    });
                }
                plan
            }
            Plan::Full { max_runs } => {
                let mut plan: Vec<Perturbation> = (1..=writes)
                    .map(|write| Perturbation::Crash { write })
                    .collect();
                for step in 1..=steps {
                    if step >= 2 {
                        plan.push(Perturbation::LeaseStall { step });
                    }
                    for resource in &resources {
                        let resource = resource.clone();
                        if step >= 2 {
                            plan.push(Perturbation::Stale {
                                step,
                                resource: resource.clone(),
                            });
                        }
                        plan.push(Perturbation::Delay {
                            step,
                            resource: resource.clone(),
                        });
                        plan.push(Perturbation::Coalesce {
                            step,
                            resource: resource.clone(),
                        });
                        plan.push(Perturbation::Relist {
                            step,
                            resource: resource.clone(),
                        });
                        plan.push(Perturbation::SlowList { step, resource });
                    }
                }
                while plan.len() > *max_runs {
                    let drop = seeded.below(plan.len());
                    plan.remove(drop);
                }
                plan
            }
        }
    }

    /// The resources the operator watches as far as the explorer knows: the workload's kinds and
    /// the kinds of what the operator wrote.
    fn resources(&self, reference: &Outcome) -> Vec<String> {
        let mut resources: BTreeSet<String> = self.workload.resources().into_iter().collect();
        for write in &reference.writes {
            if let Some(resource) = write.object.rsplit('/').nth(1) {
                resources.insert(resource.to_string());
            }
        }
        resources.into_iter().collect()
    }

    /// One run of the workload, under `perturbation` when given, compared with `reference`.
    async fn run(
        &self,
        index: usize,
        perturbation: Option<&Perturbation>,
        reference: Option<&Outcome>,
    ) -> Outcome {
        let started = Instant::now();
        let mut run = match Run::new(self, index, perturbation, reference).await {
            Ok(run) => run,
            Err(problem) => return Outcome::failed(perturbation, problem, started),
        };
        let mut problems = Vec::new();
        let mut injected = perturbation.is_none();
        if let Err(problem) = run.start_managers().await {
            problems.push(problem);
        }
        if problems.is_empty()
            && let Err(problem) = run.settle().await
        {
            problems.push(format!("before the first step: {problem}"));
        }
        let mut states = Vec::new();
        let mut differed = false;
        for (number, step) in self.workload.steps.iter().enumerate() {
            if !problems.is_empty() && !differed {
                break;
            }
            let number = number + 1;
            match run.step(number, step).await {
                Ok(did) => injected |= did,
                Err(problem) => {
                    problems.push(format!("step {number} `{}`: {problem}", step.label));
                    break;
                }
            }
            // Each step's settled state against the reference run's after the same step: the
            // first that differs is reported (later ones mostly differ because of it).
            match run.state(reference).await {
                Ok(state) => {
                    let expected = reference.and_then(|r| r.states.get(number - 1));
                    if let Some(expected) = expected.filter(|_| !differed) {
                        let found = oracle::state_problems(expected, &state);
                        if !found.is_empty() {
                            differed = true;
                            let label = &step.label;
                            problems.extend(
                                found
                                    .into_iter()
                                    .map(|p| format!("after step {number} `{label}`: {p}")),
                            );
                        }
                    }
                    states.push(state);
                }
                Err(problem) => problems.push(problem),
            }
        }
        problems.append(&mut run.notes);
        injected |= run.crashed;
        let end = (states.len() == self.workload.steps.len()).then_some(());
        let writes = run.recorder.writes();
        if let Some(reference) = reference {
            problems.extend(oracle::unexpected_deletes(&reference.writes, &writes));
        }
        let leads = run.recorder.leads();
        let superseded = run.recorder.superseded();
        problems.extend(oracle::second_writers(
            &writes,
            &superseded,
            leads.as_deref(),
        ));
        if end.is_some() {
            problems.extend(run.fixed_point().await);
            problems.append(&mut run.notes);
        }
        let panics = run.panics();
        if panics > 0 {
            problems.push(format!(
                "{panics} reconcile(s) panicked (controller_runtime_reconcile_panics_total)"
            ));
        }
        run.stop_all();
        Outcome {
            perturbation: perturbation.cloned(),
            problems,
            writes,
            states,
            injected,
            took: started.elapsed(),
        }
    }
}

/// One manager process of a run.
struct Incarnation {
    id: usize,
    manager: Manager,
    task: JoinHandle<()>,
    life: Arc<Life>,
    faults: Arc<Faults>,
    /// What its caches have been handed.
    seen: Arc<Seen>,
}

/// The state of one run.
struct Run<'a> {
    explorer: &'a Explorer,
    perturbation: Option<&'a Perturbation>,
    namespace: String,
    recorder: Arc<Recorder>,
    gates: Vec<(String, Arc<Gate>)>,
    live: Vec<Incarnation>,
    stopped: Vec<Incarnation>,
    next_id: usize,
    /// The revision before each step's operation.
    revisions: Vec<String>,
    /// Whether a crash was injected.
    crashed: bool,
    /// Problems found on the way that do not stop the run.
    notes: Vec<String>,
    /// The step running, for notes.
    step: usize,
    /// The spec of each of the workload's objects as its last step wrote it, by path.
    specs: BTreeMap<String, Value>,
    /// The reconcile outcomes counted before the step's operation: a reconcile that fails at once,
    /// before the step starts to settle, still counts as failing.
    before_step: Option<(u64, u64)>,
}

const LEASE: &str = "explore-leader";

impl<'a> Run<'a> {
    async fn new(
        explorer: &'a Explorer,
        index: usize,
        perturbation: Option<&'a Perturbation>,
        reference: Option<&Outcome>,
    ) -> Result<Run<'a>, String> {
        let unique = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() & 0xfffff);
        let namespace = format!("explore-{index}-{unique:05x}");
        let namespaces: Api<Namespace> = Api::all(explorer.client.clone());
        let object = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| format!("cannot create the run's namespace {namespace}: {e}"))?;
        let resources = match reference {
            Some(reference) => explorer.resources(reference),
            None => explorer.workload.resources(),
        };
        let gates = resources
            .into_iter()
            .map(|r| (r, Arc::new(Gate::default())))
            .collect();
        Ok(Run {
            explorer,
            perturbation,
            namespace,
            recorder: Arc::default(),
            gates,
            live: Vec::new(),
            stopped: Vec::new(),
            next_id: 0,
            revisions: Vec::new(),
            crashed: false,
            notes: Vec::new(),
            step: 0,
            specs: BTreeMap::new(),
            before_step: None,
        })
    }

    fn leader_mode(&self) -> bool {
        matches!(self.perturbation, Some(Perturbation::LeaseStall { .. }))
    }

    fn gate(&self, resource: &str) -> Option<Arc<Gate>> {
        self.gates
            .iter()
            .find(|(r, _)| r == resource)
            .map(|(_, g)| g.clone())
    }

    /// Starts a manager process with `faults` (the gates are every process's).
    fn spawn(&mut self, mut faults: Faults) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        faults.gates = self.gates.clone();
        let faults = Arc::new(faults);
        let life = Arc::new(Life::default());
        let seen = Arc::new(Seen::default());
        let client = tap::tapped(
            self.explorer.client.clone(),
            id,
            faults.clone(),
            self.recorder.clone(),
            life.clone(),
            seen.clone(),
        );
        let name = &self.explorer.manager_name;
        let manager = if self.leader_mode() {
            let timing = self.explorer.settings.lease_timing;
            Manager::candidate_in_namespace(name, client, &self.namespace, LEASE, timing)
                .map_err(|e| e.to_string())?
        } else {
            Manager::in_namespace(name, client, &self.namespace)
        };
        let controllers = manager.controllers();
        for start in &self.explorer.controllers {
            controllers.add(start(manager.clone()));
        }
        let task = tokio::spawn(async move {
            let _ = controllers.run().await;
        });
        self.live.push(Incarnation {
            id,
            manager,
            task,
            life,
            faults,
            seen,
        });
        Ok(())
    }

    /// Stops a manager process at once, as a crash does: nothing it sends afterwards arrives.
    fn stop(&mut self, index: usize) {
        let incarnation = self.live.remove(index);
        incarnation.life.kill();
        incarnation.manager.shutdown();
        incarnation.task.abort();
        if !self
            .recorder
            .superseded()
            .iter()
            .any(|(id, _)| *id == incarnation.id)
        {
            self.recorder.supersede(incarnation.id, Instant::now());
        }
        self.stopped.push(incarnation);
    }

    fn stop_all(&mut self) {
        while !self.live.is_empty() {
            self.stop(0);
        }
    }

    /// Replaces every manager process by a fresh one with `faults`.
    fn restart(&mut self, faults: Faults) -> Result<(), String> {
        self.stop_all();
        self.spawn(faults)
    }

    async fn start_managers(&mut self) -> Result<(), String> {
        let crash_after_write = match self.perturbation {
            Some(Perturbation::Crash { write }) => Some(*write),
            _ => None,
        };
        let lease_stall = self
            .leader_mode()
            .then(|| Arc::new(LeaseStall::new(self.explorer.settings.renewal_answer_delay)));
        self.spawn(Faults {
            crash_after_write,
            lease_stall,
            ..Faults::default()
        })?;
        if self.leader_mode() {
            // The first leads before the standby starts, so the Lease's holder is known.
            let manager = self.live[0].manager.clone();
            let timeout = self.explorer.settings.settle_timeout;
            tokio::time::timeout(timeout, manager.until_leading())
                .await
                .map_err(|_| format!("the first manager did not lead within {timeout:?}"))?;
            self.recorder.lead(self.live[0].id, Instant::now());
            self.spawn(Faults::default())?;
        }
        Ok(())
    }

    /// Runs step `number`, with the perturbation's injections around it; `Ok(true)` when one was
    /// made.
    async fn step(&mut self, number: usize, step: &Step) -> Result<bool, String> {
        self.recorder.set_step(number);
        self.step = number;
        self.revisions.push(self.revision(step).await?);
        let here = self.perturbation.filter(|p| p.step() == Some(number));
        let mut injected = false;
        match here {
            Some(Perturbation::Stale { resource, .. }) => {
                // An API server that lags: it serves the past for a while, then catches up.
                let revision = self.revisions.get(number.saturating_sub(2)).cloned();
                let gate = self
                    .gate(resource)
                    .ok_or_else(|| format!("no watch of {resource} to hold"))?;
                gate.hold();
                self.restart(Faults {
                    stale: revision.map(|r| (resource.clone(), r)),
                    ..Faults::default()
                })?;
                injected = true;
            }
            Some(Perturbation::SlowList { resource, .. }) => {
                let slow = (resource.clone(), self.explorer.settings.slow_list);
                self.restart(Faults {
                    slow_lists: Some(slow),
                    ..Faults::default()
                })?;
                injected = true;
            }
            Some(
                Perturbation::Delay { resource, .. } | Perturbation::Coalesce { resource, .. },
            ) => {
                let gate = self
                    .gate(resource)
                    .ok_or_else(|| format!("no watch of {resource} to hold"))?;
                gate.hold();
                injected = true;
            }
            Some(Perturbation::LeaseStall { .. }) => {
                self.stall_leader().await?;
                injected = true;
            }
            _ => {}
        }
        let children = self.children_paths();
        self.before_step = Some(self.live_outcomes());
        let left =
            workload::perform(step, &self.explorer.client, &self.namespace, &children).await?;
        let path = format!(
            "{}/{}/{}",
            step.resource.api_version, step.resource.plural, step.name
        );
        match left {
            workload::Left::Spec(spec) => {
                self.specs.insert(path, spec);
            }
            workload::Left::Deleted => {
                self.specs.remove(&path);
            }
            workload::Left::Untouched => {}
        }
        match here {
            Some(Perturbation::Relist { resource, .. }) => {
                let gate = self
                    .gate(resource)
                    .ok_or_else(|| format!("no watch of {resource} to expire"))?;
                gate.expire();
                injected = true;
            }
            Some(Perturbation::Delay { resource, .. } | Perturbation::Stale { resource, .. }) => {
                self.settle().await?;
                self.gate(resource).into_iter().for_each(|g| g.release());
            }
            Some(Perturbation::Coalesce { resource, .. }) => {
                self.settle().await?;
                self.gate(resource).into_iter().for_each(|g| g.expire());
            }
            _ => {}
        }
        self.settle().await?;
        self.check_invariants(number, step).await?;
        self.check_specs().await?;
        Ok(injected)
    }

    /// The leader's renewals answered late, then never; returns once the standby holds the Lease,
    /// with the leader marked as replaced from the moment the standby took it.
    async fn stall_leader(&mut self) -> Result<(), String> {
        let (leader, standby) = match self.live.as_slice() {
            [leader, standby, ..] => (leader, standby),
            _ => return Err("a lease stall needs a leader and a standby".into()),
        };
        let stall = leader
            .faults
            .lease_stall
            .clone()
            .ok_or("the leader has no stall")?;
        stall.start();
        let (leader_id, standby_id) = (leader.id, standby.id);
        let standby_identity = standby.manager.identity().to_string();
        let leases: Api<Lease> = Api::namespaced(self.explorer.client.clone(), &self.namespace);
        let timing = self.explorer.settings.lease_timing;
        let deadline = Instant::now() + timing.lease_duration * 3;
        loop {
            let lease = leases.get_opt(LEASE).await.map_err(|e| e.to_string())?;
            let spec = lease.and_then(|l| l.spec).unwrap_or_default();
            if spec.holder_identity.as_deref() == Some(standby_identity.as_str()) {
                let taken = acquired_at(&spec);
                self.recorder.supersede(leader_id, taken);
                self.recorder.lead(standby_id, taken);
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby did not take the Lease within {:?} of the leader's stall",
                    timing.lease_duration * 3
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the one live process, just started, to take the Lease, and records from when it
    /// leads.
    async fn new_leader(&mut self) -> Result<(), String> {
        let incarnation = self.live.first().ok_or("no process to lead")?;
        let (id, manager) = (incarnation.id, incarnation.manager.clone());
        let timeout = self.explorer.settings.settle_timeout;
        tokio::time::timeout(timeout, manager.until_leading())
            .await
            .map_err(|_| format!("no manager led within {timeout:?} of the last one's loss"))?;
        let leases: Api<Lease> = Api::namespaced(self.explorer.client.clone(), &self.namespace);
        let lease = leases.get_opt(LEASE).await.map_err(|e| e.to_string())?;
        let spec = lease.and_then(|l| l.spec).unwrap_or_default();
        self.recorder.lead(id, acquired_at(&spec));
        Ok(())
    }

    /// The revision of the API server now, as a list of the step's kind reports it.
    async fn revision(&self, step: &Step) -> Result<String, String> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.explorer.client.clone(),
            &self.namespace,
            &step.resource,
        );
        let list = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(|e| format!("cannot list {}: {e}", step.resource.plural))?;
        Ok(list.metadata.resource_version.unwrap_or_default())
    }

    /// `apps/v1/deployments/x` as its URL in this run's namespace.
    fn url(&self, object: &str) -> String {
        let parts: Vec<&str> = object.split('/').collect();
        let (group_version, rest) = match parts.as_slice() {
            [version, resource, name] => (format!("/api/{version}"), [*resource, *name]),
            [group, version, resource, name] => {
                (format!("/apis/{group}/{version}"), [*resource, *name])
            }
            _ => return object.to_string(),
        };
        format!(
            "{group_version}/namespaces/{}/{}/{}",
            self.namespace, rest[0], rest[1]
        )
    }

    /// Waits until the run is quiet and nothing is left for a garbage collector.
    async fn settle(&mut self) -> Result<(), String> {
        // What the garbage collector of a cluster does (a test control plane may run none): an
        // object whose controller owner is gone is deleted, and the operator may react to that.
        // Not while a watch is held: an operator that sees the past would make the object again
        // each time, as long as the hold lasts.
        let started = Instant::now();
        loop {
            self.settle_once().await?;
            if self.gates.iter().any(|(_, gate)| gate.is_held()) {
                return Ok(());
            }
            if self.collect_garbage().await? == 0 {
                return Ok(());
            }
            if started.elapsed() > self.explorer.settings.settle_timeout {
                return Err(format!(
                    "objects whose owner is gone were made again for {:?}",
                    self.explorer.settings.settle_timeout
                ));
            }
        }
    }

    /// Deletes each object the operator wrote whose controller owner, of a kind of the workload,
    /// no longer exists (or exists with another uid); returns how many.
    async fn collect_garbage(&self) -> Result<usize, String> {
        let mut collected = 0;
        for path in self.children_paths() {
            let request = http::Request::get(path.as_str())
                .body(Vec::new())
                .expect("a request");
            let child: Value = match self.explorer.client.request(request).await {
                Ok(child) => child,
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(e) => return Err(format!("cannot read {path}: {e}")),
            };
            let owners = child
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array);
            let controller = owners.and_then(|owners| {
                owners
                    .iter()
                    .find(|o| o.get("controller") == Some(&Value::Bool(true)))
            });
            let Some(owner) = controller else { continue };
            if child.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let field = |key: &str| owner.get(key).and_then(Value::as_str).unwrap_or_default();
            let kind = self.explorer.workload.steps.iter().find(|s| {
                s.resource.kind == field("kind") && s.resource.api_version == field("apiVersion")
            });
            let Some(step) = kind else { continue };
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.explorer.client.clone(),
                &self.namespace,
                &step.resource,
            );
            let living = api
                .get_opt(field("name"))
                .await
                .map_err(|e| e.to_string())?;
            let alive = living.is_some_and(|o| o.metadata.uid.as_deref() == Some(field("uid")));
            if !alive {
                let request = workload::delete_in_background(&path);
                match self.explorer.client.request_text(request).await {
                    Ok(_) => collected += 1,
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => return Err(format!("cannot collect {path}: {e}")),
                }
            }
        }
        Ok(collected)
    }

    /// The API paths in this run's namespace of everything the operator wrote but the
    /// workload's own kinds.
    fn children_paths(&self) -> Vec<String> {
        // By group and resource, at any version: an operator may write its kind at another
        // version than the workload's.
        let own: Vec<(&str, &str)> = self
            .explorer
            .workload
            .steps
            .iter()
            .map(|s| (s.resource.group.as_str(), s.resource.plural.as_str()))
            .collect();
        let mut paths: Vec<String> = self
            .recorder
            .writes()
            .into_iter()
            .filter(|w| !own.contains(&group_and_resource(&w.object)))
            .map(|w| self.url(&w.object))
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Waits until no process writes or reconciles for the quiet time and none has work queued;
    /// replaces a process that crashed by a fresh one.
    async fn settle_once(&mut self) -> Result<(), String> {
        let settings = &self.explorer.settings;
        let started = Instant::now();
        let mut last = (usize::MAX, u64::MAX);
        let mut changed = Instant::now();
        // Whether the last reconcile outcome seen was a failure: one that was retried and then
        // succeeded is fine; one still failing when the step settles is a state the controller
        // cannot reach.
        let mut outcomes = self
            .before_step
            .take()
            .unwrap_or_else(|| self.live_outcomes());
        let mut failing = false;
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(dead) = self.live.iter().position(|i| i.life.is_dead()) {
                self.stop(dead);
                self.crashed = true;
                self.spawn(Faults::default())?;
                changed = Instant::now();
                outcomes = self.live_outcomes();
                continue;
            }
            // A leader that lost its Lease has stopped its controllers, as its process would exit;
            // with no other process left, its Deployment starts a new one (a leader that misses
            // its renew deadline on a loaded machine, say).
            if let Some(done) = self.live.iter().position(|i| i.task.is_finished()) {
                self.stop(done);
                if self.live.is_empty() {
                    self.spawn(Faults::default())?;
                    if self.leader_mode() {
                        self.new_leader().await?;
                    }
                    changed = Instant::now();
                }
                outcomes = self.live_outcomes();
                continue;
            }
            let reconciles: u64 = self
                .all()
                .map(|i| metric(&i.manager, "controller_runtime_reconcile_total"))
                .sum();
            let seen = (self.recorder.write_count(), reconciles);
            if seen != last {
                last = seen;
                changed = Instant::now();
            }
            let (successes, errors) = self.live_outcomes();
            if errors > outcomes.1 {
                failing = true;
            }
            if successes > outcomes.0 {
                failing = errors > outcomes.1;
            }
            outcomes = (successes, errors);
            // Under leader election, no leader is no rest: one is about to take over.
            let mut leading = self.live.iter().filter(|i| i.manager.is_leading());
            let led = !self.leader_mode() || leading.clone().next().is_some();
            let idle = led
                && leading.all(|i| {
                    i.manager.ready().is_ok()
                        && metric(&i.manager, "cache_incomplete") == 0
                        && metric(&i.manager, "workqueue_depth") == 0
                        && metric(&i.manager, "controller_runtime_active_workers") == 0
                });
            let quiet = idle && changed.elapsed() >= settings.quiet;
            if quiet && !self.caches_agree().await? {
                // An event is on its way: what it makes the controller do counts from when it
                // arrives, so the quiet time starts again.
                changed = Instant::now();
                continue;
            }
            if quiet {
                if failing {
                    let when = match self.step {
                        usize::MAX => "a fresh manager on the end state".to_string(),
                        step => format!("step {step}"),
                    };
                    self.notes.push(format!(
                        "{when}: reconciles were still failing when it settled (controller_runtime_reconcile_errors_total kept rising)"
                    ));
                }
                return Ok(());
            }
            if started.elapsed() > settings.settle_timeout {
                let recent: Vec<String> = self
                    .recorder
                    .writes()
                    .iter()
                    .rev()
                    .take_while(|w| w.at.elapsed() < Duration::from_secs(5))
                    .map(Write::describe)
                    .collect();
                return Err(format!(
                    "not settled after {:?}: {} writes in the last 5 s{}",
                    settings.settle_timeout,
                    recent.len(),
                    match recent.first() {
                        Some(last) => format!(", the last `{last}` (a hot loop?)"),
                        None => " (a reconcile stuck, or work queued forever)".into(),
                    }
                ));
            }
        }
    }

    fn all(&self) -> impl Iterator<Item = &Incarnation> {
        self.live.iter().chain(&self.stopped)
    }

    /// Whether every leading process's caches of the gated resources hold what the API server
    /// holds (no event on its way; a held watch excepted).
    async fn caches_agree(&self) -> Result<bool, String> {
        let held: Vec<&str> = self
            .gates
            .iter()
            .filter(|(_, gate)| gate.is_held())
            .map(|(resource, _)| resource.as_str())
            .collect();
        for incarnation in self.live.iter().filter(|i| i.manager.is_leading()) {
            for (url, seen) in incarnation.seen.lists() {
                let resource = tap::parse_path(url.split('?').next().unwrap_or_default());
                if resource.is_some_and(|r| held.contains(&r.resource.as_str())) {
                    continue;
                }
                let request = http::Request::get(url.as_str())
                    .body(Vec::new())
                    .expect("a request");
                let list: Value = self
                    .explorer
                    .client
                    .request(request)
                    .await
                    .map_err(|e| format!("cannot list {url}: {e}"))?;
                let items = list
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let current: Vec<(String, u64)> =
                    items.iter().filter_map(tap::name_and_version).collect();
                let agrees = current.len() == seen.len()
                    && current
                        .iter()
                        .all(|(name, version)| seen.get(name).is_some_and(|v| v >= version));
                if !agrees {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Reconciles of the live processes that succeeded, and that failed.
    fn live_outcomes(&self) -> (u64, u64) {
        let sum = |name: &str| -> u64 { self.live.iter().map(|i| metric(&i.manager, name)).sum() };
        let errors = sum("controller_runtime_reconcile_errors_total");
        let all = sum("controller_runtime_reconcile_total");
        (all.saturating_sub(errors), errors)
    }

    fn panics(&self) -> u64 {
        self.all()
            .map(|i| metric(&i.manager, "controller_runtime_reconcile_panics_total"))
            .sum()
    }

    /// What exists now of everything written in this run or the reference run, and of the
    /// workload's objects.
    async fn snapshot(
        &self,
        reference: Option<&Outcome>,
    ) -> Result<BTreeMap<String, Option<Value>>, String> {
        let mut paths: BTreeSet<String> = self
            .recorder
            .writes()
            .into_iter()
            .map(|w| w.object)
            .collect();
        if let Some(reference) = reference {
            paths.extend(reference.writes.iter().map(|w| w.object.clone()));
        }
        for step in &self.explorer.workload.steps {
            if !step.name.is_empty() {
                paths.insert(format!(
                    "{}/{}/{}",
                    step.resource.api_version, step.resource.plural, step.name
                ));
            }
        }
        let mut objects = BTreeMap::new();
        for path in paths {
            let request = http::Request::get(self.url(&path))
                .body(Vec::new())
                .expect("a request");
            let object = match self.explorer.client.request::<Value>(request).await {
                Ok(object) => Some(object),
                Err(kube::Error::Api(status)) if status.code == 404 => None,
                Err(e) => return Err(format!("cannot read {path}: {e}")),
            };
            objects.insert(path, object);
        }
        Ok(objects)
    }

    /// The spec of each of the workload's objects is its user's: the operator must leave it as the
    /// workload wrote it (a status, labels or finalizers of its own are fine).
    async fn check_specs(&self) -> Result<(), String> {
        for (path, written) in &self.specs {
            let request = http::Request::get(self.url(path))
                .body(Vec::new())
                .expect("a request");
            let object: Value = match self.explorer.client.request(request).await {
                Ok(object) => object,
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(e) => return Err(format!("cannot read {path}: {e}")),
            };
            let now = object.get("spec").cloned().unwrap_or(Value::Null);
            let changed = oracle::changes(written, &now);
            if !changed.is_empty() {
                return Err(format!(
                    "the operator changed the spec of {path}, which is its user's:\n{}",
                    changed
                        .iter()
                        .map(|line| format!("      {line}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
        }
        Ok(())
    }

    async fn check_invariants(&self, number: usize, step: &Step) -> Result<(), String> {
        if self.explorer.invariants.is_empty() {
            return Ok(());
        }
        let objects = self.snapshot(None).await?;
        let snapshot = Snapshot {
            objects: objects
                .into_iter()
                .filter_map(|(p, o)| Some((p, o?)))
                .collect(),
        };
        for (name, holds) in &self.explorer.invariants {
            holds(&snapshot).map_err(|e| {
                format!(
                    "after step {number} `{}`: invariant `{name}`: {e}",
                    step.label
                )
            })?;
        }
        Ok(())
    }

    /// The state now, normalised.
    async fn state(&self, reference: Option<&Outcome>) -> Result<oracle::EndState, String> {
        let objects = self.snapshot(reference).await?;
        let uids = oracle::uid_names(objects.values().flatten());
        let normalised = objects.into_iter().map(|(path, object)| {
            (
                path,
                object.map(|o| oracle::normalise(&o, &uids, &self.namespace)),
            )
        });
        Ok(normalised.collect())
    }

    /// A fresh manager on the end state must write nothing.
    async fn fixed_point(&mut self) -> Vec<String> {
        let before = self.recorder.write_count();
        let fresh = self.restart(Faults::default());
        if let Err(problem) = fresh {
            return vec![problem];
        }
        self.step = usize::MAX;
        if let Err(problem) = self.settle().await {
            return vec![format!("a fresh manager on the end state: {problem}")];
        }
        let writes = self.recorder.writes();
        writes[before..]
            .iter()
            .map(|w| format!(
                "a fresh manager started on the end state wrote `{}`: the end state is no fixed point (progress kept in memory, or a write that never converges)",
                w.describe()
            ))
            .collect()
    }
}

/// `ok`, or the number of problems a run found.
fn verdict(outcome: &Outcome) -> String {
    match outcome.problems.len() {
        0 => "ok".into(),
        n => format!("{n} problem(s)"),
    }
}

/// The sum of a metric's series of a manager.
/// The group and resource of a path as the recorder writes it (`apps/v1/deployments/web`,
/// `v1/configmaps/web`, a subresource after the name).
fn group_and_resource(path: &str) -> (&str, &str) {
    let parts: Vec<&str> = path.split('/').collect();
    // A version (`v1`, `v2beta1`) first: the core group's; a group name is no version.
    let is_version = |segment: &str| {
        let rest = segment.strip_prefix('v').unwrap_or("");
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        let rest = rest
            .strip_prefix("alpha")
            .or_else(|| rest.strip_prefix("beta"))
            .map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
        segment.len() > 1 && segment.as_bytes()[1].is_ascii_digit() && rest.is_empty()
    };
    let core = parts.first().is_some_and(|first| is_version(first));
    match (core, parts.as_slice()) {
        (true, [_, resource, ..]) => ("", resource),
        (false, [group, _, resource, ..]) => (group, resource),
        _ => ("", ""),
    }
}

fn metric(manager: &Manager, name: &str) -> u64 {
    manager
        .metrics()
        .encode()
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// What one run found.
#[derive(Debug)]
pub struct Outcome {
    /// The perturbation, `None` for the reference run.
    pub perturbation: Option<Perturbation>,
    /// What the oracles found; empty when the run matched the reference.
    pub problems: Vec<String>,
    /// The operator's writes, every process's.
    pub writes: Vec<Write>,
    /// The state after each step, normalised.
    states: Vec<oracle::EndState>,
    /// Whether the perturbation was injected (a crash after write 9 of a run that made 8 was not).
    pub injected: bool,
    /// How long the run took.
    pub took: Duration,
}

impl Outcome {
    fn failed(perturbation: Option<&Perturbation>, problem: String, started: Instant) -> Outcome {
        Outcome {
            perturbation: perturbation.cloned(),
            problems: vec![problem],
            writes: Vec::new(),
            states: Vec::new(),
            injected: false,
            took: started.elapsed(),
        }
    }
}

/// The outcome of an exploration.
#[derive(Debug)]
pub struct Report {
    /// The seed the plan was placed with.
    pub seed: u64,
    /// The workload's steps, by label.
    pub steps: Vec<String>,
    /// The run without faults.
    pub reference: Outcome,
    /// The perturbed runs, in order.
    pub runs: Vec<Outcome>,
    replay_command: String,
    /// How long it all took.
    pub took: Duration,
}

impl Report {
    /// The runs that found a problem, the reference run first if it did.
    pub fn failures(&self) -> impl Iterator<Item = &Outcome> {
        std::iter::once(&self.reference)
            .chain(&self.runs)
            .filter(|run| !run.problems.is_empty())
    }

    /// Whether any run found a problem.
    pub fn is_ok(&self) -> bool {
        self.failures().next().is_none()
    }

    /// Prints the report, and panics with it when a run found a problem.
    ///
    /// # Panics
    ///
    /// When a run found a problem.
    pub fn assert_ok(&self) {
        println!("{self}");
        assert!(self.is_ok(), "the explorer found problems:\n{self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failures().count();
        writeln!(
            f,
            "explored {} steps in {} runs (seed {}) in {:.1} s: {}",
            self.steps.len(),
            self.runs.len() + 1,
            self.seed,
            self.took.as_secs_f64(),
            match failed {
                0 => "no problem found".to_string(),
                n => format!("{n} run(s) found a problem"),
            }
        )?;
        for (number, label) in self.steps.iter().enumerate() {
            writeln!(f, "  step {}: {label}", number + 1)?;
        }
        for run in std::iter::once(&self.reference).chain(&self.runs) {
            let name = run
                .perturbation
                .as_ref()
                .map_or("reference".to_string(), |p| p.to_string());
            let mark = if run.problems.is_empty() {
                "ok  "
            } else {
                "FAIL"
            };
            let note = match (&run.perturbation, run.injected) {
                (Some(_), false) => " (not injected: the run never reached that point)",
                _ => "",
            };
            writeln!(
                f,
                "{mark} {name}: {} writes, {:.1} s{note}",
                run.writes.len(),
                run.took.as_secs_f64()
            )?;
            if run.problems.is_empty() {
                continue;
            }
            if let Some(perturbation) = &run.perturbation {
                writeln!(
                    f,
                    "     {} ({})",
                    perturbation.describe(),
                    perturbation.class()
                )?;
            }
            for problem in &run.problems {
                writeln!(f, "   - {problem}")?;
            }
            if let Some(perturbation) = &run.perturbation {
                writeln!(
                    f,
                    "     replay: EXPLORE_REPLAY='{perturbation}' {}",
                    self.replay_command
                )?;
            }
        }
        Ok(())
    }
}

/// When a Lease was acquired (its `acquireTime`, written by its holder), on this process's clock.
fn acquired_at(spec: &k8s_openapi::api::coordination::v1::LeaseSpec) -> Instant {
    spec.acquire_time.as_ref().map_or_else(Instant::now, |t| {
        let micros = t.0.as_microsecond();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let ago = Duration::from_micros(now.saturating_sub(micros).max(0) as u64);
        Instant::now().checked_sub(ago).unwrap_or_else(Instant::now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_path_reads_as_its_group_and_resource() {
        assert_eq!(
            group_and_resource("apps/v1/deployments/web"),
            ("apps", "deployments")
        );
        assert_eq!(group_and_resource("v1/configmaps/web"), ("", "configmaps"));
        assert_eq!(
            group_and_resource("explore.example.com/v1/websites/shop/status"),
            ("explore.example.com", "websites")
        );
        assert_eq!(
            group_and_resource("v1alpha1.example.com/v1/things/a"),
            ("v1alpha1.example.com", "things")
        );
    }

    #[test]
    fn perturbations_read_back_from_their_text() {
        let all = [
            Perturbation::Crash { write: 3 },
            Perturbation::Stale {
                step: 2,
                resource: "memcacheds".into(),
            },
            Perturbation::Delay {
                step: 1,
                resource: "deployments".into(),
            },
            Perturbation::Coalesce {
                step: 9,
                resource: "memcacheds".into(),
            },
            Perturbation::Relist {
                step: 4,
                resource: "jobs".into(),
            },
            Perturbation::SlowList {
                step: 5,
                resource: "jobs".into(),
            },
            Perturbation::LeaseStall { step: 3 },
        ];
        for perturbation in all {
            let text = perturbation.to_string();
            assert_eq!(text.parse::<Perturbation>(), Ok(perturbation), "{text}");
        }
        let unknown = "sleep:step=1".parse::<Perturbation>().unwrap_err();
        assert!(
            unknown.contains("unknown perturbation `sleep`"),
            "{unknown}"
        );
        assert!(
            "crash:write=0"
                .parse::<Perturbation>()
                .unwrap_err()
                .contains("counts from 1")
        );
        assert!(
            "delay:step=2"
                .parse::<Perturbation>()
                .unwrap_err()
                .contains("lacks resource=")
        );
    }

    #[test]
    fn a_seed_places_the_same_way_every_time() {
        let picks = |seed| {
            let mut seeded = Seeded::new(seed);
            (0..8).map(|_| seeded.below(10)).collect::<Vec<_>>()
        };
        assert_eq!(picks(7), picks(7));
        assert_ne!(picks(7), picks(8));
        assert!(picks(7).iter().all(|&n| n < 10));
    }
}

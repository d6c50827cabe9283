//! The series a task's leader exports for it (docs/metrics.md), so that an alert can see a task
//! stop firing whichever node leads it: `zkcron_task_leader` (1 on the node that leads it),
//! `zkcron_task_next_tick_timestamp_seconds`, `zkcron_task_interval_seconds` (the gap between
//! the task's latest tick and its next: the one being waited), `zkcron_task_last_success_timestamp_seconds`
//! and `zkcron_task_consecutive_failures`; and `zkcron_build_info`.
//!
//! The daemon hands a [`LeaderSource`] that says, at each scrape, which tasks this node leads
//! and their next ticks; the runs' ends this node records and the stored result it reads when it
//! gains a task feed [`Facts`]. A task whose leader moves has its series on the new leader from
//! the next scrape: `max by (task)` over the nodes reads them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// One task this node leads now, as the daemon sees it at a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct LedTask {
    pub task: Arc<str>,
    /// Unix seconds of its next tick; `None`: paused, or its schedule has no further tick.
    pub next_tick: Option<f64>,
    /// Seconds from its latest tick to the next; `None` with no next tick.
    pub interval: Option<f64>,
}

/// Which tasks this node leads now, with their next ticks (called at each scrape).
pub type LeaderSource = Arc<dyn Fn() -> Vec<LedTask> + Send + Sync>;

/// What this node knows of a task's latest runs: the last success (Unix seconds) and the failures
/// since it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Facts {
    pub last_success: Option<f64>,
    pub failures: u32,
}

/// The leader's series, shared by the families that encode them.
#[derive(Default)]
pub struct Leader {
    source: Mutex<Option<LeaderSource>>,
    /// What the source said at the last scrape, with each task's facts.
    scraped: Mutex<Vec<(LedTask, Facts)>>,
    facts: Mutex<BTreeMap<Arc<str>, Facts>>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Leader")
    }
}

impl Leader {
    pub fn set_source(&self, source: LeaderSource) {
        *self.source.lock().expect("leader metrics poisoned") = Some(source);
    }

    /// Asks the source once for this scrape.
    pub fn refresh(&self) {
        let source = self.source.lock().expect("leader metrics poisoned").clone();
        let led = source.map(|source| source()).unwrap_or_default();
        let facts = self.facts.lock().expect("leader metrics poisoned");
        let scraped = led
            .into_iter()
            .map(|task| {
                let known = facts.get(&task.task).copied().unwrap_or_default();
                (task, known)
            })
            .collect();
        *self.scraped.lock().expect("leader metrics poisoned") = scraped;
    }

    /// A run of `task` ended (on this node) at `at` (Unix seconds).
    pub fn run_ended(&self, task: &str, success: bool, at: f64) {
        let mut facts = self.facts.lock().expect("leader metrics poisoned");
        let known = facts.entry(task.into()).or_default();
        if success {
            known.last_success = Some(known.last_success.map_or(at, |t| t.max(at)));
            known.failures = 0;
        } else {
            known.failures += 1;
        }
    }

    /// This node no longer leads `task`: what it knew goes (another node's runs follow).
    pub fn forget(&self, task: &str) {
        self.facts
            .lock()
            .expect("leader metrics poisoned")
            .remove(task);
    }

    /// The stored result of `task`'s newest tick, read when this node gained the task: what it
    /// knows unless its own runs said more already.
    pub fn seed(&self, task: &str, success: bool, at: f64) {
        let mut facts = self.facts.lock().expect("leader metrics poisoned");
        if facts.contains_key(task) {
            return;
        }
        let known = if success {
            Facts {
                last_success: Some(at),
                failures: 0,
            }
        } else {
            Facts {
                last_success: None,
                failures: 1,
            }
        };
        facts.insert(task.into(), known);
    }
}

impl super::Metrics {
    /// `zkcron_build_info{version}`: this node's release.
    pub fn set_release(&self, release: &str) {
        self.0.build_info.clear();
        let label = VersionLabel {
            version: release.to_string(),
        };
        self.0.build_info.get_or_create(&label).set(1);
    }

    /// Where the leader's series come from at each scrape.
    pub fn set_leader_source(&self, source: LeaderSource) {
        self.0.leader.set_source(source);
    }

    /// A run of `task` ended on this node at `at_unix`, for the leader's series.
    pub fn task_run_ended(&self, task: &str, success: bool, at_unix: f64) {
        self.0.leader.run_ended(task, success, at_unix);
    }

    /// This node lost `task`: its leader's series go with the next scrape, its facts now.
    pub fn task_lost(&self, task: &str) {
        self.0.leader.forget(task);
    }

    /// The stored result of `task`'s newest tick, read when this node gained it.
    pub fn task_result_read(&self, task: &str, success: bool, at_unix: f64) {
        self.0.leader.seed(task, success, at_unix);
    }
}

/// Which of the leader's families one [`LeaderFamily`] encodes.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Leader,
    NextTick,
    Interval,
    LastSuccess,
    Failures,
}

/// One family of the leader's series.
#[derive(Debug)]
pub struct LeaderFamily {
    pub leader: Arc<Leader>,
    pub kind: Kind,
}

impl LeaderFamily {
    fn value(&self, task: &LedTask, facts: &Facts) -> Option<f64> {
        match self.kind {
            Kind::Leader => Some(1.0),
            Kind::NextTick => task.next_tick,
            Kind::Interval => task.interval,
            Kind::LastSuccess => facts.last_success,
            Kind::Failures => Some(f64::from(facts.failures)),
        }
    }
}

impl EncodeMetric for LeaderFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let scraped = self.leader.scraped.lock().expect("leader metrics poisoned");
        for (task, facts) in scraped.iter() {
            if let Some(value) = self.value(task, facts) {
                let labels = [("task", &*task.task)];
                if matches!(self.kind, Kind::Leader | Kind::Failures) {
                    encoder
                        .encode_family(&labels)?
                        .encode_gauge(&(value as i64))?;
                } else {
                    encoder.encode_family(&labels)?.encode_gauge(&value)?;
                }
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }

    fn is_empty(&self) -> bool {
        let scraped = self.leader.scraped.lock().expect("leader metrics poisoned");
        !scraped
            .iter()
            .any(|(task, facts)| self.value(task, facts).is_some())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabel {
    pub version: String,
}

/// Registers the leader's families and `zkcron_build_info`.
pub fn register(registry: &mut Registry) -> (Arc<Leader>, Family<VersionLabel, Gauge>) {
    let shared = Arc::new(Leader::default());
    let family = |kind| LeaderFamily {
        leader: shared.clone(),
        kind,
    };
    registry.register(
        "task_leader",
        "1 on the node that leads the task now (every node its own unit of an every-node task)",
        family(Kind::Leader),
    );
    registry.register_with_unit(
        "task_next_tick_timestamp",
        "Unix time of the task's next tick, from its leader (none while paused)",
        prometheus_client::registry::Unit::Seconds,
        family(Kind::NextTick),
    );
    registry.register_with_unit(
        "task_interval",
        "Seconds from the task's latest tick to its next, from its leader",
        prometheus_client::registry::Unit::Seconds,
        family(Kind::Interval),
    );
    registry.register_with_unit(
        "task_last_success_timestamp",
        "Unix time a run of the task last ended successfully on any node, as its leader knows",
        prometheus_client::registry::Unit::Seconds,
        family(Kind::LastSuccess),
    );
    registry.register(
        "task_consecutive_failures",
        "The task's latest runs that failed in a row, as its leader knows (0 after a success)",
        family(Kind::Failures),
    );
    let build_info = Family::<VersionLabel, Gauge>::default();
    registry.register(
        "build_info",
        "1, labelled with this node's release",
        build_info.clone(),
    );
    (shared, build_info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_resets_the_failures_and_a_seed_never_overrides_own_runs() {
        let leader = Leader::default();
        leader.seed("a", false, 10.0);
        leader.run_ended("a", false, 20.0);
        assert_eq!(
            leader.facts.lock().unwrap()["a"],
            Facts {
                last_success: None,
                failures: 2
            }
        );
        leader.run_ended("a", true, 30.0);
        leader.seed("a", false, 40.0);
        assert_eq!(
            leader.facts.lock().unwrap()["a"],
            Facts {
                last_success: Some(30.0),
                failures: 0
            }
        );
    }
}

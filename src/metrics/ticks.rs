//! `zkcron_ticks_total{task, outcome, reason}`: the ticks this node recorded as not run (the
//! tick ledger: `outcome` "skipped" or "missed", `reason` its code). A series exists from the
//! first such tick of its task and reason: most tasks have none, and cost nothing here.
//! `zkcron_task_no_eligible_node{task}`: 1 for each task this node defines that no live node
//! may run (its ticks pass unrun; no leader records them), on every node that sees it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Series = BTreeMap<(Arc<str>, &'static str, &'static str), u64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    task: String,
}

/// The counters, by task, outcome and reason; and the tasks no live node may run.
#[derive(Debug, Default)]
pub struct Ticks {
    counts: Mutex<Series>,
    no_eligible: Family<TaskLabel, Gauge>,
    listed: Mutex<BTreeSet<String>>,
}

impl Ticks {
    /// The tasks no live node may run now: each has its series at 1; the others none.
    pub fn set_no_eligible(&self, tasks: &BTreeSet<String>) {
        let mut listed = self.listed.lock().expect("tick metrics poisoned");
        for gone in listed.difference(tasks) {
            self.no_eligible.remove(&TaskLabel { task: gone.clone() });
        }
        for task in tasks.difference(&listed) {
            self.no_eligible
                .get_or_create(&TaskLabel { task: task.clone() })
                .set(1);
        }
        *listed = tasks.clone();
    }

    /// `count` more ticks of `task` not run, with `outcome` and `reason` (their codes).
    pub fn add(&self, task: &str, outcome: &'static str, reason: &'static str, count: u64) {
        let mut series = self.counts.lock().expect("tick metrics poisoned");
        match series
            .iter_mut()
            .find(|((t, o, r), _)| &**t == task && *o == outcome && *r == reason)
        {
            Some((_, value)) => *value = value.saturating_add(count),
            None => {
                series.insert((task.into(), outcome, reason), count);
            }
        }
    }
}

/// The family as `/metrics` encodes it.
#[derive(Debug)]
struct TicksFamily(Arc<Ticks>);

impl EncodeMetric for TicksFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series = self.0.counts.lock().expect("tick metrics poisoned");
        for ((task, outcome, reason), value) in series.iter() {
            let task: &str = task;
            let labels = [("task", task), ("outcome", *outcome), ("reason", *reason)];
            encoder
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(value, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Counter
    }

    fn is_empty(&self) -> bool {
        self.0
            .counts
            .lock()
            .expect("tick metrics poisoned")
            .is_empty()
    }
}

/// Registers `zkcron_ticks_total`.
pub(super) fn register(registry: &mut Registry) -> Arc<Ticks> {
    let ticks = Arc::new(Ticks::default());
    registry.register(
        "ticks",
        "Ticks of a task's schedule this node recorded as not run, by outcome and reason (the tick ledger)",
        TicksFamily(ticks.clone()),
    );
    registry.register(
        "task_no_eligible_node",
        "1 for a task this node defines that no live node may run (version_req, require_labels, drains)",
        ticks.no_eligible.clone(),
    );
    ticks
}

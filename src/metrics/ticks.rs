//! `zkcron_ticks_total{task, outcome, reason}`: the ticks this node recorded as not run (the
//! tick ledger: `outcome` "skipped" or "missed", `reason` its code). A series exists from the
//! first such tick of its task and reason: most tasks have none, and cost nothing here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::registry::Registry;

type Series = BTreeMap<(Arc<str>, &'static str, &'static str), u64>;

/// The counters, by task, outcome and reason.
#[derive(Debug, Default)]
pub struct Ticks(Mutex<Series>);

impl Ticks {
    /// `count` more ticks of `task` not run, with `outcome` and `reason` (their codes).
    pub fn add(&self, task: &str, outcome: &'static str, reason: &'static str, count: u64) {
        let mut series = self.0.lock().expect("tick metrics poisoned");
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
        let series = self.0.0.lock().expect("tick metrics poisoned");
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
        self.0.0.lock().expect("tick metrics poisoned").is_empty()
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
    ticks
}

//! The daemon around the real firing core: its actions performed (claims and other calls to
//! the node, spawns at the tick's instant, stops), runs started and ended, the node's answers
//! handed back, and the slots a run counts in.

use super::*;

impl Sim<'_> {
    /// Hands the node's process's firing core `input` at its wall clock, then performs what it
    /// asks and sets its timer.
    pub(crate) fn core_input(&mut self, n: NodeIx, input: FireInput<()>) {
        let wall = self.wall(n);
        let Some(core) = self.procs[n].firing.as_mut() else {
            return;
        };
        core.handle(input, wall);
        self.core_settle(n);
    }

    /// Performs the core's actions until it has none, then sets its timer.
    pub(crate) fn core_settle(&mut self, n: NodeIx) {
        while let Some(action) = self.procs[n].firing.as_mut().and_then(|core| core.poll()) {
            self.perform(n, action);
        }
        let Some(due) = self.procs[n].firing.as_ref().and_then(|c| c.poll_timeout()) else {
            self.procs[n].core_timeout_at = None;
            return;
        };
        let true_ms = (due - epoch()).num_milliseconds() - self.procs[n].skew_ms;
        let mut at = (true_ms.max(0) as Ms).max(self.now);
        if self.sc.knobs.bug == NodeBug::SlowTimer {
            at += 3_000;
        }
        let p = &mut self.procs[n];
        if p.core_timeout_at == Some(at) {
            return;
        }
        p.core_timeout_at = Some(at);
        p.core_timeout_generation += 1;
        let generation = p.core_timeout_generation;
        self.timer(n, at - self.now, T::CoreTimeout(generation));
    }

    /// Performs one action of the firing core: calls go to the node as requests, preparations
    /// are done at once, runs start at their instant.
    fn perform(&mut self, n: NodeIx, action: FireAction<()>) {
        let ask = |what| move |call| Asked::Core { call, what };
        match action {
            FireAction::ReadFireRecord { call, task } => {
                note!(
                    self,
                    Some(n),
                    self.by_name.get(&*task).copied(),
                    "reading the record".into()
                );
                let task = task.to_string();
                self.ask(n, Request::LastClaimed { task }, ask(CoreAsk::Record)(call));
            }
            FireAction::ReadOrphan { call, task } => {
                let task = task.to_string();
                self.ask(
                    n,
                    Request::OrphanedTick { task },
                    ask(CoreAsk::Orphan)(call),
                );
            }
            FireAction::CountRunsElsewhere { call, task } => {
                let task = task.to_string();
                let asked = ask(CoreAsk::RunsElsewhere)(call);
                self.ask(n, Request::RunsElsewhere { task }, asked);
            }
            FireAction::ReadQueued { call, task } => {
                let task = task.to_string();
                self.ask(n, Request::QueuedTick { task }, ask(CoreAsk::Queued)(call));
            }
            FireAction::WaitRunsElsewhere { call, task } => {
                let task = task.to_string();
                let asked = ask(CoreAsk::RunsEnded)(call);
                self.ask(n, Request::RunsEndedElsewhere { task }, asked);
            }
            FireAction::Prepare { call, .. } => {
                let wall = self.wall(n);
                let answer = FireInput::Answer {
                    call,
                    answer: FireAnswer::Prepared(()),
                };
                if let Some(core) = self.procs[n].firing.as_mut() {
                    core.handle(answer, wall);
                }
            }
            FireAction::Claim {
                call,
                task,
                tick,
                intent,
                ticks,
            } => {
                let t = self.slot(n, &task);
                note!(
                    self,
                    Some(n),
                    Some(t),
                    format!("claim {:.3}s ({intent:?})", secs(tick))
                );
                let request = Request::Claim {
                    task: task.to_string(),
                    tick,
                    intent,
                    ticks,
                };
                self.ask(n, request, ask(CoreAsk::Claim { task: t, tick })(call));
            }
            FireAction::Reclaim { call, task, tick } => {
                let t = self.slot(n, &task);
                let request = Request::Reclaim {
                    task: task.to_string(),
                    tick,
                };
                self.ask(n, request, ask(CoreAsk::Claim { task: t, tick })(call));
            }
            FireAction::ClaimManual {
                call,
                task,
                trigger,
            } => {
                let request = Request::ClaimManual {
                    task: task.to_string(),
                    trigger,
                };
                self.ask(n, request, ask(CoreAsk::Manual)(call));
            }
            FireAction::Spawn(spawn) => self.spawn(n, spawn),
            FireAction::SkipChained {
                task,
                fire_id,
                tick,
            } => self.chained_skipped(n, &task, fire_id, tick.instant),
            FireAction::StopRuns { runs, how } => {
                for run in runs {
                    self.stop_run(n, run, how);
                }
            }
            FireAction::CancelRetries { .. } | FireAction::ReleaseMemory => {}
        }
    }

    /// A claimed run: a manual one starts now, a tick's at its due time by the node's clock.
    fn spawn(&mut self, n: NodeIx, spawn: firing::Spawn<()>) {
        let task = task_ix(&spawn.task);
        if spawn.kind == RunKind::Backfill {
            return self.backfill_spawned(n, spawn);
        }
        if zkcron::coord::record::chain_of(&spawn.fire_id).is_some() {
            return self.chained_spawned(n, spawn);
        }
        if spawn.kind == RunKind::Manual {
            let fire_id = spawn.fire_id;
            let Some(k) = self.triggers.iter().position(|(_, id, _)| *id == fire_id) else {
                return;
            };
            note!(self, Some(n), Some(task), format!("MANUAL RUN {fire_id}"));
            self.check
                .on_requested_run(Requested::Manual, self.now, &fire_id, task, n);
            self.timer(n, 500, T::ManualEnd { k, run: spawn.run });
            return;
        }
        let task = self.slot(n, &spawn.task);
        let tick = spawn.tick.instant;
        let wait = (spawn.tick.due_at - self.wall(n)).num_milliseconds().max(0) as Ms;
        self.procs[n].runs.insert(spawn.run, Run::Waiting);
        if let Some(items) = &spawn.work_items {
            let slots = self.item_slots(task, items);
            self.procs[n].run_items.insert(spawn.run, slots);
        }
        if !spawn.chained.is_empty() {
            self.procs[n].chained.insert(spawn.run, spawn.chained);
        }
        self.timer(
            n,
            wait,
            T::Spawn {
                task,
                tick,
                run: spawn.run,
            },
        );
    }

    /// The run's instant came: it starts, unless it was stopped before.
    pub(crate) fn spawn_due(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>, run: RunId) {
        match self.procs[n].runs.get(&run) {
            Some(Run::Waiting) => {
                self.procs[n].runs.insert(run, Run::Running { task, tick });
                for slot in self.run_slots(n, task, run) {
                    self.ran(n, slot, tick);
                }
                let mut took = self.rng.random_range(10..=3_000);
                if self.sc.knobs.long_runs && self.runs_rng.random_bool(0.15) {
                    // A process that outlives its task's next tick or several.
                    took = self.runs_rng.random_range(5_000..=40_000);
                    if self.sc.tasks[task].overlap != OverlapPolicy::Allow {
                        self.check.outlasted.insert(task);
                    }
                }
                self.timer(n, took, T::RunEnd { task, tick, run });
            }
            Some(Run::Running { .. }) => {}
            Some(Run::Withdrawn) => {
                note!(
                    self,
                    Some(n),
                    Some(task),
                    format!("withdrawn {:.3}s: its session ended", secs(tick))
                );
                self.procs[n].runs.remove(&run);
                for slot in self.run_slots(n, task, run) {
                    self.check.run_exited(slot, tick, n);
                }
                self.procs[n].run_items.remove(&run);
                self.core_input(n, FireInput::RunEnded { run });
            }
            None => {
                // Stopped before its instant: never started; its end is recorded.
                note!(
                    self,
                    Some(n),
                    Some(task),
                    format!("not started {:.3}s", secs(tick))
                );
                self.run_ended(
                    n,
                    task,
                    tick,
                    run,
                    "not started: stopped before its instant",
                );
            }
        }
    }

    /// SIGTERM to a run: it ends at once (a waiting one never starts). `Unspawned` only
    /// withdraws a waiting run.
    fn stop_run(&mut self, n: NodeIx, run: RunId, how: StopHow) {
        match self.procs[n].runs.get(&run) {
            Some(&Run::Running { task, tick }) if how != StopHow::Unspawned => {
                self.timer(n, 1, T::RunEnd { task, tick, run })
            }
            Some(Run::Waiting) if how == StopHow::Unspawned => {
                self.procs[n].runs.insert(run, Run::Withdrawn);
            }
            Some(Run::Waiting) => {
                self.procs[n].runs.remove(&run);
            }
            _ => {}
        }
    }

    /// A run ended: its result goes to the node, its end to the core.
    pub(crate) fn run_ended(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        tick: DateTime<Utc>,
        run: RunId,
        exit: &str,
    ) {
        self.procs[n].runs.remove(&run);
        for slot in self.run_slots(n, task, run) {
            self.check.run_exited(slot, tick, n);
        }
        self.procs[n].run_items.remove(&run);
        let chained = self.procs[n].chained.remove(&run);
        let mut result = RunResult {
            tick,
            node: self.procs[n].id.clone(),
            exit: exit.into(),
            success: exit == "exit code 0",
            attempts: 1,
            duration_ms: 1,
            finished_at: self.wall(n),
            ..RunResult::default()
        };
        if !result.success && self.sc.tasks[task].pause_on_failure {
            // As the daemon does: the pause goes with the failed run's end.
            result.pause = Some(Box::new(MarkRecord {
                format: 1,
                at: self.wall(n),
                by: format!("zkcron@{}", result.node),
                reason: Some(format!("pause_on_failure: run failed ({exit})")),
            }));
        }
        let name = self.task_name(task);
        let asked = match chained {
            Some(chained) if result.success => {
                result.chained = chained.to_vec();
                let requested = super::chain::requested(&name, &result);
                self.chain_requests.push(requested);
                Asked::ChainParentEnded(self.chain_requests.len() - 1)
            }
            _ => Asked::RunEnded,
        };
        self.ask(n, Request::RunEnded { task: name, result }, asked);
        self.core_input(n, FireInput::RunEnded { run });
    }

    /// The slot that node `n`'s run or claim of task `name` counts in: the task's, or for a
    /// task that runs on every node, `n`'s unit's.
    pub(crate) fn slot(&self, n: NodeIx, name: &str) -> TaskIx {
        let t = task_ix(name);
        if !self.sc.tasks[t].every_node {
            return t;
        }
        self.sc
            .tasks
            .iter()
            .position(|u| u.unit_of == Some((t, n)))
            .expect("a node that runs a task defines it, so it has a unit of it")
    }

    /// The task the daemon names for a slot: the task of a unit.
    pub(crate) fn task_name(&self, t: TaskIx) -> String {
        let t = self.sc.tasks[t].task_of(t);
        self.sc.tasks[t].name.clone()
    }

    /// The slots of the items `items` of the pooled task `t`.
    fn item_slots(&self, t: TaskIx, items: &[String]) -> Vec<TaskIx> {
        let names = self.sc.tasks[t].items.as_deref().unwrap_or_default();
        items
            .iter()
            .filter_map(|item| {
                let i = names.iter().position(|name| name == item)?;
                self.sc.tasks.iter().position(|u| u.item_of == Some((t, i)))
            })
            .collect()
    }

    /// The slots node `n`'s run `run` of slot `task` counts in: each item slot its claim won
    /// for a pooled task's run, else `task`'s own.
    fn run_slots(&self, n: NodeIx, task: TaskIx, run: RunId) -> Vec<TaskIx> {
        match self.procs[n].run_items.get(&run) {
            Some(slots) => slots.clone(),
            None => vec![task],
        }
    }

    pub(crate) fn answered(
        &mut self,
        n: NodeIx,
        asked: Asked,
        answer: zkcron::coord::node::io::Answer,
    ) {
        match asked {
            Asked::Core { call, what } => {
                let answer = self.core_answer(n, what, answer);
                self.core_input(n, FireInput::Answer { call, answer });
            }
            Asked::Close => {
                if self.procs[n].stopping {
                    self.kill(n);
                }
            }
            Asked::ChainParentEnded(k) => {
                if answer.is_ok() {
                    let children = std::mem::take(&mut self.chain_requests[k]);
                    self.check.expect_chained(children, self.now);
                }
            }
            Asked::Publish | Asked::RunEnded | Asked::Release => {}
        }
    }

    /// The node's answer as the firing core takes it, counted, and bent by a deliberate bug.
    fn core_answer(
        &mut self,
        n: NodeIx,
        what: CoreAsk,
        answer: zkcron::coord::node::io::Answer,
    ) -> FireAnswer<()> {
        match (what, answer) {
            (CoreAsk::Record, Ok(Answered::Tick(last))) => FireAnswer::FireRecord(Ok(last)),
            (CoreAsk::Record, Err(error)) => FireAnswer::FireRecord(Err(error)),
            (CoreAsk::Claim { task, tick }, answer) => {
                let outcome = match answer {
                    Ok(Answered::Claim(outcome)) => Ok(outcome),
                    Ok(Answered::ClaimedItems(items)) => {
                        self.count_claim(n, task, tick, &Ok(ClaimOutcome::Claimed));
                        return FireAnswer::ClaimedItems(items.into());
                    }
                    Err(error) if self.sc.knobs.bug == NodeBug::AssumeClaimedOnLoss => {
                        note!(
                            self,
                            Some(n),
                            Some(task),
                            format!(
                                "claim {:.3}s: {error}, taken as won (deliberate bug)",
                                secs(tick)
                            )
                        );
                        Ok(ClaimOutcome::Claimed)
                    }
                    Err(error) => Err(error),
                    Ok(other) => panic!("the node answered {other:?} to {what:?}"),
                };
                self.count_claim(n, task, tick, &outcome);
                FireAnswer::Claim(outcome)
            }
            (CoreAsk::Orphan, answer) => FireAnswer::Orphan(answer.map(|a| match a {
                Answered::Tick(tick) => tick,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::RunsElsewhere, answer) => {
                FireAnswer::RunsElsewhere(answer.map(|a| match a {
                    Answered::Count(count) => count,
                    other => panic!("the node answered {other:?} to {what:?}"),
                }))
            }
            (CoreAsk::Manual, answer) => FireAnswer::Claim(answer.map(|a| match a {
                Answered::Claim(outcome) => outcome,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::Queued, answer) => FireAnswer::Queued(answer.map(|a| match a {
                Answered::Tick(tick) => tick,
                other => panic!("the node answered {other:?} to {what:?}"),
            })),
            (CoreAsk::RunsEnded, answer) => FireAnswer::RunsEnded(answer.map(|_| ())),
            (_, answer) => panic!("the node answered {answer:?} to {what:?}"),
        }
    }

    fn count_claim(
        &mut self,
        n: NodeIx,
        task: TaskIx,
        tick: DateTime<Utc>,
        outcome: &Result<ClaimOutcome, zkcron::coord::CoordError>,
    ) {
        let what = match outcome {
            Ok(ClaimOutcome::Claimed) => "claimed".to_string(),
            Ok(ClaimOutcome::AlreadyClaimed { record }) => {
                self.stats.already_claimed += 1;
                format!("already claimed (record {:.3}s)", secs(*record))
            }
            Ok(ClaimOutcome::NotLeader) => {
                self.stats.not_leader += 1;
                "not leader".to_string()
            }
            Ok(ClaimOutcome::Done { runs }) => format!("done after {runs} runs"),
            Err(error) => {
                self.stats.conflicts += 1;
                format!("{error}")
            }
        };
        note!(
            self,
            Some(n),
            Some(task),
            format!("claim {:.3}s: {what}", secs(tick))
        );
    }

    pub(crate) fn ran(&mut self, n: NodeIx, task: TaskIx, tick: DateTime<Utc>) {
        self.stats.runs += 1;
        note!(self, Some(n), Some(task), format!("RUN {:.3}s", secs(tick)));
        let session = self
            .check
            .claims
            .get(&(task, tick))
            .and_then(|c| c.iter().find(|c| c.node == n))
            .map_or(SessionId(0), |c| c.session);
        self.check_overlap(n, task, tick);
        self.check.on_run(self.now, task, tick, n, session);
        let slots = (task, self.sc.tasks[task].task_of(task));
        self.check.check_failure_pause(self.now, slots, tick, n);
    }
}

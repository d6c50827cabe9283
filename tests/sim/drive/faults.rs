//! The faults and the operator's actions of a scenario: crashes, stops, partitions, pauses,
//! clock steps, reloads, the stranger's writes, `zkcron pause` / `resume`, drains. The operator's
//! writes are the shipped rules of `zkcron::coord::operator`, applied to what the model holds.

use zkcron::coord::operator::{self, Marking, OperatorBugs, ResumeRead, Versioned};
use zkcron::coord::records::Paths;
use zkcron::coord::zkop::NodeAcl;

use super::*;

impl Sim<'_> {
    pub(crate) fn disturb(&mut self, n: NodeIx, kind: u8, on: bool) {
        if on {
            self.open_disturbance.entry((n, kind)).or_insert(self.now);
        } else if let Some(start) = self.open_disturbance.remove(&(n, kind)) {
            self.disturbed.push((Some(n), start, self.now));
        }
    }

    pub(crate) fn fault(&mut self, fault: Fault) {
        note!(self, fault.node(), None, format!("FAULT {fault:?}"));
        if !matches!(fault, Fault::LinkUp(_) | Fault::Thaw(_) | Fault::LossOff(_)) {
            self.disturbed.push((fault.node(), self.now, self.now));
        }
        match fault {
            Fault::Start(n) => self.boot(n),
            Fault::Crash(n) => {
                if !self.procs[n].up {
                    return;
                }
                if let Some(conn) = self.procs[n].conn {
                    self.kill_link(conn);
                }
                self.kill(n);
            }
            Fault::Stop(n) => {
                if !self.procs[n].up {
                    return;
                }
                if self.procs[n].frozen {
                    self.kill(n);
                    return;
                }
                self.graceful_stop(n);
            }
            Fault::Restart {
                node: n,
                seed,
                release,
            } => {
                if self.procs[n].up {
                    return;
                }
                if let Some(seed) = seed {
                    self.procs[n].seed = seed;
                }
                if let Some(release) = release {
                    self.procs[n].release = Some(release);
                }
                self.boot(n);
            }
            Fault::LinkDown(n) => {
                self.link_up[n] = false;
                self.disturb(n, 0, true);
            }
            Fault::LinkUp(n) => {
                self.link_up[n] = true;
                self.disturb(n, 0, false);
            }
            Fault::Freeze(n) => {
                if self.procs[n].up {
                    self.procs[n].frozen = true;
                    self.disturb(n, 1, true);
                }
            }
            Fault::Thaw(n) => self.thaw(n),
            Fault::LossOn(n, pct) => {
                self.procs[n].loss_pct = pct;
                self.disturb(n, 2, true);
            }
            Fault::LossOff(n) => {
                self.procs[n].loss_pct = 0;
                self.disturb(n, 2, false);
            }
            Fault::Skew(n, skew) => {
                self.procs[n].skew_ms = skew;
                if self.procs[n].up {
                    self.log_node(n);
                    // The daemon notices a clock step and re-plans every task.
                    self.core_input(n, FireInput::ClockJumped);
                }
            }
            Fault::Stranger(meddle) => self.meddle(meddle),
            Fault::Reload(n) => {
                // The files change now; a node that is down loads them when it starts, a
                // stopped process when it resumes.
                self.procs[n].reloads += 1;
                if self.procs[n].up {
                    self.timer(n, 0, T::Reload);
                }
            }
            Fault::HealAll => {
                for n in 0..self.sc.nodes.len() {
                    // Every node is undrained (a no-op where no mark is), but those the operator
                    // leaves drained.
                    if !self.sc.drained_at_end.contains(&n) {
                        self.meddle(Meddle::Undrain(n));
                    }
                }
                for t in 0..self.sc.tasks.len() {
                    // Every task is resumed (no write where no mark is).
                    self.meddle(Meddle::Resume(t));
                }
                for n in 0..self.procs.len() {
                    self.link_up[n] = true;
                    self.procs[n].loss_pct = 0;
                    self.thaw(n);
                    for kind in 0..3 {
                        self.disturb(n, kind, false);
                    }
                    if !self.procs[n].up && !self.sc.nodes[n].visitor {
                        self.boot(n);
                    }
                }
            }
        }
    }

    /// A stranger client writes foreign or stale znodes; what ZooKeeper refuses (no parent, the
    /// znode exists) is simply not done.
    pub(crate) fn meddle(&mut self, meddle: Meddle) {
        if let Meddle::Resume(t) = meddle {
            self.check.failure_resumed(t, self.now);
        }
        let name = |t: TaskIx| self.sc.tasks[t].name.clone();
        let since = epoch() + TimeDelta::milliseconds(self.now as i64);
        let paths = sim_paths();
        let ops: Vec<ZkOp> = match &meddle {
            Meddle::GhostMember => {
                let tasks = self
                    .sc
                    .tasks
                    .iter()
                    .filter(|t| !t.is_unit())
                    .map(|t| {
                        (
                            t.name.clone(),
                            TaskSetEntry {
                                digest: format!("{:016x}", t.name.len()),
                                version_req: None,
                                require_labels: Default::default(),
                                schedule: None,
                                timezone: None,
                                ..Default::default()
                            },
                        )
                    })
                    .collect();
                let set = TaskSetRecord {
                    format: 1,
                    tasks,
                    calendars: Default::default(),
                };
                let member = MemberRecord {
                    format: 1,
                    id: "ghost".into(),
                    release: "99.0.0".into(),
                    seed: format!("{:016x}", u64::MAX),
                    host: "elsewhere".into(),
                    pid: 1,
                    http: None,
                    started_at: since,
                    labels: Default::default(),
                    taskset: TaskSetRef {
                        digest: "ghost".into(),
                        chunks: 1,
                        count: self.sc.task_count(),
                    },
                    leads: true,
                    drained: false,
                };
                vec![
                    ZkOp::Create {
                        path: format!("{BASE}/tasksets/ghost-0"),
                        data: serde_json::to_vec(&set).expect("encodes"),
                        mode: CreateMode::Persistent,
                        acl: Default::default(),
                    },
                    ZkOp::Create {
                        path: format!("{BASE}/members/ghost"),
                        data: serde_json::to_vec(&member).expect("encodes"),
                        mode: CreateMode::Persistent,
                        acl: Default::default(),
                    },
                ]
            }
            Meddle::PersistentLease(t) => vec![ZkOp::Create {
                path: format!("{BASE}/leases/{}", name(*t)),
                data: serde_json::to_vec(&LeaseRecord {
                    format: 1,
                    node: "ghost".into(),
                    session: "1".into(),
                    since,
                })
                .expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            }],
            Meddle::TamperLease(t) => vec![ZkOp::SetData {
                path: format!("{BASE}/leases/{}", name(*t)),
                data: b"{\"tampered\": true}".to_vec(),
                version: None,
            }],
            Meddle::TamperEpoch(t) => vec![ZkOp::SetData {
                path: format!("{BASE}/tasks/{}/epoch", name(*t)),
                data: b"tampered".to_vec(),
                version: None,
            }],
            Meddle::PersistentRun(t) => vec![ZkOp::Create {
                path: format!("{BASE}/tasks/{}/run-{}", name(*t), since.timestamp()),
                data: serde_json::to_vec(&RunRecord {
                    format: 1,
                    node: "ghost".into(),
                    session: "1".into(),
                    tick: since,
                    started_at: since,
                })
                .expect("encodes"),
                mode: CreateMode::Persistent,
                acl: Default::default(),
            }],
            Meddle::Drain(n) => self.mark_ops(&paths.drain(&self.sc.nodes[*n].id), since),
            Meddle::Undrain(n) => {
                let node = &self.sc.nodes[*n].id;
                let read = self.read::<MarkRecord>(&paths.drain(node));
                operator::undrain(&paths, node, read.as_ref())
                    .into_iter()
                    .collect()
            }
            Meddle::Pause(t) => self.mark_ops(&paths.paused(&self.sc.tasks[*t].name), since),
            Meddle::Resume(t) => self.resume_ops(*t, since).into_iter().collect(),
            Meddle::DeleteLeases | Meddle::DeleteMembers => {
                let dir = if meddle == Meddle::DeleteLeases {
                    "leases"
                } else {
                    "members"
                };
                let root = format!("{BASE}/{dir}");
                let mut paths: Vec<String> = self
                    .zk
                    .nodes
                    .keys()
                    .filter(|p| model_zk::covers(&root, p))
                    .cloned()
                    .collect();
                paths.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
                paths
                    .into_iter()
                    .map(|path| ZkOp::Delete {
                        path,
                        version: None,
                    })
                    .collect()
            }
        };
        for op in ops {
            let mut writes = Vec::new();
            let (result, events) = self.zk.apply(self.stranger, &op, self.now, &mut writes);
            note!(self, None, None, format!("stranger {op:?}: {result:?}"));
            for write in writes {
                self.on_write(None, &write);
            }
            self.broadcast(events);
        }
    }

    /// The record at `path` in the model, decoded, with its version; `None` when it is missing
    /// or is not such a record (a stranger's garbage).
    fn read<T: serde::de::DeserializeOwned>(&self, path: &str) -> Option<Versioned<T>> {
        let z = self.zk.nodes.get(path)?;
        let value = serde_json::from_slice(&z.data).ok()?;
        Some(Versioned {
            value,
            version: z.stat.version,
        })
    }

    /// `zkcron pause` or `zkcron drain` at `at` of the mark at `path` ([`operator::mark`]), in
    /// the order `zkcron` performs them: the parents (one that exists is refused, which is
    /// fine), then the mark; nothing when a mark is there already.
    fn mark_ops(&self, path: &str, at: DateTime<Utc>) -> Vec<ZkOp> {
        let read = self.read::<MarkRecord>(path);
        let mark = MarkRecord {
            format: 1,
            at,
            by: "ops@sim".into(),
            reason: None,
        };
        match operator::mark(path, read.as_ref().map(|r| &r.value), &mark, NodeAcl::Open) {
            Marking::Already(_) => Vec::new(),
            Marking::Create {
                mut parents,
                create,
            } => {
                parents.push(create);
                parents
            }
        }
    }

    /// `zkcron resume`'s multi, as the shipped rule makes it ([`operator::resume`]) from the
    /// records it reads here: the task's and its units' under `tasks/`. `None` when the task
    /// is not paused. The scenario's deliberate bug may make the rule drop a queued tick.
    fn resume_ops(&self, t: TaskIx, now: DateTime<Utc>) -> Option<ZkOp> {
        let paths = sim_paths();
        let task = &self.sc.tasks[t].name;
        let tasks = format!("{}/", paths.tasks());
        let children = self
            .zk
            .nodes
            .keys()
            .filter_map(|path| path.strip_prefix(&tasks))
            .filter(|name| !name.contains('/'));
        let read = ResumeRead {
            mark: self.read::<MarkRecord>(&paths.paused(task)),
            records: operator::resume_reads(task, children)
                .into_iter()
                .filter_map(|name| Some((name.clone(), self.read(&paths.record(&name))?)))
                .collect(),
        };
        let bugs = OperatorBugs {
            resume_drops_queued: self.sc.knobs.bug == NodeBug::ResumeDropsQueued,
        };
        operator::resume_with(bugs, &paths, task, &read, now)
    }

    /// The daemon reloads its changed task files, as `daemon::reload` does: the firing core
    /// stops firing every task (each changed), is handed the new definitions (it fires the
    /// tasks it leads again from their fire records), and the node publishes them.
    pub(super) fn reload(&mut self, n: NodeIx) {
        let mut specs: Vec<TaskSpec> = self.procs[n]
            .defines
            .iter()
            .map(|&t| task_spec(&self.sc.tasks[t], self.procs[n].reloads))
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        note!(self, Some(n), None, "reloading changed task files".into());
        let changed = specs
            .iter()
            .map(|spec| (spec.name.to_string(), Unload::Changed))
            .collect();
        self.core_input(n, FireInput::Unload(changed));
        let loaded = specs.iter().cloned().map(Arc::new).collect();
        self.core_input(n, FireInput::Load(loaded));
        self.ask(n, Request::Publish(specs), Asked::Publish);
        self.settle(n);
    }

    pub(crate) fn kill(&mut self, n: NodeIx) {
        let p = &mut self.procs[n];
        p.up = false;
        p.frozen = false;
        p.stopping = false;
        p.deferred.clear();
        p.inc += 1;
        p.firing = None;
        p.runs.clear();
        p.chained.clear();
        p.run_items.clear();
        p.node = None;
        self.log_node(n);
        // Its processes end with it.
        self.check.live_runs.retain(|r| r.node != n);
    }

    /// SIGTERM: the daemon stops firing, releases everything and closes; the process exits when
    /// the node closed its session or after 2 s.
    pub(crate) fn graceful_stop(&mut self, n: NodeIx) {
        self.procs[n].stopping = true;
        self.core_input(n, FireInput::Shutdown);
        self.ask(n, Request::ReleaseAll, Asked::Release);
        self.ask(n, Request::Close, Asked::Close);
        self.timer(n, 2_000, T::StopDeadline);
        self.settle(n);
    }

    pub(crate) fn thaw(&mut self, n: NodeIx) {
        if !self.procs[n].frozen {
            return;
        }
        self.procs[n].frozen = false;
        self.disturb(n, 1, false);
        // Resumed: timers that came due and buffered messages run now, in their order; half the
        // time the firing core's timers first, so the node acts on its stale view at once.
        let deferred = std::mem::take(&mut self.procs[n].deferred);
        let (wakes, rest): (Vec<Ev>, Vec<Ev>) = if self.rng.random_bool(0.5) {
            deferred.into_iter().partition(|ev| {
                matches!(
                    ev,
                    Ev::Timer {
                        timer: T::CoreTimeout(_) | T::Spawn { .. },
                        ..
                    }
                )
            })
        } else {
            (Vec::new(), deferred)
        };
        for ev in wakes.into_iter().chain(rest) {
            self.push(self.now, ev);
        }
    }
}

/// The paths of the simulated cluster, as the nodes and `zkcron` name them.
pub(super) fn sim_paths() -> Paths {
    Paths {
        base: BASE.to_string(),
    }
}

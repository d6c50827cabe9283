//! What the checker sees of the server's writes: claims (fire records moving to a new tick),
//! results and pauses, lease deletes and the registered members.

use super::*;

impl Sim<'_> {
    pub(crate) fn on_write(&mut self, node: Option<NodeIx>, write: &Write) {
        if let Some(path) = write.path.strip_suffix("/result")
            && let Some(t) = self.task_of(path, "tasks")
        {
            self.on_result_write(t, write);
        } else if let Some(t) = self.task_of(&write.path, "control/paused")
            && node.is_some()
            && write.before.is_none()
            && write.after.is_some()
        {
            // A node pauses a task only for a failed run (`pause_on_failure`); its result may
            // not be stored with it (a newer one was).
            self.failure_paused(t);
        } else if let Some(t) = self.task_of(&write.path, "tasks") {
            self.on_record_write(node, t, write);
        } else if let Some(t) = self.task_of(&write.path, "leases") {
            if write.after.is_none()
                && let Some((_, stat)) = &write.before
            {
                let owner = stat.ephemeral_owner;
                if node.is_some() && owner != 0 && owner != write.session && self.is_member(owner) {
                    self.check.violations.push(Violation {
                        kind: Kind::ForeignLeaseDelete,
                        at: self.now,
                        task: Some(t),
                        tick: None,
                        detail: format!(
                            "{} (session {:x}) deleted the lease of session {owner:x}, a live member",
                            node.map_or("a stranger".to_string(), |n| format!("n{n}")),
                            write.session
                        ),
                    });
                }
            }
        } else if write.path.starts_with(&format!("{BASE}/members/")) {
            self.log_members();
        }
    }

    pub(crate) fn on_record_write(&mut self, node: Option<NodeIx>, t: TaskIx, write: &Write) {
        let Some((data, _)) = &write.after else {
            return;
        };
        let decode = |data: &[u8]| serde_json::from_slice::<WireRecord>(data).ok();
        let Some(record) = decode(data) else {
            return; // A stranger's garbage; the node must cope, the checker has no claim.
        };
        let before = write.before.as_ref().and_then(|(d, _)| decode(d));
        if node.is_none() {
            self.check
                .on_operator_write(self.now, t, before.as_ref(), &record);
        }
        if let Some(n) = node {
            let session = SessionId(write.session as u64);
            if self
                .check
                .on_queue_write(self.now, t, before.as_ref(), &record, n, session)
            {
                note!(self, node, Some(t), "QUEUED TICK STARTED".to_string());
                self.stats.queued_started += 1;
                return;
            }
        }
        let Some(tick) = record.tick else { return };
        let previous = before.as_ref().and_then(|b| b.tick);
        // A fresh claim by another session of the tick the record names already is a second
        // claim of it (a stale node claiming ahead after its successor claimed); any other write
        // of the same tick (a rerun, a field) is not a new claim.
        let second_claim = before.as_ref().is_some_and(|b| {
            !b.session.is_empty() && b.session != record.session && record.reruns == 0
        });
        if previous == Some(tick) && !second_claim {
            return;
        }
        if node.is_none() {
            // `zkcron resume` moved the record past the paused period: no claim, and the ticks
            // it passed over are not caught up.
            note!(
                self,
                None,
                Some(t),
                format!(
                    "RESUMED: record moved from {:?} to {:.3}s",
                    previous.map(secs),
                    secs(tick)
                )
            );
            self.check.resumed.push((t, previous, tick));
            return;
        }
        self.stats.claims += 1;
        let claimer = node.unwrap_or(NO_NODE);
        let lease = format!("{BASE}/leases/{}", self.sc.tasks[t].name);
        let holder = self
            .zk
            .nodes
            .get(&lease)
            .map(|z| SessionId(z.stat.ephemeral_owner as u64));
        let session = SessionId(write.session as u64);
        note!(
            self,
            node,
            Some(t),
            format!(
                "CLAIM {:.3}s applied for session {:x} (lease holder {:x?}), record was {:?}",
                secs(tick),
                write.session,
                holder.map(|h| h.0),
                previous.map(secs)
            ),
        );
        // A tick is claimed up to `CLAIM_AHEAD` before its instant (and spawned at it).
        let latest = epoch()
            + TimeDelta::milliseconds(self.now as i64 + self.sc.max_abs_skew_ms)
            + zkcron::plan::CLAIM_AHEAD;
        let write = RecordWrite {
            task: t,
            previous,
            tick,
            node: claimer,
            session,
        };
        self.check.on_claim(self.now, &write, holder, latest);
    }

    /// Whether `session` is alive and owns a member znode: a live member, whose leases count.
    pub(crate) fn is_member(&self, session: i64) -> bool {
        let prefix = format!("{BASE}/members/");
        self.zk.alive(session)
            && self
                .zk
                .nodes
                .range(prefix.clone()..)
                .take_while(|(path, _)| path.starts_with(&prefix))
                .any(|(_, z)| z.stat.ephemeral_owner == session)
    }

    /// The registered members (ephemeral member znodes of a live session of a real node).
    pub(crate) fn log_members(&mut self) {
        let mut members = Vec::new();
        let prefix = format!("{BASE}/members/");
        for (path, z) in self.zk.nodes.range(prefix.clone()..) {
            let Some(id) = path.strip_prefix(&prefix) else {
                break;
            };
            let owner = z.stat.ephemeral_owner;
            let Some(n) = self.procs.iter().position(|p| p.id == id) else {
                continue;
            };
            if owner == 0 || !self.zk.alive(owner) {
                continue;
            }
            let Ok(record) = serde_json::from_slice::<MemberRecord>(&z.data) else {
                continue;
            };
            // The nodes' own conversion: a record they cannot rank, they ignore.
            let Ok(member) = record.to_member(self.procs[n].tasks.clone()) else {
                continue;
            };
            members.push((n, SessionId(owner as u64), member));
        }
        if self.member_log.last().is_none_or(|(_, last)| {
            last.len() != members.len()
                || last
                    .iter()
                    .zip(&members)
                    .any(|(a, b)| a.0 != b.0 || a.1 != b.1 || a.2.may_lead != b.2.may_lead)
        }) {
            self.member_log.push((self.now, members));
        }
    }
}

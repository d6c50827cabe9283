//! The cluster view, a part of the node: the members and their sessions and task sets, which
//! leases exist and since when some are vacant, and whom the node trusts. `members.rs` (the
//! listings, member records, task sets), `leases.rs`, `foreign.rs` and `gc.rs` change it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::foreign::ForeignTrust;
use super::gc::Gc;
use super::members::Fetch;
use super::{MemberInfo, TaskSet, TaskSetRef};

/// The cluster as this node sees it: members, their sessions and task sets, which leases
/// exist and since when some are vacant, and whom it trusts.
#[derive(Debug, Default)]
pub(super) struct View {
    /// This node's task set as published: its reference, its chunks and the set.
    pub(super) my_set: Option<(TaskSetRef, Vec<Vec<u8>>, Arc<TaskSet>)>,
    /// The members whose record and task set could be used: the ranking's input.
    pub(super) members: BTreeMap<String, MemberInfo>,
    /// The session owning each ephemeral member znode as last read (whether or not its record
    /// could be used): the live sessions whose leases and runs count.
    pub(super) member_sessions: BTreeMap<String, i64>,
    /// Every session seen owning a member znode in this node's session: a node that left the
    /// membership to stop keeps its session (and its live runs) until its jobs end.
    pub(super) seen_sessions: BTreeSet<i64>,
    /// Every session seen owning a run znode of a task whose fire record named it as the
    /// claimer, in this node's session: a zkcron node's, whose runs count as members' do.
    pub(super) claimer_sessions: BTreeSet<i64>,
    /// Run znodes of sessions neither seen as members nor named by a fire record, by path: the
    /// czxid and when this node first saw them (they count as live for a grace).
    pub(super) unknown_runs: BTreeMap<String, (i64, Duration)>,
    /// The task sets read so far, by digest (members that define the same tasks share one).
    pub(super) tasksets: BTreeMap<String, Arc<TaskSet>>,
    /// The task sets being read, by digest, with the members waiting for them.
    pub(super) fetches: BTreeMap<String, Fetch>,
    /// The tasks whose lease exists, whoever holds it, as last seen (every task of the
    /// cluster, not only this node's: decisions read it as a set).
    pub(super) present: BTreeSet<String>,
    /// This node's leases whose task had no fire record at the session's listing and whose
    /// lease it has not seen since: their first take creates the record in the same multi,
    /// instead of a take that fails on the missing epoch first (a failed multi is a write
    /// ZooKeeper logs: a cold start of a new cluster made one per task).
    pub(super) unrecorded: BTreeSet<String>,
    /// When each absent lease was first seen vacant: a backup covers it only after a bound
    /// (decisions read it as a map).
    pub(super) vacant_since: BTreeMap<String, Duration>,
    /// When another member last joined or changed: vacancy counts from then too.
    pub(super) members_changed: Duration,
    /// When the member view (this node's own record included) last changed: a take answered
    /// after it needs a decision (the decisions in between skipped it).
    pub(super) view_changed: Duration,
    /// What the node knows of the owners of foreign leases, by task: checked to be a live
    /// member's, being checked, or a suspect (a session that is no member's) left alone for a
    /// grace period.
    pub(super) trust: ForeignTrust,
    /// The task-set collection in flight.
    pub(super) gc: Option<Gc>,
}

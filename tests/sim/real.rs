//! The real node ([`zkcron::coord::node::Node`]) as the simulation's [`SimNode`].

use zkcron::coord::node::io::{Input, Now, Output};
use zkcron::coord::node::{Node, NodeBugs, NodeConfig};

use super::*;

impl SimNode for Node {
    fn handle(&mut self, input: Input, now: Now) {
        Node::handle(self, input, now);
    }
    fn handle_timeout(&mut self, now: Now) {
        Node::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Duration> {
        Node::poll_timeout(self)
    }
    fn poll(&mut self) -> Option<Output> {
        Node::poll(self)
    }
}

/// Builds the real node for one simulated process, with the scenario's deliberate bug if it is
/// one of the node's test-only switches (`bugs`).
pub(crate) fn real_node(spec: &NodeSpec, now: Now) -> Box<dyn SimNode> {
    let config = NodeConfig {
        id: spec.id.clone(),
        release: spec.release.clone(),
        seed: spec.seed,
        base: spec.base.clone(),
        connect: "model-zookeeper:2181".into(),
        session_timeout: spec.session_timeout,
        max_clock_skew: Some(spec.max_clock_skew),
        labels: Default::default(),
        host: "sim".into(),
        pid: 1,
        http: None,
        started_at: now.wall,
        history_runs: 100,
        acl: Default::default(),
        bugs: NodeBugs {
            unfenced_claim: spec.claim_mode == ClaimMode::Unfenced,
            stray_leases_checked_only_when_leading: spec.bug == NodeBug::StrayLeasesOnlyWhenLeading,
            backfill_claim_keeps_progress: spec.bug == NodeBug::BackfillKeepsProgress,
            every_node_as_leader: spec.bug == NodeBug::EveryNodeAsLeader,
            chain_request_apart: spec.bug == NodeBug::ChainRequestApart,
            pool_runs_every_item: spec.bug == NodeBug::PoolRunsEveryItem,
            pause_apart: spec.bug == NodeBug::PauseApart,
            runs_unlimited: spec.bug == NodeBug::RunsUnlimited,
        },
    };
    Box::new(Node::new(config, now))
}

//! The `reliable-multicast` and `reliable-ordered-multicast` checks (issue 17 §"Properties"):
//! multicast with group membership, judged per host from what each application received.
//!
//! The hosts owed a sender's messages are those that joined a group (`[[scenario.group]]`)
//! at or before the workload's start and neither left nor crashed afterwards; senders that
//! crashed owe nothing (their buffers died with them). Each owed message must reach each such
//! host exactly once, unless the sender's stack reported it (a `SendRefused` notice naming
//! it); no node may receive a message twice; nothing may be reported unrecoverable; with
//! `ordered`, each such host received each sender's messages in increasing order.

use std::collections::BTreeSet;

use viastack_kernel::NodeId;
use viastack_stack::model::{Pattern, Scenario};

use crate::recorder::{Recorder, BROADCAST};

/// The violations (empty when the property holds).
pub fn check(scenario: &Scenario, rec: &Recorder, ordered: bool) -> Vec<String> {
    let mut v = Vec::new();
    let crashed: BTreeSet<u32> = scenario.crashes.iter().map(|c| c.node).collect();
    if let Some(n) = rec.notices.get("McastUnrecoverable") {
        v.push(format!(
            "{n} McastUnrecoverable notices: messages lost and reported"
        ));
    }
    for (w, load) in scenario.workloads.iter().enumerate() {
        if load.pattern != Pattern::Multicast {
            continue;
        }
        let Ok(w) = u16::try_from(w) else { continue };
        // Hosts owed this workload's messages.
        let joined: BTreeSet<u32> = scenario
            .groups
            .iter()
            .filter(|g| g.join && g.at <= load.start)
            .map(|g| g.node)
            .collect();
        let owed: Vec<u32> = joined
            .into_iter()
            .filter(|n| !crashed.contains(n))
            .filter(|n| !scenario.groups.iter().any(|g| g.node == *n && !g.join))
            .collect();
        let senders: Vec<u32> = load
            .senders
            .clone()
            .unwrap_or_else(|| (0..scenario.nodes).collect());
        for s in senders.into_iter().filter(|s| !crashed.contains(s)) {
            let Some(stream) = rec.streams.get(&(w, NodeId(s), BROADCAST)) else {
                continue;
            };
            for seq in 0..stream.sent {
                let at = rec.multicast.get(&(w, NodeId(s), seq));
                if let Some((n, c)) = at.and_then(|m| m.iter().find(|(_, c)| **c > 1)) {
                    v.push(format!(
                        "message {seq} of node {s} delivered {c} times at node {n}"
                    ));
                }
                if stream.reported.contains(&seq) {
                    continue;
                }
                for &h in owed.iter().filter(|&&h| h != s) {
                    if at.and_then(|m| m.get(&NodeId(h))).is_none() {
                        v.push(format!("message {seq} of node {s} never reached node {h}"));
                    }
                }
            }
            if ordered {
                // Per receiver: the deliveries in arrival order are the recorder's
                // `out_of_order` count of this stream.
                if stream.out_of_order > 0 {
                    v.push(format!(
                        "{} messages of node {s} delivered out of order",
                        stream.out_of_order
                    ));
                }
            }
        }
    }
    if v.len() > 10 {
        let more = v.len() - 10;
        v.truncate(10);
        v.push(format!("… and {more} more"));
    }
    v
}

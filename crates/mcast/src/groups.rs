//! Global object "Group Table" of seed 004 ("stores current list of group members on each leaf
//! interface; updated when members join/leave groups"). Written by the IGMP router component
//! ([`crate::igmp`], RFC 2236 §6: a group is present on an interface until its membership timer
//! runs out); read by multicast forwarding (replicate onto interfaces with members) and by
//! grafting (a new member on a pruned branch grafts it back).
//!
//! Invariants: every group is a multicast (class D) address. At most [`MAX_GROUPS`] (interface,
//! group) entries: reports of more new groups are refused.

use std::collections::BTreeMap;

use viastack_kernel::Instant;

use crate::addr::Addr;
use crate::memory::{Changes, Notifier, Reader};

/// Most (interface, group) memberships a group table holds.
pub const MAX_GROUPS: usize = 16_384;

/// Members of one group on one interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The interface.
    pub iface: u16,
    /// The group.
    pub group: Addr,
    /// When the membership ends unless a report refreshes it.
    pub expires: Instant,
    /// The host that reported last.
    pub last_reporter: Addr,
}

/// A change of the group table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupChange {
    /// The group has members on the interface (it had none).
    Joined {
        /// Interface.
        iface: u16,
        /// Group.
        group: Addr,
    },
    /// The group has no members left on the interface.
    Left {
        /// Interface.
        iface: u16,
        /// Group.
        group: Addr,
    },
}

/// Global object "Group Table".
#[derive(Debug, Default)]
pub struct GroupTable {
    entries: BTreeMap<(u16, Addr), Membership>,
    notifier: Notifier<GroupChange>,
}

impl GroupTable {
    /// Write: a report of `group` by `from` on `iface`: members until `expires`. Returns
    /// whether the group is new on the interface. Non-multicast groups, and new ones beyond
    /// [`MAX_GROUPS`], are refused (`false`).
    pub fn report(&mut self, iface: u16, group: Addr, from: Addr, expires: Instant) -> bool {
        if !group.is_multicast() {
            return false;
        }
        let full = self.entries.len() >= MAX_GROUPS;
        match self.entries.get_mut(&(iface, group)) {
            Some(m) => {
                m.expires = expires;
                m.last_reporter = from;
                false
            }
            None if full => false,
            None => {
                self.entries.insert(
                    (iface, group),
                    Membership {
                        iface,
                        group,
                        expires,
                        last_reporter: from,
                    },
                );
                self.notifier.notify(&GroupChange::Joined { iface, group });
                true
            }
        }
    }

    /// Write: lower the membership timer of `group` on `iface` to `at` (a leave was heard and
    /// last-member queries are under way); a later timer is never raised this way.
    pub fn lower_timer(&mut self, iface: u16, group: Addr, at: Instant) {
        if let Some(m) = self.entries.get_mut(&(iface, group)) {
            m.expires = m.expires.min(at);
        }
    }

    /// Write: remove memberships whose timer ran out at `now`; returns them.
    pub fn expire(&mut self, now: Instant) -> Vec<(u16, Addr)> {
        let gone: Vec<(u16, Addr)> = self
            .entries
            .values()
            .filter(|m| m.expires <= now)
            .map(|m| (m.iface, m.group))
            .collect();
        for &(iface, group) in &gone {
            self.entries.remove(&(iface, group));
            self.notifier.notify(&GroupChange::Left { iface, group });
        }
        gone
    }

    /// Write: forget every membership on `iface` (the interface went away).
    pub fn clear_interface(&mut self, iface: u16) {
        let gone: Vec<Addr> = self
            .entries
            .keys()
            .filter(|(i, _)| *i == iface)
            .map(|&(_, g)| g)
            .collect();
        for group in gone {
            self.entries.remove(&(iface, group));
            self.notifier.notify(&GroupChange::Left { iface, group });
        }
    }

    /// Read: whether `group` has members on `iface`.
    pub fn has_members(&self, iface: u16, group: Addr) -> bool {
        self.entries.contains_key(&(iface, group))
    }

    /// Read: the membership of `group` on `iface`.
    pub fn get(&self, iface: u16, group: Addr) -> Option<&Membership> {
        self.entries.get(&(iface, group))
    }

    /// Read: every membership, by interface then group.
    pub fn iter(&self) -> impl Iterator<Item = &Membership> {
        self.entries.values()
    }

    /// Read: the earliest membership timer.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.entries.values().map(|m| m.expires).min()
    }

    /// Subscribe to changes.
    pub fn subscribe(&mut self) -> Reader {
        self.notifier.subscribe()
    }

    /// The changes since the reader's last call.
    pub fn changes(&mut self, r: Reader) -> Changes<GroupChange> {
        self.notifier.take(r)
    }

    /// Check the invariants.
    ///
    /// # Errors
    /// The first broken one.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (&(i, g), m) in &self.entries {
            if (m.iface, m.group) != (i, g) {
                return Err(format!(
                    "membership keyed ({i}, {g}) is for ({}, {})",
                    m.iface, m.group
                ));
            }
            if !g.is_multicast() {
                return Err(format!("{g} on interface {i} is not a multicast group"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_leaves_and_timers() {
        let g = Addr(0xe001_0203);
        let mut gt = GroupTable::default();
        let r = gt.subscribe();
        assert!(!gt.report(0, Addr(7), Addr(1), Instant::from_millis(10)));
        assert!(gt.report(1, g, Addr(1), Instant::from_millis(10)));
        assert!(!gt.report(1, g, Addr(2), Instant::from_millis(20)));
        assert!(gt.has_members(1, g));
        gt.lower_timer(1, g, Instant::from_millis(15));
        gt.lower_timer(1, g, Instant::from_millis(99));
        assert_eq!(gt.next_expiry(), Some(Instant::from_millis(15)));
        assert_eq!(gt.expire(Instant::from_millis(14)), vec![]);
        assert_eq!(gt.expire(Instant::from_millis(15)), vec![(1, g)]);
        assert_eq!(
            gt.changes(r),
            Changes::List(vec![
                GroupChange::Joined { iface: 1, group: g },
                GroupChange::Left { iface: 1, group: g }
            ])
        );
        assert!(gt.check_invariants().is_ok());
    }
}

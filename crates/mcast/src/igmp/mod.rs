//! IGMPv2 group management, sans-IO: seed 004's "Join_Leave" component of the Group Management
//! composite protocol, with RFC 2236's semantics. The router side ([`Router`]) writes the node's
//! **group table** (global memory); the host side ([`Host`]) is the application's join/leave
//! API.
//!
//! # Router (RFC 2236 §3, §6)
//! On each interface the router with the lowest address is the **querier**: every router starts
//! as querier, sends `startup_query_count` general queries `startup_query_interval` apart, then
//! one per `query_interval`; hearing a query from a lower address makes it a non-querier until
//! `other_querier_present_interval` passes without one. Every report (v1 or v2) sets the
//! group's membership timer on that interface to `group_membership_interval`. A leave heard by
//! the querier for a group with members sends `last_member_query_count` group-specific queries
//! `last_member_query_interval` apart and lowers the timer to their end: a report in between
//! keeps the group, silence removes it. A non-querier lowers the timer the same way when it
//! hears such a query.
//!
//! # Host (RFC 2236 §3, §6)
//! `join` sends an unsolicited report at once and once more after a random delay up to
//! `unsolicited_report_interval`. A query (general, or for one of its groups) starts a timer
//! per group, random in `[0, max response time]` (a running timer is only ever shortened); at
//! its end the host reports, unless it heard another host's report for that group first
//! (**suppression**). `leave` sends a leave only if this host was the last to report.
//! Random delays come from a generator seeded by the caller (the node's seeded RNG).
//!
//! # Timers and the wire
//! [`Timers::rfc`] holds RFC 2236 §8's values; [`Timers::scaled`] multiplies them by the
//! profile's `time_scale`. The max response time on the wire stays in RFC units (tenths of a
//! second of unscaled time), and the host multiplies it by the same scale: queries stay
//! standard while every node runs faster.

pub mod wire;

use std::collections::BTreeMap;
use std::collections::VecDeque;

use viastack_kernel::{Duration, Instant};

use crate::addr::Addr;
use crate::dvmrp::Outgoing;
use crate::memory::GlobalMemory;
pub use wire::Repr;

/// RFC 2236 §8 timers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timers {
    /// §8.1 Robustness Variable: 2.
    pub robustness: u8,
    /// §8.2 Query Interval: 125 s.
    pub query_interval: Duration,
    /// §8.3 Query Response Interval: 10 s.
    pub query_response_interval: Duration,
    /// §8.6 Startup Query Interval: 1/4 of the query interval.
    pub startup_query_interval: Duration,
    /// §8.8 Last Member Query Interval: 1 s.
    pub last_member_query_interval: Duration,
    /// §8.10 Unsolicited Report Interval: 10 s.
    pub unsolicited_report_interval: Duration,
    /// The factor these were scaled by (1: RFC time), to read and write wire times.
    pub scale: f64,
}

impl Timers {
    /// RFC 2236 §8's defaults.
    pub fn rfc() -> Self {
        Timers {
            robustness: 2,
            query_interval: Duration::from_secs(125),
            query_response_interval: Duration::from_secs(10),
            startup_query_interval: Duration::from_millis(31_250),
            last_member_query_interval: Duration::from_secs(1),
            unsolicited_report_interval: Duration::from_secs(10),
            scale: 1.0,
        }
    }

    /// Every duration times `factor` (at least 1 µs); a factor that is not positive and finite
    /// changes nothing.
    pub fn scaled(self, factor: f64) -> Self {
        if !(factor.is_finite() && factor > 0.0) {
            return self;
        }
        let s = |d: Duration| d.mul_f64(factor).max(Duration::from_micros(1));
        Timers {
            robustness: self.robustness,
            query_interval: s(self.query_interval),
            query_response_interval: s(self.query_response_interval),
            startup_query_interval: s(self.startup_query_interval),
            last_member_query_interval: s(self.last_member_query_interval),
            unsolicited_report_interval: s(self.unsolicited_report_interval),
            scale: self.scale * factor,
        }
    }

    /// §8.4 Group Membership Interval: robustness × query interval + query response interval.
    pub fn group_membership_interval(&self) -> Duration {
        self.query_interval * u32::from(self.robustness) + self.query_response_interval
    }

    /// §8.5 Other Querier Present Interval: robustness × query interval + half the query
    /// response interval.
    pub fn other_querier_present_interval(&self) -> Duration {
        self.query_interval * u32::from(self.robustness) + self.query_response_interval / 2
    }

    /// A duration as a wire max response time (tenths of an unscaled second, 1..=255).
    fn wire_max_resp(&self, d: Duration) -> u8 {
        let tenths = d.as_secs_f64() / self.scale * 10.0;
        tenths.round().clamp(1.0, 255.0) as u8
    }

    /// A wire max response time as a duration at this scale.
    fn max_resp_duration(&self, max_resp: u8) -> Duration {
        Duration::from_secs_f64(f64::from(max_resp) / 10.0 * self.scale)
    }
}

impl Default for Timers {
    fn default() -> Self {
        Timers::rfc()
    }
}

/// Counters of either side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// General queries sent.
    pub general_queries: u64,
    /// Group-specific queries sent.
    pub group_queries: u64,
    /// Reports sent.
    pub reports_sent: u64,
    /// Reports suppressed (another host reported first).
    pub reports_suppressed: u64,
    /// Leaves sent.
    pub leaves_sent: u64,
    /// Messages received.
    pub received: u64,
    /// Messages that did not decode.
    pub malformed: u64,
    /// Messages of unknown type (ignored).
    pub unknown: u64,
    /// Times this router became querier after another querier fell silent.
    pub querier_takeovers: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Querier {
        next_query: Instant,
        startup_left: u8,
    },
    NonQuerier {
        other_present_until: Instant,
    },
}

/// Last-member queries under way for one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastMember {
    next: Instant,
    left: u8,
}

#[derive(Debug)]
struct RouterIface {
    role: Role,
    last_member: BTreeMap<Addr, LastMember>,
}

/// The IGMP router side of one router: every interface.
#[derive(Debug)]
pub struct Router {
    addr: Addr,
    timers: Timers,
    ifaces: Vec<RouterIface>,
    out: VecDeque<Outgoing>,
    stats: Stats,
}

impl Router {
    /// A router with address `addr` and `ifaces` interfaces, starting at `now` as querier
    /// everywhere.
    pub fn new(
        addr: Addr,
        ifaces: u16,
        timers: Timers,
        now: Instant,
        mem: &mut GlobalMemory,
    ) -> Self {
        let mut r = Router {
            addr,
            timers,
            ifaces: (0..ifaces)
                .map(|_| RouterIface {
                    role: Role::Querier {
                        next_query: now,
                        startup_left: timers.robustness,
                    },
                    last_member: BTreeMap::new(),
                })
                .collect(),
            out: VecDeque::new(),
            stats: Stats::default(),
        };
        r.handle_timeout(now, mem);
        r
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Whether this router is the querier on `iface`.
    pub fn is_querier(&self, iface: u16) -> bool {
        self.ifaces
            .get(usize::from(iface))
            .is_some_and(|i| matches!(i.role, Role::Querier { .. }))
    }

    /// The next message to send (link-local broadcast on its interface).
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    fn send(&mut self, iface: u16, r: Repr) {
        self.out.push_back(Outgoing {
            iface,
            to: None,
            bytes: r.to_bytes().to_vec(),
        });
    }

    /// An IGMP message from `from` on `iface`.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        bytes: &[u8],
        mem: &mut GlobalMemory,
    ) {
        let t = self.timers;
        let Some(state) = self.ifaces.get_mut(usize::from(iface)) else {
            self.stats.malformed += 1;
            return;
        };
        let repr = match Repr::parse(bytes) {
            Ok(r) => r,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.stats.received += 1;
        match repr {
            Repr::Query { group, .. } => {
                if from < self.addr {
                    state.role = Role::NonQuerier {
                        other_present_until: now.saturating_add(t.other_querier_present_interval()),
                    };
                    state.last_member.clear();
                }
                if let (Some(g), Role::NonQuerier { .. }) = (group, state.role) {
                    let end = t.last_member_query_interval * u32::from(t.robustness);
                    mem.groups.lower_timer(iface, g, now.saturating_add(end));
                }
            }
            Repr::Report { group, .. } => {
                mem.groups.report(
                    iface,
                    group,
                    from,
                    now.saturating_add(t.group_membership_interval()),
                );
                state.last_member.remove(&group);
            }
            Repr::Leave { group } => {
                if matches!(state.role, Role::Querier { .. })
                    && mem.groups.has_members(iface, group)
                    && !state.last_member.contains_key(&group)
                {
                    let count = t.robustness.max(1);
                    mem.groups.lower_timer(
                        iface,
                        group,
                        now.saturating_add(t.last_member_query_interval * u32::from(count)),
                    );
                    state.last_member.insert(
                        group,
                        LastMember {
                            next: now.saturating_add(t.last_member_query_interval),
                            left: count - 1,
                        },
                    );
                    self.stats.group_queries += 1;
                    let max_resp = t.wire_max_resp(t.last_member_query_interval);
                    self.send(
                        iface,
                        Repr::Query {
                            max_resp,
                            group: Some(group),
                        },
                    );
                }
            }
            Repr::Unknown(_) => self.stats.unknown += 1,
        }
    }

    /// Timers: queries, querier takeover, last-member queries, membership expiry.
    pub fn handle_timeout(&mut self, now: Instant, mem: &mut GlobalMemory) {
        let t = self.timers;
        let mut sends = Vec::new();
        for (i, state) in self.ifaces.iter_mut().enumerate() {
            let iface = u16::try_from(i).unwrap_or(u16::MAX);
            if let Role::NonQuerier {
                other_present_until,
            } = state.role
            {
                if other_present_until <= now {
                    self.stats.querier_takeovers += 1;
                    state.role = Role::Querier {
                        next_query: now,
                        startup_left: 0,
                    };
                }
            }
            if let Role::Querier {
                next_query,
                startup_left,
            } = state.role
            {
                if next_query <= now {
                    let gap = if startup_left > 1 {
                        t.startup_query_interval
                    } else {
                        t.query_interval
                    };
                    state.role = Role::Querier {
                        next_query: now.saturating_add(gap),
                        startup_left: startup_left.saturating_sub(1),
                    };
                    self.stats.general_queries += 1;
                    sends.push((
                        iface,
                        Repr::Query {
                            max_resp: t.wire_max_resp(t.query_response_interval),
                            group: None,
                        },
                    ));
                }
            }
            let mut done = Vec::new();
            for (&g, lm) in &mut state.last_member {
                if lm.next <= now {
                    if lm.left == 0 {
                        done.push(g);
                    } else {
                        lm.left -= 1;
                        lm.next = now.saturating_add(t.last_member_query_interval);
                        self.stats.group_queries += 1;
                        sends.push((
                            iface,
                            Repr::Query {
                                max_resp: t.wire_max_resp(t.last_member_query_interval),
                                group: Some(g),
                            },
                        ));
                    }
                }
            }
            for g in done {
                state.last_member.remove(&g);
            }
        }
        for (iface, r) in sends {
            self.send(iface, r);
        }
        mem.groups.expire(now);
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self, mem: &GlobalMemory) -> Option<Instant> {
        let mut d = mem.groups.next_expiry();
        let mut at = |x: Instant| d = Some(d.map_or(x, |d| d.min(x)));
        for s in &self.ifaces {
            match s.role {
                Role::Querier { next_query, .. } => at(next_query),
                Role::NonQuerier {
                    other_present_until,
                } => at(other_present_until),
            }
            for lm in s.last_member.values() {
                at(lm.next);
            }
        }
        d
    }
}

/// A host's state for one group it has joined (RFC 2236 §6 host states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    /// A report is due at `report_at`.
    Delaying {
        /// When.
        report_at: Instant,
        /// Whether this host sent the last report of the group.
        last_reporter: bool,
    },
    /// No report pending.
    Idle {
        /// Whether this host sent the last report of the group.
        last_reporter: bool,
    },
}

/// The IGMP host side of one host, on its interface 0.
#[derive(Debug)]
pub struct Host {
    timers: Timers,
    rng: u64,
    groups: BTreeMap<Addr, Member>,
    out: VecDeque<Outgoing>,
    stats: Stats,
}

impl Host {
    /// A host whose random delays come from `seed`.
    pub fn new(timers: Timers, seed: u64) -> Self {
        Host {
            timers,
            rng: seed,
            groups: BTreeMap::new(),
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Whether the host is a member of `group`.
    pub fn is_member(&self, group: Addr) -> bool {
        self.groups.contains_key(&group)
    }

    /// The groups joined and their states.
    pub fn groups(&self) -> impl Iterator<Item = (&Addr, &Member)> {
        self.groups.iter()
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// splitmix64.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random delay in `[0, max]`.
    fn delay(&mut self, max: Duration) -> Duration {
        let n = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(if n == 0 { 0 } else { self.random() % (n + 1) })
    }

    fn report(&mut self, group: Addr) {
        self.stats.reports_sent += 1;
        self.out.push_back(Outgoing {
            iface: 0,
            to: None,
            bytes: Repr::Report { group, v1: false }.to_bytes().to_vec(),
        });
    }

    /// The application joins `group` (a multicast address; others are refused with `false`).
    /// Joining a group already joined changes nothing.
    pub fn join(&mut self, now: Instant, group: Addr) -> bool {
        if !group.is_multicast() {
            return false;
        }
        if self.groups.contains_key(&group) {
            return true;
        }
        self.report(group);
        let d = self.delay(self.timers.unsolicited_report_interval);
        self.groups.insert(
            group,
            Member::Delaying {
                report_at: now.saturating_add(d),
                last_reporter: true,
            },
        );
        true
    }

    /// The application leaves `group`: a leave goes out if this host reported last.
    pub fn leave(&mut self, _now: Instant, group: Addr) {
        let Some(m) = self.groups.remove(&group) else {
            return;
        };
        let last = match m {
            Member::Delaying { last_reporter, .. } | Member::Idle { last_reporter } => {
                last_reporter
            }
        };
        if last {
            self.stats.leaves_sent += 1;
            self.out.push_back(Outgoing {
                iface: 0,
                to: None,
                bytes: Repr::Leave { group }.to_bytes().to_vec(),
            });
        }
    }

    /// An IGMP message arrived (from a router or another host on the link).
    pub fn handle_datagram(&mut self, now: Instant, bytes: &[u8]) {
        let repr = match Repr::parse(bytes) {
            Ok(r) => r,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.stats.received += 1;
        match repr {
            Repr::Query { max_resp, group } => {
                let max = self.timers.max_resp_duration(max_resp);
                let targets: Vec<Addr> = match group {
                    None => self.groups.keys().copied().collect(),
                    Some(g) if self.groups.contains_key(&g) => vec![g],
                    Some(_) => Vec::new(),
                };
                for g in targets {
                    let d = self.delay(max);
                    let at = now.saturating_add(d);
                    if let Some(m) = self.groups.get_mut(&g) {
                        *m = match *m {
                            Member::Delaying {
                                report_at,
                                last_reporter,
                            } => Member::Delaying {
                                report_at: report_at.min(at),
                                last_reporter,
                            },
                            Member::Idle { last_reporter } => Member::Delaying {
                                report_at: at,
                                last_reporter,
                            },
                        };
                    }
                }
            }
            Repr::Report { group, .. } => {
                if let Some(m) = self.groups.get_mut(&group) {
                    if matches!(m, Member::Delaying { .. }) {
                        self.stats.reports_suppressed += 1;
                        *m = Member::Idle {
                            last_reporter: false,
                        };
                    }
                }
            }
            Repr::Leave { .. } => {}
            Repr::Unknown(_) => self.stats.unknown += 1,
        }
    }

    /// Timers: reports due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<Addr> = self
            .groups
            .iter()
            .filter(|(_, m)| matches!(m, Member::Delaying { report_at, .. } if *report_at <= now))
            .map(|(&g, _)| g)
            .collect();
        for g in due {
            self.report(g);
            self.groups.insert(
                g,
                Member::Idle {
                    last_reporter: true,
                },
            );
        }
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.groups
            .values()
            .filter_map(|m| match m {
                Member::Delaying { report_at, .. } => Some(*report_at),
                Member::Idle { .. } => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Addr = Addr(0xe000_0101);

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn sent(out: &mut VecDeque<Outgoing>) -> Vec<Repr> {
        out.drain(..)
            .filter_map(|o| Repr::parse(&o.bytes).ok())
            .collect()
    }

    #[test]
    fn rfc_timers() {
        let t = Timers::rfc();
        assert_eq!(t.group_membership_interval(), Duration::from_secs(260));
        assert_eq!(t.other_querier_present_interval(), Duration::from_secs(255));
        let s = t.scaled(0.01);
        assert_eq!(s.query_interval, Duration::from_millis(1250));
        // The wire keeps RFC units: a 10 s response interval is 100 tenths at any scale.
        assert_eq!(s.wire_max_resp(s.query_response_interval), 100);
        assert_eq!(s.max_resp_duration(100), Duration::from_millis(100));
    }

    #[test]
    fn querier_election_reports_and_last_member_queries() {
        let mut mem = GlobalMemory::new(Addr(5));
        let t = Timers::rfc().scaled(0.01);
        let mut r = Router::new(Addr(5), 1, t, ms(0), &mut mem);
        assert_eq!(
            sent(&mut r.out),
            vec![Repr::Query {
                max_resp: 100,
                group: None
            }]
        );
        assert!(r.is_querier(0));
        // A report: members for the group membership interval (2.6 s).
        let rep = Repr::Report {
            group: G,
            v1: false,
        }
        .to_bytes();
        r.handle_datagram(ms(10), 0, Addr(20), &rep, &mut mem);
        assert!(mem.groups.has_members(0, G));
        assert_eq!(mem.groups.next_expiry(), Some(ms(2610)));
        // A leave: group-specific queries 10 ms apart, the timer lowered to 20 ms.
        let leave = Repr::Leave { group: G }.to_bytes();
        r.handle_datagram(ms(20), 0, Addr(20), &leave, &mut mem);
        assert_eq!(
            sent(&mut r.out),
            vec![Repr::Query {
                max_resp: 10,
                group: Some(G)
            }]
        );
        r.handle_timeout(ms(30), &mut mem);
        assert_eq!(sent(&mut r.out).len(), 1, "second last-member query");
        r.handle_timeout(ms(40), &mut mem);
        assert!(!mem.groups.has_members(0, G), "nobody answered");
        // A lower address queries: non-querier until 2.55 s of silence.
        let q = Repr::Query {
            max_resp: 100,
            group: None,
        }
        .to_bytes();
        r.handle_datagram(ms(50), 0, Addr(3), &q, &mut mem);
        assert!(!r.is_querier(0));
        r.handle_timeout(ms(2599), &mut mem);
        assert!(!r.is_querier(0));
        r.handle_timeout(ms(2600), &mut mem);
        assert!(r.is_querier(0));
        assert_eq!(r.stats().querier_takeovers, 1);
        // Garbage is counted.
        r.handle_datagram(ms(2601), 0, Addr(3), &[1, 2], &mut mem);
        assert_eq!(r.stats().malformed, 1);
        assert!(mem.check_invariants().is_ok());
    }

    #[test]
    fn hosts_report_with_random_delay_suppress_and_leave() {
        let t = Timers::rfc().scaled(0.01);
        let mut a = Host::new(t, 1);
        let mut b = Host::new(t, 2);
        assert!(!a.join(ms(0), Addr(7)), "not a group");
        assert!(a.join(ms(0), G));
        assert_eq!(
            sent(&mut a.out),
            vec![Repr::Report {
                group: G,
                v1: false
            }]
        );
        // The repeated unsolicited report, within 100 ms.
        let at = a.poll_timeout().unwrap_or(ms(1000));
        assert!(at <= ms(100));
        a.handle_timeout(at);
        assert_eq!(sent(&mut a.out).len(), 1);
        b.join(ms(0), G);
        b.handle_timeout(b.poll_timeout().unwrap_or(ms(0)));
        sent(&mut b.out);
        // A general query: both start timers within 100 ms; the first to fire reports, the
        // other hears it and keeps quiet.
        let q = Repr::Query {
            max_resp: 100,
            group: None,
        }
        .to_bytes();
        a.handle_datagram(ms(200), &q);
        b.handle_datagram(ms(200), &q);
        let (ta, tb) = (
            a.poll_timeout().unwrap_or(ms(0)),
            b.poll_timeout().unwrap_or(ms(0)),
        );
        assert!(ta <= ms(300) && tb <= ms(300));
        let (first, second) = if ta <= tb {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        first.handle_timeout(ta.min(tb));
        let report = first.out.pop_front().map(|o| o.bytes).unwrap_or_default();
        second.handle_datagram(ta.min(tb), &report);
        assert_eq!(second.stats().reports_suppressed, 1);
        assert_eq!(second.poll_timeout(), None);
        // The suppressed host was not last to report: its leave is silent; the other's is not.
        second.leave(ms(400), G);
        assert!(second.out.is_empty());
        first.leave(ms(400), G);
        assert_eq!(sent(&mut first.out), vec![Repr::Leave { group: G }]);
    }
}

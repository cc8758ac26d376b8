//! The rendezvous server and its client, sans-IO (seed 000 §3.1.1 and HyperCast's design: "a
//! new overlay node contacts a rendezvous point — a buddy list or a *server* — to find members
//! of the overlay"; the server is also how partitions find each other, since it hears from the
//! leader of every one of them).
//!
//! - [`Server`]: remembers the nodes that register ([`Message::Register`], repeated by every
//!   member every [`ClientConfig::every`]; forgotten after [`ServerConfig::member_timeout`];
//!   at most [`ServerConfig::max_members`], the least recently heard forgotten first) and
//!   answers a [`Message::Query`] with [`Message::Members`]: the leaders first (a DT leader, a
//!   hypercube HRoot), then the most recently heard, at most
//!   [`crate::wire::rdv::MAX_MEMBERS`]. A *leader* that registers is answered too, with the
//!   other leaders: several leaders are several partitions (or cubes founded at once), and
//!   each leader adds the others to its buddies — the DT leader's `NewNode` and the HRoot's
//!   beacon go to the buddies, which is how the topologies merge (DT: the leaders' NewNodes
//!   reach the other partition; hypercube: a foreign beacon makes the weaker cube rejoin,
//!   [`crate::hypercube`] *Partitions*).
//! - [`Client`]: what an overlay node adds to its topology engine: it queries the server
//!   while the node has no place in the overlay, registers once it has one, and returns the
//!   members the server names, which the driver gives the engine as buddies
//!   (`add_buddy` of [`crate::hypercube::Node`] and [`crate::dt::Node`]). A hypercube node
//!   whose query finds nobody founds the cube ([`Client::alone`]).
//!
//! Wire form: [`crate::wire::rdv`] (overlay datagram kind 3). The CLI runs the server on UDP
//! (`viastack overlay rendezvous --listen ADDR`).

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::{Duration, Instant};

use crate::wire::rdv::MAX_MEMBERS;

/// One member named by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<S> {
    /// Whether it registered as a leader.
    pub leader: bool,
    /// Where it is.
    pub node: S,
}

/// A rendezvous message (wire form: [`crate::wire::rdv`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<S> {
    /// A member registers (and refreshes its registration).
    Register {
        /// It is a leader (DT leader, hypercube HRoot).
        leader: bool,
        /// Where it is.
        node: S,
    },
    /// A node asks who is there.
    Query {
        /// Where to answer.
        node: S,
    },
    /// The server's answer.
    Members(Vec<Member<S>>),
}

/// Server parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// A member not heard from this long is forgotten: 10 s.
    pub member_timeout: Duration,
    /// At most this many members are remembered: 4096.
    pub max_members: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            member_timeout: Duration::from_secs(10),
            max_members: 4096,
        }
    }
}

/// What the server counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Registrations (and refreshes).
    pub registers: u64,
    /// Queries answered.
    pub queries: u64,
    /// Members forgotten because the table was full.
    pub evicted: u64,
    /// Members forgotten because they went silent.
    pub expired: u64,
    /// `Members` messages received (a server does not take answers).
    pub unexpected: u64,
}

/// The rendezvous server.
#[derive(Debug, Clone)]
pub struct Server<S> {
    config: ServerConfig,
    members: BTreeMap<S, (bool, Instant)>,
    transmits: VecDeque<(S, Message<S>)>,
    stats: ServerStats,
}

impl<S: Clone + Ord> Server<S> {
    /// A server with `config`.
    pub fn new(config: ServerConfig) -> Self {
        Server {
            config,
            members: BTreeMap::new(),
            transmits: VecDeque::new(),
            stats: ServerStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// The members remembered, with whether each is a leader.
    pub fn members(&self) -> impl Iterator<Item = (&S, bool)> {
        self.members.iter().map(|(s, (l, _))| (s, *l))
    }

    /// Handles one message (its sender's substrate address is not needed: messages name their
    /// node).
    pub fn handle_message(&mut self, now: Instant, msg: Message<S>) {
        self.expire(now);
        match msg {
            Message::Register { leader, node } => {
                self.stats.registers += 1;
                if !self.members.contains_key(&node)
                    && self.members.len() >= self.config.max_members
                {
                    let oldest = self
                        .members
                        .iter()
                        .min_by_key(|(_, (_, t))| *t)
                        .map(|(s, _)| s.clone());
                    if let Some(o) = oldest {
                        self.members.remove(&o);
                        self.stats.evicted += 1;
                    }
                }
                self.members.insert(node.clone(), (leader, now));
                if leader {
                    let others: Vec<Member<S>> = self
                        .answer(&node)
                        .into_iter()
                        .filter(|m| m.leader)
                        .collect();
                    if !others.is_empty() {
                        self.transmits.push_back((node, Message::Members(others)));
                    }
                }
            }
            Message::Query { node } => {
                self.stats.queries += 1;
                let m = self.answer(&node);
                self.transmits.push_back((node, Message::Members(m)));
            }
            Message::Members(_) => self.stats.unexpected += 1,
        }
    }

    /// The answer for `to`: leaders first, then the most recently heard, never `to` itself.
    fn answer(&self, to: &S) -> Vec<Member<S>> {
        let mut v: Vec<(&S, bool, Instant)> = self
            .members
            .iter()
            .filter(|(s, _)| *s != to)
            .map(|(s, (l, t))| (s, *l, *t))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
        v.into_iter()
            .take(MAX_MEMBERS)
            .map(|(s, leader, _)| Member {
                leader,
                node: s.clone(),
            })
            .collect()
    }

    fn expire(&mut self, now: Instant) {
        let timeout = self.config.member_timeout;
        let before = self.members.len();
        self.members.retain(|_, (_, t)| now < *t + timeout);
        self.stats.expired += (before - self.members.len()) as u64;
    }

    /// The next message to send, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(S, Message<S>)> {
        self.transmits.pop_front()
    }
}

/// Client parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig<S> {
    /// The server.
    pub server: S,
    /// Query (while without a place) or register (once placed) this often: 1 s.
    pub every: Duration,
}

/// The client side, run by an overlay node's driver next to its topology engine.
#[derive(Debug, Clone)]
pub struct Client<S> {
    config: ClientConfig<S>,
    me: S,
    next: Instant,
    /// Queries answered with nobody.
    alone: bool,
    answered: bool,
}

impl<S: Clone + Ord> Client<S> {
    /// A client of node `me`, starting at `now`.
    pub fn new(config: ClientConfig<S>, me: S, now: Instant) -> Self {
        Client {
            config,
            me,
            next: now,
            alone: false,
            answered: false,
        }
    }

    /// When [`Client::poll`] has something to send.
    pub fn poll_timeout(&self) -> Instant {
        self.next
    }

    /// The message due at `now`, if any, for the server: a query while the node has no place
    /// in the overlay (`placed` false), else a registration as a leader or not.
    pub fn poll(&mut self, now: Instant, placed: bool, leader: bool) -> Option<(S, Message<S>)> {
        if now < self.next {
            return None;
        }
        self.next = now + self.config.every;
        let msg = if placed {
            Message::Register {
                leader,
                node: self.me.clone(),
            }
        } else {
            Message::Query {
                node: self.me.clone(),
            }
        };
        Some((self.config.server.clone(), msg))
    }

    /// An answer from the server: the members to add as buddies (never this node).
    pub fn handle_message(&mut self, msg: Message<S>) -> Vec<S> {
        match msg {
            Message::Members(v) => {
                let v: Vec<S> = v
                    .into_iter()
                    .map(|m| m.node)
                    .filter(|n| *n != self.me)
                    .collect();
                if !self.answered {
                    self.answered = true;
                    self.alone = v.is_empty();
                }
                v
            }
            _ => Vec::new(),
        }
    }

    /// The first answer named nobody: this node is the first of the overlay (a hypercube
    /// node then founds the cube).
    pub fn alone(&self) -> bool {
        self.alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::SimAddr;

    #[test]
    fn server_answers_queries_with_leaders_first_and_introduces_leaders() {
        let t = Instant::ZERO;
        let mut s = Server::new(ServerConfig::default());
        s.handle_message(t, Message::Query { node: SimAddr(9) });
        assert_eq!(
            s.poll_transmit(),
            Some((SimAddr(9), Message::Members(vec![])))
        );
        s.handle_message(
            t,
            Message::Register {
                leader: false,
                node: SimAddr(1),
            },
        );
        s.handle_message(
            t,
            Message::Register {
                leader: true,
                node: SimAddr(2),
            },
        );
        assert_eq!(
            s.poll_transmit(),
            None,
            "the only leader has no one to meet"
        );
        s.handle_message(
            t,
            Message::Register {
                leader: true,
                node: SimAddr(3),
            },
        );
        assert_eq!(
            s.poll_transmit(),
            Some((
                SimAddr(3),
                Message::Members(vec![Member {
                    leader: true,
                    node: SimAddr(2)
                }])
            ))
        );
        s.handle_message(t, Message::Query { node: SimAddr(9) });
        let Some((_, Message::Members(m))) = s.poll_transmit() else {
            panic!("no answer");
        };
        assert_eq!(
            m.iter().map(|m| (m.node, m.leader)).collect::<Vec<_>>(),
            vec![(SimAddr(2), true), (SimAddr(3), true), (SimAddr(1), false)]
        );
        // Silent members are forgotten.
        s.handle_message(
            t + Duration::from_secs(11),
            Message::Query { node: SimAddr(9) },
        );
        assert_eq!(
            s.poll_transmit(),
            Some((SimAddr(9), Message::Members(vec![])))
        );
        assert_eq!(s.stats().expired, 3);
    }

    #[test]
    fn server_memory_is_bounded() {
        let mut s = Server::new(ServerConfig {
            max_members: 3,
            ..ServerConfig::default()
        });
        for i in 0..10u32 {
            s.handle_message(
                Instant::from_millis(u64::from(i)),
                Message::Register {
                    leader: false,
                    node: SimAddr(i),
                },
            );
        }
        assert_eq!(s.members().count(), 3);
        assert_eq!(s.stats().evicted, 7);
        assert_eq!(
            s.members().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![SimAddr(7), SimAddr(8), SimAddr(9)]
        );
    }

    #[test]
    fn client_queries_until_placed_then_registers() {
        let t = Instant::ZERO;
        let cfg = ClientConfig {
            server: SimAddr(100),
            every: Duration::from_secs(1),
        };
        let mut c = Client::new(cfg, SimAddr(4), t);
        assert_eq!(
            c.poll(t, false, false),
            Some((SimAddr(100), Message::Query { node: SimAddr(4) }))
        );
        assert_eq!(c.poll(t, false, false), None, "once per period");
        assert_eq!(c.handle_message(Message::Members(vec![])), vec![]);
        assert!(c.alone());
        let t = t + Duration::from_secs(1);
        assert_eq!(
            c.poll(t, true, true),
            Some((
                SimAddr(100),
                Message::Register {
                    leader: true,
                    node: SimAddr(4)
                }
            ))
        );
    }
}

//! The bus itself, sans IO: a deterministic T-script interpreter (seed 003 "The ToolBus";
//! scripts of [`crate::script`]) joined to the tools' connections, the reference table and
//! the leases of [`crate::refs`].
//!
//! Contract (as quinn-proto's endpoint, DESIGN.md §6): a driver feeds inputs —
//! [`Bus::handle_connect`], [`Bus::handle_bytes`] / [`Bus::handle_frame`],
//! [`Bus::handle_disconnect`], [`Bus::handle_timeout`] — each with the current time, then
//! drains [`Bus::poll_output`] (frames to send, connections to close, tools to launch) and asks
//! [`Bus::poll_timeout`] when to call again. The bus never reads a clock or touches a socket,
//! so every scenario runs in a test with a virtual clock. For a given script, seed and input
//! sequence the run is identical: process ids, request and delivery numbers, and the choice
//! among enabled atoms (a seeded splitmix64) are all deterministic.
//!
//! Semantics, one step at a time: every process offers the first atoms of its expression
//! (`p . q` offers `p`'s; `p + q` both; `p +> q` `q`'s only when none of `p`'s can step;
//! `p * q` `p`'s and `q`'s; `p || q` both; `if` offers the branch its condition selects). An
//! atom can step when its partner exists (`snd-msg` with a matching `rec-msg` of another
//! process; `rec-value` with a value from the tool; …), its `delay` has passed and its
//! `timeout` has not, both counted from the process's previous step. One enabled atom is
//! chosen (seeded), executed, and the process continues. A process that sent a term holding
//! references waits for the receiver's ACK (seed 003: the next statement waits until the value
//! has arrived), so the value cannot be freed before it is fetched.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::json;
use viastack_kernel::{Duration, Instant};

use crate::refs::{RefAction, RefCounters, RefTable};
use crate::script::{Atom, Op, Proc, Script};
use crate::term::{has_type, Arena, Kind, RefInfo, Scope, Term};
use crate::wire::{self, FailCode, Frame, WireError};

/// A tool's connection number (also its tool id).
pub type ToolId = u64;

/// The bus's limits and defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// A tool silent for longer loses its references (seed 003's proposed lease). Tools send
    /// PING at a third of it.
    pub lease: Duration,
    /// Values whose encoding is larger go by reference (announced in REG).
    pub threshold: u32,
    /// Largest frame accepted.
    pub max_frame: usize,
    /// References one owner may have counted at once.
    pub max_refs_per_tool: usize,
    /// Values and events queued per tool before refusing more.
    pub max_queued_per_tool: usize,
    /// Notes queued per process before dropping more (counted).
    pub note_queue: usize,
    /// Live processes at most (`create` beyond it fails, counted).
    pub max_processes: usize,
    /// Steps per input before yielding (livelock guard; the rest runs at the next timeout).
    pub step_cap: usize,
    /// Seed of the choice among enabled atoms.
    pub seed: u64,
    /// Record a JSON line per step for [`Bus::poll_trace`].
    pub trace: bool,
    /// Tokens tools must present in HELLO (empty: none required).
    pub tokens: Vec<String>,
    /// Relayed transfers (GETs of a passive owner's values) waiting or running per value.
    pub max_relays_per_owner: usize,
    /// Bytes of frames (values, events) the bus holds in its tool queues at once, all tools
    /// together; a frame beyond it is refused (counted `refused_memory`).
    pub max_queued_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            lease: Duration::from_secs(10),
            // 2 MiB, above the measured turning point (`viastack bench bus`, docs/BUS.md
            // "Figures"): below ~1 MB a reference costs as much as the copy through the bus;
            // from a few MB it is several times faster (seed 003's "turning point").
            threshold: 2 << 20,
            max_frame: wire::DEFAULT_MAX_FRAME,
            max_refs_per_tool: 4096,
            max_queued_per_tool: 256,
            note_queue: 64,
            max_processes: 10_000,
            step_cap: 10_000,
            seed: 0,
            trace: false,
            tokens: Vec::new(),
            max_relays_per_owner: 64,
            max_queued_bytes: 256 << 20,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send this frame to this tool.
    Send {
        /// The tool.
        tool: ToolId,
        /// The frame.
        frame: Frame,
    },
    /// Close the tool's connection (after sending what precedes).
    Close {
        /// The tool.
        tool: ToolId,
    },
    /// Start a tool (`execute` of a tool declared with a command).
    Launch {
        /// The tool's name.
        tool: String,
        /// Its command line.
        command: String,
    },
}

/// Counters of a bus run, each refusal typed.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Counters {
    /// Atoms executed.
    pub steps: u64,
    /// Frames received.
    pub frames_in: u64,
    /// Frames sent.
    pub frames_out: u64,
    /// Frames that did not decode (the connection is closed).
    pub bad_frames: u64,
    /// Frames refused: a reference the tool may not name, a full queue, a wrong state.
    pub refused_frames: u64,
    /// HELLOs refused (version, token).
    pub refused_hellos: u64,
    /// Unknown frame kinds, ignored.
    pub unknown_frames: u64,
    /// Notes dropped because a subscriber's queue was full.
    pub notes_dropped: u64,
    /// Assignments of a value of the wrong type, skipped.
    pub type_errors: u64,
    /// Creates refused at the process limit.
    pub refused_creates: u64,
    /// Tools that lost their lease.
    pub leases_expired: u64,
    /// References a tool named that it neither owns nor was granted (refused).
    pub refused_grants: u64,
    /// GETs relayed to passive owners.
    pub relays: u64,
    /// Relayed GETs refused (not granted, over the pending limit, owner not passive).
    pub refused_relays: u64,
    /// PUT chunks relayed from passive owners to consumers.
    pub relayed_chunks: u64,
    /// Values and events refused because the bus's queues held `max_queued_bytes`.
    pub refused_memory: u64,
    /// References refused because their owner held `max_refs_per_tool`.
    pub refused_refs_over_limit: u64,
    /// Tools closed because they did not read what the bus queued for them (the driver's
    /// bounded per-connection queue overflowed).
    pub slow_readers: u64,
}

struct Process {
    name: String,
    body: Arc<Proc>,
    env: BTreeMap<String, Term>,
    types: Arc<BTreeMap<String, String>>,
    since: Instant,
    notes: VecDeque<Term>,
    subs: Vec<Term>,
    blocked_on: Option<u64>,
    /// The atoms the body offers first (with their continuations) and whether computing
    /// them met a biased choice, kept between steps: they depend only on the body and the
    /// variables (an `if`'s condition), so they are recomputed only after this process
    /// stepped or a variable of it changed ([`Bus::advance`], [`Bus::set_var`]). Computing
    /// them was most of a round trip's instructions (four times per round trip).
    firsts: Option<(Cands, bool)>,
}

struct ProcScope<'a> {
    env: &'a BTreeMap<String, Term>,
    types: &'a BTreeMap<String, String>,
}

impl Scope for ProcScope<'_> {
    fn value(&self, name: &str) -> Option<&Term> {
        self.env.get(name)
    }
    fn accepts(&self, name: &str, value: &Term) -> bool {
        self.types.get(name).is_none_or(|ty| has_type(ty, value))
    }
}

impl Process {
    fn scope(&self) -> ProcScope<'_> {
        ProcScope {
            env: &self.env,
            types: &self.types,
        }
    }
}

enum ToolState {
    /// Connected, no HELLO yet.
    Fresh,
    /// Registered.
    Up,
    /// Gone (END, socket closed, lease); waits for a `rec-disconnect`.
    Gone,
}

struct Tool {
    state: ToolState,
    name: String,
    location: String,
    claimed: Option<u64>,
    last_heard: Instant,
    values: VecDeque<Term>,
    /// The frame size of each queued value, for the bus's memory limit.
    value_bytes: VecDeque<usize>,
    events: VecDeque<(u64, Term)>,
    event_bytes: VecDeque<usize>,
    unacked: Vec<(u64, Term)>,
    next_request: u64,
    /// References the bus delivered to this tool (it may pass them on; a relayed GET must
    /// name one of an unacknowledged delivery).
    granted: BTreeSet<(u64, u64)>,
}

/// A GET of a passive owner's value relayed through the bus (seed 003 "active <- passive"
/// and "passive - passive"): the owner's PUT chunks for the variable go to `consumer`, one
/// relay per (owner, variable) at a time.
struct Relay {
    /// The consumer; `None` once it is gone (the rest of the value is drained and dropped).
    consumer: Option<ToolId>,
    delivery: u64,
    offset: u64,
    window: u32,
}

/// One enabled step.
enum Step {
    Local {
        pid: u64,
        atom: Arc<Atom>,
        cont: Arc<Proc>,
    },
    Comm {
        snd: u64,
        snd_cont: Arc<Proc>,
        rcv: u64,
        rcv_atom: Arc<Atom>,
        rcv_cont: Arc<Proc>,
        value: Term,
        binds: Vec<(Arc<str>, Term)>,
    },
}

/// The bus: script processes, tools, references.
pub struct Bus {
    /// The hash-consing arena every term of the run lives in.
    pub arena: Arena,
    script: Script,
    config: Config,
    procs: BTreeMap<u64, Process>,
    next_pid: u64,
    tools: BTreeMap<ToolId, Tool>,
    next_tool: ToolId,
    refs: RefTable,
    out: VecDeque<Output>,
    trace: VecDeque<String>,
    rng: u64,
    launched: BTreeSet<u64>,
    counters: Counters,
    pending_run: bool,
    /// Set when computing first atoms met a biased choice: only then do the offered atoms
    /// differ from the unbiased ones (so a script without `+>` computes them once per step).
    saw_biased: std::cell::Cell<bool>,
    /// Bytes of the frames held in tool queues (values, events), all tools.
    queued_bytes: usize,
    /// Size of the frame being handled (0 when handed over decoded).
    frame_bytes: usize,
    /// Relayed transfers by (owner, variable): the front one runs.
    relays: BTreeMap<(ToolId, u64), VecDeque<Relay>>,
}

fn seq(p: Arc<Proc>, q: &Arc<Proc>) -> Arc<Proc> {
    if matches!(*p, Proc::Nil) {
        q.clone()
    } else {
        Arc::new(Proc::Seq(p, q.clone()))
    }
}

fn merge(p: Arc<Proc>, q: Arc<Proc>) -> Arc<Proc> {
    match (&*p, &*q) {
        (Proc::Nil, _) => q,
        (_, Proc::Nil) => p,
        _ => Arc::new(Proc::Merge(p, q)),
    }
}

/// Evaluates a script expression: variables replaced by their values, then the built-in
/// functions (`add sub mul div mod less less-equal greater greater-equal equal not-equal not
/// and or size first next concat`) applied bottom-up; anything else is a plain term.
pub fn eval(arena: &mut Arena, t: &Term, scope: &dyn Scope) -> Term {
    let t = arena.substitute(t, scope);
    reduce(arena, &t, 0)
}

fn boolean(_arena: &mut Arena, b: bool) -> Term {
    // Made once per thread: every `if` and `while` condition ends here, once per step.
    thread_local! {
        static BOOLS: [Term; 2] = {
            let mut a = Arena::new();
            [a.appl("false", Vec::new()), a.appl("true", Vec::new())]
        };
    }
    BOOLS.with(|t| t[usize::from(b)].clone())
}

fn reduce(arena: &mut Arena, t: &Term, depth: usize) -> Term {
    let Some((f, args)) = t.as_appl() else {
        return t.clone();
    };
    if args.is_empty() || depth > crate::term::MAX_DEPTH {
        return t.clone();
    }
    let orig = args;
    let args: Vec<Term> = args.iter().map(|a| reduce(arena, a, depth + 1)).collect();
    let ints: Option<Vec<i64>> = args.iter().map(Term::as_int).collect();
    let is_true = |t: &Term| {
        t.as_appl()
            .is_some_and(|(f, a)| f == "true" && a.is_empty())
    };
    let list = |t: &Term| match t.strip().kind() {
        Kind::List(xs) => Some(xs.to_vec()),
        _ => None,
    };
    let r = match (f, args.as_slice(), ints.as_deref()) {
        ("add", _, Some([a, b])) => a.checked_add(*b).map(|v| arena.int(v)),
        ("sub", _, Some([a, b])) => a.checked_sub(*b).map(|v| arena.int(v)),
        ("mul", _, Some([a, b])) => a.checked_mul(*b).map(|v| arena.int(v)),
        ("div", _, Some([a, b])) => a.checked_div(*b).map(|v| arena.int(v)),
        ("mod", _, Some([a, b])) => a.checked_rem(*b).map(|v| arena.int(v)),
        ("less", _, Some([a, b])) => Some(boolean(arena, a < b)),
        ("less-equal", _, Some([a, b])) => Some(boolean(arena, a <= b)),
        ("greater", _, Some([a, b])) => Some(boolean(arena, a > b)),
        ("greater-equal", _, Some([a, b])) => Some(boolean(arena, a >= b)),
        ("equal", [a, b], _) => Some(boolean(arena, a.strip() == b.strip())),
        ("not-equal", [a, b], _) => Some(boolean(arena, a.strip() != b.strip())),
        ("not", [a], _) => Some(boolean(arena, !is_true(a))),
        ("and", [a, b], _) => Some(boolean(arena, is_true(a) && is_true(b))),
        ("or", [a, b], _) => Some(boolean(arena, is_true(a) || is_true(b))),
        ("size", [a], _) => list(a).map(|xs| arena.int(xs.len() as i64)),
        ("first", [a], _) => list(a).and_then(|xs| xs.first().cloned()),
        ("next", [a], _) => list(a).and_then(|xs| {
            let rest = xs.get(1..).map(<[Term]>::to_vec)?;
            Some(arena.list(rest))
        }),
        ("concat", [a, b], _) => match (list(a), list(b)) {
            (Some(mut x), Some(y)) => {
                x.extend(y);
                Some(arena.list(x))
            }
            _ => None,
        },
        _ => None,
    };
    match r {
        Some(r) => r,
        // Nothing reduced below: the term itself, not a copy made again.
        None if args.iter().zip(orig).all(|(x, y)| x.ptr_eq(y)) => t.clone(),
        None => arena.appl(f, args),
    }
}

fn is_true(t: &Term) -> bool {
    t.as_appl()
        .is_some_and(|(f, a)| f == "true" && a.is_empty())
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The tool id a term names (`name(id)`), if any.
fn tool_of(t: &Term) -> Option<ToolId> {
    let (_, args) = t.as_appl()?;
    match args {
        [id] => id.as_int().and_then(|i| u64::try_from(i).ok()),
        _ => None,
    }
}

impl Bus {
    /// A bus running `script` (its `toolbus(...)` processes start at `now`).
    pub fn new(script: Script, arena: Arena, config: Config, now: Instant) -> Bus {
        let rng = config.seed ^ 0x6275_735f_7365_6564;
        let refs = RefTable::new(config.max_refs_per_tool);
        let mut bus = Bus {
            arena,
            script,
            config,
            procs: BTreeMap::new(),
            next_pid: 0,
            tools: BTreeMap::new(),
            next_tool: 0,
            refs,
            out: VecDeque::new(),
            trace: VecDeque::new(),
            rng,
            launched: BTreeSet::new(),
            counters: Counters::default(),
            relays: BTreeMap::new(),
            queued_bytes: 0,
            frame_bytes: 0,
            pending_run: false,
            saw_biased: std::cell::Cell::new(false),
        };
        let starts = bus.script.toolbus.clone();
        for (name, args, _) in starts {
            bus.spawn(&name, args, now);
        }
        bus.run(now);
        bus
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The reference table's counters.
    pub fn ref_counters(&self) -> RefCounters {
        self.refs.counters
    }

    /// References currently counted, and bytes tools hold for them.
    pub fn refs_held(&self) -> (usize, u64) {
        (self.refs.len(), self.refs.held_bytes())
    }

    /// The count of one reference.
    pub fn ref_count(&self, owner: u64, var: u64) -> u32 {
        self.refs.count((owner, var))
    }

    /// Live processes.
    pub fn process_count(&self) -> usize {
        self.procs.len()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        let o = self.out.pop_front();
        if matches!(o, Some(Output::Send { .. })) {
            self.counters.frames_out += 1;
        }
        o
    }

    /// The next trace line (JSON), if tracing.
    pub fn poll_trace(&mut self) -> Option<String> {
        self.trace.pop_front()
    }

    /// When to call [`Bus::handle_timeout`] next.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        if self.pending_run {
            return Some(now);
        }
        let lease = self
            .tools
            .values()
            .filter(|t| !matches!(t.state, ToolState::Gone))
            .map(|t| t.last_heard.saturating_add(self.config.lease))
            .min();
        let delay = self
            .procs
            .values()
            .flat_map(|p| {
                let mut v = Vec::new();
                collect_delays(&p.body, p.since, now, &mut v);
                v
            })
            .min();
        match (lease, delay) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn spawn(&mut self, name: &str, args: Vec<Term>, now: Instant) -> Option<u64> {
        if self.procs.len() >= self.config.max_processes {
            self.counters.refused_creates += 1;
            return None;
        }
        let def = self.script.processes.get(name)?;
        let mut env = BTreeMap::new();
        let mut bound = Vec::new();
        for ((formal, _), value) in def.formals.iter().zip(args) {
            bound.extend(value.refs());
            env.insert(formal.clone(), value);
        }
        let p = Process {
            name: name.to_string(),
            body: def.body.clone(),
            env,
            types: Arc::new(def.vars.clone()),
            since: now,
            notes: VecDeque::new(),
            subs: Vec::new(),
            blocked_on: None,
            firsts: None,
        };
        self.refs.bind(&bound);
        self.next_pid += 1;
        let pid = self.next_pid;
        self.procs.insert(pid, p);
        Some(pid)
    }

    /// A tool connected; returns its id (the driver names the connection by it).
    pub fn handle_connect(&mut self, now: Instant) -> ToolId {
        self.next_tool += 1;
        let id = self.next_tool;
        self.tools.insert(
            id,
            Tool {
                state: ToolState::Fresh,
                name: String::new(),
                location: String::new(),
                claimed: None,
                last_heard: now,
                values: VecDeque::new(),
                value_bytes: VecDeque::new(),
                events: VecDeque::new(),
                event_bytes: VecDeque::new(),
                unacked: Vec::new(),
                next_request: 0,
                granted: BTreeSet::new(),
            },
        );
        id
    }

    /// The tool's connection closed.
    pub fn handle_disconnect(&mut self, now: Instant, tool: ToolId) {
        self.lose_tool(tool, "disconnected");
        self.run(now);
    }

    /// Bytes of a frame still incomplete arrived from `tool`: it is alive (a large frame that
    /// takes longer than the lease to arrive does not cost its sender the lease).
    pub fn handle_progress(&mut self, now: Instant, tool: ToolId) {
        if let Some(t) = self.tools.get_mut(&tool) {
            t.last_heard = now;
        }
    }

    /// The driver closed `tool`'s connection because it did not read what was queued for it
    /// (counted; the tool is lost like a disconnected one).
    pub fn handle_slow_reader(&mut self, now: Instant, tool: ToolId) {
        self.counters.slow_readers += 1;
        self.lose_tool(tool, "slow reader");
        self.run(now);
    }

    /// One whole frame's bytes from `tool`. A frame that does not decode closes the connection.
    ///
    /// # Errors
    /// The decoder's error (already counted and acted on).
    pub fn handle_bytes(
        &mut self,
        now: Instant,
        tool: ToolId,
        bytes: &[u8],
    ) -> Result<(), WireError> {
        match Frame::parse(&mut self.arena, bytes, self.config.max_frame) {
            Ok(f) => {
                self.frame_bytes = bytes.len();
                self.handle_frame(now, tool, f);
                self.frame_bytes = 0;
                Ok(())
            }
            Err(e) => {
                self.counters.bad_frames += 1;
                self.send(
                    tool,
                    Frame::End {
                        reason: format!("bad frame: {e}"),
                    },
                );
                self.out.push_back(Output::Close { tool });
                self.lose_tool(tool, "bad frame");
                self.run(now);
                Err(e)
            }
        }
    }

    fn send(&mut self, tool: ToolId, frame: Frame) {
        self.out.push_back(Output::Send { tool, frame });
    }

    fn refuse(&mut self, tool: ToolId, detail: &str) {
        self.counters.refused_frames += 1;
        self.send(
            tool,
            Frame::Fail {
                delivery: 0,
                code: FailCode::Refused,
                detail: detail.to_string(),
            },
        );
    }

    /// Whether `tool` may send a term holding `refs`: each is its own (at its registered
    /// location), or one the bus already counts (passed along), and within the owner's limit.
    fn refs_admitted(&self, tool: ToolId, refs: &[RefInfo]) -> bool {
        let Some(t) = self.tools.get(&tool) else {
            return false;
        };
        refs.iter().all(|r| {
            // Its own (at its location; "" for a passive owner, whose values are relayed),
            // or one the bus delivered to it and still counts.
            (r.owner == tool && *r.location == t.location)
                || (t.granted.contains(&(r.owner, r.var)) && self.refs.count((r.owner, r.var)) > 0)
        })
    }

    /// One decoded frame from `tool`.
    pub fn handle_frame(&mut self, now: Instant, tool: ToolId, frame: Frame) {
        self.counters.frames_in += 1;
        let Some(t) = self.tools.get_mut(&tool) else {
            return;
        };
        t.last_heard = now;
        if matches!(t.state, ToolState::Fresh) {
            match frame {
                Frame::Hello {
                    version,
                    name,
                    location,
                    token,
                } if version == wire::VERSION
                    && (self.config.tokens.is_empty() || self.config.tokens.contains(&token)) =>
                {
                    t.state = ToolState::Up;
                    t.name = name;
                    t.location = location;
                    let (lease_ms, threshold) = (
                        u32::try_from(self.config.lease.as_millis()).unwrap_or(u32::MAX),
                        self.config.threshold,
                    );
                    self.send(
                        tool,
                        Frame::Reg {
                            version: wire::VERSION,
                            tool,
                            lease_ms,
                            threshold,
                        },
                    );
                    self.trace_event(now, json!({"tool": tool, "connected": self.tools.get(&tool).map(|t| t.name.clone())}));
                }
                other => {
                    self.counters.refused_hellos += 1;
                    let why = match other {
                        Frame::Hello { version, .. } if version != wire::VERSION => {
                            format!(
                                "version {version} not supported (bus speaks {})",
                                wire::VERSION
                            )
                        }
                        Frame::Hello { .. } => "token refused".to_string(),
                        _ => "HELLO expected first".to_string(),
                    };
                    self.send(tool, Frame::End { reason: why });
                    self.out.push_back(Output::Close { tool });
                    self.tools.remove(&tool);
                }
            }
            self.run(now);
            return;
        }
        if matches!(t.state, ToolState::Gone) {
            return;
        }
        match frame {
            Frame::Value { term, .. } => {
                if self.admit(tool, &term) {
                    let n = self.frame_bytes;
                    if let Some(t) = self.tools.get_mut(&tool) {
                        t.values.push_back(term);
                        t.value_bytes.push_back(n);
                        self.queued_bytes += n;
                    }
                }
            }
            Frame::Event { event, term } => {
                if self.admit(tool, &term) {
                    let n = self.frame_bytes;
                    if let Some(t) = self.tools.get_mut(&tool) {
                        t.events.push_back((event, term));
                        t.event_bytes.push_back(n);
                        self.queued_bytes += n;
                    }
                }
            }
            Frame::Note { term } => {
                if self.admit(tool, &term) {
                    let refs = term.refs();
                    self.publish_note(&term);
                    let mut actions = Vec::new();
                    self.refs
                        .unbind(refs.iter().map(|r| (r.owner, r.var)), &mut actions);
                    self.apply(actions);
                }
            }
            Frame::Ack { delivery } => {
                let mut actions = Vec::new();
                self.refs.ack(tool, delivery, &mut actions);
                for p in self.procs.values_mut() {
                    if p.blocked_on == Some(delivery) {
                        p.blocked_on = None;
                        p.since = now;
                    }
                }
                self.apply(actions);
            }
            Frame::Ping { .. } => {}
            Frame::End { .. } => {
                self.out.push_back(Output::Close { tool });
                self.lose_tool(tool, "END");
            }
            Frame::Unknown { .. } => self.counters.unknown_frames += 1,
            Frame::Get {
                delivery,
                var,
                offset,
                window,
            } => self.relay_get(tool, delivery, var, offset, window),
            Frame::Credit { var, bytes } => self.relay_credit(tool, var, bytes),
            Frame::Put {
                var,
                offset,
                total,
                data,
            } => self.relay_put(tool, var, offset, total, data),
            Frame::Fail {
                delivery,
                code,
                detail,
            } => self.relay_fail(tool, delivery, code, detail),
            _ => self.refuse(tool, "frame kind not accepted from a tool"),
        }
        self.run(now);
        // Frames that make no step (notes nobody takes, refused values) leave their terms in
        // the arena too: purged here as well as after each step, so the arena stays bounded
        // whatever the tools send (`tests/bounded.rs`).
        self.arena.purge_if_large();
    }

    /// Checks a term a tool sends (its references, its queue) and counts its references as
    /// bound while it waits in a queue. Refusals are typed FAILs, counted.
    fn admit(&mut self, tool: ToolId, term: &Term) -> bool {
        let refs = term.refs();
        let queued = self
            .tools
            .get(&tool)
            .map_or(0, |t| t.values.len() + t.events.len());
        if !self.refs_admitted(tool, &refs) {
            self.counters.refused_grants += 1;
            self.refuse(tool, "reference not owned by this tool nor granted to it");
            return false;
        }
        if !self.refs.admits(&refs) {
            self.counters.refused_refs_over_limit += 1;
            self.refuse(tool, "the owner holds too many references");
            return false;
        }
        if queued >= self.config.max_queued_per_tool {
            self.refuse(tool, "queue full");
            return false;
        }
        if self.queued_bytes + self.frame_bytes > self.config.max_queued_bytes {
            self.counters.refused_memory += 1;
            self.refuse(
                tool,
                "bus memory limit: the script has not taken queued values yet",
            );
            return false;
        }
        self.refs.bind(&refs);
        true
    }
}

impl Bus {
    fn refuse_relay(&mut self, tool: ToolId, delivery: u64, detail: &str) {
        self.counters.refused_relays += 1;
        self.send(
            tool,
            Frame::Fail {
                delivery,
                code: FailCode::Refused,
                detail: detail.to_string(),
            },
        );
    }

    /// A consumer's GET sent to the bus: allowed only for a reference of one of its
    /// unacknowledged deliveries (the script granted it) whose owner is passive; relayed to
    /// the owner's connection when no other relay of that value runs.
    fn relay_get(&mut self, tool: ToolId, delivery: u64, var: u64, offset: u64, window: u32) {
        let owner = self.refs.delivery(delivery).and_then(|d| {
            if d.to != tool {
                return None;
            }
            d.refs.iter().find(|(_, v)| *v == var).map(|(o, _)| *o)
        });
        let Some(owner) = owner else {
            self.refuse_relay(
                tool,
                delivery,
                "GET of a reference not granted to this tool",
            );
            return;
        };
        let passive = self
            .tools
            .get(&owner)
            .is_some_and(|t| matches!(t.state, ToolState::Up) && t.location.is_empty());
        if !passive {
            self.refuse_relay(
                tool,
                delivery,
                "the owner is active: GET it at its location",
            );
            return;
        }
        let queue = self.relays.entry((owner, var)).or_default();
        if queue.len() >= self.config.max_relays_per_owner {
            self.refuse_relay(tool, delivery, "too many relayed transfers pending");
            return;
        }
        queue.push_back(Relay {
            consumer: Some(tool),
            delivery,
            offset,
            window,
        });
        self.counters.relays += 1;
        if queue.len() == 1 {
            self.start_relay(owner, var);
        }
    }

    fn start_relay(&mut self, owner: ToolId, var: u64) {
        let Some(r) = self.relays.get(&(owner, var)).and_then(|q| q.front()) else {
            return;
        };
        let frame = Frame::Get {
            delivery: r.delivery,
            var,
            offset: r.offset,
            window: r.window,
        };
        self.send(owner, frame);
    }

    fn finish_relay(&mut self, owner: ToolId, var: u64) {
        if let Some(q) = self.relays.get_mut(&(owner, var)) {
            q.pop_front();
            if q.is_empty() {
                self.relays.remove(&(owner, var));
            } else {
                self.start_relay(owner, var);
            }
        }
    }

    /// A consumer's CREDIT for a relayed value, passed to the owner.
    fn relay_credit(&mut self, tool: ToolId, var: u64, bytes: u32) {
        let owner = self.relays.iter().find_map(|((o, v), q)| {
            (*v == var && q.front().is_some_and(|r| r.consumer == Some(tool))).then_some(*o)
        });
        // Without a running relay the CREDIT is ignored: the relay may have ended already
        // (the owner had window for the rest when the consumer sent it).
        if let Some(owner) = owner {
            self.send(owner, Frame::Credit { var, bytes });
        }
    }

    /// A passive owner's PUT chunk, passed to the consumer of the running relay.
    fn relay_put(&mut self, tool: ToolId, var: u64, offset: u64, total: u64, data: Vec<u8>) {
        let Some(r) = self
            .relays
            .get_mut(&(tool, var))
            .and_then(|q| q.front_mut())
        else {
            self.refuse(tool, "PUT for no relayed transfer");
            return;
        };
        if r.consumer.is_none() {
            // Its consumer is gone: dropped until the value's end.
            if offset.saturating_add(data.len() as u64) >= total {
                self.finish_relay(tool, var);
            }
            return;
        }
        if offset != r.offset {
            let (consumer, delivery) = (r.consumer, r.delivery);
            self.refuse(tool, "relayed PUT out of order");
            if let Some(c) = consumer {
                self.refuse_relay(c, delivery, "the owner sent the value out of order");
            }
            self.finish_relay(tool, var);
            return;
        }
        r.offset += data.len() as u64;
        let done = r.offset >= total;
        let consumer = r.consumer;
        self.counters.relayed_chunks += 1;
        if let Some(c) = consumer {
            self.send(
                c,
                Frame::Put {
                    var,
                    offset,
                    total,
                    data,
                },
            );
        }
        if done {
            self.finish_relay(tool, var);
        }
    }

    /// A passive owner's FAIL of a relayed GET (it does not hold the variable), passed on.
    fn relay_fail(&mut self, tool: ToolId, delivery: u64, code: FailCode, detail: String) {
        let key = self.relays.iter().find_map(|(k, q)| {
            (k.0 == tool && q.front().is_some_and(|r| r.delivery == delivery)).then_some(*k)
        });
        let Some(key) = key else {
            self.refuse(tool, "FAIL for no relayed transfer");
            return;
        };
        if let Some(c) = self
            .relays
            .get(&key)
            .and_then(|q| q.front())
            .and_then(|r| r.consumer)
        {
            self.send(
                c,
                Frame::Fail {
                    delivery,
                    code,
                    detail,
                },
            );
        }
        self.finish_relay(key.0, key.1);
    }

    /// Relays touching a lost tool: as owner they end (its deliveries FAIL at the consumers
    /// through the reference table); as consumer its waiting relays are dropped and the
    /// running one is drained (the owner is given window to finish; the chunks are dropped).
    fn relays_lost(&mut self, tool: ToolId) {
        self.relays.retain(|(o, _), _| *o != tool);
        let mut drain = Vec::new();
        for ((o, v), q) in &mut self.relays {
            let front_was_it = q.front().is_some_and(|r| r.consumer == Some(tool));
            q.retain(|r| r.consumer != Some(tool));
            if front_was_it {
                q.push_front(Relay {
                    consumer: None,
                    delivery: 0,
                    offset: 0,
                    window: 0,
                });
                drain.push((*o, *v));
            }
        }
        // The drained relay's offset is unknown here: the owner is told to send the rest
        // unthrottled and the chunks are dropped until the value's end.
        for (o, v) in drain {
            if let Some(r) = self.relays.get_mut(&(o, v)).and_then(|q| q.front_mut()) {
                r.offset = u64::MAX;
            }
            self.send(
                o,
                Frame::Credit {
                    var: v,
                    bytes: u32::MAX,
                },
            );
        }
    }
}

fn window_ok(atom: &Atom, since: Instant, now: Instant) -> bool {
    let after = |ms: u64| since.saturating_add(Duration::from_millis(ms));
    atom.delay_ms.is_none_or(|d| now >= after(d)) && atom.timeout_ms.is_none_or(|t| now < after(t))
}

fn collect_delays(p: &Arc<Proc>, since: Instant, now: Instant, out: &mut Vec<Instant>) {
    match &**p {
        Proc::Atom(a) => {
            if let Some(d) = a.delay_ms {
                let at = since.saturating_add(Duration::from_millis(d));
                if at > now {
                    out.push(at);
                }
            }
        }
        Proc::Seq(p, _) => collect_delays(p, since, now, out),
        Proc::Alt(p, q)
        | Proc::Biased(p, q)
        | Proc::Iter(p, q)
        | Proc::Merge(p, q)
        | Proc::If(_, p, q) => {
            collect_delays(p, since, now, out);
            collect_delays(q, since, now, out);
        }
        Proc::Nil | Proc::Delta => {}
    }
}

type Cands = Vec<(Arc<Atom>, Arc<Proc>)>;

impl Bus {
    fn trace_event(&mut self, now: Instant, mut v: serde_json::Value) {
        if !self.config.trace {
            return;
        }
        if let Some(o) = v.as_object_mut() {
            o.insert("t_ms".into(), json!(now.as_nanos() / 1_000_000));
        }
        self.trace.push_back(v.to_string());
    }

    fn lose_tool(&mut self, tool: ToolId, why: &str) {
        let Some(t) = self.tools.get_mut(&tool) else {
            return;
        };
        if matches!(t.state, ToolState::Gone) {
            return;
        }
        let fresh = matches!(t.state, ToolState::Fresh);
        t.state = ToolState::Gone;
        let mut keys = Vec::new();
        for v in t.values.drain(..) {
            keys.extend(v.refs());
        }
        let held: usize = t.value_bytes.drain(..).chain(t.event_bytes.drain(..)).sum();
        self.queued_bytes = self.queued_bytes.saturating_sub(held);
        for (_, e) in t.events.drain(..).chain(t.unacked.drain(..)) {
            keys.extend(e.refs());
        }
        let claimed = t.claimed.is_some();
        self.relays_lost(tool);
        let mut actions = Vec::new();
        self.refs
            .unbind(keys.iter().map(|r| (r.owner, r.var)), &mut actions);
        self.refs.tool_lost(tool, &mut actions);
        if fresh || !claimed {
            self.tools.remove(&tool);
        }
        self.apply(actions);
        let now = self
            .procs
            .values()
            .map(|p| p.since)
            .max()
            .unwrap_or(Instant::ZERO);
        self.trace_event(now, json!({"tool": tool, "lost": why}));
    }

    fn apply(&mut self, actions: Vec<RefAction>) {
        for a in actions {
            match a {
                RefAction::Fin { owner, var } => {
                    if self
                        .tools
                        .get(&owner)
                        .is_some_and(|t| matches!(t.state, ToolState::Up))
                    {
                        self.send(owner, Frame::Fin { var });
                    }
                }
                RefAction::Fail { to, delivery } => {
                    if self
                        .tools
                        .get(&to)
                        .is_some_and(|t| matches!(t.state, ToolState::Up))
                    {
                        self.send(
                            to,
                            Frame::Fail {
                                delivery,
                                code: FailCode::OwnerLost,
                                detail: "the value's owner was lost (left or lease expired)".into(),
                            },
                        );
                    }
                    for p in self.procs.values_mut() {
                        if p.blocked_on == Some(delivery) {
                            p.blocked_on = None;
                        }
                    }
                }
            }
        }
    }

    /// Time passed: expired leases are enforced and delayed atoms may step.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired: Vec<ToolId> = self
            .tools
            .iter()
            .filter(|(_, t)| {
                !matches!(t.state, ToolState::Gone)
                    && now >= t.last_heard.saturating_add(self.config.lease)
            })
            .map(|(id, _)| *id)
            .collect();
        for tool in expired {
            self.counters.leases_expired += 1;
            self.send(
                tool,
                Frame::End {
                    reason: "lease expired".into(),
                },
            );
            self.out.push_back(Output::Close { tool });
            self.lose_tool(tool, "lease expired");
        }
        self.run(now);
    }

    fn run(&mut self, now: Instant) {
        self.pending_run = false;
        for _ in 0..self.config.step_cap {
            if !self.step(now) {
                return;
            }
        }
        self.pending_run = true;
    }

    /// The first atoms of `p` for process `pid`; with `bias`, `p +> q` offers `q`'s only when
    /// none of `p`'s is enabled (judged against `raw`, every process's unbiased first atoms).
    fn firsts(
        &self,
        pid: u64,
        p: &Arc<Proc>,
        now: Instant,
        tmp: &mut Arena,
        raw: Option<&BTreeMap<u64, Cands>>,
        out: &mut Cands,
    ) {
        match &**p {
            Proc::Nil | Proc::Delta => {}
            Proc::Atom(a) => out.push((a.clone(), Arc::new(Proc::Nil))),
            Proc::Seq(a, b) => {
                // The left side's atoms go straight into `out`, their continuations then
                // extended in place (no vector per node).
                let start = out.len();
                self.firsts(pid, a, now, tmp, raw, out);
                for (_, c) in &mut out[start..] {
                    *c = seq(c.clone(), b);
                }
            }
            Proc::Alt(a, b) => {
                self.firsts(pid, a, now, tmp, raw, out);
                self.firsts(pid, b, now, tmp, raw, out);
            }
            Proc::Biased(a, b) => {
                self.saw_biased.set(true);
                let mut left = Vec::new();
                self.firsts(pid, a, now, tmp, raw, &mut left);
                let any = match raw {
                    None => false,
                    Some(raw) => left
                        .iter()
                        .any(|(x, _)| self.enabled(pid, x, now, tmp, raw)),
                };
                out.extend(left);
                if !any || raw.is_none() {
                    self.firsts(pid, b, now, tmp, raw, out);
                } else {
                    // Only the left side's atoms are offered.
                }
            }
            Proc::Iter(a, b) => {
                let start = out.len();
                self.firsts(pid, a, now, tmp, raw, out);
                for (_, c) in &mut out[start..] {
                    *c = seq(c.clone(), p);
                }
                self.firsts(pid, b, now, tmp, raw, out);
            }
            Proc::Merge(a, b) => {
                let start = out.len();
                self.firsts(pid, a, now, tmp, raw, out);
                for (_, c) in &mut out[start..] {
                    *c = merge(c.clone(), b.clone());
                }
                let start = out.len();
                self.firsts(pid, b, now, tmp, raw, out);
                for (_, c) in &mut out[start..] {
                    *c = merge(a.clone(), c.clone());
                }
            }
            Proc::If(c, a, b) => {
                let Some(proc_) = self.procs.get(&pid) else {
                    return;
                };
                let v = eval(tmp, c, &proc_.scope());
                if is_true(&v) {
                    self.firsts(pid, a, now, tmp, raw, out);
                } else if matches!(**b, Proc::Nil) {
                    // `if` without `else`, false: the process goes on as if it were not there;
                    // represented as a silent successful end of this branch.
                    out.push((
                        Arc::new(Atom {
                            op: Op::Tau,
                            args: Vec::new(),
                            delay_ms: None,
                            timeout_ms: None,
                            pos: Default::default(),
                        }),
                        Arc::new(Proc::Nil),
                    ));
                } else {
                    self.firsts(pid, b, now, tmp, raw, out);
                }
            }
        }
    }

    fn tool_arg(&self, p: &Process, t: &Term) -> Option<ToolId> {
        match t.kind() {
            Kind::Var { name, .. } => p.env.get(&**name).and_then(tool_of),
            _ => tool_of(t),
        }
    }

    fn free_tool(&self, name: &str) -> Option<ToolId> {
        self.tools
            .iter()
            .find(|(_, t)| {
                matches!(t.state, ToolState::Up) && t.claimed.is_none() && t.name == name
            })
            .map(|(id, _)| *id)
    }

    fn tool_type(p: &Process, atom: &Atom) -> Option<String> {
        match atom.op {
            Op::Execute => atom.args.first()?.as_appl().map(|(f, _)| f.to_string()),
            _ => match atom.args.first()?.kind() {
                Kind::Var { name, .. } => p.types.get(&**name).cloned(),
                _ => None,
            },
        }
    }

    fn up(&self, tool: Option<ToolId>) -> Option<&Tool> {
        tool.and_then(|id| self.tools.get(&id))
            .filter(|t| matches!(t.state, ToolState::Up))
    }

    /// Whether `atom` of `pid` can step now (for `snd-msg`/`rec-msg`: whether a partner offers).
    fn enabled(
        &self,
        pid: u64,
        atom: &Atom,
        now: Instant,
        tmp: &mut Arena,
        raw: &BTreeMap<u64, Cands>,
    ) -> bool {
        let Some(p) = self.procs.get(&pid) else {
            return false;
        };
        if p.blocked_on.is_some() || !window_ok(atom, p.since, now) {
            return false;
        }
        let scope = p.scope();
        let arg = |i: usize| atom.args.get(i);
        match &atom.op {
            Op::Tau
            | Op::Assign
            | Op::SndNote
            | Op::Subscribe
            | Op::Unsubscribe
            | Op::Create(_) => true,
            Op::SndMsg | Op::RecMsg => {
                let Some(a) = arg(0) else { return false };
                let mine = eval(tmp, a, &scope);
                raw.iter().filter(|(q, _)| **q != pid).any(|(q, cands)| {
                    let Some(qp) = self.procs.get(q) else {
                        return false;
                    };
                    cands.iter().any(|(x, _)| {
                        let Some(b) = x.args.first() else {
                            return false;
                        };
                        match (&atom.op, &x.op) {
                            (Op::SndMsg, Op::RecMsg) => {
                                tmp.matches(b, &mine, &qp.scope(), &mut Vec::new())
                            }
                            (Op::RecMsg, Op::SndMsg) => {
                                let theirs = eval(tmp, b, &qp.scope());
                                tmp.matches(a, &theirs, &scope, &mut Vec::new())
                            }
                            _ => false,
                        }
                    })
                })
            }
            Op::RecNote | Op::NoNote => {
                let Some(pat) = arg(0) else { return false };
                let any = p
                    .notes
                    .iter()
                    .any(|n| tmp.matches(pat, n, &scope, &mut Vec::new()));
                any == (atom.op == Op::RecNote)
            }
            Op::Execute | Op::RecConnect => {
                Self::tool_type(p, atom).is_some_and(|ty| self.free_tool(&ty).is_some())
            }
            Op::RecDisconnect => arg(0)
                .and_then(|t| self.tool_arg(p, t))
                .and_then(|id| self.tools.get(&id))
                .is_some_and(|t| matches!(t.state, ToolState::Gone)),
            Op::SndEval | Op::SndDo | Op::SndTerminate => {
                self.up(arg(0).and_then(|t| self.tool_arg(p, t))).is_some()
            }
            Op::SndAckEvent => {
                let (Some(tool), Some(pat)) =
                    (self.up(arg(0).and_then(|t| self.tool_arg(p, t))), arg(1))
                else {
                    return false;
                };
                tool.unacked
                    .iter()
                    .any(|(_, e)| tmp.matches(pat, e, &scope, &mut Vec::new()))
            }
            Op::RecValue => {
                let (Some(tool), Some(pat)) =
                    (self.up(arg(0).and_then(|t| self.tool_arg(p, t))), arg(1))
                else {
                    return false;
                };
                tool.values
                    .front()
                    .is_some_and(|v| tmp.matches(pat, v, &scope, &mut Vec::new()))
            }
            Op::RecEvent => {
                let (Some(tool), Some(pat)) =
                    (self.up(arg(0).and_then(|t| self.tool_arg(p, t))), arg(1))
                else {
                    return false;
                };
                tool.events
                    .iter()
                    .any(|(_, e)| tmp.matches(pat, e, &scope, &mut Vec::new()))
            }
        }
    }

    /// One step: false when nothing can step.
    fn step(&mut self, now: Instant) -> bool {
        let mut tmp = Arena::new();
        let pids: Vec<u64> = self
            .procs
            .iter()
            .filter(|(_, p)| p.blocked_on.is_none())
            .map(|(pid, _)| *pid)
            .collect();
        let mut raw: BTreeMap<u64, Cands> = BTreeMap::new();
        self.saw_biased.set(false);
        for &pid in &pids {
            let Some(p) = self.procs.get(&pid) else {
                raw.insert(pid, Vec::new());
                continue;
            };
            let c = if let Some((c, biased)) = &p.firsts {
                if *biased {
                    self.saw_biased.set(true);
                }
                c.clone()
            } else {
                let before = self.saw_biased.replace(false);
                let mut c = Vec::new();
                self.firsts(pid, &p.body, now, &mut tmp, None, &mut c);
                let biased = self.saw_biased.get();
                self.saw_biased.set(before || biased);
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.firsts = Some((c.clone(), biased));
                }
                c
            };
            raw.insert(pid, c);
        }
        // Without a biased choice the second pass would compute the same atoms again.
        let offered = if self.saw_biased.get() {
            let mut offered: BTreeMap<u64, Cands> = BTreeMap::new();
            for &pid in &pids {
                let mut c = Vec::new();
                if let Some(p) = self.procs.get(&pid) {
                    self.firsts(pid, &p.body, now, &mut tmp, Some(&raw), &mut c);
                }
                offered.insert(pid, c);
            }
            offered
        } else {
            raw
        };
        let mut steps: Vec<Step> = Vec::new();
        let mut launches: Vec<(u64, String)> = Vec::new();
        for (&pid, cands) in &offered {
            for (atom, cont) in cands {
                if !self.enabled(pid, atom, now, &mut tmp, &offered) {
                    if atom.op == Op::Execute && !self.launched.contains(&pid) {
                        if let Some(ty) =
                            self.procs.get(&pid).and_then(|p| Self::tool_type(p, atom))
                        {
                            launches.push((pid, ty));
                        }
                    }
                    continue;
                }
                match atom.op {
                    Op::RecMsg => {}
                    Op::SndMsg => {
                        let Some(p) = self.procs.get(&pid) else {
                            continue;
                        };
                        let Some(a) = atom.args.first() else { continue };
                        let value = eval(&mut tmp, a, &p.scope());
                        for (&q, qc) in &offered {
                            if q == pid {
                                continue;
                            }
                            let Some(qp) = self.procs.get(&q) else {
                                continue;
                            };
                            if qp.blocked_on.is_some() {
                                continue;
                            }
                            for (x, xc) in qc {
                                if x.op != Op::RecMsg || !window_ok(x, qp.since, now) {
                                    continue;
                                }
                                let Some(pat) = x.args.first() else { continue };
                                let mut binds = Vec::new();
                                if tmp.matches(pat, &value, &qp.scope(), &mut binds) {
                                    steps.push(Step::Comm {
                                        snd: pid,
                                        snd_cont: cont.clone(),
                                        rcv: q,
                                        rcv_atom: x.clone(),
                                        rcv_cont: xc.clone(),
                                        value: value.clone(),
                                        binds,
                                    });
                                }
                            }
                        }
                    }
                    _ => steps.push(Step::Local {
                        pid,
                        atom: atom.clone(),
                        cont: cont.clone(),
                    }),
                }
            }
        }
        for (pid, ty) in launches {
            if let Some(command) = self.script.tools.get(&ty).and_then(|d| d.command.clone()) {
                self.launched.insert(pid);
                self.out.push_back(Output::Launch { tool: ty, command });
            }
        }
        if steps.is_empty() {
            return false;
        }
        let pick = (splitmix(&mut self.rng) % steps.len() as u64) as usize;
        let step = steps.swap_remove(pick);
        self.counters.steps += 1;
        match step {
            Step::Local { pid, atom, cont } => self.exec(pid, &atom, cont, now),
            Step::Comm {
                snd,
                snd_cont,
                rcv,
                rcv_atom,
                rcv_cont,
                value,
                binds,
            } => {
                let value = self.arena.import(&value);
                // Shown only when tracing: a value sent by value may be megabytes.
                if self.config.trace {
                    self.trace_step(now, snd, &format!("snd-msg({value})"), &[]);
                    self.trace_step(now, rcv, &rcv_atom.to_string(), &binds);
                }
                self.advance(snd, snd_cont, now);
                for (name, v) in binds {
                    let v = self.arena.import(&v);
                    self.set_var(rcv, &name, v);
                }
                self.advance(rcv, rcv_cont, now);
            }
        }
        self.arena.purge_if_large();
        true
    }

    fn trace_step(&mut self, now: Instant, pid: u64, atom: &str, binds: &[(Arc<str>, Term)]) {
        if !self.config.trace {
            return;
        }
        let name = self
            .procs
            .get(&pid)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let b: serde_json::Map<String, serde_json::Value> = binds
            .iter()
            .map(|(n, v)| (n.to_string(), json!(v.to_string())))
            .collect();
        let step = self.counters.steps;
        self.trace_event(
            now,
            json!({"step": step, "pid": pid, "process": name, "atom": atom, "binds": b}),
        );
    }

    fn advance(&mut self, pid: u64, cont: Arc<Proc>, now: Instant) {
        let done = matches!(*cont, Proc::Nil);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.body = cont;
            p.since = now;
            p.firsts = None;
        }
        if done {
            self.end_process(pid);
        }
    }

    fn end_process(&mut self, pid: u64) {
        let Some(p) = self.procs.remove(&pid) else {
            return;
        };
        self.launched.remove(&pid);
        let mut keys = Vec::new();
        for v in p.env.values().chain(p.notes.iter()) {
            keys.extend(v.refs().into_iter().map(|r| (r.owner, r.var)));
        }
        let mut actions = Vec::new();
        self.refs.unbind(keys, &mut actions);
        self.apply(actions);
    }

    fn set_var(&mut self, pid: u64, name: &str, value: Term) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let new_refs = value.refs();
        p.firsts = None;
        let old = p.env.insert(name.to_string(), value);
        self.refs.bind(&new_refs);
        if let Some(old) = old {
            let mut actions = Vec::new();
            self.refs.unbind(
                old.refs().into_iter().map(|r| (r.owner, r.var)),
                &mut actions,
            );
            self.apply(actions);
        }
    }

    fn publish_note(&mut self, note: &Term) {
        let tmp = Arena::new();
        let mut dropped = 0;
        let mut bound = Vec::new();
        for p in self.procs.values_mut() {
            let scope = ProcScope {
                env: &p.env,
                types: &p.types,
            };
            if p.subs
                .iter()
                .any(|s| tmp.matches(s, note, &scope, &mut Vec::new()))
            {
                if p.notes.len() < self.config.note_queue {
                    p.notes.push_back(note.clone());
                    bound.extend(note.refs());
                } else {
                    dropped += 1;
                }
            }
        }
        self.refs.bind(&bound);
        self.counters.notes_dropped += dropped;
    }

    /// Sends `term` to `tool` in the frame `make` builds from the delivery number; a term
    /// holding references is counted as a delivery in flight and blocks `pid` until its ACK.
    fn deliver(&mut self, pid: u64, tool: ToolId, term: &Term, make: impl FnOnce(u64) -> Frame) {
        let refs = term.refs();
        let delivery = if refs.is_empty() {
            0
        } else {
            if let Some(t) = self.tools.get_mut(&tool) {
                t.granted.extend(refs.iter().map(|r| (r.owner, r.var)));
            }
            self.refs.deliver(tool, &refs)
        };
        self.send(tool, make(delivery));
        if delivery != 0 {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.blocked_on = Some(delivery);
            }
        }
    }

    fn exec(&mut self, pid: u64, atom: &Arc<Atom>, cont: Arc<Proc>, now: Instant) {
        let mut binds: Vec<(Arc<str>, Term)> = Vec::new();
        // References a matched queue entry held, released after the bindings are made.
        let mut release: Vec<(u64, u64)> = Vec::new();
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let tool = atom.args.first().and_then(|t| self.tool_arg(p, t));
        let arg1 = atom.args.get(1).cloned();
        let scope_env = p.env.clone();
        let types = p.types.clone();
        let scope = ProcScope {
            env: &scope_env,
            types: &types,
        };
        // Advance first: a process that ends here must not hold its bindings.
        let shown = if self.config.trace {
            atom.to_string()
        } else {
            String::new()
        };
        match &atom.op {
            Op::Tau | Op::NoNote | Op::SndMsg | Op::RecMsg => {}
            Op::Assign => {
                if let (Some(Kind::Var { name, .. }), Some(e)) =
                    (atom.args.first().map(Term::kind), &arg1)
                {
                    let v = eval(&mut self.arena, e, &scope);
                    if scope.accepts(name, &v) {
                        binds.push((name.clone(), v));
                    } else {
                        self.counters.type_errors += 1;
                    }
                }
            }
            Op::Create(name) => {
                let n = atom.args.len().saturating_sub(1);
                let args: Vec<Term> = atom.args[..n]
                    .iter()
                    .map(|a| eval(&mut self.arena, a, &scope))
                    .collect();
                if let Some(new) = self.spawn(name, args, now) {
                    if let Some(Kind::Var { name, .. }) = atom.args.last().map(Term::kind) {
                        let id = self.arena.int(new as i64);
                        binds.push((name.clone(), id));
                    }
                }
            }
            Op::SndNote => {
                if let Some(a) = atom.args.first() {
                    let v = eval(&mut self.arena, a, &scope);
                    self.publish_note(&v);
                }
            }
            Op::RecNote => {
                if let (Some(pat), Some(p)) = (atom.args.first(), self.procs.get_mut(&pid)) {
                    let scope = ProcScope {
                        env: &scope_env,
                        types: &types,
                    };
                    if let Some(i) = p
                        .notes
                        .iter()
                        .position(|n| self.arena.matches(pat, n, &scope, &mut binds))
                    {
                        if let Some(n) = p.notes.remove(i) {
                            release.extend(n.refs().into_iter().map(|r| (r.owner, r.var)));
                        }
                    }
                }
            }
            Op::Subscribe | Op::Unsubscribe => {
                if let Some(a) = atom.args.first() {
                    let pat = self.arena.substitute(a, &scope);
                    if let Some(p) = self.procs.get_mut(&pid) {
                        if atom.op == Op::Subscribe {
                            p.subs.push(pat);
                        } else {
                            p.subs.retain(|s| *s != pat);
                        }
                    }
                }
            }
            Op::Execute | Op::RecConnect => {
                let ty = self.procs.get(&pid).and_then(|p| Self::tool_type(p, atom));
                if let Some(id) = ty.as_deref().and_then(|ty| self.free_tool(ty)) {
                    if let Some(t) = self.tools.get_mut(&id) {
                        t.claimed = Some(pid);
                    }
                    self.launched.remove(&pid);
                    let var = match atom.op {
                        Op::Execute => atom.args.get(1),
                        _ => atom.args.first(),
                    };
                    if let (Some(Kind::Var { name, .. }), Some(ty)) = (var.map(Term::kind), ty) {
                        let idt = self.arena.int(id as i64);
                        let t = self.arena.appl(&ty, vec![idt]);
                        binds.push((name.clone(), t));
                    }
                }
            }
            Op::RecDisconnect => {
                if let Some(id) = tool {
                    self.tools.remove(&id);
                }
            }
            Op::SndEval | Op::SndDo | Op::SndTerminate => {
                if let (Some(id), Some(e)) = (tool, &arg1) {
                    let term = eval(&mut self.arena, e, &scope);
                    match atom.op {
                        Op::SndEval => {
                            let request = self.tools.get_mut(&id).map_or(0, |t| {
                                t.next_request += 1;
                                t.next_request
                            });
                            self.deliver(pid, id, &term, |delivery| Frame::Eval {
                                request,
                                delivery,
                                term: term.clone(),
                            });
                        }
                        Op::SndDo => self.deliver(pid, id, &term, |delivery| Frame::Do {
                            delivery,
                            term: term.clone(),
                        }),
                        _ => {
                            self.send(id, Frame::Terminate { term });
                            self.out.push_back(Output::Close { tool: id });
                            self.lose_tool(id, "terminated");
                        }
                    }
                }
            }
            Op::SndAckEvent => {
                if let (Some(id), Some(pat)) = (tool, &arg1) {
                    let found = self.tools.get_mut(&id).and_then(|t| {
                        let i = t.unacked.iter().position(|(_, e)| {
                            self.arena.matches(pat, e, &scope, &mut Vec::new())
                        })?;
                        Some(t.unacked.remove(i))
                    });
                    if let Some((event, e)) = found {
                        let term = eval(&mut self.arena, pat, &scope);
                        self.deliver(pid, id, &term, |delivery| Frame::AckEvent {
                            event,
                            delivery,
                            term: term.clone(),
                        });
                        let mut actions = Vec::new();
                        self.refs
                            .unbind(e.refs().into_iter().map(|r| (r.owner, r.var)), &mut actions);
                        self.apply(actions);
                    }
                }
            }
            Op::RecValue | Op::RecEvent => {
                if let (Some(id), Some(pat)) = (tool, &arg1) {
                    let rec_value = atom.op == Op::RecValue;
                    if let Some(t) = self.tools.get_mut(&id) {
                        if rec_value {
                            if let Some(n) = t.value_bytes.pop_front() {
                                self.queued_bytes = self.queued_bytes.saturating_sub(n);
                            }
                            if let Some(v) = t.values.pop_front() {
                                self.arena.matches(pat, &v, &scope, &mut binds);
                                release.extend(v.refs().into_iter().map(|r| (r.owner, r.var)));
                            }
                        } else if let Some(i) = t
                            .events
                            .iter()
                            .position(|(_, e)| self.arena.matches(pat, e, &scope, &mut binds))
                        {
                            // The event stays counted (now unacknowledged) until snd-ack-event.
                            if let Some(ev) = t.events.remove(i) {
                                t.unacked.push(ev);
                            }
                            if let Some(n) = t.event_bytes.remove(i) {
                                self.queued_bytes = self.queued_bytes.saturating_sub(n);
                            }
                        }
                    }
                }
            }
        }
        self.trace_step(now, pid, &shown, &binds);
        // Bind before releasing what the matched frames held, so a value moved from a queue
        // to a variable never touches zero.
        for (name, v) in binds {
            self.set_var(pid, &name, v);
        }
        let mut actions = Vec::new();
        self.refs.unbind(release, &mut actions);
        self.apply(actions);
        self.advance(pid, cont, now);
    }
}

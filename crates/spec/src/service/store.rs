//! Live service instances (seed 000 §3.1.1.5, §4.3.2, §5.1.3.2 — the seed's `FSMStore` of
//! `GenericFSM` objects).
//!
//! One instance per (ServiceID, MessageID), created on the first message of a new id that
//! triggers at least one basic event (a message no filter accepts creates nothing), freed when
//! it reaches a final state or runs `terminate`. Instances live in a slab indexed through a
//! hash map; freed slots are reused. A pool of instances can be pre-built (the seed's
//! pre-allocation of FSMs, §6.3.4.1) so the first messages do not pay for construction.
//!
//! One input runs, in order (§5.1.4.3): the basic events it triggers are recorded in the
//! instance's history, each is delivered to the chart (one macrostep each, declaration order);
//! then every composite event that has one of them as a constituent is evaluated and those that
//! hold are delivered (declaration order). Timer expiries for instances that no longer exist are
//! ignored (§5.1.4.2).
//!
//! # Errors
//! A chart that takes more than [`Service::step_limit`] microsteps for one event (a
//! transition loop) is stopped: the instance is freed and [`RunnerError::StepLimit`] returned.
//! A store that holds [`StoreConfig::capacity`] instances refuses new ones
//! ([`RunnerError::Full`]).

use std::sync::Arc;

use viastack_kernel::time::Instant;

use foldhash::HashMap as FastMap;

use crate::chart::{
    self, EventName, ExternalEvent, Instance, RunError, StateId, Status, Symbol, Value, Vars,
};

use super::action::{self, Action, Ctx, Draft, Network};
use super::flat::Step;
use super::history::History;
use super::load::Service;
use super::message::{InstanceKey, Message, NodeInfo};
use super::{Runner, RunnerError};

/// Store limits. (The per-event step limit is the service's: [`Service::set_step_limit`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Instances built ahead per service.
    pub pool: usize,
    /// Most live instances (all services).
    pub capacity: usize,
}

impl Default for StoreConfig {
    /// No pool; 1,000,000 live instances.
    fn default() -> Self {
        StoreConfig {
            pool: 0,
            capacity: 1_000_000,
        }
    }
}

/// An instance's machine: the general chart engine's, or a state of the service's
/// [`Flat`] machine (see [`flat`](super::flat)).
#[derive(Clone)]
enum Machine {
    Chart(Box<Instance>),
    Flat(u16),
}

impl Machine {
    fn new(svc: &Service) -> Machine {
        match svc.flat {
            Some(_) => Machine::Flat(0),
            None => Machine::Chart(Box::new(Instance::new(&svc.chart))),
        }
    }

    fn is_active(&self, s: StateId) -> bool {
        match self {
            Machine::Chart(inst) => inst.is_active(s),
            Machine::Flat(state) => s.0 == 0 || s.0 == u32::from(*state),
        }
    }

    /// Active states in document order.
    fn active_states(&self) -> Vec<StateId> {
        match self {
            Machine::Chart(inst) => inst.active_states().collect(),
            Machine::Flat(state) => vec![StateId(0), StateId(u32::from(*state))],
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Machine::Chart(inst) => std::mem::size_of::<Instance>() + inst.heap_bytes(),
            Machine::Flat(_) => 0,
        }
    }
}

#[derive(Clone)]
struct Live {
    key: InstanceKey,
    svc: u16,
    inst: Machine,
    hist: History,
}

/// The instances of one node's services. `Clone` copies every live instance (the explorer
/// branches a whole node this way).
#[derive(Clone)]
pub struct Store {
    services: Vec<Arc<Service>>,
    config: StoreConfig,
    node: NodeInfo,
    slab: Vec<Option<Live>>,
    free: Vec<u32>,
    map: FastMap<InstanceKey, u32>,
    pool: Vec<Vec<(Machine, History)>>,
    /// Histories of freed instances, per service, for reuse.
    recycled: Vec<Vec<History>>,
    hits: Vec<u16>,
    comps: Vec<u16>,
    fire: Vec<Symbol>,
    /// Composite events (indexes) that hold, for a flat machine.
    fire_flat: Vec<u16>,
    drafts: Vec<Draft>,
    /// The timer id of the current timer step (for `_event.data`).
    timer: u32,
}

/// `_event.data` of a basic or composite event: the message's attributes (numbers; Payload
/// and extra attributes as text), or `{TimerIdentifier}` for a timer.
pub fn event_data(m: Option<&Message>, timer: u32) -> Value {
    let mut map = std::collections::BTreeMap::new();
    match m {
        Some(m) => {
            for a in super::message::Attr::ALL {
                map.insert(a.name().to_string(), Value::Number(m.get(a) as f64));
            }
            if let Some(p) = &m.payload {
                map.insert("Payload".into(), Value::str(&String::from_utf8_lossy(p)));
            }
            for (k, v) in &m.extra {
                map.insert(k.to_string(), Value::str(v));
            }
        }
        None => {
            map.insert("TimerIdentifier".into(), Value::Number(f64::from(timer)));
        }
    }
    Value::map(map)
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("services", &self.services.len())
            .field("live", &self.map.len())
            .finish()
    }
}

/// The chart's host for one step: runs the actions through [`action::run`].
struct StepHost<'a, N: Network> {
    ctx: Ctx<'a, N>,
}

impl<N: Network> chart::Host<Action> for StepHost<'_, N> {
    fn execute(&mut self, a: &Action, vars: &mut Vars<'_>) -> Result<(), String> {
        action::run(a, &mut self.ctx, &*vars)
    }
}

impl Store {
    /// A store running `services` (distinct ServiceIDs).
    pub fn new(services: Vec<Arc<Service>>, config: StoreConfig) -> Store {
        let drafts = services.iter().map(|s| s.drafts).max().unwrap_or(0);
        let pool: Vec<Vec<(Machine, History)>> = services
            .iter()
            .map(|s| {
                (0..config.pool)
                    .map(|_| {
                        (
                            Machine::new(s),
                            History::new(&s.layout, s.logic.new_state()),
                        )
                    })
                    .collect()
            })
            .collect();
        Store {
            services,
            config,
            node: NodeInfo::default(),
            slab: Vec::with_capacity(config.pool),
            free: Vec::new(),
            map: FastMap::with_capacity_and_hasher(config.pool, Default::default()),
            recycled: vec![Vec::new(); pool.len()],
            pool,
            hits: Vec::new(),
            comps: Vec::new(),
            fire: Vec::new(),
            fire_flat: Vec::new(),
            drafts: vec![Draft::default(); drafts],
            timer: 0,
        }
    }

    /// The local node information.
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// The services.
    pub fn services(&self) -> &[Arc<Service>] {
        &self.services
    }

    /// The active states of a live instance, in document order.
    pub fn states(&self, key: InstanceKey) -> Vec<&str> {
        let Some(&i) = self.map.get(&key) else {
            return Vec::new();
        };
        let Some(l) = &self.slab[i as usize] else {
            return Vec::new();
        };
        let chart = &self.services[usize::from(l.svc)].chart;
        l.inst
            .active_states()
            .into_iter()
            .map(|s| chart.state_name(s))
            .collect()
    }

    fn service_index(&self, id: u32) -> Option<usize> {
        self.services.iter().position(|s| s.id() == id)
    }

    fn free_slot(&mut self, i: u32) {
        if let Some(mut l) = self.slab[i as usize].take() {
            self.map.remove(&l.key);
            self.free.push(i);
            // Recycle the history's allocations (bounded by the live peak).
            let si = usize::from(l.svc);
            l.hist.reset();
            self.recycled[si].push(l.hist);
        }
    }

    fn create<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        key: InstanceKey,
        current: &Message,
        net: &mut N,
    ) -> Result<u32, RunnerError> {
        if self.map.len() >= self.config.capacity {
            return Err(RunnerError::Full(self.map.len()));
        }
        let svc = &self.services[si];
        let (mut inst, hist) = match self.pool[si].pop() {
            Some(p) => p,
            None => (
                Machine::new(svc),
                match self.recycled[si].pop() {
                    Some(h) => h,
                    None => History::new(&svc.layout, svc.logic.new_state()),
                },
            ),
        };
        let mut host = StepHost {
            ctx: Ctx {
                now,
                key,
                node: &mut self.node,
                history: &hist,
                current: Some(current),
                drafts: &mut self.drafts,
                net,
                terminated: false,
                each: 0,
            },
        };
        let status = match (&mut inst, &svc.flat) {
            (Machine::Flat(state), Some(flat)) => {
                let step = flat.start();
                run_step(step, &mut host.ctx);
                *state = step.target.unwrap_or(0);
                if step.ends {
                    Ok(Status::Final)
                } else {
                    Ok(Status::Running)
                }
            }
            (Machine::Chart(inst), _) => inst.start(&svc.chart, now, &mut host),
            (Machine::Flat(_), None) => Ok(Status::Final),
        };
        let terminated = host.ctx.terminated;
        clear_drafts(&mut self.drafts);
        let status = status.map_err(|e| step_error(key, e))?;
        let live = Live {
            key,
            svc: si as u16,
            inst,
            hist,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(live);
                i
            }
            None => {
                self.slab.push(Some(live));
                (self.slab.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        if terminated || status == Status::Final {
            self.free_slot(i);
        }
        Ok(i)
    }

    /// Delivers `self.fire` to instance `i`; frees it when it ends.
    fn deliver<N: Network>(
        &mut self,
        now: Instant,
        i: u32,
        current: Option<&Message>,
        net: &mut N,
    ) -> Result<bool, RunnerError> {
        let Some(live) = self.slab[i as usize].as_mut() else {
            return Ok(false);
        };
        let svc = &self.services[usize::from(live.svc)];
        let key = live.key;
        let mut host = StepHost {
            ctx: Ctx {
                now,
                key,
                node: &mut self.node,
                history: &live.hist,
                current,
                drafts: &mut self.drafts,
                net,
                terminated: false,
                each: 0,
            },
        };
        let mut result = Ok(true);
        for &sym in &self.fire {
            let handled = svc
                .handlers
                .get(sym.0 as usize)
                .is_some_and(|hs| hs.iter().any(|&s| live.inst.is_active(s)));
            if !handled {
                continue;
            }
            let ev = if svc.event_data {
                ExternalEvent {
                    name: EventName::Symbol(sym),
                    data: event_data(current, self.timer),
                }
            } else {
                ExternalEvent::symbol(sym)
            };
            let Machine::Chart(inst) = &mut live.inst else {
                break;
            };
            match inst.handle_event(&svc.chart, now, ev, &mut host) {
                Ok(Status::Final) => {
                    result = Ok(false);
                    break;
                }
                Ok(Status::Running) => {
                    if host.ctx.terminated {
                        result = Ok(false);
                        break;
                    }
                }
                Err(e) => {
                    result = Err(step_error(key, e));
                    break;
                }
            }
            clear_drafts(host.ctx.drafts);
        }
        if !matches!(result, Ok(true)) {
            self.free_slot(i);
        }
        result
    }

    /// Records the hits in instance `i`'s history and runs them, then the composites.
    fn step<N: Network>(
        &mut self,
        now: Instant,
        i: u32,
        m: Option<&Message>,
        timer: u32,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        self.timer = timer;
        let Some(live) = self.slab[i as usize].as_mut() else {
            return Ok(());
        };
        let svc = &self.services[usize::from(live.svc)];
        for &e in &self.hits {
            if let Some(m) = m {
                live.hist.record(&svc.layout, e, m);
            }
            if svc.logic.listens(e) {
                svc.logic.record(&mut live.hist.logic, e, now, m, timer);
            }
        }
        if svc.flat.is_some() {
            return self.step_flat(now, i, m, net);
        }
        // Basic events, in declaration order.
        self.fire.clear();
        self.fire.extend(
            self.hits
                .iter()
                .filter_map(|&e| svc.basic_sym[usize::from(e)]),
        );
        if !self.fire.is_empty() && !self.deliver(now, i, m, net)? {
            return Ok(());
        }
        let svc = &self.services[usize::from(svc_index(&self.slab, i))];
        // Composite events whose constituents fired and whose expression holds.
        self.comps.clear();
        for &e in &self.hits {
            self.comps
                .extend_from_slice(&svc.comp_by_basic[usize::from(e)]);
        }
        if self.comps.is_empty() {
            return Ok(());
        }
        self.comps.sort_unstable();
        self.comps.dedup();
        let Some(live) = self.slab[i as usize].as_ref() else {
            return Ok(());
        };
        self.fire.clear();
        for &c in &self.comps {
            let Some(sym) = svc.composite_sym[usize::from(c)] else {
                continue;
            };
            // A composite no active state handles would be skipped anyway: do not evaluate it.
            let handled = svc
                .handlers
                .get(sym.0 as usize)
                .is_some_and(|hs| hs.iter().any(|&s| live.inst.is_active(s)));
            if handled
                && svc
                    .logic
                    .eval(usize::from(c), &live.hist.logic, &self.node, now)
            {
                self.fire.push(sym);
            }
        }
        if !self.fire.is_empty() {
            self.deliver(now, i, m, net)?;
        }
        Ok(())
    }
}

impl Store {
    /// [`Store::step`] for a service with a [`Flat`] machine: the same order of basic and
    /// composite events, each one table read.
    fn step_flat<N: Network>(
        &mut self,
        now: Instant,
        i: u32,
        m: Option<&Message>,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(live) = self.slab[i as usize].as_mut() else {
            return Ok(());
        };
        let svc = &self.services[usize::from(live.svc)];
        let (Some(flat), Machine::Flat(state)) = (&svc.flat, &mut live.inst) else {
            return Ok(());
        };
        let mut ctx = Ctx {
            now,
            key: live.key,
            node: &mut self.node,
            history: &live.hist,
            current: m,
            drafts: &mut self.drafts,
            net,
            terminated: false,
            each: 0,
        };
        let mut ended = false;
        // Basic events, in declaration order.
        for &e in &self.hits {
            if let Some(step) = flat.step(usize::from(e), *state) {
                ended = run_flat(step, state, &mut ctx);
                if ended {
                    break;
                }
            }
        }
        // Composite events whose constituents fired and whose expression holds, each given
        // to the state the machine is in when its turn comes.
        if !ended {
            let candidates: &[u16] = match self.hits.as_slice() {
                [e] => &svc.comp_by_basic[usize::from(*e)],
                hits => {
                    self.comps.clear();
                    for &e in hits {
                        self.comps
                            .extend_from_slice(&svc.comp_by_basic[usize::from(e)]);
                    }
                    self.comps.sort_unstable();
                    self.comps.dedup();
                    &self.comps
                }
            };
            if !candidates.is_empty() {
                let basics = svc.data.basic.len();
                let before = *state;
                self.fire_flat.clear();
                for &c in candidates {
                    if flat.step(basics + usize::from(c), before).is_some()
                        && svc
                            .logic
                            .eval(usize::from(c), &live.hist.logic, ctx.node, now)
                    {
                        self.fire_flat.push(c);
                    }
                }
                for &c in &self.fire_flat {
                    if let Some(step) = flat.step(basics + usize::from(c), *state) {
                        ended = run_flat(step, state, &mut ctx);
                        if ended {
                            break;
                        }
                    }
                }
            }
        }
        if ended {
            self.free_slot(i);
        }
        Ok(())
    }
}

/// Runs one flat step's actions (a failing action ends its block, as in the engine) and
/// moves to its target; whether the instance ended (a final state or `terminate`).
fn run_flat<N: Network>(step: &Step, state: &mut u16, ctx: &mut Ctx<'_, N>) -> bool {
    run_step(step, ctx);
    if let Some(t) = step.target {
        *state = t;
    }
    clear_drafts(ctx.drafts);
    step.ends || ctx.terminated
}

fn run_step<N: Network>(step: &Step, ctx: &mut Ctx<'_, N>) {
    for block in step.blocks.iter() {
        for a in block.iter() {
            if action::run(a, ctx, &()).is_err() {
                break;
            }
        }
    }
}

fn clear_drafts(d: &mut [Draft]) {
    for x in d {
        x.clear();
    }
}

fn svc_index(slab: &[Option<Live>], i: u32) -> u16 {
    slab.get(i as usize)
        .and_then(Option::as_ref)
        .map_or(0, |l| l.svc)
}

fn step_error(key: InstanceKey, e: RunError) -> RunnerError {
    match e {
        RunError::StepLimit { steps } => RunnerError::StepLimit { key, steps },
        _ => RunnerError::StepLimit { key, steps: 0 },
    }
}

/// For the explorer ([`explore`](super::explore)): a canonical view of the live instances.
impl Store {
    /// The keys of the live instances, ascending.
    pub fn keys(&self) -> Vec<InstanceKey> {
        let mut k: Vec<InstanceKey> = self.map.keys().copied().collect();
        k.sort_unstable();
        k
    }

    /// Feeds the node information and every live instance (key, service, machine state,
    /// history; in key order, whatever the slab layout) to `h`. Two stores of the same services
    /// with equal fingerprints react alike to every input; times are hashed as ages at `now`.
    pub fn fingerprint<H: std::hash::Hasher>(&self, now: Instant, h: &mut H) {
        use std::hash::Hash;
        self.node.address.hash(h);
        self.node.parent.hash(h);
        self.node.children.hash(h);
        self.node.neighbours.hash(h);
        for key in self.keys() {
            let Some(l) = self
                .map
                .get(&key)
                .and_then(|&i| self.slab[i as usize].as_ref())
            else {
                continue;
            };
            key.service.hash(h);
            key.message.hash(h);
            l.svc.hash(h);
            match &l.inst {
                Machine::Flat(s) => {
                    h.write_u8(0);
                    s.hash(h);
                }
                Machine::Chart(inst) => {
                    h.write_u8(1);
                    inst.fingerprint(h);
                }
            }
            l.hist.fingerprint(now.as_nanos(), h);
        }
    }
}

impl Runner for Store {
    fn handle_message<N: Network>(
        &mut self,
        now: Instant,
        m: &Message,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(si) = self.service_index(m.service_id) else {
            return Err(RunnerError::UnknownService(m.service_id));
        };
        self.hits.clear();
        self.services[si]
            .matcher
            .message(m, &self.node, &mut self.hits);
        if self.hits.is_empty() {
            return Ok(());
        }
        let key = m.key();
        let i = match self.map.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.create(now, si, key, m, net)?;
                if self.slab[i as usize].is_none() {
                    return Ok(());
                }
                i
            }
        };
        self.step(now, i, Some(m), 0, net)
    }

    fn handle_timer<N: Network>(
        &mut self,
        now: Instant,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(&i) = self.map.get(&key) else {
            return Ok(());
        };
        let Some(live) = self.slab[i as usize].as_ref() else {
            return Ok(());
        };
        self.hits.clear();
        self.services[usize::from(live.svc)]
            .matcher
            .timer(id, &mut self.hits);
        if self.hits.is_empty() {
            return Ok(());
        }
        self.step(now, i, None, id, net)
    }

    fn set_node(&mut self, node: NodeInfo) {
        self.node = node;
    }

    fn state(&self, key: InstanceKey) -> Option<&str> {
        let &i = self.map.get(&key)?;
        let l = self.slab[i as usize].as_ref()?;
        let chart = &self.services[usize::from(l.svc)].chart;
        l.inst.active_states().last().map(|&s| chart.state_name(s))
    }

    fn live(&self) -> usize {
        self.map.len()
    }

    fn memory_bytes(&self) -> usize {
        let map = self.map.capacity() * (std::mem::size_of::<(InstanceKey, u32)>() + 1);
        let slab =
            self.slab.capacity() * std::mem::size_of::<Option<Live>>() + self.free.capacity() * 4;
        let recycled: usize = self
            .recycled
            .iter()
            .flatten()
            .map(|h| std::mem::size_of::<History>() + h.heap_bytes())
            .sum();
        let live: usize = self
            .slab
            .iter()
            .flatten()
            .map(|l| l.inst.heap_bytes() + l.hist.heap_bytes())
            .sum();
        map + slab + recycled + live
    }
}

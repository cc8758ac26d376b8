//! Live service instances (seed 000 §3.1.1.5, §4.3.2, §5.1.3.2 — the seed's `FSMStore` of
//! `GenericFSM` objects).
//!
//! One instance per (ServiceID, MessageID), created on the first message of a new id that
//! triggers at least one basic event (a message no filter accepts creates nothing), freed when
//! it reaches a final state or runs `terminate`. Instances of a service on the general engine
//! live in a slab indexed through a hash map; freed slots are reused. Instances of a service
//! on the flat machine (`service::flat`, issue 15 §2: the fast path of a service loaded at run
//! time) live in that service's own map, MessageID → (atomic state, history), one probe per
//! input, and their steps run the load-time-resolved fast ops (every send building its message
//! in one scratch message the store reuses); their histories are recycled. The usual input of
//! such a service (its MessageType or TimerIdentifier triggers one basic event, the chart has
//! [`Cell`]s) is handled from its load-time [`Route`](super::flat::Route) (issue 15 §2, eighth
//! round, docs/spec-format.md): one route read, one probe, the history record, one cell read,
//! and the cell's step; the first message of an id is created from the route out of line, and
//! every other input takes the general path (matcher, plans, `flat_step`) out of line.
//! A pool of instances can be pre-built (the seed's pre-allocation of FSMs, §6.3.4.1) so the
//! first messages do not pay for construction.
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

use super::action::Prim;
use super::action::Primitive;
use super::action::{self, Action, Ctx, Draft, Network};
use super::flat::{
    Base, Cell, Ev, EventPlan, FastOp, Flat, Model, Scratch, SendOp, Src, Step, NO_SLOT,
    ROUTE_CELL, ROUTE_NONE,
};
use super::history::History;
use super::load::Service;
use super::message::{Addr, InstanceKey, Message, NodeInfo, PAYLOAD_TYPE};
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

/// An instance of a service on the general chart engine.
#[derive(Clone)]
struct Machine(Box<Instance>);

impl Machine {
    fn new(svc: &Service) -> Machine {
        Machine(Box::new(Instance::new(&svc.chart)))
    }

    fn is_active(&self, s: StateId) -> bool {
        self.0.is_active(s)
    }

    /// Active states in document order.
    fn active_states(&self) -> Vec<StateId> {
        self.0.active_states().collect()
    }

    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Instance>() + self.0.heap_bytes()
    }
}

/// An instance of a service on the flat machine: its state and history, stored inline in the
/// service's map (one probe per input, no slab, no engine instance).
#[derive(Clone, Debug)]
struct FlatInst {
    state: u16,
    hist: History,
    /// The datamodel's variables (empty for a chart without one).
    vars: Box<[Option<Value>]>,
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
    /// Per service on the flat machine: its live instances by MessageID (empty for the
    /// others, whose instances live in the slab).
    flat: Vec<FastMap<u64, FlatInst>>,
    /// Live instances in `flat`.
    flat_live: usize,
    /// Histories of freed instances, per service, for reuse.
    recycled: Vec<Vec<History>>,
    hits: Vec<u16>,
    comps: Vec<u16>,
    fire: Vec<Symbol>,
    /// Composite events (indexes) that hold, for a flat machine.
    fire_flat: Vec<u16>,
    /// The message a flat step's send builds, reused from send to send (the network only
    /// borrows it).
    scratch: Message,
    drafts: Vec<Draft>,
    /// The timer id of the current timer step (for `_event.data`).
    timer: u32,
    /// A flat machine's `_event` values for the current event.
    dm: Scratch,
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
                let n = if s.flat.is_some() { 0 } else { config.pool };
                (0..n)
                    .map(|_| {
                        (
                            Machine::new(s),
                            History::new(&s.layout, s.logic.new_state()),
                        )
                    })
                    .collect()
            })
            .collect();
        let recycled = services
            .iter()
            .map(|s| match s.flat {
                Some(_) => (0..config.pool)
                    .map(|_| History::new(&s.layout, s.logic.new_state()))
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        // The pool of a flat service: its map's room, reserved (and its histories, below).
        let flat = services
            .iter()
            .map(|s| {
                let n = if s.flat.is_some() { config.pool } else { 0 };
                FastMap::with_capacity_and_hasher(n, Default::default())
            })
            .collect();
        Store {
            recycled,
            flat,
            flat_live: 0,
            services,
            config,
            node: NodeInfo::default(),
            slab: Vec::with_capacity(config.pool),
            free: Vec::new(),
            map: FastMap::with_capacity_and_hasher(config.pool, Default::default()),
            pool,
            hits: Vec::new(),
            comps: Vec::new(),
            fire: Vec::new(),
            fire_flat: Vec::new(),
            scratch: Message::default(),
            drafts: vec![Draft::default(); drafts],
            timer: 0,
            dm: Scratch::default(),
        }
    }

    /// Adds a service at run time (issue 16 §4: a spec fetched from another node); `false`
    /// (and nothing changes) if a service with its ServiceID is already here. Live instances
    /// of the other services are kept. No instances are pre-built for it.
    pub fn add_service(&mut self, service: Arc<Service>) -> bool {
        if self.service_index(service.id()).is_some()
            || self.services.len() >= usize::from(u16::MAX)
        {
            return false;
        }
        if self.drafts.len() < service.drafts {
            self.drafts.resize(service.drafts, Draft::default());
        }
        self.pool.push(Vec::new());
        self.recycled.push(Vec::new());
        self.flat.push(FastMap::default());
        self.services.push(service);
        true
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
        if let Some((si, f)) = self.flat_inst(key) {
            // The atomic state and its ancestors, in document order.
            let chart = &self.services[si].chart;
            let mut chain = vec![u32::from(f.state)];
            let mut x = u32::from(f.state);
            while x != 0 {
                x = chart.states().get(x as usize).map_or(0, |s| s.parent);
                chain.push(x);
            }
            return chain
                .into_iter()
                .rev()
                .map(|s| chart.state_name(StateId(s)))
                .collect();
        }
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

    #[inline]
    fn service_index(&self, id: u32) -> Option<usize> {
        // One service is the usual case.
        if let [s] = self.services.as_slice() {
            return (s.id() == id).then_some(0);
        }
        self.services.iter().position(|s| s.id() == id)
    }

    /// The flat-machine instance of `key`, with its service's index.
    fn flat_inst(&self, key: InstanceKey) -> Option<(usize, &FlatInst)> {
        let si = self.service_index(key.service)?;
        self.flat[si].get(&key.message).map(|f| (si, f))
    }

    fn live_count(&self) -> usize {
        self.map.len() + self.flat_live
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
        if self.live_count() >= self.config.capacity {
            return Err(RunnerError::Full(self.live_count()));
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
        let status = inst.0.start(&svc.chart, now, &mut host);
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
            match live.inst.0.handle_event(&svc.chart, now, ev, &mut host) {
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
    /// A message for service `si`, which runs on the flat machine. The usual input (its type
    /// triggers one basic event and the chart has [`Cell`]s; its instance exists) is handled
    /// here from its type's [`Route`](super::flat::Route): one route read, one probe, the history record, one
    /// cell read; an idle cell ends it there, another runs out of line
    /// ([`run_cell`]). Anything else takes [`Store::flat_message_slow`].
    #[inline(always)]
    fn flat_message<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        m: &Message,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(svc) = self.services.get(si) else {
            return Ok(());
        };
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        let route = *machine.message_route(m.message_type);
        if route.kind != ROUTE_CELL {
            if route.kind == ROUTE_NONE {
                return Ok(());
            }
            return self.flat_message_slow(now, si, m, net);
        }
        let Some(inst) = self.flat.get_mut(si).and_then(|x| x.get_mut(&m.message_id)) else {
            return self.flat_create_routed(now, si, m, route, net);
        };
        let FlatInst { state, hist, .. } = inst;
        record_routed(svc, hist, route, m, now);
        let at = route.cells as usize + usize::from(*state);
        if machine.cell_at(at).is_some_and(Cell::idle) {
            return Ok(());
        }
        let r = Routed {
            at,
            now,
            key: m.key(),
            current: Some(m),
        };
        let ended = routed(
            svc,
            machine,
            r,
            state,
            hist,
            &mut self.node,
            &mut self.drafts,
            &mut self.scratch,
            &mut self.fire_flat,
            net,
        );
        if ended {
            self.flat_end(si, m.message_id);
        }
        Ok(())
    }

    /// The first message of an id whose type has a [`ROUTE_CELL`] route (out of line): the
    /// instance is created in place in the service's map, enters its initial state, then
    /// takes the message as [`Store::flat_message`] does. Such a chart has no datamodel.
    #[inline(never)]
    fn flat_create_routed<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        m: &Message,
        route: super::flat::Route,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Store {
            services,
            node,
            flat,
            recycled,
            fire_flat,
            scratch,
            drafts,
            flat_live,
            config,
            map,
            ..
        } = self;
        let (Some(svc), Some(instances), Some(spare)) =
            (services.get(si), flat.get_mut(si), recycled.get_mut(si))
        else {
            return Ok(());
        };
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        if map.len() + *flat_live >= config.capacity {
            return Err(RunnerError::Full(map.len() + *flat_live));
        }
        let key = m.key();
        let hist = match spare.pop() {
            Some(h) => h,
            None => History::new(&svc.layout, svc.logic.new_state()),
        };
        *flat_live += 1;
        let inst = instances.entry(key.message).or_insert(FlatInst {
            state: 0,
            hist,
            vars: Box::default(),
        });
        let mut ctx = Ctx {
            now,
            key,
            node,
            history: &inst.hist,
            current: Some(m),
            drafts,
            net,
            terminated: false,
            each: 0,
        };
        let mut state = 0;
        if run_flat::<false, N>(machine.start(), &mut state, &mut ctx, scratch, None) {
            if let Some(mut f) = instances.remove(&key.message) {
                f.hist.reset();
                std::mem::forget(f.vars);
                spare.push(f.hist);
            }
            *flat_live -= 1;
            return Ok(());
        }
        inst.state = state;
        let FlatInst { state, hist, .. } = inst;
        record_routed(svc, hist, route, m, now);
        let at = route.cells as usize + usize::from(*state);
        if machine.cell_at(at).is_some_and(Cell::idle) {
            return Ok(());
        }
        let r = Routed {
            at,
            now,
            key,
            current: Some(m),
        };
        if routed(
            svc, machine, r, state, hist, node, drafts, scratch, fire_flat, net,
        ) {
            self.flat_end(si, key.message);
        }
        Ok(())
    }

    /// [`Store::flat_message`]'s general path: matches the message (a message type whose
    /// events have no filter beyond the type is one table read), finds or creates the
    /// instance in the service's map and steps it.
    #[inline(never)]
    fn flat_message_slow<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        m: &Message,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(svc) = self.services.get(si) else {
            return Ok(());
        };
        let svc = &**svc;
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        let hits: &[u16] = match svc.matcher.message_plain(m.message_type) {
            Some(h) => h,
            None => {
                self.hits.clear();
                svc.matcher.message(m, &self.node, &mut self.hits);
                &self.hits
            }
        };
        if hits.is_empty() {
            return Ok(());
        }
        let Some(instances) = self.flat.get_mut(si) else {
            return Ok(());
        };
        let inst = match instances.get_mut(&m.message_id) {
            Some(inst) => inst,
            // The first message of an id: out of line, so the usual input's function stays
            // small.
            None => {
                let svc = Arc::clone(&self.services[si]);
                let hits = std::mem::take(&mut self.hits);
                let hits2: &[u16] = match svc.matcher.message_plain(m.message_type) {
                    Some(h) => h,
                    None => &hits,
                };
                let r = self.flat_create(now, si, &svc, m, hits2, net);
                self.hits = hits;
                return r;
            }
        };
        let key = m.key();
        let FlatInst { state, hist, vars } = inst;
        let single = flat_record(svc, machine, hist, hits, now, Some(m), 0);
        let cell = single.and_then(|(e, _)| machine.cell(e, *state));
        if cell.is_some_and(Cell::idle) {
            return Ok(());
        }
        let mut ctx = Ctx {
            now,
            key,
            node: &mut self.node,
            history: hist,
            current: Some(m),
            drafts: &mut self.drafts,
            net,
            terminated: false,
            each: 0,
        };
        let ended = match cell {
            Some(cell) => flat_cell(
                svc,
                machine,
                cell,
                state,
                &mut ctx,
                &mut self.scratch,
                &mut self.fire_flat,
            ),
            None => {
                let single = single.map(|(_, p)| p);
                let input = Input {
                    timer: 0,
                    scratch: &mut self.scratch,
                    dm: &mut self.dm,
                    comps: &mut self.comps,
                    fire: &mut self.fire_flat,
                };
                if machine.model().is_some() {
                    flat_step_dm(svc, machine, state, vars, single, hits, &mut ctx, input)
                } else {
                    flat_step::<false, N>(svc, machine, state, vars, single, hits, &mut ctx, input)
                }
            }
        };
        if ended {
            self.flat_end(si, key.message);
        }
        Ok(())
    }

    /// Frees flat instance `message` of service `si` (its history recycled).
    #[inline(never)]
    fn flat_end(&mut self, si: usize, message: u64) {
        if let Some(f) = self.flat.get_mut(si).and_then(|x| x.remove(&message)) {
            self.flat_live -= 1;
            let FlatInst { mut hist, vars, .. } = f;
            if vars.is_empty() {
                // Nothing to free (a chart without a datamodel).
                std::mem::forget(vars);
            }
            hist.reset();
            if let Some(r) = self.recycled.get_mut(si) {
                r.push(hist);
            }
        }
    }

    /// The first message of an id for flat service `si`: the instance is created (in place in
    /// the service's map), enters its initial state, then steps with the message's `hits`.
    #[inline(never)]
    fn flat_create<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        svc: &Service,
        m: &Message,
        hits: &[u16],
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let key = m.key();
        let Store {
            node,
            flat,
            recycled,
            comps,
            fire_flat,
            scratch,
            drafts,
            flat_live,
            config,
            map,
            dm,
            ..
        } = self;
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        let instances = &mut flat[si];
        if map.len() + *flat_live >= config.capacity {
            return Err(RunnerError::Full(map.len() + *flat_live));
        }
        *flat_live += 1;
        let hist = match recycled[si].pop() {
            Some(h) => h,
            None => History::new(&svc.layout, svc.logic.new_state()),
        };
        let vars = match machine.model() {
            Some(model) => model.new_vars(dm),
            None => Box::default(),
        };
        let inst = instances.entry(key.message).or_insert(FlatInst {
            state: 0,
            hist,
            vars,
        });
        let mut ctx = Ctx {
            now,
            key,
            node,
            history: &inst.hist,
            current: Some(m),
            drafts,
            net,
            terminated: false,
            each: 0,
        };
        let step = machine.start();
        let mut state = 0;
        dm.reset();
        let mut d = Dm {
            model: machine.model(),
            vars: &mut inst.vars,
            scratch: dm,
            ev: None,
        };
        if run_flat::<true, N>(step, &mut state, &mut ctx, scratch, Some(&mut d)) {
            if let Some(mut f) = instances.remove(&key.message) {
                f.hist.reset();
                recycled[si].push(f.hist);
            }
            *flat_live -= 1;
            return Ok(());
        }
        inst.state = state;
        let FlatInst { state, hist, vars } = inst;
        let single = flat_record(svc, machine, hist, hits, now, Some(m), 0);
        let cell = single.and_then(|(e, _)| machine.cell(e, *state));
        if cell.is_some_and(Cell::idle) {
            return Ok(());
        }
        let mut ctx = Ctx {
            now,
            key,
            node,
            history: hist,
            current: Some(m),
            drafts,
            net,
            terminated: false,
            each: 0,
        };
        let ended = match cell {
            Some(cell) => flat_cell(svc, machine, cell, state, &mut ctx, scratch, fire_flat),
            None => {
                let single = single.map(|(_, p)| p);
                let input = Input {
                    timer: 0,
                    scratch,
                    dm,
                    comps,
                    fire: fire_flat,
                };
                if machine.model().is_some() {
                    flat_step_dm(svc, machine, state, vars, single, hits, &mut ctx, input)
                } else {
                    flat_step::<false, N>(svc, machine, state, vars, single, hits, &mut ctx, input)
                }
            }
        };
        if ended {
            self.flat_end(si, key.message);
        }
        Ok(())
    }

    /// Timer `id` of `key`, whose service `si` runs on the flat machine: from the id's
    /// [`Route`](super::flat::Route) as [`Store::flat_message`] does, else [`Store::flat_timer_slow`].
    #[inline(always)]
    fn flat_timer<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(svc) = self.services.get(si) else {
            return Ok(());
        };
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        let route = *machine.timer_route(id);
        if route.kind != ROUTE_CELL {
            if route.kind == ROUTE_NONE {
                return Ok(());
            }
            return self.flat_timer_slow(now, si, key, id, net);
        }
        let Some(instances) = self.flat.get_mut(si) else {
            return Ok(());
        };
        // One probe: the entry also ends the instance when its step does.
        let std::collections::hash_map::Entry::Occupied(mut entry) = instances.entry(key.message)
        else {
            return Ok(());
        };
        let FlatInst { state, hist, .. } = entry.get_mut();
        if route.logic {
            svc.logic
                .record(&mut hist.logic, route.event, now, None, id);
        }
        let at = route.cells as usize + usize::from(*state);
        if machine.cell_at(at).is_some_and(Cell::idle) {
            return Ok(());
        }
        let r = Routed {
            at,
            now,
            key,
            current: None,
        };
        let ended = routed(
            svc,
            machine,
            r,
            state,
            hist,
            &mut self.node,
            &mut self.drafts,
            &mut self.scratch,
            &mut self.fire_flat,
            net,
        );
        if ended {
            let f = entry.remove();
            self.flat_live -= 1;
            if let Some(spare) = self.recycled.get_mut(si) {
                recycle(spare, f);
            }
        }
        Ok(())
    }

    /// [`Store::flat_timer`]'s general path.
    #[inline(never)]
    fn flat_timer_slow<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        let Some(svc) = self.services.get(si) else {
            return Ok(());
        };
        let svc = &**svc;
        let Some(machine) = &svc.flat else {
            return Ok(());
        };
        let Some(inst) = self.flat.get_mut(si).and_then(|x| x.get_mut(&key.message)) else {
            return Ok(());
        };
        let hits: &[u16] = match svc.matcher.timer_plain(id) {
            Some(h) => h,
            None => {
                self.hits.clear();
                svc.matcher.timer(id, &mut self.hits);
                &self.hits
            }
        };
        if hits.is_empty() {
            return Ok(());
        }
        let FlatInst { state, hist, vars } = inst;
        let single = flat_record(svc, machine, hist, hits, now, None, id);
        let cell = single.and_then(|(e, _)| machine.cell(e, *state));
        if cell.is_some_and(Cell::idle) {
            return Ok(());
        }
        let mut ctx = Ctx {
            now,
            key,
            node: &mut self.node,
            history: hist,
            current: None,
            drafts: &mut self.drafts,
            net,
            terminated: false,
            each: 0,
        };
        let ended = match cell {
            Some(cell) => flat_cell(
                svc,
                machine,
                cell,
                state,
                &mut ctx,
                &mut self.scratch,
                &mut self.fire_flat,
            ),
            None => {
                let single = single.map(|(_, p)| p);
                let input = Input {
                    timer: id,
                    scratch: &mut self.scratch,
                    dm: &mut self.dm,
                    comps: &mut self.comps,
                    fire: &mut self.fire_flat,
                };
                if machine.model().is_some() {
                    flat_step_dm(svc, machine, state, vars, single, hits, &mut ctx, input)
                } else {
                    flat_step::<false, N>(svc, machine, state, vars, single, hits, &mut ctx, input)
                }
            }
        };
        if ended {
            self.flat_end(si, key.message);
        }
        Ok(())
    }
}

/// Keeps the history of an ended flat instance for the next one (its datamodel's variables
/// dropped; out of line).
#[inline(never)]
fn recycle(spare: &mut Vec<History>, f: FlatInst) {
    let FlatInst { mut hist, vars, .. } = f;
    if vars.is_empty() {
        // Nothing to free (a chart without a datamodel).
        std::mem::forget(vars);
    }
    hist.reset();
    spare.push(hist);
}

/// A routed message's history record: its message kept in the event's slot, then its keyed
/// index or the composite indexes told (what `flat_record` does for a one-event input).
#[inline(always)]
fn record_routed(
    svc: &Service,
    hist: &mut History,
    route: super::flat::Route,
    m: &Message,
    now: Instant,
) {
    if route.slot != NO_SLOT {
        hist.keep(route.slot, m);
    }
    match route.keyed {
        Some((id, a)) => svc.logic.record_keyed(&mut hist.logic, id, m.get(a), now),
        None if route.logic => svc
            .logic
            .record(&mut hist.logic, route.event, now, Some(m), 0),
        None => {}
    }
}

/// A routed input past its history record: where its cell is and what its step's context
/// is made of.
struct Routed<'a> {
    /// Index of its [`Cell`].
    at: usize,
    now: Instant,
    key: InstanceKey,
    current: Option<&'a Message>,
}

/// A routed input's step and composites, after its history record (inlined: a function of
/// its own measured slower, 101.4 M against 94.6 M instructions in `flat_speed`; an idle
/// input never comes here). Whether the instance ended.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn routed<N: Network>(
    svc: &Service,
    machine: &Flat,
    r: Routed<'_>,
    state: &mut u16,
    hist: &History,
    node: &mut NodeInfo,
    drafts: &mut [Draft],
    scratch: &mut Message,
    fire: &mut Vec<u16>,
    net: &mut N,
) -> bool {
    let Some(cell) = machine.cell_at(r.at) else {
        // Not reached: a state is below the chart's state count, and the cells cover
        // every (event, state).
        return false;
    };
    let mut ctx = Ctx {
        now: r.now,
        key: r.key,
        node,
        history: hist,
        current: r.current,
        drafts,
        net,
        terminated: false,
        each: 0,
    };
    flat_cell(svc, machine, cell, state, &mut ctx, scratch, fire)
}

/// What one input to a flat-machine instance runs with besides its [`Ctx`].
struct Input<'a> {
    /// The timer id of a timer expiry (0 for a message).
    timer: u32,
    /// The message a send builds.
    scratch: &'a mut Message,
    /// The store's `_event` scratch.
    dm: &'a mut Scratch,
    /// Composite candidates (several hits).
    comps: &'a mut Vec<u16>,
    /// Composites that hold after the first.
    fire: &'a mut Vec<u16>,
}

/// Records an input's hits in the instance's history (its message kept, the indexes
/// updated); the load-time plan of its event when it triggers one basic event.
#[inline(always)]
fn flat_record<'m>(
    svc: &Service,
    machine: &'m Flat,
    hist: &mut History,
    hits: &[u16],
    now: Instant,
    current: Option<&Message>,
    timer: u32,
) -> Option<(u16, &'m EventPlan)> {
    // One basic event: its load-time plan (history slot, index, composites that some state
    // takes), no per-event lookups.
    let single = match hits {
        [e] => machine.event_plan(*e).map(|p| (*e, p)),
        _ => None,
    };
    match single {
        Some((e, plan)) => {
            if let Some(m) = current {
                if plan.slot != NO_SLOT {
                    hist.keep(plan.slot, m);
                }
            }
            match (plan.keyed, current) {
                (Some((id, a)), Some(m)) => {
                    svc.logic.record_keyed(&mut hist.logic, id, m.get(a), now)
                }
                _ if plan.logic => svc.logic.record(&mut hist.logic, e, now, current, timer),
                _ => {}
            }
        }
        None => {
            for &e in hits {
                if let Some(m) = current {
                    hist.record(&svc.layout, e, m);
                }
                if svc.logic.listens(e) {
                    svc.logic.record(&mut hist.logic, e, now, current, timer);
                }
            }
        }
    }
    single
}

/// A flat step's datamodel: the instance's variables and the current event.
struct Dm<'a> {
    model: Option<&'a Model>,
    vars: &'a mut [Option<Value>],
    scratch: &'a mut Scratch,
    ev: Option<Ev<'a>>,
}

impl<'a> Dm<'a> {
    /// A new event (its `_event` values are read again).
    #[inline]
    fn event(&mut self, name: &'a str, current: Option<&'a Message>, timer: u32) {
        if self.model.is_some() {
            self.ev = Some(Ev {
                name,
                current,
                timer,
            });
            self.scratch.reset();
        }
    }
}

/// The candidate of `step`'s chain the engine would take in `state`: the first whose `cond`
/// holds (`None`: no transition).
#[inline]
fn select<'m>(machine: &'m Flat, step: &'m Step, state: u16, dm: &mut Dm<'_>) -> Option<&'m Step> {
    let mut s = step;
    loop {
        let Some(c) = &s.cond else {
            return Some(s);
        };
        if let Some(m) = dm.model {
            if m.cond(c, dm.vars, dm.scratch, dm.ev.as_ref(), state) {
                return Some(s);
            }
        }
        s = machine.alt(s)?;
    }
}

/// One input to a flat-machine instance (the order of [`Store::step`]): the hits recorded in
/// its history, each basic event's step, then every composite event whose constituents
/// fired and whose expression holds, each given to the state the machine is in when its turn
/// comes. Whether the instance ended.
/// `DM`: the chart has a datamodel (`machine.model()` is some); without one, nothing of the
/// datamodel is looked at (h2hack's path keeps its instruction count).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn flat_step<const DM: bool, N: Network>(
    svc: &Service,
    machine: &Flat,
    state: &mut u16,
    vars: &mut [Option<Value>],
    single: Option<&EventPlan>,
    hits: &[u16],
    ctx: &mut Ctx<'_, N>,
    input: Input<'_>,
) -> bool {
    let now = ctx.now;
    // Without a datamodel nothing of it is built or passed.
    let mut dm = if DM {
        Some(Dm {
            model: machine.model(),
            vars,
            scratch: input.dm,
            ev: None,
        })
    } else {
        None
    };
    let ctx = &mut *ctx;
    // Basic events, in declaration order.
    for &e in hits {
        if let Some(step) = machine.step(usize::from(e), *state) {
            let step = match dm.as_mut() {
                Some(dm) if DM => {
                    let name = svc.data.basic.get(usize::from(e)).map_or("", |b| &b.name);
                    dm.event(name, ctx.current, input.timer);
                    select(machine, step, *state, dm)
                }
                _ => Some(step),
            };
            if let Some(step) = step {
                if run_flat::<DM, N>(step, state, ctx, input.scratch, dm.as_mut()) {
                    return true;
                }
            }
        }
    }
    let comps = input.comps;
    let fire = input.fire;
    let candidates: &[u16] = match single {
        Some(plan) => &plan.comps,
        None => {
            comps.clear();
            for &e in hits {
                comps.extend_from_slice(&svc.comp_by_basic[usize::from(e)]);
            }
            comps.sort_unstable();
            comps.dedup();
            comps
        }
    };
    if candidates.is_empty() {
        return false;
    }
    let basics = svc.data.basic.len();
    let before = *state;
    // Every candidate is evaluated in the state before any of them runs; the first that
    // holds runs the step found while evaluating (the state has not changed yet), the others
    // the step of the state the machine is in when their turn comes.
    let mut first: Option<(u16, &Step)> = None;
    fire.clear();
    for &c in candidates {
        if let Some(step) = machine.step(basics + usize::from(c), before) {
            if svc
                .logic
                .eval(usize::from(c), &ctx.history.logic, ctx.node, now)
            {
                match first {
                    None => first = Some((c, step)),
                    Some(_) => fire.push(c),
                }
            }
        }
    }
    let Some((c, step)) = first else {
        return false;
    };
    let comp_name = |c: u16| {
        svc.data
            .composite
            .get(usize::from(c))
            .map_or("", |x| x.name.as_str())
    };
    let step = match dm.as_mut() {
        Some(dm) if DM => {
            dm.event(comp_name(c), ctx.current, input.timer);
            select(machine, step, *state, dm)
        }
        _ => Some(step),
    };
    if let Some(step) = step {
        if run_flat::<DM, N>(step, state, ctx, input.scratch, dm.as_mut()) {
            return true;
        }
    }
    for &c in fire.iter() {
        if let Some(step) = machine.step(basics + usize::from(c), *state) {
            let step = match dm.as_mut() {
                Some(dm) if DM => {
                    dm.event(comp_name(c), ctx.current, input.timer);
                    select(machine, step, *state, dm)
                }
                _ => Some(step),
            };
            if let Some(step) = step {
                if run_flat::<DM, N>(step, state, ctx, input.scratch, dm.as_mut()) {
                    return true;
                }
            }
        }
    }
    false
}

/// One input of a single basic event on a chart without a datamodel, from its load-time
/// [`Cell`] (the order of [`flat_step`]: the event's step, then the composites that hold,
/// the first running the step its cell resolved, the others the step of the state the
/// machine is in when their turn comes). Whether the instance ended.
#[inline(always)]
fn flat_cell<N: Network>(
    svc: &Service,
    machine: &Flat,
    cell: &Cell,
    state: &mut u16,
    ctx: &mut Ctx<'_, N>,
    scratch: &mut Message,
    fire: &mut Vec<u16>,
) -> bool {
    if let Some(step) = machine.step_at(cell.step) {
        if run_flat::<false, N>(step, state, ctx, scratch, None) {
            return true;
        }
    }
    if cell.comps.is_empty() {
        return false;
    }
    let now = ctx.now;
    let mut first: Option<u16> = None;
    fire.clear();
    for &(c, s) in cell.comps.iter() {
        if svc
            .logic
            .eval(usize::from(c), &ctx.history.logic, ctx.node, now)
        {
            match first {
                None => first = Some(s),
                Some(_) => fire.push(c),
            }
        }
    }
    let Some(step) = first.and_then(|s| machine.step_at(s)) else {
        return false;
    };
    if run_flat::<false, N>(step, state, ctx, scratch, None) {
        return true;
    }
    let basics = svc.data.basic.len();
    for &c in fire.iter() {
        if let Some(step) = machine.step(basics + usize::from(c), *state) {
            if run_flat::<false, N>(step, state, ctx, scratch, None) {
                return true;
            }
        }
    }
    false
}

/// [`flat_step`] of a chart with a datamodel, out of line (h2hack's inputs, without one, keep
/// a small function).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn flat_step_dm<N: Network>(
    svc: &Service,
    machine: &Flat,
    state: &mut u16,
    vars: &mut [Option<Value>],
    single: Option<&EventPlan>,
    hits: &[u16],
    ctx: &mut Ctx<'_, N>,
    input: Input<'_>,
) -> bool {
    flat_step::<true, N>(svc, machine, state, vars, single, hits, ctx, input)
}

/// Runs one flat step's ops (a failing op ends its block, as in the engine) and moves to its
/// target; whether the instance ended (a final state or `terminate`).
/// `DM`: `dm` is some (the chart has a datamodel).
#[inline(always)]
fn run_flat<const DM: bool, N: Network>(
    step: &Step,
    state: &mut u16,
    ctx: &mut Ctx<'_, N>,
    scratch: &mut Message,
    mut dm: Option<&mut Dm<'_>>,
) -> bool {
    let ops = &*step.ops;
    let mut i = 0;
    while let Some((op, end)) = ops.get(i) {
        i = if run_op::<DM, N>(op, ctx, scratch, dm.as_deref_mut(), *state) {
            i + 1
        } else {
            usize::from(*end)
        };
    }
    if let Some(t) = step.target {
        *state = t;
    }
    if step.drafts {
        clear_drafts(ctx.drafts);
    }
    step.ends || ctx.terminated
}

/// Runs one resolved op; false when it fails (a value that cannot be read now: nothing is
/// performed and the rest of its block is skipped).
#[inline(always)]
fn run_op<const DM: bool, N: Network>(
    op: &FastOp,
    ctx: &mut Ctx<'_, N>,
    scratch: &mut Message,
    dm: Option<&mut Dm<'_>>,
    state: u16,
) -> bool {
    match op {
        FastOp::SetTimer { id, after } => {
            ctx.net.perform(
                ctx.now,
                ctx.key,
                Primitive::SetTimer {
                    id: *id,
                    after: *after,
                },
            );
        }
        FastOp::CancelTimer { id } => {
            ctx.net
                .perform(ctx.now, ctx.key, Primitive::CancelTimer { id: *id });
        }
        FastOp::Terminate => {
            ctx.net.perform(ctx.now, ctx.key, Primitive::Terminate);
            ctx.terminated = true;
        }
        FastOp::Send(op) => return send(op, ctx, scratch),
        FastOp::Each { selector, send: op } => return send_each(selector, op, ctx, scratch),
        FastOp::Action(a) => return interpreted(a, ctx, if DM { dm.as_deref() } else { None }),
        FastOp::Assign(x) => {
            return match dm {
                Some(dm) if DM => assign(x, dm, state),
                _ => false,
            }
        }
    }
    true
}

/// `<assign>` in the flat machine's datamodel; whether it succeeded.
#[inline(never)]
fn assign(
    x: &(crate::chart::expr::Location, crate::chart::compile::Spec),
    dm: &mut Dm<'_>,
    state: u16,
) -> bool {
    match dm.model {
        Some(m) => m.assign(&x.0, &x.1, dm.vars, dm.scratch, dm.ev.as_ref(), state),
        None => false,
    }
}

/// An action the flat machine did not resolve, run by the interpreter; whether it succeeded.
/// Out of line (its error is a `String` to drop), so the usual ops' loop keeps a small frame.
#[inline(never)]
fn interpreted<N: Network>(a: &Action, ctx: &mut Ctx<'_, N>, dm: Option<&Dm<'_>>) -> bool {
    match dm.and_then(|d| Some((d.model?, &*d.vars))) {
        Some((m, vars)) => action::run(a, ctx, &m.source(vars)).is_ok(),
        None => action::run(a, ctx, &()).is_ok(),
    }
}

/// A `foreach` send: the nodes are selected first (on the stack for the usual few), then one
/// send each; false at the first that fails. Out of line, so the usual ops' loop keeps a small
/// frame.
#[inline(never)]
fn send_each<N: Network>(
    selector: &super::logic::Selector,
    op: &SendOp,
    ctx: &mut Ctx<'_, N>,
    scratch: &mut Message,
) -> bool {
    // The selection is made before any send (as the interpreter does): on the stack
    // for the usual few nodes.
    let mut near = [Addr(0); 16];
    let mut n = 0;
    let mut spill = Vec::new();
    selector.for_each(&ctx.history.logic, ctx.node, ctx.now, |a| {
        if n < near.len() {
            near[n] = a;
            n += 1;
        } else {
            spill.push(a);
        }
    });
    let outer = ctx.each;
    let mut ok = true;
    for a in near[..n].iter().chain(&spill) {
        ctx.each = a.0 as i64;
        if !send(op, ctx, scratch) {
            ok = false;
            break;
        }
    }
    ctx.each = outer;
    ok
}

/// Builds a message in `msg` (its base, then the attribute writes) and performs `prim`;
/// false, with nothing performed, when a value cannot be read now. The payload is shared only
/// when the primitive carries it (a control message does not; `sendMessage` only for type
/// Payload), so no reference count is taken to be dropped; `msg` is the store's scratch
/// message, overwritten whole by every send and left without a payload.
#[inline(always)]
fn send<N: Network>(op: &SendOp, ctx: &mut Ctx<'_, N>, msg: &mut Message) -> bool {
    let from = match op.base {
        Base::Fresh => None,
        Base::Last(s) => match ctx.history.last(s) {
            Some(m) => Some(m),
            None => return false,
        },
        Base::Current => match ctx.current {
            Some(m) => Some(m),
            None => return false,
        },
    };
    match from {
        Some(m) => msg.assign_header(m),
        None => msg.assign_fresh(),
    }
    // The constant one-byte attributes, without dispatch.
    let (mask, b) = (op.mask, op.bytes);
    if mask != 0 {
        if mask & 1 != 0 {
            msg.message_type = b[0];
        }
        if mask & 2 != 0 {
            msg.delivery_mode = b[1];
        }
        if mask & 4 != 0 {
            msg.hop_limit = b[2];
        }
    }
    // A value that cannot be read ends the send with nothing performed (the scratch message
    // is simply overwritten by the next one).
    for &(a, src) in op.sets.iter() {
        let x = match src {
            Src::Int(x) => x,
            Src::LastAttr(s, b) => match ctx.history.last(s) {
                Some(m) => m.get(b),
                None => return false,
            },
            Src::CurrentAttr(b) => match ctx.current {
                Some(m) => m.get(b),
                None => return false,
            },
            Src::NodeAddress => ctx.node.address.0 as i64,
            Src::NodeParent => ctx.node.parent.0 as i64,
            Src::Each => ctx.each,
        };
        msg.set(a, x);
    }
    let prim = op.prim;
    let carries = match prim {
        Prim::SendControl => false,
        Prim::Send => msg.message_type == PAYLOAD_TYPE,
        _ => true,
    };
    if carries {
        if let Some(m) = from {
            msg.payload.clone_from(&m.payload);
        }
    }
    if action::emit(
        prim,
        msg,
        (0, 0),
        ctx.now,
        ctx.key,
        ctx.node.address,
        ctx.net,
    ) {
        ctx.terminated = true;
    }
    msg.payload = None;
    true
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
    /// The keys of the live instances, ascending (engine and flat-machine instances alike).
    pub fn keys(&self) -> Vec<InstanceKey> {
        let mut k: Vec<InstanceKey> = self.map.keys().copied().collect();
        for (si, instances) in self.flat.iter().enumerate() {
            let service = self.services[si].id();
            k.extend(
                instances
                    .keys()
                    .map(|&message| InstanceKey { service, message }),
            );
        }
        k.sort_unstable();
        k
    }

    /// Feeds the node information and every live instance (key, service, machine state,
    /// history; in key order, whatever the storage layout) to `h`. Two stores of the same
    /// services with equal fingerprints react alike to every input; times are hashed as ages
    /// at `now`.
    pub fn fingerprint<H: std::hash::Hasher>(&self, now: Instant, h: &mut H) {
        use std::hash::Hash;
        self.node.address.hash(h);
        self.node.parent.hash(h);
        self.node.children.hash(h);
        self.node.neighbours.hash(h);
        for key in self.keys() {
            key.service.hash(h);
            key.message.hash(h);
            if let Some((si, f)) = self.flat_inst(key) {
                si.hash(h);
                h.write_u8(0);
                f.state.hash(h);
                f.hist.fingerprint(now.as_nanos(), h);
                // The datamodel's variables (their debug form is canonical).
                for v in f.vars.iter() {
                    format!("{v:?}").hash(h);
                }
                continue;
            }
            let Some(l) = self
                .map
                .get(&key)
                .and_then(|&i| self.slab[i as usize].as_ref())
            else {
                continue;
            };
            usize::from(l.svc).hash(h);
            h.write_u8(1);
            l.inst.0.fingerprint(h);
            l.hist.fingerprint(now.as_nanos(), h);
        }
    }
}

impl Store {
    /// A message for service `si`, which runs on the general engine (out of line: the flat
    /// machine's inputs keep a small function).
    #[inline(never)]
    fn engine_message<N: Network>(
        &mut self,
        now: Instant,
        si: usize,
        m: &Message,
        net: &mut N,
    ) -> Result<(), RunnerError> {
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

    /// A timer of an instance on the general engine (out of line).
    #[inline(never)]
    fn engine_timer<N: Network>(
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
        if self.services[si].flat.is_some() {
            return self.flat_message(now, si, m, net);
        }
        self.engine_message(now, si, m, net)
    }

    fn handle_timer<N: Network>(
        &mut self,
        now: Instant,
        key: InstanceKey,
        id: u32,
        net: &mut N,
    ) -> Result<(), RunnerError> {
        if let Some(si) = self.service_index(key.service) {
            if self.services[si].flat.is_some() {
                return self.flat_timer(now, si, key, id, net);
            }
        }
        self.engine_timer(now, key, id, net)
    }

    fn set_node(&mut self, node: NodeInfo) {
        self.node = node;
    }

    fn state(&self, key: InstanceKey) -> Option<&str> {
        if let Some((si, f)) = self.flat_inst(key) {
            return Some(
                self.services[si]
                    .chart
                    .state_name(StateId(u32::from(f.state))),
            );
        }
        let &i = self.map.get(&key)?;
        let l = self.slab[i as usize].as_ref()?;
        let chart = &self.services[usize::from(l.svc)].chart;
        l.inst.active_states().last().map(|&s| chart.state_name(s))
    }

    fn live(&self) -> usize {
        self.live_count()
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
        let flat: usize = self
            .flat
            .iter()
            .map(|f| {
                f.capacity() * (std::mem::size_of::<(u64, FlatInst)>() + 1)
                    + f.values()
                        .map(|x| {
                            x.hist.heap_bytes()
                                + x.vars.len() * std::mem::size_of::<Option<Value>>()
                        })
                        .sum::<usize>()
            })
            .sum();
        map + slab + recycled + live + flat
    }
}

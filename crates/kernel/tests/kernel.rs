//! Kernel behaviour: routes, Ψ ⊆ Γ, binding modes, shared sessions, flow, timers, echo,
//! injection (issue 2 §1).
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_INIT, DEBUG, ECHO, EVENT, SENDABLE, TIMER,
};
use viastack_kernel::layers::{Ghost, Transparent};
use viastack_kernel::{
    AutoBind, BindError, BindMode, Body, ChannelId, Context, Dest, Direction, Duration, Event,
    EventType, InjectError, Instant, Kernel, KernelConfig, Layer, LayerRef, Message, NodeId,
    Output, Qos, QosError, Sendable, Session, SessionId,
};

static DATA: EventTypeDef = EventTypeDef::new("TestData", Some(&SENDABLE));
static DATA_URGENT: EventTypeDef = EventTypeDef::new("TestDataUrgent", Some(&DATA));
static QUERY: EventTypeDef = EventTypeDef::new("TestQuery", Some(&EVENT));

type Log = Arc<Mutex<Vec<String>>>;

/// A layer whose sessions log every event they get and forward it.
struct Recorder {
    name: String,
    accepts: Vec<EventType>,
    requires: Vec<EventType>,
    provides: Vec<EventType>,
    log: Log,
}

impl Recorder {
    fn new(name: &str, accepts: Vec<EventType>, log: &Log) -> Arc<Recorder> {
        Arc::new(Recorder {
            name: name.into(),
            accepts,
            requires: vec![],
            provides: vec![],
            log: Arc::clone(log),
        })
    }
}

impl Layer for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        self.accepts.clone()
    }
    fn requires(&self) -> Vec<EventType> {
        self.requires.clone()
    }
    fn provides(&self) -> Vec<EventType> {
        self.provides.clone()
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(RecorderSession {
            name: self.name.clone(),
            log: Arc::clone(&self.log),
            seen: 0,
        })
    }
}

struct RecorderSession {
    name: String,
    log: Log,
    seen: u64,
}

impl Session for RecorderSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        self.seen += 1;
        let dir = match event.dir() {
            Direction::Up => "up",
            Direction::Down => "down",
        };
        self.log.lock().unwrap().push(format!(
            "{}:{}:{}:c{}",
            self.name,
            event.ty(),
            dir,
            event.channel().0
        ));
        if let Body::Debug(lines) = &mut event.body {
            lines.push(format!("{} saw {}", self.name, self.seen));
        }
        ctx.go(event);
    }
}

fn lines(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

fn data(dir: Direction, ch: ChannelId, payload: &[u8]) -> Event {
    Event::sendable(
        DATA.id(),
        dir,
        ch,
        Sendable::new(
            NodeId(0),
            Dest::Node(NodeId(1)),
            Message::from_payload(payload),
        ),
    )
}

fn kernel() -> Kernel {
    Kernel::new(KernelConfig::default())
}

fn start(k: &mut Kernel, name: &str, qos: &Arc<Qos>) -> ChannelId {
    let ch = k.create_channel(name, qos);
    k.start_channel(ch, Instant::ZERO).unwrap();
    ch
}

fn deliveries(k: &mut Kernel) -> Vec<Event> {
    let mut out = vec![];
    while let Some(o) = k.poll_output() {
        match o {
            // Channel life-cycle notices also reach the application; these tests look at data.
            Output::Deliver(e) if e.ty() == CHANNEL_INIT.id() => {}
            Output::Deliver(e) => out.push(e),
            Output::Transmit(_) => {}
        }
    }
    out
}

#[test]
fn routes_visit_only_accepting_layers_and_include_subtypes() {
    let log = Log::default();
    let bottom = Recorder::new("bottom", vec![SENDABLE.id()], &log);
    let mid: LayerRef = Arc::new(Transparent::new("mid"));
    let top = Recorder::new("top", vec![DATA_URGENT.id()], &log);
    let qos = Qos::new("q", vec![bottom, mid, top]).unwrap();
    assert_eq!(&*qos.route(DATA.id()), &[0], "top accepts only the subtype");
    assert_eq!(&*qos.route(DATA_URGENT.id()), &[0, 2]);
    assert!(qos.route(CHANNEL_INIT.id()).is_empty());

    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    lines(&log);
    k.inject(Instant::ZERO, data(Direction::Down, ch, b"x"))
        .unwrap();
    assert_eq!(lines(&log), vec!["bottom:TestData:down:c0"]);
    let urgent = Event::sendable(
        DATA_URGENT.id(),
        Direction::Up,
        ch,
        Sendable::new(NodeId(1), Dest::Node(NodeId(0)), Message::new()),
    );
    k.inject(Instant::ZERO, urgent).unwrap();
    assert_eq!(
        lines(&log),
        vec!["bottom:TestDataUrgent:up:c0", "top:TestDataUrgent:up:c0"]
    );
    let delivered = deliveries(&mut k);
    assert_eq!(
        delivered.len(),
        1,
        "the up event left the top for the application"
    );
    assert_eq!(delivered[0].ty(), DATA_URGENT.id());
}

#[test]
fn route_table_lists_provided_types() {
    let log = Log::default();
    let a = Arc::new(Recorder {
        name: "a".into(),
        accepts: vec![EVENT.id()],
        requires: vec![],
        provides: vec![DATA.id()],
        log,
    });
    let qos = Qos::new("q", vec![a]).unwrap();
    let table = qos.route_table();
    let names: Vec<&str> = table.iter().map(|(t, _)| t.name()).collect();
    assert!(
        names.contains(&"TestData") && names.contains(&"ChannelInit"),
        "{names:?}"
    );
    assert!(table
        .iter()
        .all(|(_, layers)| layers == &vec!["a".to_string()]));
}

#[test]
fn qos_refuses_required_event_nobody_provides() {
    let log = Log::default();
    let needy = Arc::new(Recorder {
        name: "needy".into(),
        accepts: vec![],
        requires: vec![QUERY.id()],
        provides: vec![],
        log: Arc::clone(&log),
    });
    let err = Qos::new("q", vec![needy.clone()]).unwrap_err();
    assert_eq!(
        err,
        QosError::MissingEvent {
            qos: "q".into(),
            layer: "needy".into(),
            event: "TestQuery".into()
        }
    );
    // A provider of a subtype satisfies the requirement for its parent.
    let provider = Arc::new(Recorder {
        name: "provider".into(),
        accepts: vec![],
        requires: vec![],
        provides: vec![QUERY.id()],
        log,
    });
    assert!(Qos::new("q", vec![provider, needy]).is_ok());
    assert!(matches!(Qos::new("e", vec![]), Err(QosError::Empty { .. })));
}

/// A session that, asked to auto-bind, puts a session it knows into the slots of its layer.
struct Binder {
    partner: SessionId,
    partner_layer: String,
}

impl Session for Binder {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        ctx.go(event);
    }
    fn auto_bind(&mut self, request: &mut AutoBind<'_>) {
        let slots: Vec<usize> = request
            .empty_slots()
            .into_iter()
            .filter(|(_, l)| l.name() == self.partner_layer)
            .map(|(i, _)| i)
            .collect();
        for slot in slots {
            request.bind(slot, self.partner).unwrap();
        }
    }
}

#[test]
fn three_binding_modes_in_order() {
    let log = Log::default();
    let fd: LayerRef = Recorder::new("fd", vec![CHANNEL_INIT.id()], &log);
    let sync: LayerRef = Recorder::new("sync", vec![CHANNEL_INIT.id()], &log);
    let app: LayerRef = Recorder::new("app", vec![CHANNEL_INIT.id()], &log);
    let qos = Qos::new("q", vec![fd.clone(), sync.clone(), app.clone()]).unwrap();
    let mut k = kernel();

    let fd_session = k.create_session(&fd);
    let sync_session = k.add_session(
        &sync,
        Box::new(Binder {
            partner: fd_session,
            partner_layer: "fd".into(),
        }),
    );
    let ch = k.create_channel("c", &qos);
    {
        let mut cur = k.cursor(ch).unwrap();
        // Explicit, into the sync slot only: the cursor checks the layer. The fd slot is left
        // empty, so only automatic binding can fill it with `fd_session`.
        assert_eq!(cur.position(), 0);
        assert_eq!(cur.session(), None);
        assert!(cur.up());
        assert_eq!(cur.layer().name(), "sync");
        let err = cur.set_session(fd_session).unwrap_err();
        assert!(
            matches!(err, BindError::WrongLayer { slot: 1, .. }),
            "{err}"
        );
        cur.set_session(sync_session).unwrap();
    }
    assert_eq!(
        k.channel_sessions(ch),
        vec![None, Some(sync_session), None],
        "before start, only the explicit binding"
    );
    k.start_channel(ch, Instant::ZERO).unwrap();
    let slots = k.channel_sessions(ch);
    assert_eq!(slots[1], Some(sync_session), "explicit");
    assert_eq!(
        slots[0],
        Some(fd_session),
        "automatic, by the bound sync session"
    );
    assert_eq!(
        k.channel_bind_modes(ch),
        vec![BindMode::Automatic, BindMode::Explicit, BindMode::Default]
    );
    let app_session = slots[2].expect("default");
    assert!(app_session != fd_session && app_session != sync_session);
    assert_eq!(k.session_layer(app_session).unwrap().name(), "app");
    // ChannelInit went up through all three, bottom first.
    assert_eq!(
        lines(&log),
        vec!["fd:ChannelInit:up:c0", "app:ChannelInit:up:c0"],
        "(the sync session is a Binder, which does not log)"
    );
    let mut cur = k.cursor(ch).unwrap();
    assert!(matches!(
        cur.set_session(fd_session),
        Err(BindError::AlreadyStarted(_))
    ));
}

/// A session that brings, into every channel it joins, the sessions it already shares a
/// channel with (the intermedia sync of seed 001 §5.1).
struct Bringer;

impl Session for Bringer {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        ctx.go(event);
    }
    fn auto_bind(&mut self, request: &mut AutoBind<'_>) {
        request.bind_companions();
    }
}

#[test]
fn a_shared_session_brings_its_companions_into_the_next_channel() {
    let log = Log::default();
    let dev: LayerRef = Recorder::new("dev", vec![CHANNEL_INIT.id()], &log);
    let fd: LayerRef = Recorder::new("fd", vec![CHANNEL_INIT.id()], &log);
    let frag: LayerRef = Recorder::new("frag", vec![CHANNEL_INIT.id()], &log);
    let sync: LayerRef = Recorder::new("sync", vec![CHANNEL_INIT.id()], &log);
    let audio = Qos::new("audio", vec![dev.clone(), fd.clone(), sync.clone()]).unwrap();
    let video = Qos::new(
        "video",
        vec![dev.clone(), fd.clone(), frag.clone(), sync.clone()],
    )
    .unwrap();
    let mut k = kernel();
    let sync_session = k.add_session(&sync, Box::new(Bringer));
    let bind_sync = |k: &mut Kernel, ch: ChannelId, top: usize| {
        let mut cur = k.cursor(ch).unwrap();
        for _ in 0..top {
            assert!(cur.up());
        }
        cur.set_session(sync_session).unwrap();
    };
    // Audio first: the sync session shares nothing yet, so dev and fd are defaults.
    let a = k.create_channel("audio", &audio);
    bind_sync(&mut k, a, 2);
    k.start_channel(a, Instant::ZERO).unwrap();
    let audio_slots = k.channel_sessions(a);
    assert_eq!(
        k.channel_bind_modes(a),
        vec![BindMode::Default, BindMode::Default, BindMode::Explicit]
    );
    // Video: only the sync is bound; it brings audio's dev and fd; frag has no companion.
    let v = k.create_channel("video", &video);
    bind_sync(&mut k, v, 3);
    k.start_channel(v, Instant::ZERO).unwrap();
    let video_slots = k.channel_sessions(v);
    assert_eq!(video_slots[0], audio_slots[0], "the same device session");
    assert_eq!(video_slots[1], audio_slots[1], "the same failure detector");
    assert!(
        !audio_slots.contains(&video_slots[2]),
        "a frag session of its own"
    );
    assert_eq!(
        k.channel_bind_modes(v),
        vec![
            BindMode::Automatic,
            BindMode::Automatic,
            BindMode::Default,
            BindMode::Explicit
        ]
    );
}

/// Answers every data event on the channel it came from, without knowing how many exist.
struct Responder {
    answered: Vec<ChannelId>,
}

impl Session for Responder {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == DATA.id() && event.dir() == Direction::Up {
            self.answered.push(event.channel());
            let reply = data(Direction::Down, event.channel(), b"reply");
            ctx.go(reply);
        }
        ctx.go(event);
    }
}

struct ResponderLayer;
impl Layer for ResponderLayer {
    fn name(&self) -> &str {
        "responder"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![DATA.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Responder { answered: vec![] })
    }
}

#[test]
fn shared_session_in_a_diamond_answers_on_each_channel() {
    let log = Log::default();
    let device: LayerRef = Recorder::new("device", vec![SENDABLE.id()], &log);
    let responder: LayerRef = Arc::new(ResponderLayer);
    let audio_only: LayerRef = Recorder::new("audio", vec![SENDABLE.id()], &log);
    let video_only: LayerRef = Recorder::new("video", vec![SENDABLE.id()], &log);
    let qa = Qos::new("audio", vec![device.clone(), audio_only, responder.clone()]).unwrap();
    let qv = Qos::new("video", vec![device.clone(), video_only, responder.clone()]).unwrap();
    let mut k = kernel();
    let shared_dev = k.create_session(&device);
    let shared_resp = k.create_session(&responder);
    let mut chans = vec![];
    for qos in [&qa, &qv] {
        let ch = k.create_channel(qos.name(), qos);
        let mut cur = k.cursor(ch).unwrap();
        cur.set_session(shared_dev).unwrap();
        cur.top().set_session(shared_resp).unwrap();
        k.start_channel(ch, Instant::ZERO).unwrap();
        chans.push(ch);
    }
    lines(&log);
    k.inject(Instant::ZERO, data(Direction::Up, chans[1], b"v"))
        .unwrap();
    k.inject(Instant::ZERO, data(Direction::Up, chans[0], b"a"))
        .unwrap();
    let r: &Responder = k.session(shared_resp).unwrap();
    assert_eq!(r.answered, vec![chans[1], chans[0]]);
    assert_eq!(
        lines(&log),
        vec![
            "device:TestData:up:c1",
            "video:TestData:up:c1",
            "video:TestData:down:c1",
            "device:TestData:down:c1",
            "device:TestData:up:c0",
            "audio:TestData:up:c0",
            "audio:TestData:down:c0",
            "device:TestData:down:c0",
        ],
        "each reply went down the channel its request came up"
    );
    assert_eq!(
        k.channel_sessions(chans[0])[0],
        k.channel_sessions(chans[1])[0]
    );
}

/// Emits a burst of numbered events down; the bottom records their order.
struct Burst;
impl Session for Burst {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == QUERY.id() {
            for i in 0..5u8 {
                ctx.go(data(Direction::Down, event.channel(), &[i]));
            }
        } else {
            ctx.go(event);
        }
    }
}
struct BurstLayer;
impl Layer for BurstLayer {
    fn name(&self) -> &str {
        "burst"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![QUERY.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![DATA.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Burst)
    }
}

struct Sink {
    got: Vec<u8>,
}
impl Session for Sink {
    fn handle(&mut self, event: Event, _ctx: &mut Context<'_>) {
        if let Some(s) = event.sendable_ref() {
            self.got.extend_from_slice(s.message.as_slice());
        }
    }
}
struct SinkLayer;
impl Layer for SinkLayer {
    fn name(&self) -> &str {
        "sink"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![DATA.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Sink { got: vec![] })
    }
}

#[test]
fn events_between_two_sessions_keep_fifo_order() {
    let qos = Qos::new(
        "q",
        vec![
            Arc::new(SinkLayer) as LayerRef,
            Arc::new(Ghost::new("g1")),
            Arc::new(Ghost::new("g2")),
            Arc::new(BurstLayer),
        ],
    )
    .unwrap();
    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    for _ in 0..3 {
        k.inject(
            Instant::ZERO,
            Event::new(QUERY.id(), Direction::Down, ch, Body::Empty),
        )
        .unwrap();
    }
    let sink = k.channel_sessions(ch)[0].unwrap();
    let s: &Sink = k.session(sink).unwrap();
    assert_eq!(s.got, [0, 1, 2, 3, 4].repeat(3));
}

/// Sets timers on init; records (time, token, type) of expiries.
struct TimerUser {
    fired: Vec<(Instant, u64, String)>,
    cancel_me: Option<viastack_kernel::TimerId>,
    periodic: Option<viastack_kernel::TimerId>,
}
impl Session for TimerUser {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == CHANNEL_INIT.id() {
            ctx.set_timer(Duration::from_millis(30), 3);
            ctx.set_timer(Duration::from_millis(10), 1);
            self.cancel_me = Some(ctx.set_timer(Duration::from_millis(20), 2));
            self.periodic = Some(ctx.set_periodic(Duration::from_millis(25), 7));
        } else if let Body::Timer(t) = &event.body {
            assert_eq!(event.channel(), ChannelId(0), "timers carry their channel");
            self.fired
                .push((ctx.now(), t.token, event.ty().name().to_string()));
            if t.token == 1 {
                assert!(ctx.cancel_timer(self.cancel_me.unwrap()));
                assert!(
                    !ctx.cancel_timer(self.cancel_me.unwrap()),
                    "second cancel is a no-op"
                );
            }
            if t.token == 7 && ctx.now() >= Instant::from_millis(75) {
                ctx.cancel_timer(self.periodic.unwrap());
            }
        }
    }
}
struct TimerLayer;
impl Layer for TimerLayer {
    fn name(&self) -> &str {
        "timers"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![CHANNEL_INIT.id(), TIMER.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(TimerUser {
            fired: vec![],
            cancel_me: None,
            periodic: None,
        })
    }
}

#[test]
fn timers_fire_in_virtual_time_to_their_setter() {
    let qos = Qos::new("q", vec![Arc::new(TimerLayer) as LayerRef]).unwrap();
    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    let sid = k.channel_sessions(ch)[0].unwrap();
    assert_eq!(k.poll_timeout(), Some(Instant::from_millis(10)));
    k.handle_timeout(Instant::from_millis(9));
    assert!(
        k.session::<TimerUser>(sid).unwrap().fired.is_empty(),
        "not early"
    );
    // Drive like a simulator: jump to each deadline.
    let mut steps = 0;
    while let Some(t) = k.poll_timeout() {
        k.handle_timeout(t);
        k.handle_timeout(t); // twice is harmless
        steps += 1;
        assert!(steps < 100, "timer livelock");
    }
    let fired = &k.session::<TimerUser>(sid).unwrap().fired;
    let got: Vec<(u64, u64)> = fired
        .iter()
        .map(|(t, tok, _)| (t.as_nanos() / 1_000_000, *tok))
        .collect();
    assert_eq!(got, vec![(10, 1), (25, 7), (30, 3), (50, 7), (75, 7)]);
    assert_eq!(fired[1].2, "PeriodicTimer");
    assert_eq!(fired[0].2, "Timer");
    assert_eq!(k.pending_timers(), 0);
}

#[test]
fn echo_gathers_information_and_comes_back() {
    let log = Log::default();
    let a: LayerRef = Recorder::new("a", vec![DEBUG.id(), ECHO.id()], &log);
    let b: LayerRef = Recorder::new("b", vec![DEBUG.id()], &log);
    let c: LayerRef = Recorder::new("c", vec![DEBUG.id(), ECHO.id()], &log);
    let qos = Qos::new("q", vec![a, b, c]).unwrap();
    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    lines(&log);
    let debug = Event::new(DEBUG.id(), Direction::Up, ch, Body::Debug(vec![]));
    let echo = Event::new(ECHO.id(), Direction::Down, ch, Body::Echo(Box::new(debug)));
    k.inject(Instant::ZERO, echo).unwrap();
    assert_eq!(
        lines(&log),
        vec![
            "c:Echo:down:c0",
            "a:Echo:down:c0",
            "a:Debug:up:c0",
            "b:Debug:up:c0",
            "c:Debug:up:c0"
        ]
    );
    let out = deliveries(&mut k);
    assert_eq!(out.len(), 1);
    match &out[0].body {
        Body::Debug(lines) => assert_eq!(lines, &["a saw 2", "b saw 1", "c saw 2"]),
        other => panic!("expected the debug report, got {other:?}"),
    }
}

#[test]
fn closed_channel_refuses_injection_from_any_thread() {
    let log = Log::default();
    let a: LayerRef = Recorder::new("a", vec![CHANNEL_CLOSE.id(), SENDABLE.id()], &log);
    let qos = Qos::new("q", vec![a]).unwrap();
    let mut k = kernel();
    let unstarted = k.create_channel("later", &qos);
    assert!(matches!(
        k.inject(Instant::ZERO, data(Direction::Down, unstarted, b"x")),
        Err(InjectError::NotOpen { .. })
    ));
    let ch = start(&mut k, "c", &qos);
    let injector = k.injector();
    let woken = Arc::new(Mutex::new(0));
    let w = Arc::clone(&woken);
    k.set_waker(move || *w.lock().unwrap() += 1);
    let handle = {
        let injector = injector.clone();
        std::thread::spawn(move || {
            for i in 0..100u8 {
                injector.inject(ch, data(Direction::Up, ch, &[i])).unwrap();
            }
        })
    };
    handle.join().unwrap();
    assert_eq!(*woken.lock().unwrap(), 100);
    lines(&log);
    k.handle_injected(Instant::ZERO);
    assert_eq!(lines(&log).len(), 100);
    let payloads: Vec<u8> = deliveries(&mut k)
        .iter()
        .map(|e| e.sendable_ref().unwrap().message.as_slice()[0])
        .collect();
    assert_eq!(
        payloads,
        (0..100).collect::<Vec<u8>>(),
        "FIFO across threads"
    );

    k.close_channel(ch, Instant::ZERO).unwrap();
    assert_eq!(lines(&log), vec!["a:ChannelClose:up:c1"]);
    assert!(matches!(
        injector.inject(ch, data(Direction::Up, ch, b"late")),
        Err(InjectError::NotOpen { .. })
    ));
    assert!(matches!(
        k.inject(Instant::ZERO, data(Direction::Up, ch, b"late")),
        Err(InjectError::NotOpen { .. })
    ));
    assert!(k.close_channel(ch, Instant::ZERO).is_err());
    assert!(matches!(
        injector.inject(ChannelId(99), data(Direction::Up, ch, b"x")),
        Err(InjectError::UnknownChannel(99))
    ));
}

/// Pushes a 4-byte header going down, pops it going up.
struct Header {
    tag: u32,
}
impl Session for Header {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let dir = event.dir();
        if let Some(s) = event.sendable_mut() {
            match dir {
                Direction::Down => s.message.push_u32(self.tag),
                Direction::Up => {
                    if s.message.pop_u32() != Ok(self.tag) {
                        ctx.count("bad_header");
                        return;
                    }
                }
            }
        }
        ctx.go(event);
    }
}
struct HeaderLayer(String, u32);
impl Layer for HeaderLayer {
    fn name(&self) -> &str {
        &self.0
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Header { tag: self.1 })
    }
}

/// Turns every down sendable around at the bottom, recording the payload address.
struct Loopback {
    payload_addrs: Vec<usize>,
}
impl Session for Loopback {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if event.dir() == Direction::Down {
            if let Some(s) = event.sendable_ref() {
                let bytes = s.message.as_slice();
                self.payload_addrs.push(bytes[8..].as_ptr() as usize);
            }
            event.set_dir(Direction::Up);
        }
        ctx.go(event);
    }
}
struct LoopbackLayer;
impl Layer for LoopbackLayer {
    fn name(&self) -> &str {
        "loopback"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Loopback {
            payload_addrs: vec![],
        })
    }
}

#[test]
fn headers_are_pushed_and_popped_over_one_buffer() {
    let qos = Qos::new(
        "q",
        vec![
            Arc::new(LoopbackLayer) as LayerRef,
            Arc::new(HeaderLayer("h1".into(), 0x1111_1111)),
            Arc::new(HeaderLayer("h2".into(), 0x2222_2222)),
        ],
    )
    .unwrap();
    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    let msg = Message::from_payload(b"the payload");
    let payload_addr = msg.as_slice().as_ptr() as usize;
    let ev = Event::sendable(
        DATA.id(),
        Direction::Down,
        ch,
        Sendable::new(NodeId(0), Dest::Node(NodeId(0)), msg),
    );
    k.inject(Instant::ZERO, ev).unwrap();
    let out = deliveries(&mut k);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].sendable_ref().unwrap().message.as_slice(),
        b"the payload"
    );
    let lb = k.channel_sessions(ch)[0].unwrap();
    let seen = &k.session::<Loopback>(lb).unwrap().payload_addrs;
    assert_eq!(seen, &vec![payload_addr], "payload never moved");
    assert!(k.counters().is_empty(), "{:?}", k.counters());
}

#[test]
fn new_events_start_next_to_their_sender() {
    // The burst session sits at the top; its events must skip itself and reach the sink.
    let qos = Qos::new(
        "q",
        vec![
            Arc::new(SinkLayer) as LayerRef,
            Arc::new(Transparent::new("t")),
            Arc::new(BurstLayer),
        ],
    )
    .unwrap();
    let mut k = kernel();
    let ch = start(&mut k, "c", &qos);
    // Inject the query from the bottom going up: it reaches burst, which sends data down.
    k.inject(
        Instant::ZERO,
        Event::new(QUERY.id(), Direction::Up, ch, Body::Empty),
    )
    .unwrap();
    let sink = k.channel_sessions(ch)[0].unwrap();
    assert_eq!(k.session::<Sink>(sink).unwrap().got, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_kernel_built_late_starts_at_its_start_time() {
    // A node restarted at 1.5 s must not see time zero while its channels start.
    let start = Instant::from_millis(1500);
    let k = Kernel::new(KernelConfig {
        start,
        ..KernelConfig::default()
    });
    assert_eq!(k.now(), start);
    assert_eq!(Kernel::new(KernelConfig::default()).now(), Instant::ZERO);
}

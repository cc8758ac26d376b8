//! `viastack group chat NAME`: a group chat on real sockets (seed 001 §2.1, the
//! virtual-synchrony group with total order, through the `viastack::group` handle). Several
//! processes on one machine (or across machines, with `--deployment`) form a group; each prints
//! every view as it changes and every line typed at any member, in the one total order all
//! members share, and sends the lines typed on its stdin. End of input leaves the group.
//!
//! Without a deployment, the members of group NAME are the UDP ports `BASE..BASE+N` of
//! 127.0.0.1, BASE derived from the name (or `--port`); a process takes the first free one
//! unless `--id` says which. The stack is `vsync` + `total-order` over a heartbeat failure
//! detector ([`stack_text`]), or `--stack FILE`.
//!
//! `group peer` (hidden) is the viastack side of `viastack bench group`: one member driven line
//! by line on stdin, answering on stdout with the protocol of `bench/jgroups`'s `GroupPeer`.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use viastack::group::{Group, GroupError, GroupEvent, View};
use viastack::{Deployment, Node, NodeBuilder, NodeId, RecvError, Tag};

/// `viastack group …`.
#[derive(Subcommand)]
pub enum GroupCommand {
    /// Chat in group NAME on loopback: print views and everyone's lines in total order.
    Chat(ChatArgs),
    /// One member of `bench group`, driven on stdin (internal).
    #[command(hide = true)]
    Peer(ChatArgs),
}

/// Options of `group chat`.
#[derive(Args)]
pub struct ChatArgs {
    /// The group's name (picks the ports on loopback).
    pub name: String,
    /// How many members the group can have (ports BASE..BASE+N).
    #[arg(long, default_value_t = 3)]
    pub members: u32,
    /// This member's id (0..N-1); the first free one when left out.
    #[arg(long)]
    pub id: Option<u32>,
    /// The first member's UDP port (default: derived from NAME).
    #[arg(long)]
    pub port: Option<u16>,
    /// A deployment file instead of loopback ports (see docs/APPLICATIONS.md).
    #[arg(long)]
    pub deployment: Option<PathBuf>,
    /// A stack file with a `vsync` channel instead of the built-in one.
    #[arg(long)]
    pub stack: Option<PathBuf>,
    /// Heartbeat period of the built-in stack's failure detector.
    #[arg(long, value_parser = crate::duration_arg, default_value = "50ms")]
    pub heartbeat: viastack_kernel::Duration,
    /// Silence after which the failure detector suspects a member.
    #[arg(long, value_parser = crate::duration_arg, default_value = "500ms")]
    pub suspect: viastack_kernel::Duration,
    /// How long a suspicion must last before the member is excluded.
    #[arg(long, value_parser = crate::duration_arg, default_value = "200ms")]
    pub confirm: viastack_kernel::Duration,
}

/// The built-in group stack: `stacks/group.toml`'s layers (device, checksum, heartbeat,
/// vsync, total-order) with the given failure-detector times and no scenario, plus a `bundle`
/// layer above the checksum: what one kernel batch sends to a member (data copies, `Order`s,
/// statuses) leaves as one datagram (issue 18: twice the messages/s of one datagram each).
pub fn stack_text(
    heartbeat: viastack_kernel::Duration,
    suspect: viastack_kernel::Duration,
    confirm: viastack_kernel::Duration,
) -> String {
    let ms = |d: viastack_kernel::Duration| format!("{}ms", d.as_nanos().div_ceil(1_000_000));
    format!(
        r#"# The group of `viastack group chat` and `bench group`: vsync + total order.
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.pack]
kind = "bundle"
max_bytes = 60000
[layers.hb]
kind = "heartbeat"
interval = "{}"
timeout = "{}"
[layers.vs]
kind = "vsync"
confirm = "{}"
[layers.to]
kind = "total-order"
capacity = 16384
[qos.group]
layers = ["dev", "sum", "pack", "hb", "vs", "to"]
[channels.g]
qos = "group"
"#,
        ms(heartbeat),
        ms(suspect),
        ms(confirm)
    )
}

/// The first port of group `name` on loopback: FNV-1a of the name into 30000..50000.
pub fn base_port(name: &str) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    30000 + (h % 20000) as u16
}

fn builder(args: &ChatArgs, deployment: Deployment) -> anyhow::Result<NodeBuilder> {
    let b = Node::builder()
        .deployment(deployment)
        .linger(viastack_kernel::Duration::from_millis(300));
    Ok(match &args.stack {
        Some(path) => b.stack_file(path),
        None => b.stack_text(
            "group-chat.toml",
            stack_text(args.heartbeat, args.suspect, args.confirm),
        ),
    })
}

/// Joins as `--id`, or as the first member whose address is free.
fn join(args: &ChatArgs) -> anyhow::Result<Group> {
    let deployment = match &args.deployment {
        Some(path) => Deployment::from_file(path)?,
        None => {
            if args.members == 0 || args.members > 1000 {
                bail!("--members must be 1..=1000");
            }
            let base = args.port.unwrap_or_else(|| base_port(&args.name));
            if u32::from(base) + args.members > 65536 {
                bail!("ports {base}+{} run past 65535", args.members);
            }
            let addrs: Vec<SocketAddr> = (0..args.members)
                .map(|i| SocketAddr::from(([127, 0, 0, 1], base + i as u16)))
                .collect();
            Deployment::new(addrs)
        }
    };
    let ids: Vec<u32> = match (args.id, deployment.id) {
        (Some(id), _) => vec![id],
        (None, Some(id)) => vec![id.0],
        (None, None) => (0..deployment.nodes.len() as u32).collect(),
    };
    let mut last = None;
    for id in ids {
        match Group::join_with(builder(args, deployment.clone().with_id(NodeId(id)))?) {
            Ok(g) => return Ok(g),
            Err(GroupError::Open(viastack::OpenError::Bind { .. })) if args.id.is_none() => {
                last = Some(anyhow::anyhow!("every member's address is taken"));
            }
            Err(e) => return Err(e).context(format!("joining group {}", args.name)),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("the deployment has no nodes")))
}

fn show_view(v: &View) -> String {
    let members: Vec<String> = v.members.iter().map(|m| m.0.to_string()).collect();
    format!(
        "view {}.{}: [{}]",
        v.id.counter,
        v.id.coord.node.0,
        members.join(", ")
    )
}

/// Lines of stdin, read by a thread; `None` at the end of input.
fn stdin_lines() -> mpsc::Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// Runs `viastack group …`.
pub fn run(cmd: GroupCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        GroupCommand::Chat(args) => chat(&args),
        GroupCommand::Peer(args) => peer(&args),
    }
}

fn chat(args: &ChatArgs) -> anyhow::Result<ExitCode> {
    let mut group = join(args)?;
    let out = std::io::stdout();
    eprintln!(
        "member {} of group {} (type lines; end of input leaves)",
        group.id().0,
        args.name
    );
    let input = stdin_lines();
    loop {
        loop {
            match input.try_recv() {
                Ok(Some(line)) => {
                    group.send(line.into_bytes())?;
                }
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                    group.leave()?;
                    return Ok(ExitCode::SUCCESS);
                }
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let e = match group.recv_timeout(Duration::from_millis(20)) {
            Ok(e) => e,
            Err(RecvError::Timeout) => continue,
            Err(RecvError::Closed) => return Ok(ExitCode::FAILURE),
        };
        let mut o = out.lock();
        match e {
            GroupEvent::View(v) => writeln!(o, "{}", show_view(&v))?,
            GroupEvent::Message(m) => {
                writeln!(o, "{}: {}", m.from.0, String::from_utf8_lossy(&m.payload))?;
            }
            GroupEvent::Blocked | GroupEvent::Unblocked | GroupEvent::Notice(_) => {}
            GroupEvent::SlowMember(n) => eprintln!("member {} is slow: sends wait", n.0),
            GroupEvent::SendFailed { kind, tags } => {
                eprintln!("{} line(s) not sent: {kind:?}", tags.len());
            }
        }
        o.flush()?;
    }
}

/// Round state of the bench peer: deliveries counted and an order fingerprint.
struct Round {
    id: u32,
    /// Unknown until this member read the round's command.
    expect: Option<u64>,
    got: u64,
    hash: u64,
    start: std::time::Instant,
}

/// This member's sends of a round, flow-controlled: at most [`WINDOW`] of its own messages
/// not yet delivered back to it (total order delivers every member's message to itself
/// too), and messages the group refused (its buffer held back by stability) sent again.
struct Outgoing {
    round: u32,
    size: usize,
    next: u64,
    count: u64,
    retry: VecDeque<u64>,
    tags: HashMap<Tag, u64>,
    in_flight: u64,
}

/// Own messages in flight at most (below the layer's `capacity` of unstable messages).
const WINDOW: u64 = 512;

impl Outgoing {
    /// Sends what the window allows; whether anything is left to send.
    fn pump(&mut self, group: &Group) -> anyhow::Result<bool> {
        while self.in_flight < WINDOW {
            let i = match self.retry.pop_front() {
                Some(i) => i,
                None if self.next < self.count => {
                    self.next += 1;
                    self.next - 1
                }
                None => break,
            };
            let mut payload = vec![0u8; self.size.max(12)];
            payload[..4].copy_from_slice(&self.round.to_be_bytes());
            payload[4..12].copy_from_slice(&i.to_be_bytes());
            match group.try_send(payload) {
                Ok(tag) => {
                    self.tags.insert(tag, i);
                    self.in_flight += 1;
                }
                Err(GroupError::Send(viastack::SendError::Full)) => {
                    self.retry.push_front(i);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(self.next < self.count || !self.retry.is_empty())
    }
}

/// `group peer`: `ready` once a view has `--members` members; `round R N SIZE` sends N
/// messages of SIZE bytes and answers `done R SECONDS HASH` once N × members messages of
/// round R were delivered (HASH: FNV-1a over the (sender, index) order of delivery, equal at
/// every member when the order is total); every later view is reported as `view SIZE`.
fn peer(args: &ChatArgs) -> anyhow::Result<ExitCode> {
    let mut group = join(args)?;
    let me = group.id();
    let n = args.members as usize;
    let out = std::io::stdout();
    let say = |s: String| -> anyhow::Result<()> {
        let mut o = out.lock();
        writeln!(o, "viastack-bench {s}")?;
        o.flush()?;
        Ok(())
    };
    let input = stdin_lines();
    let mut ready = false;
    let mut round: Option<Round> = None;
    let mut sending: Option<Outgoing> = None;
    loop {
        match input.try_recv() {
            Ok(Some(line)) => {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w[..] {
                    ["quit"] => {
                        group.leave()?;
                        return Ok(ExitCode::SUCCESS);
                    }
                    ["stats"] => {
                        let m = group.node().metrics()?;
                        let c: Vec<String> = m
                            .counters
                            .iter()
                            .filter(|(k, v)| **v > 0 && !k.starts_with("kernel"))
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect();
                        say(format!("stats {}", c.join(" ")))?;
                    }
                    ["round", r, count, size] => {
                        let (r, count, size): (u32, u64, usize) =
                            (r.parse()?, count.parse()?, size.parse()?);
                        if round.as_ref().is_none_or(|x| x.id != r) {
                            round = Some(Round::begin(r));
                        }
                        if let Some(x) = round.as_mut() {
                            x.expect = Some(count * n as u64);
                            x.finish(&say)?;
                        }
                        sending = Some(Outgoing {
                            round: r,
                            size,
                            next: 0,
                            count,
                            retry: VecDeque::new(),
                            tags: HashMap::new(),
                            in_flight: 0,
                        });
                    }
                    _ => say(format!("error unknown command: {line}"))?,
                }
                continue;
            }
            Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                group.leave()?;
                return Ok(ExitCode::SUCCESS);
            }
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let busy = match sending.as_mut() {
            Some(o) => o.pump(&group)?,
            None => false,
        };
        let wait = Duration::from_millis(if busy { 1 } else { 5 });
        match group.recv_timeout(wait) {
            Ok(e) => {
                on_event(e, me, &mut round, &mut sending, &mut ready, n, &say)?;
                while let Some(e) = group.try_recv() {
                    on_event(e, me, &mut round, &mut sending, &mut ready, n, &say)?;
                }
            }
            Err(RecvError::Timeout) => {}
            Err(RecvError::Closed) => return Ok(ExitCode::FAILURE),
        }
    }
}

impl Round {
    /// Counting starts at the round's command or its first delivery, whichever comes first.
    #[allow(clippy::disallowed_methods)] // a driver: it times rounds by the wall clock
    fn begin(id: u32) -> Round {
        Round {
            id,
            expect: None,
            got: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            start: std::time::Instant::now(),
        }
    }

    fn finish(&mut self, say: &dyn Fn(String) -> anyhow::Result<()>) -> anyhow::Result<()> {
        if self.expect == Some(self.got) {
            #[allow(clippy::disallowed_methods)]
            let secs = self.start.elapsed().as_secs_f64();
            say(format!("done {} {secs} {:016x}", self.id, self.hash))?;
            self.expect = None;
        }
        Ok(())
    }
}

fn on_event(
    e: GroupEvent,
    me: NodeId,
    round: &mut Option<Round>,
    sending: &mut Option<Outgoing>,
    ready: &mut bool,
    n: usize,
    say: &dyn Fn(String) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match e {
        GroupEvent::View(v) => {
            if !*ready && v.members.len() == n {
                *ready = true;
                say(format!("ready {}", v.id))?;
            } else if *ready {
                say(format!("view {}", v.members.len()))?;
            }
        }
        GroupEvent::Message(m) => {
            if m.payload.len() < 12 {
                return Ok(());
            }
            let id = u32::from_be_bytes([m.payload[0], m.payload[1], m.payload[2], m.payload[3]]);
            if let Some(o) = sending.as_mut().filter(|o| m.from == me && o.round == id) {
                o.in_flight = o.in_flight.saturating_sub(1);
            }
            match round {
                Some(r) if r.id > id => return Ok(()),
                Some(r) if r.id == id => {}
                _ => *round = Some(Round::begin(id)),
            }
            let Some(r) = round.as_mut() else {
                return Ok(());
            };
            r.got += 1;
            for b in m.from.0.to_be_bytes().iter().chain(&m.payload[4..12]) {
                r.hash ^= u64::from(*b);
                r.hash = r.hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            r.finish(say)?;
        }
        GroupEvent::SendFailed {
            kind: viastack::FailureKind::SendRefused,
            tags,
        } if sending.is_some() => {
            if let Some(o) = sending.as_mut() {
                for t in tags {
                    if let Some(i) = o.tags.remove(&t) {
                        o.retry.push_back(i);
                        o.in_flight = o.in_flight.saturating_sub(1);
                    }
                }
            }
        }
        GroupEvent::SendFailed { kind, tags } => {
            say(format!("error {} message(s) failed: {kind:?}", tags.len()))?;
        }
        _ => {}
    }
    Ok(())
}

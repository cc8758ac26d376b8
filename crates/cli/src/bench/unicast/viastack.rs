//! The viastack side of `bench unicast`: two nodes built from a stack file, each on its own
//! thread and UDP socket, driven exactly as `run --net` drives them (kernel, transport, real
//! clock), with a sender that keeps a bounded number of messages in flight.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Kernel, KernelConfig, Message, NodeId, Output, Sendable,
    SessionId,
};
use viastack_net::{Clock, Transport, UdpTransport};
use viastack_stack::{build_node, parse, standard_catalog, BuildEnv};

use super::{pin, Measurement};

/// One node of the pair.
struct Side {
    kernel: Kernel,
    channel: ChannelId,
    device: SessionId,
    transport: UdpTransport,
}

fn build(stack: &str) -> anyhow::Result<(Side, Side)> {
    let catalog = standard_catalog();
    let file = parse("bench.toml", stack, &catalog).map_err(|d| anyhow!("bench stack: {d}"))?;
    let mut sides = Vec::new();
    for n in 0..2u32 {
        let env = BuildEnv {
            node: NodeId(n),
            nodes: 2,
            seed: 1,
        };
        let config = KernelConfig {
            node: NodeId(n),
            seed: u64::from(n) + 1,
            ..KernelConfig::default()
        };
        let built = build_node(&file, &catalog, &env, config).map_err(|d| anyhow!("{d}"))?;
        let channel = built
            .channels
            .iter()
            .find(|(name, _)| name == "data")
            .map(|(_, c)| *c)
            .context("the bench stack needs a `data` channel")?;
        let [(_, device)] = built.devices[..] else {
            bail!("the bench stack needs exactly one device");
        };
        let transport = UdpTransport::bind(([127, 0, 0, 1], 0).into())?;
        sides.push(Side {
            kernel: built.kernel,
            channel,
            device,
            transport,
        });
    }
    let addrs = sides
        .iter()
        .map(|s| s.transport.local_addr())
        .collect::<Result<Vec<_>, _>>()?;
    for s in &mut sides {
        s.transport.set_peers(addrs.clone());
    }
    let b = sides.pop().context("two sides")?;
    let a = sides.pop().context("two sides")?;
    Ok((a, b))
}

impl Side {
    /// Hands transmits to the socket; returns the application deliveries (payload lengths).
    fn drain(&mut self, delivered: &mut impl FnMut(&Event)) {
        let mut transmits = Vec::new();
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) => {
                    if let Dest::Node(n) = t.dest {
                        transmits.push((n, t.message));
                    }
                }
                Output::Deliver(ev) => delivered(&ev),
            }
        }
        let batch: Vec<(NodeId, &[u8])> =
            transmits.iter().map(|(n, m)| (*n, m.as_slice())).collect();
        self.transport.send_batch(&batch);
    }

    /// Waits for datagrams until the kernel's next deadline (at most `cap`), then feeds them
    /// and fires due timers.
    fn step(&mut self, clock: &Clock, cap: Duration, delivered: &mut impl FnMut(&Event)) {
        let wait = self
            .kernel
            .poll_timeout()
            .map_or(cap, |t| clock.until(t).min(cap));
        let mut inbox = Vec::new();
        if let Err(e) = self
            .transport
            .recv(wait, &mut |from, bytes| inbox.push((from, bytes.to_vec())))
        {
            tracing::warn!(error = %e, "bench socket");
        }
        let now = clock.now();
        for (from, bytes) in inbox {
            self.kernel
                .handle_datagram(now, self.device, from, Message::from_wire(bytes));
        }
        self.kernel.handle_timeout(clock.now());
        self.drain(delivered);
    }

    fn send(&mut self, clock: &Clock, to: u32, payload: &[u8]) {
        let ev = Event::sendable(
            SENDABLE.id(),
            Direction::Down,
            self.channel,
            Sendable::new(
                self.kernel.node(),
                Dest::Node(NodeId(to)),
                Message::from_payload(payload),
            ),
        );
        if let Err(e) = self.kernel.inject(clock.now(), ev) {
            tracing::warn!(error = %e, "bench message refused");
        }
    }
}

fn is_data(ev: &Event) -> bool {
    ev.sendable_ref().is_some()
}

/// Moves `count` messages of `size` bytes from node 0 to node 1, at most `window` in flight.
pub fn throughput(
    stack: &str,
    size: usize,
    count: u64,
    window: u64,
) -> anyhow::Result<Measurement> {
    let (mut a, mut b) = build(stack)?;
    let delivered = Arc::new(AtomicU64::new(0));
    let clock = Clock::start();
    let cap = Duration::from_millis(2);
    let done = Arc::clone(&delivered);
    let receiver = std::thread::spawn(move || -> (u64, Option<Instant>) {
        pin(1);
        let mut bytes = 0u64;
        let mut last = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        while done.load(Ordering::Relaxed) < count && Instant::now() < deadline {
            b.step(&clock, cap, &mut |ev: &Event| {
                if let Some(s) = ev.sendable_ref() {
                    bytes += s.message.len() as u64;
                    done.fetch_add(1, Ordering::Relaxed);
                    last = Some(Instant::now());
                }
            });
        }
        tracing::debug!(counters = ?b.kernel.counters(), "bench receiver");
        (bytes, last)
    });
    pin(0);
    let payload = vec![0x5au8; size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let mut sent = 0u64;
    while delivered.load(Ordering::Relaxed) < count && Instant::now() < deadline {
        while sent < count && sent - delivered.load(Ordering::Relaxed) < window {
            a.send(&clock, 1, &payload);
            sent += 1;
        }
        a.drain(&mut |_| {});
        a.step(&clock, cap, &mut |_| {});
    }
    tracing::debug!(counters = ?a.kernel.counters(), "bench sender");
    let (bytes, last) = receiver
        .join()
        .map_err(|_| anyhow!("bench receiver panicked"))?;
    let messages = delivered.load(Ordering::Relaxed);
    if messages < count {
        bail!("only {messages} of {count} messages arrived within 60 s");
    }
    let secs = last.map_or(f64::NAN, |l| (l - start).as_secs_f64());
    Ok(Measurement {
        messages,
        bytes,
        secs,
    })
}

/// Ping-pong of `size`-byte messages between the two nodes: round-trip times in µs.
pub fn pingpong(stack: &str, size: usize, rounds: u32) -> anyhow::Result<Vec<f64>> {
    let (mut a, mut b) = build(stack)?;
    let clock = Clock::start();
    let cap = Duration::from_millis(2);
    let stop = Arc::new(AtomicU64::new(0));
    let stop_b = Arc::clone(&stop);
    let echo = std::thread::spawn(move || {
        pin(1);
        let payload = vec![7u8; size];
        while stop_b.load(Ordering::Relaxed) == 0 {
            let mut got = 0;
            b.step(&clock, cap, &mut |ev: &Event| {
                if is_data(ev) {
                    got += 1;
                }
            });
            for _ in 0..got {
                b.send(&clock, 0, &payload);
            }
            b.drain(&mut |_| {});
        }
    });
    pin(0);
    let payload = vec![7u8; size];
    let mut rtts = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = Instant::now();
        a.send(&clock, 1, &payload);
        a.drain(&mut |_| {});
        let mut back = false;
        let deadline = t + Duration::from_secs(5);
        while !back && Instant::now() < deadline {
            a.step(&clock, cap, &mut |ev: &Event| back |= is_data(ev));
        }
        if !back {
            stop.store(1, Ordering::Relaxed);
            bail!("ping-pong reply lost for 5 s");
        }
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    stop.store(1, Ordering::Relaxed);
    echo.join().map_err(|_| anyhow!("echo panicked"))?;
    Ok(rtts)
}

//! The viastack side of `bench unicast`: two nodes built from a stack file, each on its own
//! thread and UDP socket, driven as `run --net` drives them (kernel, transport, real clock).
//!
//! The two threads share nothing but the sockets, as two processes would (issue 13 §5): the
//! receiver returns credits over the stack (an 8-byte message with its delivered count every
//! quarter window and at the end), the sender keeps at most a window of messages beyond the
//! last credit, and the round ends when the final credit reaches the sender. Each driver call
//! is one batch for the kernel (`begin_batch`/`end_batch`): the messages the sender hands over
//! at once, and the datagrams of one `recvmmsg`, so a `bundle` layer packs what they cause.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
            ..BuildEnv::default()
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
    /// and fires due timers, as one batch.
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
        self.kernel.begin_batch();
        for (from, bytes) in inbox {
            self.kernel
                .handle_datagram(now, self.device, from, Message::from_wire(bytes));
        }
        self.kernel.handle_timeout(clock.now());
        self.kernel.end_batch(clock.now());
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

/// CPU time of the calling thread (for the debug log: where a lane's time goes).
fn thread_cpu() -> Option<Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(Duration::from)
}

fn is_data(ev: &Event) -> bool {
    ev.sendable_ref().is_some()
}

/// Moves `count` messages of `size` bytes from node 0 to node 1, at most `window` beyond the
/// receiver's last credit; the time from the first send to the final credit's arrival.
pub fn throughput(
    stack: &str,
    size: usize,
    count: u64,
    window: u64,
) -> anyhow::Result<Measurement> {
    let (mut a, mut b) = build(stack)?;
    let clock = Clock::start();
    let cap = Duration::from_millis(2);
    // Set by the sender once it holds the final credit: the receiver's signal to stop
    // stepping (it answers retransmissions until then), never read for the measurement.
    let finished = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&finished);
    let credit_every = (window / 4).max(1);
    let receiver = std::thread::Builder::new()
        .name("bench-receiver".into())
        .spawn(move || -> (u64, u64) {
            pin(1);
            let (mut messages, mut bytes, mut credited) = (0u64, 0u64, 0u64);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                b.step(&clock, cap, &mut |ev: &Event| {
                    if let Some(s) = ev.sendable_ref() {
                        bytes += s.message.len() as u64;
                        messages += 1;
                    }
                });
                if messages >= credited + credit_every || (messages == count && credited < count) {
                    credited = messages;
                    b.send(&clock, 0, &credited.to_be_bytes());
                    b.drain(&mut |_| {});
                }
            }
            tracing::debug!(counters = ?b.kernel.counters(), cpu = ?thread_cpu(), "bench receiver");
            (messages, bytes)
        })?;
    pin(0);
    let payload = vec![0x5au8; size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let (mut sent, mut credit) = (0u64, 0u64);
    while credit < count && Instant::now() < deadline {
        if sent < count && sent - credit < window {
            a.kernel.begin_batch();
            while sent < count && sent - credit < window {
                a.send(&clock, 1, &payload);
                sent += 1;
            }
            a.kernel.end_batch(clock.now());
            a.drain(&mut |_| {});
        }
        a.step(&clock, cap, &mut |ev: &Event| {
            if let Some(s) = ev.sendable_ref() {
                if let Ok(c) = <[u8; 8]>::try_from(s.message.as_slice()) {
                    credit = credit.max(u64::from_be_bytes(c));
                }
            }
        });
    }
    let secs = start.elapsed().as_secs_f64();
    finished.store(true, Ordering::Relaxed);
    tracing::debug!(counters = ?a.kernel.counters(), cpu = ?thread_cpu(), secs, "bench sender");
    let (messages, bytes) = receiver
        .join()
        .map_err(|_| anyhow!("bench receiver panicked"))?;
    if credit < count {
        bail!("only {credit} of {count} messages were credited within 60 s ({messages} arrived)");
    }
    Ok(Measurement {
        messages,
        bytes,
        secs,
        cpu_secs: None,
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

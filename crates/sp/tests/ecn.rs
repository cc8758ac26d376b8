//! Explicit congestion notification on real sockets (issue 4: CB carries ECN): `SpSocket`
//! marks its datagrams ECT(0), and a path that marks them CE makes the receiver echo it and
//! the sender halve its congestion window.
//!
//! The marking path is a private network namespace whose loopback has an nftables rule
//! setting CE on a fifth of the datagrams to the receiver's port, as a congested ECN router
//! would. It needs root (to create the namespace) and the `ip` and `nft` tools
//! (`scripts/setup.sh`, run by the test command, installs iproute2 and nftables); without
//! them, or without the right to create a namespace, the test says so and passes, unless
//! `VIASTACK_REQUIRE_NETNS` is set (as `.ci/run` does when it runs as root).
#![allow(clippy::unwrap_used)]

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use viastack_sp::socket::SpSocket;
use viastack_sp::Config;

/// The ECN bits of the next datagram `socket` receives (it must have IP_RECVTOS set).
fn ecn_of_next(socket: &UdpSocket) -> u8 {
    let mut buf = [0u8; 2048];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut cmsg = nix::cmsg_space!(i32);
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .unwrap();
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::Ipv4Tos(tos) = c {
            return tos & 0b11;
        }
    }
    panic!("no TOS control message");
}

#[test]
fn datagrams_leave_marked_ect0_unless_ecn_is_off() {
    for (ecn, want) in [(true, 0b10), (false, 0b00)] {
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&peer, sockopt::IpRecvTos, &true).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let addr = peer.local_addr().unwrap();
        let config = Config {
            ecn,
            conn_timeout: viastack_kernel::Duration::from_millis(20),
            attempts: 1,
            ..Config::default()
        };
        let mut sp = SpSocket::bind("127.0.0.1:0", config, false).unwrap();
        // Nobody answers the START; it is the datagram looked at.
        let _ = sp.connect(addr, Duration::from_millis(100));
        assert_eq!(ecn_of_next(&peer), want, "ecn {ecn}");
    }
}

/// Whether `tool` can be started (`ip -V`, `nft -v` print their versions).
fn tool_runs(tool: &str) -> bool {
    let flag = if tool == "ip" { "-V" } else { "-v" };
    Command::new(tool)
        .arg(flag)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Says why the test cannot run here and returns, unless CI demands it runs
/// (`VIASTACK_REQUIRE_NETNS`, set by `.ci/run` as root): then the missing environment fails it.
fn skip(reason: &str) {
    assert!(
        std::env::var_os("VIASTACK_REQUIRE_NETNS").is_none(),
        "cannot run the ECN test: {reason}"
    );
    eprintln!("skipped: {reason}");
}

/// Runs `cmd` in the current network namespace; panics with its output if it fails.
fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} cannot run ({e}): install iproute2 and nftables"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_path_that_marks_congestion_halves_the_senders_window() {
    // Namespaces belong to threads: this one gets its own network, and the threads it starts
    // inherit it.
    let t = std::thread::spawn(|| {
        if let Some(tool) = ["ip", "nft"].into_iter().find(|t| !tool_runs(t)) {
            skip(&format!(
                "`{tool}` is not installed (scripts/setup.sh installs iproute2 and nftables as root)"
            ));
            return;
        }
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            skip(&format!(
                "cannot create a network namespace ({e}); needs root"
            ));
            return;
        }
        run("ip", &["link", "set", "lo", "up"]);
        let config = Config {
            block_size: 1_000,
            ..Config::default()
        };
        let mut receiver = SpSocket::bind("127.0.0.1:0", config.clone(), true).unwrap();
        let addr = receiver.local_addr().unwrap();
        let port = addr.port().to_string();
        run("nft", &["add", "table", "ip", "viastack"]);
        run(
            "nft",
            &["add chain ip viastack out { type filter hook output priority 0 ; }"],
        );
        run(
            "nft",
            &[
                "add", "rule", "ip", "viastack", "out", "udp", "dport", &port, "numgen", "random",
                "mod", "5", "<", "1", "ip", "ecn", "set", "ce",
            ],
        );
        let messages: Vec<Vec<u8>> = (0..40u32)
            .map(|i| (0..20_000u32).map(|j| (i * 7 + j) as u8).collect())
            .collect();
        let n = messages.len();
        let rx = std::thread::spawn(move || {
            let h = receiver.accept(Some(Duration::from_secs(5))).unwrap();
            let mut got = Vec::new();
            while got.len() < n {
                got.push(
                    receiver
                        .recv_message(Some(Duration::from_secs(5)))
                        .unwrap()
                        .data,
                );
            }
            let stats = receiver.stats(h);
            receiver.run_for(Duration::from_millis(200)).unwrap();
            (got, stats)
        });
        let mut sender = SpSocket::bind("127.0.0.1:0", config, false).unwrap();
        let h = sender.connect(addr, Duration::from_secs(5)).unwrap();
        for m in &messages {
            sender.send_message(h, m.clone(), 0).unwrap();
        }
        sender.flush(h, Duration::from_secs(10)).unwrap();
        let tx = sender.stats(h).unwrap();
        let _ = sender.close(h, Duration::from_secs(1));
        let (got, rx_stats) = rx.join().unwrap();
        let rx_stats = rx_stats.unwrap();
        // Everything arrives, intact and in order: marks replace drops.
        assert!(got == messages, "messages differ");
        // The marks were seen, echoed and answered.
        assert!(rx_stats.ce_received > 0, "{rx_stats:?}");
        assert!(tx.ecn_echoes > 0, "{tx:?}");
        assert!(tx.congestion_reductions > 0, "{tx:?}");
        assert_eq!(tx.retransmits, 0, "{tx:?}");
    });
    t.join().unwrap();
}

//! The references of `bench unicast`, measured in the same run as viastack: kernel TCP, raw
//! kernel UDP (no reliability) and quinn (QUIC, a real peer). Each moves `count` messages of
//! `size` bytes from a sender thread to a receiver thread over loopback.

#![allow(clippy::disallowed_methods)] // benchmarks read the clock

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{pin, Measurement};

/// Kernel TCP: one connection, messages written back to back (length-prefixed), read to the
/// end by the receiver.
pub fn tcp(size: usize, count: u64) -> anyhow::Result<Measurement> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> anyhow::Result<(u64, u64)> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; 1 << 20];
        let (mut bytes, want) = (0u64, count * (size as u64 + 4));
        while bytes < want {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
        Ok((bytes, bytes / (size as u64 + 4)))
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut msg = vec![0x5au8; size + 4];
    msg[..4].copy_from_slice(&(size as u32).to_be_bytes());
    let start = Instant::now();
    for _ in 0..count {
        s.write_all(&msg)?;
    }
    s.flush()?;
    let (bytes, messages) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("tcp receiver panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    Ok(Measurement {
        messages,
        bytes: bytes - messages * 4,
        secs,
        cpu_secs: None,
    })
}

/// Largest UDP payload over IPv4.
pub const MAX_UDP: usize = 65_507;

/// Raw kernel UDP, no reliability: the sender blasts datagrams (a message above 65,507 bytes is
/// sent as two datagrams), the receiver counts what arrives until a quiet period.
pub fn udp(size: usize, count: u64) -> anyhow::Result<Measurement> {
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let addr = rx.local_addr()?;
    let pieces = size.div_ceil(MAX_UDP).max(1);
    let piece = size.div_ceil(pieces);
    let receiver = std::thread::spawn(move || -> (u64, Option<Instant>) {
        pin(1);
        let mut buf = vec![0u8; 65_536];
        let mut bytes = 0u64;
        let mut last = None;
        while let Ok(n) = rx.recv(&mut buf) {
            bytes += n as u64;
            last = Some(Instant::now());
            if bytes >= count * size as u64 {
                break;
            }
        }
        (bytes, last)
    });
    pin(0);
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    let msg = vec![0x5au8; piece];
    let start = Instant::now();
    for _ in 0..count {
        for _ in 0..pieces {
            // A full socket buffer drops the datagram: that is raw UDP.
            let _ = tx.send_to(&msg, addr);
        }
    }
    let (bytes, last) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("udp receiver panicked"))?;
    let secs = last.map_or(f64::NAN, |l| (l - start).as_secs_f64());
    Ok(Measurement {
        messages: bytes / size as u64,
        bytes,
        secs,
        cpu_secs: None,
    })
}

/// Raw UDP ping-pong of `size`-byte datagrams: round-trip times in µs.
pub fn udp_pingpong(size: usize, rounds: u32) -> anyhow::Result<Vec<f64>> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    b.set_read_timeout(Some(Duration::from_secs(2)))?;
    a.set_read_timeout(Some(Duration::from_secs(2)))?;
    let echo = std::thread::spawn(move || -> anyhow::Result<()> {
        pin(1);
        let mut buf = [0u8; 2048];
        for _ in 0..rounds {
            let n = b.recv(&mut buf)?;
            b.send(&buf[..n])?;
        }
        Ok(())
    });
    pin(0);
    let msg = vec![7u8; size];
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t = Instant::now();
        a.send(&msg)?;
        a.recv(&mut buf)
            .context("raw UDP ping-pong lost a datagram")?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo panicked"))??;
    Ok(rtts)
}

/// quinn's transport settings for the loopback run: its defaults size the flow-control windows
/// for a 100 Mbit/s × 100 ms path (1.25 MB per stream), which caps it well below what loopback
/// carries; the reference gets windows as large as what viastack keeps in flight (4 MiB) and
/// more, so it is measured at its best. Larger MTUs were tried and make quinn slower (its
/// packet pacing and GSO are tuned for ~1,500-byte packets), so MTU discovery keeps its default.
fn quinn_transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20));
    t.receive_window(quinn::VarInt::from_u32(64 << 20));
    t.send_window(64 << 20);
    Arc::new(t)
}

/// quinn (QUIC): one unidirectional stream carrying every message, read to the end.
pub fn quinn(size: usize, count: u64) -> anyhow::Result<Measurement> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    let cert_der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
    let mut server_config =
        quinn::ServerConfig::with_single_cert(vec![cert_der.clone()], key.into())?;
    server_config.transport_config(quinn_transport());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der)?;
    let mut client_config = quinn::ClientConfig::with_root_certificates(Arc::new(roots))?;
    client_config.transport_config(quinn_transport());

    let server_addr: SocketAddr = "127.0.0.1:0".parse()?;
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || -> anyhow::Result<u64> {
        pin(1);
        rt()?.block_on(async move {
            let endpoint = quinn::Endpoint::server(server_config, server_addr)?;
            addr_tx.send(endpoint.local_addr()?)?;
            let conn = endpoint
                .accept()
                .await
                .context("no incoming connection")?
                .await?;
            let mut stream = conn.accept_uni().await?;
            let mut buf = vec![0u8; 1 << 20];
            let mut bytes = 0u64;
            while let Some(n) = stream.read(&mut buf).await? {
                bytes += n as u64;
            }
            conn.close(0u32.into(), b"done");
            endpoint.wait_idle().await;
            Ok(bytes)
        })
    });
    pin(0);
    let addr = addr_rx.recv()?;
    let start = Instant::now();
    rt()?.block_on(async move {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
        endpoint.set_default_client_config(client_config);
        let conn = endpoint.connect(addr, "localhost")?.await?;
        let mut stream = conn.open_uni().await?;
        let msg = vec![0x5au8; size];
        for _ in 0..count {
            stream.write_all(&msg).await?;
        }
        stream.finish()?;
        stream.stopped().await?;
        conn.closed().await;
        anyhow::Ok(())
    })?;
    let bytes = server
        .join()
        .map_err(|_| anyhow::anyhow!("quinn server panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    Ok(Measurement {
        messages: bytes / size as u64,
        bytes,
        secs,
        cpu_secs: None,
    })
}

//! The three-language example (`examples/bus/three-languages.tb`, run at 100 MB by
//! `examples/bus/run.sh`) at 3 MB, above the bus's 2 MiB threshold: a Python producer, a Java
//! transformer (the Java client compiled with javac) and the Rust consumer are started by the
//! script's `execute` atoms against a real bus driver on a Unix socket; the trace must show
//! that both values the script bound were references (the bus never carried the bytes) and
//! that the consumer's check passed, with one fetch. Skips, saying so, when python3 or a JDK
//! is missing (scripts/setup.sh installs them).

// The shared body and the PEM helper are not `#[test]` functions themselves.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use viastack::Instant;
use viastack_bus::interp::{Bus, Config};
use viastack_bus::net::{serve, Endpoint, Listener, ServeOptions};
use viastack_bus::script::Script;
use viastack_bus::Arena;

const BYTES: usize = 3_000_000;

/// The trace, collected for the test to read.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<u8>>>);

impl Write for Collected {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("trace lock poisoned"))?
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn a_value_goes_python_to_java_to_rust_by_reference() {
    three_languages(false);
}

/// The same on a TLS bus: every tool verifies the bus's certificate (given as
/// `VIASTACK_BUS_CA`), the Python producer and the Java transformer serve their values over TLS
/// and announce `tls:HOST:PORT;sha256=FP`, and the Java transformer and the Rust consumer
/// fetch only from the pinned owner (docs/BUS.md "TLS on the owners' listeners").
#[test]
fn a_value_goes_python_to_java_to_rust_by_reference_on_a_tls_bus() {
    let openssl = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !openssl {
        eprintln!("skipped: the Python owner's throwaway certificate needs the openssl command");
        return;
    }
    three_languages(true);
}

fn three_languages(tls: bool) {
    for tool in ["python3", "javac", "java"] {
        if !have(tool) {
            eprintln!("skipped: the three-language bus example needs {tool} (scripts/setup.sh installs it)");
            return;
        }
    }
    let root = root();
    let dir = std::env::temp_dir().join(format!(
        "viastack-3lang-{}-{}",
        std::process::id(),
        if tls { "tls" } else { "plain" }
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let classes = dir.join("classes");
    let javac = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .args(
            std::fs::read_dir(root.join("clients/java/src/main/java/org/viastack/bus"))
                .unwrap()
                .map(|e| e.unwrap().path()),
        )
        .arg(root.join("examples/bus/Transformer.java"))
        .status()
        .unwrap();
    assert!(javac.success(), "javac failed");

    // The shipped script, at 3 MB, with the paths run.sh passes through the environment.
    let src = std::fs::read_to_string(root.join("examples/bus/three-languages.tb")).unwrap();
    assert!(src.contains("toolbus(Main(100000000))"));
    let src = src
        .replace(
            "toolbus(Main(100000000))",
            &format!("toolbus(Main({BYTES}))"),
        )
        .replace(
            "$VIASTACK_EXAMPLE",
            &root.join("examples/bus").display().to_string(),
        )
        .replace("$VIASTACK_JAVA_CP", &classes.display().to_string())
        .replace("$VIASTACK_BUS_CONSUMER", env!("CARGO_BIN_EXE_bus-consumer"));
    let mut opts = ServeOptions::default();
    let (src, sock) = if tls {
        // The bus's certificate (for "localhost"), trusted by the tools through the
        // environment their commands set.
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let ca = dir.join("bus.pem");
        std::fs::write(&ca, pem("CERTIFICATE", ck.cert.der())).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()),
        );
        opts.tls = Some(
            viastack_bus::net::tls_server_config_der(vec![ck.cert.der().clone()], key).unwrap(),
        );
        let env = format!("command = \"VIASTACK_BUS_CA={} ", ca.display());
        (src.replace("command = \"", &env), "127.0.0.1:0".to_string())
    } else {
        (src, format!("unix:{}", dir.join("bus.sock").display()))
    };
    let mut arena = Arena::new();
    let script = Script::parse("three-languages.tb", &src, &mut arena).unwrap();
    let config = Config {
        trace: true,
        ..Config::default()
    };
    let listener = Listener::bind(&Endpoint::parse(&sock)).unwrap();
    let bus = Bus::new(script, arena, config, Instant::ZERO);
    let trace = Collected::default();
    opts.trace = Some(Box::new(trace.clone()));
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(serve(listener, bus, opts).map_err(|e| e.to_string()));
    });
    let result = ended
        .recv_timeout(Duration::from_secs(180))
        .expect("the script did not end within 3 minutes");
    let _ = std::fs::remove_dir_all(&dir);
    let counters = result.unwrap();
    // Tool to tool: nothing relayed through the bus, nothing refused, no bad frame.
    assert_eq!(counters.relays, 0, "{counters:?}");
    assert_eq!(counters.relayed_chunks, 0, "{counters:?}");
    assert_eq!(counters.refused_grants, 0, "{counters:?}");
    assert_eq!(counters.bad_frames, 0, "{counters:?}");

    let text = String::from_utf8(trace.0.lock().unwrap().clone()).unwrap();
    let mut binds = std::collections::HashMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(b) = v.get("binds").and_then(|b| b.as_object()) {
            for (k, v) in b {
                binds
                    .entry(k.clone())
                    .or_insert_with(|| v.as_str().unwrap_or_default().to_string());
            }
        }
    }
    let v = &binds["V"];
    let w = &binds["W"];
    assert!(
        v.starts_with("@ref("),
        "the producer's value went by value: {v:.200}"
    );
    assert!(
        v.contains(",data(\"") && v.ends_with(",<blob>))"),
        "V is the producer's data by its shape: {v}"
    );
    assert!(
        w.starts_with("@ref("),
        "the transformer's value went by value: {w:.200}"
    );
    assert!(
        w.contains(",transformed(\"complement\",") && w.ends_with(",<blob>))"),
        "W is the transformer's result by its shape: {w}"
    );
    for (name, r) in [("producer's", v), ("transformer's", w)] {
        assert_eq!(
            r.contains(",\"tls:127.0.0.1:"),
            tls,
            "the {name} reference names a pinned TLS listener exactly on a TLS bus: {r:.200}"
        );
    }
    assert_ne!(
        v.split(',').next(),
        w.split(',').next(),
        "two owners: the producer and the transformer"
    );
    assert_eq!(
        binds["R"],
        format!("ok({BYTES},1)"),
        "the Rust consumer's verdict"
    );
}

/// PEM armour for DER bytes (rcgen is built without its `pem` feature).
fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b = String::new();
    for c in der.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                b.push(B64[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                b.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out + &format!("-----END {label}-----\n")
}

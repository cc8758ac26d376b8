//! End-to-end tests of the `viastack` binary: `check` (route tables and `file:line:` errors),
//! `run` (exit status from the declared property, JSON report, determinism from the seed),
//! `demo`, `layers` (and that docs/LAYERS.md is what it generates), `keygen` (and its key files
//! in stack files) and `bench kernel`.
#![allow(clippy::unwrap_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The workspace root (the binary runs there, so `stacks/…` paths work).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `viastack` with `args` from the workspace root.
fn viastack<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_viastack"))
        .args(args)
        .current_dir(root())
        .env_remove("VIASTACK_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// `code`, or a panic showing everything the command printed.
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", stdout(o)))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

/// A scratch directory of one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("viastack-cli-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, src: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, src).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The 1-based line of `src` containing `marker` (which must occur exactly once).
fn line_of(src: &str, marker: &str) -> usize {
    let hits: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "marker `{marker}` must be on exactly one line"
    );
    hits[0]
}

/// The `file:line: message` lines of stderr for `path`, as (line, whole line).
fn diagnostics(path: &Path, err: &str) -> Vec<(usize, String)> {
    let prefix = format!("{}:", path.display());
    err.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (n, _) = rest.split_once(": ")?;
            Some((n.parse().ok()?, l.to_string()))
        })
        .collect()
}

/// Writes `src`, runs `viastack check` on it and asserts exit status 1 and exactly the
/// `expected` diagnostics, in order: for each, the line holding the marker and the words the
/// message must contain.
fn check_fails(test: &str, src: &str, expected: &[(&str, &[&str])]) {
    let scratch = Scratch::new(test);
    let path = scratch.write("stack.toml", src);
    let o = viastack([OsStr::new("check"), path.as_os_str()]);
    assert_exit(&o, 1);
    assert!(o.stdout.is_empty(), "a failed check prints no report");
    let err = stderr(&o);
    let got = diagnostics(&path, &err);
    assert_eq!(got.len(), expected.len(), "diagnostics:\n{err}");
    for ((line, text), (marker, words)) in got.iter().zip(expected) {
        let want = line_of(src, marker);
        assert_eq!(*line, want, "`{marker}` is on line {want}:\n{err}");
        assert!(
            text.starts_with(&format!("{}:{want}: ", path.display())),
            "{text}"
        );
        for w in *words {
            assert!(text.contains(w), "`{w}` missing from: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// check
// ---------------------------------------------------------------------------------------------

#[test]
fn check_accepts_every_shipped_stack_and_prints_its_routes() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("stacks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension() == Some(OsStr::new("toml")))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let rel = file.strip_prefix(root()).unwrap().to_path_buf();
        let o = viastack([OsStr::new("check"), rel.as_os_str()]);
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert!(
            out.starts_with(&format!("{}: ok\n", rel.display())),
            "{out}"
        );
        assert!(
            out.contains("\nqos "),
            "no route table for {}:\n{out}",
            rel.display()
        );
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with("Sendable") && l.contains("dev ->")),
            "no Sendable route from the device in {}:\n{out}",
            rel.display()
        );
    }
}

/// The route of `event` in QoS `qos` as `check` prints it.
fn route<'a>(out: &'a str, qos: &str, event: &str) -> &'a str {
    let header = format!("qos {qos} (");
    let mut lines = out.lines().skip_while(|l| !l.starts_with(&header));
    assert!(lines.next().is_some(), "no QoS `{qos}` in:\n{out}");
    lines
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| {
            let l = l.trim_start();
            l.strip_prefix(event)
                .filter(|rest| rest.starts_with(' '))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no {event} route in QoS `{qos}`:\n{out}"))
}

#[test]
fn check_prints_the_diamond_route_tables() {
    let o = viastack(["check", "stacks/diamond.toml"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert_eq!(
        route(&out, "data", "Sendable"),
        "dev -> fd -> order -> sync"
    );
    assert_eq!(route(&out, "audio", "Sendable"), "dev -> fd -> sync");
    assert_eq!(route(&out, "video", "Sendable"), "dev -> fd -> sync");
    // Only the ghosts (and fifo for ChannelClose) see non-sendable events; never the device.
    assert_eq!(route(&out, "data", "ChannelClose"), "fd -> order -> sync");
    assert_eq!(route(&out, "audio", "Timer"), "fd -> sync");
    assert!(
        out.contains(
            "data             qos data: dev=dev (explicit)  fd=the-fd (explicit)  \
             order=#3 (default)  sync=the-sync (explicit)"
        ),
        "{out}"
    );
    assert!(out.contains("scenario: 4 nodes"), "{out}");
}

/// Issue 13 §3: the shipped multimedia stack binds only the sync session into video; the sync
/// session fills video's failure-detector slot with the one it shares with audio (automatic
/// binding). Without automatic binding video would get a failure detector of its own.
#[test]
fn check_shows_the_multimedia_video_channel_bound_automatically() {
    let o = viastack(["check", "stacks/multimedia.toml"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let video = out
        .lines()
        .find(|l| l.trim_start().starts_with("video ") && l.contains("qos video:"))
        .unwrap_or_else(|| panic!("no video channel line:\n{out}"));
    assert!(video.contains("fd=the-fd (automatic)"), "{video}");
    assert!(video.contains("sync=the-sync (explicit)"), "{video}");
    assert!(
        video.contains("frag=#") && video.contains("(default)"),
        "{video}"
    );
}

#[test]
fn check_leaves_transparent_layers_off_every_route() {
    let scratch = Scratch::new("transparent");
    let path = scratch.write(
        "t.toml",
        r#"
[layers.dev]
kind = "device"
[layers.clear]
kind = "transparent"
[layers.order]
kind = "fifo"
[qos.q]
layers = ["dev", "clear", "order"]
[channels.c]
qos = "q"
"#,
    );
    let o = viastack([OsStr::new("check"), path.as_os_str()]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("qos q (bottom first: dev < clear < order)"),
        "{out}"
    );
    assert_eq!(route(&out, "q", "Sendable"), "dev -> order");
    assert_eq!(route(&out, "q", "Timer"), "(no layer accepts it)");
    let routes: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("qos q ("))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(!routes.is_empty(), "{out}");
    assert!(routes.iter().all(|l| !l.contains("clear")), "{out}");
}

#[test]
fn check_reports_bad_toml_syntax_at_its_line() {
    check_fails(
        "syntax",
        "[layers.dev]\nkind = \"device\"\nport = = 3\n\n[qos.q]\nlayers = [\"dev\"]\n",
        &[("port = =", &["invalid TOML"])],
    );
}

#[test]
fn check_suggests_a_close_layer_kind() {
    check_fails(
        "kind",
        "[layers.dev]\nkind = \"device\"\n[layers.fd]\nkind = \"ghots\"\n",
        &[(
            "ghots",
            &[
                "layer `fd`",
                "unknown layer kind `ghots`",
                "did you mean `ghost`",
            ],
        )],
    );
}

#[test]
fn check_suggests_a_close_parameter_name() {
    check_fails(
        "param",
        "[layers.dev]\nkind=\"device\"\nprot=1\n",
        &[("prot", &["unknown parameter `prot`", "did you mean `port`"])],
    );
}

#[test]
fn check_refuses_an_ill_typed_parameter() {
    check_fails(
        "type",
        "[layers.dev]\nkind = \"device\"\nport = \"x\"\n",
        &[(
            "port",
            &["parameter `port`", "expected an integer", "found string"],
        )],
    );
}

#[test]
fn check_refuses_an_out_of_range_parameter() {
    check_fails(
        "range",
        "[layers.dev]\nkind = \"device\"\nport = 70000\n",
        &[("port", &["parameter `port`", "0..=65535", "70000"])],
    );
}

#[test]
fn check_refuses_a_qos_naming_an_unknown_layer() {
    check_fails(
        "qos-layer",
        "[layers.dev]\nkind = \"device\"\n[layers.fd]\nkind = \"ghost\"\n\n[qos.q]\nlayers = [\"dev\", \"fx\"]\n",
        &[(
            "layers =",
            &["QoS `q`", "unknown layer `fx`", "did you mean `fd`"],
        )],
    );
}

#[test]
fn check_refuses_a_qos_whose_requirements_nobody_provides() {
    check_fails(
        "requires",
        "[layers.order]\nkind = \"fifo\"\n\n[qos.lonely]\nlayers = [\"order\"]\n",
        &[(
            "[qos.lonely]",
            &[
                "QoS `lonely`",
                "layer `order`",
                "requires",
                "Inbound",
                "hint: ",
                "kind `device`",
            ],
        )],
    );
}

/// Issue 13 §2: a QoS with no transport passed `check` (a heartbeat layer "provided" the
/// `Sendable` everything required) and then lost every message.
#[test]
fn check_refuses_a_qos_without_a_transport_at_the_bottom() {
    check_fails(
        "no-device",
        "[layers.fd]\nkind = \"heartbeat\"\n[layers.order]\nkind = \"fifo\"\n\n[qos.q]\nlayers = [\"fd\", \"order\"]\n",
        &[(
            "[qos.q]",
            &[
                "QoS `q`",
                "layer `fd` requires event `Inbound`",
                "hint: ",
                "transport at its bottom",
            ],
        )],
    );
}

/// Issue 13 §2: a device above another layer passed `check` and the run did nothing.
#[test]
fn check_refuses_a_device_that_is_not_the_bottom_layer() {
    check_fails(
        "device-on-top",
        "[layers.dev]\nkind = \"device\"\n[layers.order]\nkind = \"fifo\"\n\n[qos.q]\nlayers = [\"order\", \"dev\"]\n",
        &[(
            "[qos.q]",
            &[
                "QoS `q`",
                "layer `dev` is a transport",
                "must be the bottom layer",
                "hint: ",
                "layers = [\"dev\", \"order\"]",
            ],
        )],
    );
}

#[test]
fn check_prints_who_provides_each_required_event() {
    let o = viastack(["check", "stacks/reliable.toml"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for layer in ["sum", "rel", "frag"] {
        assert!(
            out.contains(&format!(
                "requires            {layer} needs Inbound from dev"
            )),
            "{out}"
        );
    }
    assert!(out.contains("delivers            reliable fifo"), "{out}");
}

#[test]
fn check_refuses_a_session_bound_to_two_layers() {
    let src = r#"[layers.dev]
kind = "device"
[layers.a]
kind = "ghost"
[layers.b]
kind = "ghost"
[qos.qa]
layers = ["dev", "a"]
[qos.qb]
layers = ["dev", "b"]
[channels.x]
qos = "qa"
bind = { a = "s" }
[channels.y]
qos = "qb"
bind = { b = "s" }
"#;
    let first = line_of(src, "bind = { a");
    check_fails(
        "shared",
        src,
        &[(
            "bind = { b",
            &[
                "session `s`",
                "layer `a` in channel `x`",
                &format!("(line {first})"),
                "layer `b` in channel `y`",
            ],
        )],
    );
}

const SCENARIO_BASE: &str = r#"[layers.dev]
kind = "device"
[qos.q]
layers = ["dev"]
[channels.c]
qos = "q"
[scenario]
nodes = 3
"#;

#[test]
fn check_refuses_a_probability_above_one() {
    check_fails(
        "loss",
        &format!("{SCENARIO_BASE}[scenario.link]\nloss = 1.5\n"),
        &[("loss", &["`loss`", "0..=1", "1.5"])],
    );
}

#[test]
fn check_refuses_a_workload_on_an_unknown_channel() {
    check_fails(
        "workload",
        &format!("{SCENARIO_BASE}[[scenario.workload]]\nchannel = \"nope\"\nmessages = 1\n"),
        &[("\"nope\"", &["unknown channel `nope`", "`c`"])],
    );
}

#[test]
fn check_refuses_a_crash_of_a_node_that_does_not_exist() {
    check_fails(
        "crash",
        &format!("{SCENARIO_BASE}[[scenario.crash]]\nnode = 3\nat = \"1s\"\n"),
        // Node indices are reported at the table that holds them.
        &[(
            "[[scenario.crash]]",
            &["[[scenario.crash]] #1", "node 3 does not exist", "3 nodes"],
        )],
    );
}

#[test]
fn check_reports_every_error_sorted_by_line() {
    // The scenario comes first in the file although it is checked after the layers: the
    // report is still in line order.
    let src = r#"[scenario]
nodes = 2
[scenario.link]
loss = 1.5
[[scenario.crash]]
node = 7
at = "1s"

[layers.dev]
kind = "device"
port = 70000
[layers.fd]
kind = "ghots"
[layers.order]
kind = "fifo"
[qos.lonely]
layers = ["order"]
"#;
    check_fails(
        "many",
        src,
        &[
            ("loss", &["1.5"]),
            ("[[scenario.crash]]", &["node 7 does not exist"]),
            ("port", &["70000"]),
            ("ghots", &["did you mean `ghost`"]),
            ("[qos.lonely]", &["requires", "Inbound"]),
        ],
    );
}

#[test]
fn check_of_a_missing_file_names_it() {
    let scratch = Scratch::new("missing");
    let path = scratch.0.join("no-such-stack.toml");
    let o = viastack([OsStr::new("check"), path.as_os_str()]);
    assert_ne!(o.status.code(), Some(0));
    assert!(o.status.code().is_some(), "killed by a signal");
    assert!(
        stderr(&o).contains(&path.display().to_string()),
        "{}",
        stderr(&o)
    );
}

// ---------------------------------------------------------------------------------------------
// run
// ---------------------------------------------------------------------------------------------

#[test]
fn run_diamond_holds_its_property() {
    let o = viastack(["run", "stacks/diamond.toml"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("property   reliable-fifo: holds"), "{out}");
    assert!(out.contains("seed 1"), "{out}");
}

/// Issue 16 §2: the shipped overlay stacks check, run in the simulator and pass their
/// `overlay-multicast` expectation (16 nodes with late starts, a leave and a crash).
#[test]
fn overlay_stacks_check_and_run_with_their_expectations() {
    for (file, topology) in [
        ("stacks/overlay-dt.toml", "topology=\"dt\""),
        ("stacks/overlay-hc.toml", "topology=\"hypercube\""),
    ] {
        let o = viastack(["check", file]);
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert!(out.contains(topology), "{file}: {out}");
        assert_eq!(
            route(&out, "overlay", "Sendable"),
            "dev -> sum -> net",
            "{file}"
        );
        let o = viastack(["run", file, "--json"]);
        assert_exit(&o, 0);
        let r = json(&o);
        assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{file}: {r}");
        assert_eq!(r["verdict"]["expect"], "overlay-multicast", "{file}: {r}");
        // 14 nodes stay up (node 5 leaves, node 6 crashes), 10 multicasts each, each delivered
        // at the 13 others.
        assert_eq!(num(&r, "sent"), 140.0, "{file}: {r}");
        assert_eq!(r["counters"]["net.delivered"], 140 * 13, "{file}: {r}");
        assert_eq!(num(&r, "duplicated"), 0.0, "{file}: {r}");
    }
}

/// Issue 16 §3: the shipped `messagestore` stacks (a delivery service per message above the DT
/// overlay) check and pass `overlay-multicast`: 12 nodes, 10 multicasts each, every one
/// delivered by the service at the 11 others — h2hack, e2eack and sync over 10 % loss, dupelim
/// under flooding.
#[test]
fn messagestore_stacks_check_and_run_with_their_expectations() {
    for service in ["h2hack", "e2eack", "sync", "dupelim"] {
        let file = format!("stacks/overlay-{service}.toml");
        let o = viastack(["check", file.as_str()]);
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert_eq!(
            route(&out, service, "Sendable"),
            "dev -> sum -> net -> store",
            "{file}"
        );
        let o = viastack(["run", file.as_str(), "--json"]);
        assert_exit(&o, 0);
        let r = json(&o);
        assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{file}: {r}");
        assert_eq!(r["verdict"]["expect"], "overlay-multicast", "{file}: {r}");
        assert_eq!(num(&r, "sent"), 120.0, "{file}: {r}");
        assert_eq!(
            r["counters"]["store.to_application"],
            120 * 11,
            "{file}: {r}"
        );
        assert_eq!(num(&r, "duplicated"), 0.0, "{file}: {r}");
    }
    // ordering: per-sender order under reordering links (`expect = "fifo"`).
    let o = viastack(["run", "stacks/overlay-ordering.toml", "--json"]);
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{r}");
    assert_eq!(r["verdict"]["expect"], "fifo", "{r}");
    assert_eq!(num(&r, "out_of_order"), 0.0, "{r}");
}

/// A `messagestore` whose service does not load is refused at build time, with the stack
/// file's line and the service file's `file:line:col`.
#[test]
fn messagestore_with_a_broken_service_is_refused_with_both_positions() {
    let dir = Scratch::new("mstore-broken");
    let bad = dir.write(
        "bad.scxml",
        "<scxml xmlns=\"http://www.w3.org/2005/07/scxml\" initial=\"a\">\n<state id=\"a\"/>\n</scxml>\n",
    );
    let shipped = std::fs::read_to_string(root().join("stacks/overlay-h2hack.toml")).unwrap();
    let src = shipped.replace(
        "service = \"../specs/h2hack.scxml\"",
        &format!("service = \"{}\"", bad.display()),
    );
    let stack = dir.write("s.toml", &src);
    let line = line_of(&src, "bad.scxml");
    let o = viastack([OsStr::new("check"), stack.as_os_str()]);
    assert_exit(&o, 1);
    let err = String::from_utf8_lossy(&o.stderr).to_string() + &stdout(&o);
    assert!(err.contains(&format!("s.toml:{line}:")), "{err}");
    assert!(err.contains("parameter `service`"), "{err}");
    assert!(err.contains("bad.scxml:1:1: error"), "{err}");
}

#[test]
fn run_diamond_json_reports_every_message_delivered() {
    let o = viastack(["run", "stacks/diamond.toml", "--json"]);
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{r}");
    assert_eq!(r["verdict"]["expect"], "reliable-fifo", "{r}");
    // 4 nodes x (500 audio + 200 video + 100 data).
    assert_eq!(num(&r, "sent"), 3200.0, "{r}");
    assert_eq!(r["delivered"], r["sent"], "{r}");
    assert_eq!(num(&r, "lost"), 0.0, "{r}");
    assert_eq!(num(&r, "seed"), 1.0, "{r}");
    assert!(
        r["trace_hash"].as_str().is_some_and(|h| h.len() == 16),
        "{r}"
    );
}

/// Three nodes all-to-all on channel `c` over `link`, expecting `expect`; with a fifo layer if
/// `fifo`.
fn scenario(fifo: bool, expect: &str, link: &str) -> String {
    let (layer, layers) = if fifo {
        ("[layers.order]\nkind = \"fifo\"\n", r#"["dev", "order"]"#)
    } else {
        ("", r#"["dev"]"#)
    };
    format!(
        r#"[layers.dev]
kind = "device"
{layer}[qos.q]
layers = {layers}
[channels.c]
qos = "q"
[scenario]
nodes = 3
seed = 5
duration = "1s"
expect = "{expect}"
[scenario.link]
latency = "1ms"
{link}
[[scenario.workload]]
channel = "c"
messages = 200
size = 64
interval = "1ms"
"#
    )
}

#[test]
fn run_exits_2_and_names_property_and_seed_when_reliability_fails() {
    let scratch = Scratch::new("lossy");
    let path = scratch.write("lossy.toml", &scenario(true, "reliable-fifo", "loss = 0.2"));
    let o = viastack([OsStr::new("run"), path.as_os_str()]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("`reliable-fifo` violated"), "{err}");
    assert!(err.contains("seed 5"), "{err}");
    assert!(err.contains("never delivered"), "{err}");
    assert!(stdout(&o).contains("VIOLATED"), "{}", stdout(&o));
}

#[test]
fn run_without_fifo_over_jitter_violates_fifo_and_with_fifo_holds() {
    let scratch = Scratch::new("jitter");
    let bare = scratch.write("bare.toml", &scenario(false, "fifo", "jitter = \"5ms\""));
    let o = viastack([OsStr::new("run"), bare.as_os_str(), OsStr::new("--json")]);
    assert_exit(&o, 2);
    let r = json(&o);
    assert!(num(&r, "out_of_order") > 0.0, "{r}");
    assert_eq!(r["verdict"]["holds"], Value::Bool(false), "{r}");
    assert!(stderr(&o).contains("`fifo` violated"), "{}", stderr(&o));

    let ordered = scratch.write("ordered.toml", &scenario(true, "fifo", "jitter = \"5ms\""));
    let o = viastack([OsStr::new("run"), ordered.as_os_str(), OsStr::new("--json")]);
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(num(&r, "out_of_order"), 0.0, "{r}");
    assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{r}");
    // The fifo layer did the work: it dropped the copies that arrived late.
    assert!(num(&r["counters"], "order.stale") > 0.0, "{r}");
}

#[test]
fn run_seed_and_duration_flags_override_the_file_and_runs_are_reproducible() {
    let scratch = Scratch::new("seed");
    let path = scratch.write(
        "noisy.toml",
        &scenario(
            true,
            "fifo",
            "jitter = \"2ms\"\nloss = 0.1\nduplicate = 0.05",
        ),
    );
    let run = |seed: &str| {
        let o = viastack([
            OsStr::new("run"),
            path.as_os_str(),
            OsStr::new("--json"),
            OsStr::new("--seed"),
            OsStr::new(seed),
        ]);
        assert_exit(&o, 0);
        json(&o)
    };
    let a = run("11");
    let b = run("11");
    let c = run("12");
    assert_eq!(num(&a, "seed"), 11.0, "{a}");
    assert_eq!(num(&c, "seed"), 12.0, "{c}");
    assert_eq!(a, b, "the same seed twice must give the same report");
    assert_ne!(
        a["trace_hash"], c["trace_hash"],
        "seeds 11 and 12 ran identically"
    );

    let o = viastack([
        OsStr::new("run"),
        path.as_os_str(),
        OsStr::new("--json"),
        OsStr::new("--duration"),
        OsStr::new("100ms"),
    ]);
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(num(&r, "duration_s"), 0.1, "{r}");
    // One message per ms per node: the workload was cut short.
    assert!(num(&r, "sent") <= 3.0 * 101.0, "{r}");
}

#[test]
fn run_reports_file_errors_and_a_missing_scenario_with_exit_1() {
    let scratch = Scratch::new("run-errors");
    let bad = scratch.write("bad.toml", "[layers.dev]\nkind = \"devise\"\n");
    let o = viastack([OsStr::new("run"), bad.as_os_str()]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains(&format!("{}:2: ", bad.display())),
        "{}",
        stderr(&o)
    );

    let idle = scratch.write(
        "idle.toml",
        "[layers.dev]\nkind = \"device\"\n[qos.q]\nlayers = [\"dev\"]\n",
    );
    let o = viastack([OsStr::new("run"), idle.as_os_str()]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("no [scenario]"), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------------------------
// demo, layers, bench
// ---------------------------------------------------------------------------------------------

#[test]
fn demo_runs_and_holds_fifo() {
    let o = viastack(["demo"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("property   fifo: holds"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn demo_json_reports_the_whole_workload() {
    let o = viastack(["demo", "--json"]);
    assert_exit(&o, 0);
    let r = json(&o);
    assert_eq!(r["verdict"]["holds"], Value::Bool(true), "{r}");
    assert_eq!(r["verdict"]["expect"], "fifo", "{r}");
    // 8 nodes x 2,000 messages.
    assert_eq!(num(&r, "sent"), 16000.0, "{r}");
    assert!(num(&r, "delivered") > 0.0, "{r}");
    assert_eq!(num(&r, "out_of_order"), 0.0, "{r}");
}

#[test]
fn demo_show_prints_the_shipped_demo_file() {
    let o = viastack(["demo", "--show"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("[scenario]"), "{out}");
    let shipped = std::fs::read_to_string(root().join("stacks/demo.toml")).unwrap();
    assert_eq!(out, shipped);
}

#[test]
fn layers_lists_every_kind() {
    let o = viastack(["layers"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let kinds: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // Every kind of the standard catalog (whose own test pins the list), in its order.
    let catalog = viastack_stack::standard_catalog();
    let expected: Vec<&str> = catalog.kinds().iter().map(|k| k.name).collect();
    assert_eq!(kinds, expected, "{out}");
    assert!(out.contains("params: port"), "{out}");
    assert!(
        out.contains("exactly one of: key, key_file, key_env"),
        "{out}"
    );
}

#[test]
fn layers_markdown_is_the_committed_reference() {
    let o = viastack(["layers", "--markdown"]);
    assert_exit(&o, 0);
    let committed = std::fs::read_to_string(root().join("docs/LAYERS.md")).unwrap();
    assert!(
        o.stdout == committed.as_bytes(),
        "docs/LAYERS.md is stale: regenerate it with \
         `cargo run -p viastack-cli -- layers --markdown > docs/LAYERS.md`"
    );
}

// ---------------------------------------------------------------------------------------------
// keygen, and the keys it makes in stack files
// ---------------------------------------------------------------------------------------------

/// A stack with an `encrypt` layer whose key comes from `key_line` (line 5).
fn keyed_stack(key_line: &str) -> String {
    format!(
        "[layers.dev]\nkind = \"device\"\n[layers.enc]\nkind = \"encrypt\"\n{key_line}\n\
         [qos.q]\nlayers = [\"dev\", \"enc\"]\n[channels.data]\nqos = \"q\"\n"
    )
}

/// The key in `text`: 64 lowercase hex digits and a newline, which `encrypt` reads.
#[track_caller]
fn assert_key(text: &str) -> String {
    let key = text
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no newline: {text:?}"));
    assert_eq!(key.len(), 64, "{text:?}");
    assert!(
        key.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{text:?}"
    );
    assert!(viastack_protocols::encrypt::parse_key(key).is_ok());
    key.to_string()
}

#[test]
fn keygen_prints_a_fresh_key_each_time() {
    let a = viastack(["keygen"]);
    let b = viastack(["keygen"]);
    assert_exit(&a, 0);
    assert_exit(&b, 0);
    assert_ne!(assert_key(&stdout(&a)), assert_key(&stdout(&b)));
}

#[test]
fn keygen_out_writes_an_owner_only_key_file_and_never_overwrites_one() {
    let scratch = Scratch::new("keygen-out");
    let key_path = scratch.0.join("group.key");
    let keygen_out = || {
        viastack([
            OsStr::new("keygen"),
            OsStr::new("--out"),
            key_path.as_os_str(),
        ])
    };
    let o = keygen_out();
    assert_exit(&o, 0);
    assert!(
        o.stdout.is_empty(),
        "the key is not printed: {}",
        stdout(&o)
    );
    let written = std::fs::read_to_string(&key_path).unwrap();
    let key = assert_key(&written);
    assert!(!stderr(&o).contains(&key), "{}", stderr(&o));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    }
    // Again: refused, and the key in use is untouched.
    let again = keygen_out();
    assert_exit(&again, 1);
    assert!(
        stderr(&again).contains("exists: refusing to overwrite"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), written);
    // The file is a key file: `check` (run from the workspace root) finds it beside the stack
    // and shows where it is, never the key.
    let stack = scratch.write("stack.toml", &keyed_stack("key_file = \"group.key\""));
    let o = viastack([OsStr::new("check"), stack.as_os_str()]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("key_file={:?}", key_path.display().to_string())),
        "{out}"
    );
    assert!(!out.contains(&key[..16]), "{out}");
}

#[test]
fn check_shows_no_inline_key_and_reports_bad_key_files_at_their_line() {
    let scratch = Scratch::new("key-file-errors");
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let stack = scratch.write("stack.toml", &keyed_stack(&format!("key = \"{key}\"")));
    let o = viastack([OsStr::new("check"), stack.as_os_str()]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("key=<secret>"), "{}", stdout(&o));
    assert!(!stdout(&o).contains(&key[..16]), "{}", stdout(&o));
    let key_path = scratch.write("group.key", &format!("{key}\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::Permissions::from_mode(0o640);
        std::fs::set_permissions(&key_path, mode).unwrap();
    }
    let stack = scratch.write("stack.toml", &keyed_stack("key_file = \"group.key\""));
    let k = key_path.display().to_string();
    let mut cases = vec![(
        "missing.key",
        format!(
            "cannot read key file `{}`",
            scratch.0.join("missing.key").display()
        ),
    )];
    if cfg!(unix) {
        cases.push(("group.key", format!("run `chmod 600 {k}`")));
    }
    for (name, words) in cases {
        scratch.write(
            "stack.toml",
            &keyed_stack(&format!("key_file = \"{name}\"")),
        );
        let o = viastack([OsStr::new("check"), stack.as_os_str()]);
        assert_exit(&o, 1);
        let err = stderr(&o);
        let got = diagnostics(&stack, &err);
        assert_eq!(got.len(), 1, "{err}");
        assert_eq!(got[0].0, 5, "{err}");
        assert!(
            got[0]
                .1
                .contains("parameter `key_file` of layer `enc` (encrypt)"),
            "{err}"
        );
        assert!(got[0].1.contains(&words), "`{words}` missing from: {err}");
        assert!(!err.contains(&key[..16]), "{err}");
    }
}

#[test]
fn bench_kernel_json_has_every_measurement() {
    let o = viastack([
        "bench", "kernel", "--layers", "1", "--events", "2001", "--repeat", "1", "--json",
    ]);
    assert_exit(&o, 0);
    let r = json(&o);
    for key in ["transparent_0", "ghost_1", "direct_1"] {
        assert_eq!(num(&r[key], "events"), 2001.0, "{key}: {r}");
        assert!(num(&r[key], "ns_per_event") > 0.0, "{key}: {r}");
    }
    assert_eq!(num(&r["ghost_1"], "layers"), 1.0, "{r}");
    assert!(num(&r, "transparent1_vs_0") > 0.0, "{r}");
    // A difference of two timings: its sign is the machine's business, but it must be a
    // number (a missing row makes it NaN, which serializes as null).
    assert!(num(&r, "ghost_ns_per_layer").is_finite(), "{r}");
}

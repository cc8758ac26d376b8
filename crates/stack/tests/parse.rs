//! Stack-file parser: a full valid file round-trips into the model, and each class of error is
//! reported at its exact line with what was expected (issue 2 §3, DESIGN.md §4.6).
#![allow(clippy::unwrap_used)]

mod common;

use viastack_kernel::Duration;
use viastack_stack::{parse, Diagnostics, Expect, ParamValue, Pattern};

fn errors(src: &str) -> Diagnostics {
    match parse("t.toml", src, &common::catalog()) {
        Ok(f) => panic!("expected errors, parsed: {f:#?}"),
        Err(d) => d,
    }
}

/// Asserts some diagnostic is on `line` and its message contains every needle.
#[track_caller]
fn has(d: &Diagnostics, line: usize, needles: &[&str]) {
    let found =
        d.0.iter()
            .any(|x| x.line == line && needles.iter().all(|n| x.message.contains(n)));
    assert!(
        found,
        "no diagnostic at line {line} with {needles:?} in:\n{d}"
    );
}

const HEAD: &str = r#"[layers.dev]
kind = "sim-device"
[layers.fd]
kind = "ghost"
[layers.t]
kind = "transparent"
[qos.data]
layers = ["dev", "fd", "t"]
[channels.data]
qos = "data"
"#; // 10 lines

#[test]
fn full_file_round_trips_into_the_model() {
    let f = parse("example.toml", common::EXAMPLE, &common::catalog()).unwrap();
    assert_eq!(f.path, "example.toml");
    assert_eq!(f.layers.len(), 3);
    assert_eq!(f.layers["dev"].kind, "sim-device");
    assert_eq!(f.layers["dev"].line, 2);
    assert_eq!(
        f.layers["dev"].params.get_int("port"),
        Ok(0),
        "default filled"
    );
    assert_eq!(f.layers["fd"].kind, "ghost");
    assert_eq!(f.layers["t"].kind, "transparent");
    assert_eq!(f.qos["data"].layers, vec!["dev", "fd", "t"]);
    assert_eq!(f.qos["data"].line, 10);
    let names: Vec<&str> = f.channels.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["data", "audio"], "file order, not map order");
    assert_eq!(f.channels[0].qos, "data");
    assert_eq!(f.channels[0].bind["fd"], "shared-fd");
    assert_eq!(f.channels[1].bind["fd"], "shared-fd");
    assert_eq!(f.channels[1].line, 17);
    assert_eq!(f.sessions["shared-fd"].layer, "fd");
    assert_eq!(f.sessions["shared-fd"].line, 21);
    let s = f.scenario.as_ref().unwrap();
    assert_eq!(s.nodes, 4);
    assert_eq!(s.seed, 7);
    assert_eq!(s.duration, Duration::from_secs(10));
    assert_eq!(s.expect, Expect::ReliableFifo);
    assert_eq!(s.link.latency, Duration::from_millis(1));
    assert_eq!(s.link.jitter, Duration::ZERO);
    assert_eq!(s.link.bandwidth, Some(1_000_000_000));
    assert_eq!(s.link.loss, 0.0);
    assert_eq!(s.link.reorder_delay, Duration::from_millis(5));
    assert_eq!(s.links.len(), 1);
    assert_eq!((s.links[0].from, s.links[0].to), (0, 1));
    assert_eq!(s.links[0].loss, Some(0.1));
    assert_eq!(s.links[0].latency, None);
    let l01 = s.link_between(0, 1);
    assert_eq!(l01.loss, 0.1);
    assert_eq!(
        l01.bandwidth,
        Some(1_000_000_000),
        "the rest from [scenario.link]"
    );
    assert_eq!(s.link_between(1, 0).loss, 0.0, "directed");
    assert_eq!(s.partitions.len(), 1);
    assert_eq!(s.partitions[0].at, Duration::from_secs(2));
    assert_eq!(s.partitions[0].heal, Some(Duration::from_secs(4)));
    assert_eq!(s.partitions[0].groups, vec![vec![0, 1], vec![2, 3]]);
    assert_eq!(s.crashes.len(), 1);
    assert_eq!(s.crashes[0].node, 2);
    assert_eq!(s.crashes[0].at, Duration::from_secs(3));
    assert_eq!(s.crashes[0].restart, Some(Duration::from_secs(5)));
    let w = &s.workloads[0];
    assert_eq!(w.channel, "data");
    assert_eq!(w.messages, 1000);
    assert_eq!(w.size, 256);
    assert_eq!(w.interval, Duration::from_millis(1));
    assert_eq!(w.start, Duration::ZERO);
    assert_eq!(w.pattern, Pattern::AllToAll);
    assert_eq!(w.senders, Some(vec![0, 1]));
    assert_eq!(w.line, 50);
}

#[test]
fn parameters_of_every_type_and_defaults() {
    let src = r#"[layers.frag]
kind = "fragment"
mtu = 9000
timeout = "1.5s"
mode = "safe"
window = "1MiB"
rate = "10Mbps"
ratio = 1
verbose = true
label = "hello"
[layers.d]
kind = "fragment"
[scenario]
nodes = 2
[[scenario.workload]]
channel = "c"
messages = 3
size = "1KiB"
pattern = "ring"
[qos.q]
layers = ["frag"]
[channels.c]
qos = "q"
"#;
    let f = parse("t.toml", src, &common::catalog()).unwrap();
    let p = &f.layers["frag"].params;
    assert_eq!(p.get_int("mtu"), Ok(9000));
    assert_eq!(p.get_duration("timeout"), Ok(Duration::from_millis(1500)));
    assert_eq!(p.get_str("mode"), Ok("safe".to_string()));
    assert_eq!(p.get_bytes("window"), Ok(1 << 20));
    assert_eq!(p.get_bandwidth("rate"), Ok(10_000_000));
    assert_eq!(p.get_float("ratio"), Ok(1.0));
    assert_eq!(p.get_bool("verbose"), Ok(true));
    assert_eq!(p.get_str("label"), Ok("hello".to_string()));
    let d = &f.layers["d"].params;
    assert_eq!(d.get("mtu"), Some(&ParamValue::Int(1500)));
    assert_eq!(d.get_duration("timeout"), Ok(Duration::from_millis(10)));
    assert_eq!(d.get_bytes("window"), Ok(65536));
    let s = f.scenario.unwrap();
    assert_eq!(s.seed, 0);
    assert_eq!(s.expect, Expect::None);
    assert_eq!(s.duration, Duration::from_secs(10));
    assert_eq!(s.workloads[0].size, 1024);
    assert_eq!(s.workloads[0].pattern, Pattern::Ring);
    assert_eq!(s.workloads[0].senders, None);
    assert_eq!(s.workloads[0].interval, Duration::from_millis(1));
}

#[test]
fn bad_toml_syntax() {
    let d = errors("[layers.dev]\nkind = \"ghost\"\n[qos.data\nlayers = []\n");
    assert_eq!(d.0.len(), 1);
    has(&d, 3, &["invalid TOML"]);
    assert!(d.to_string().starts_with("t.toml:3: invalid TOML"), "{d}");
    let d = errors("a = \"unterminated\n");
    has(&d, 1, &["invalid TOML"]);
}

#[test]
fn unknown_top_level_key() {
    let d = errors(&format!("{HEAD}[layer.x]\nkind = \"ghost\"\n"));
    has(
        &d,
        11,
        &[
            "unknown top-level key `layer`",
            "did you mean `layers`?",
            "`scenario`",
        ],
    );
}

#[test]
fn unknown_keys_in_tables() {
    let src = format!(
        "{HEAD}qoss = \"x\"\n[scenario]\nnodes = 2\n[scenario.link]\nlatncy = \"1ms\"\n[sessions.s]\nlayer = \"fd\"\nlayr = 1\n"
    );
    let d = errors(&src);
    has(
        &d,
        11,
        &[
            "unknown key `qoss` in channel `data`",
            "did you mean `qos`?",
        ],
    );
    has(
        &d,
        15,
        &[
            "unknown key `latncy` in [scenario.link]",
            "did you mean `latency`?",
            "`jitter`",
        ],
    );
    has(&d, 18, &["unknown key `layr` in session `s`", "`layer`"]);
}

#[test]
fn unknown_layer_kind_suggests_close_names() {
    let d = errors(&format!("{HEAD}[layers.x]\nkind = \"ghots\"\n"));
    has(
        &d,
        12,
        &["layer `x`: unknown layer kind `ghots`; did you mean `ghost`?"],
    );
    let d = errors(&format!("{HEAD}[layers.x]\nkind = \"zzzzzzzz\"\n"));
    has(
        &d,
        12,
        &[
            "unknown layer kind `zzzzzzzz`",
            "known kinds:",
            "`transparent`",
        ],
    );
    let d = errors(&format!("{HEAD}[layers.x]\nkinds = \"ghost\"\n"));
    has(&d, 11, &["layer `x`: missing `kind`"]);
}

#[test]
fn unknown_parameter_lists_known_ones() {
    let d = errors(&format!(
        "{HEAD}[layers.frag]\nkind = \"fragment\"\nmtux = 1500\n"
    ));
    has(
        &d,
        13,
        &[
            "unknown parameter `mtux` of layer `frag` (fragment)",
            "did you mean `mtu`?",
            "known parameters:",
            "`timeout`",
        ],
    );
}

#[test]
fn ill_typed_and_out_of_range_parameters() {
    let d = errors(&format!(
        "{HEAD}[layers.frag]\nkind = \"fragment\"\nmtu = \"big\"\n\nratio = 1.5\ntimeout = \"10 parsecs\"\nwindow = -1\nmode = \"fats\"\n"
    ));
    has(
        &d,
        13,
        &["parameter `mtu` of layer `frag` (fragment): expected an integer in 64..=65535, found string"],
    );
    has(
        &d,
        15,
        &["parameter `ratio`", "expected a number in 0..=1, found 1.5"],
    );
    has(
        &d,
        16,
        &["parameter `timeout`", "unknown duration unit `parsecs`"],
    );
    has(&d, 17, &["parameter `window`", "byte size", "found -1"]);
    has(&d, 18, &["parameter `mode`", "did you mean `fast`?"]);
    let d = errors(&format!(
        "{HEAD}[layers.frag]\nkind = \"fragment\"\nmtu = 10\n"
    ));
    has(&d, 13, &["expected an integer in 64..=65535, found 10"]);
}

#[test]
fn missing_required_parameter() {
    let d = errors(&format!("{HEAD}\n[layers.k]\nkind = \"keyed\"\n"));
    has(
        &d,
        12,
        &["layer `k` (keyed): missing required parameter `key` (a string)"],
    );
}

#[test]
fn qos_naming_an_unknown_layer() {
    let d =
        errors("[layers.fd]\nkind = \"ghost\"\n[qos.data]\nlayers = [\n  \"fd\",\n  \"fx\",\n]\n");
    has(
        &d,
        6,
        &["QoS `data` names unknown layer `fx`; did you mean `fd`?"],
    );
    let d = errors("[layers.fd]\nkind = \"ghost\"\n[qos.data]\nlayers = [\"fd\", \"fd\"]\n");
    has(&d, 4, &["lists layer `fd` twice"]);
    let d = errors("[layers.fd]\nkind = \"ghost\"\n[qos.data]\nlayers = []\n");
    has(&d, 4, &["`layers` is empty"]);
}

#[test]
fn channel_naming_an_unknown_qos() {
    let d = errors(&format!("{HEAD}[channels.b]\nqos = \"dta\"\n"));
    has(
        &d,
        12,
        &["channel `b` names unknown QoS `dta`; did you mean `data`?"],
    );
}

#[test]
fn bind_naming_a_layer_outside_the_qos() {
    let d = errors(&format!(
        "{HEAD}[layers.other]\nkind = \"ghost\"\n[channels.b]\nqos = \"data\"\nbind = {{ other = \"s\" }}\n"
    ));
    has(
        &d,
        15,
        &[
            "channel `b`: `bind` names layer `other`, which is not in QoS `data`",
            "`fd`",
        ],
    );
}

#[test]
fn bind_on_a_device_is_refused() {
    let d = errors(&format!(
        "{HEAD}[channels.b]\nqos = \"data\"\nbind = {{ dev = \"s\" }}\n"
    ));
    has(&d, 13, &["layer `dev` is a device"]);
}

#[test]
fn shared_session_bound_to_two_layers() {
    let src = r#"[layers.fd]
kind = "ghost"
[layers.sync]
kind = "ghost"
[qos.q1]
layers = ["fd"]
[qos.q2]
layers = ["sync"]
[channels.a]
qos = "q1"
bind = { fd = "x" }
[channels.b]
qos = "q2"
bind = { sync = "x" }
"#;
    let d = errors(src);
    has(
        &d,
        14,
        &["session `x` is bound to layer `fd` in channel `a` (line 11) but to layer `sync` in channel `b`"],
    );
}

#[test]
fn shared_session_differs_from_its_declaration() {
    let src = r#"[sessions.x]
layer = "fd"
[layers.fd]
kind = "ghost"
[layers.sync]
kind = "ghost"
[qos.q2]
layers = ["sync"]
[channels.b]
qos = "q2"
bind = { sync = "x" }
"#;
    let d = errors(src);
    has(
        &d,
        11,
        &["session `x` is declared with layer `fd` (line 1) but bound to layer `sync` in channel `b`"],
    );
    let d = errors("[layers.fd]\nkind = \"ghost\"\n[sessions.x]\nlayer = \"fx\"\n");
    has(
        &d,
        4,
        &["session `x` names unknown layer `fx`; did you mean `fd`?"],
    );
}

#[test]
fn qos_whose_requirements_are_not_provided() {
    let src = "[layers.n]\nkind = \"needy\"\n[layers.g]\nkind = \"ghost\"\n\n[qos.bad]\nlayers = [\"g\", \"n\"]\n[layers.p]\nkind = \"provider\"\n[qos.good]\nlayers = [\"p\", \"n\"]\n";
    let d = errors(src);
    assert_eq!(d.0.len(), 1, "{d}");
    has(
        &d,
        6,
        &["QoS `bad`: layer `n` requires event `TestNeed`, which no layer of the QoS provides"],
    );
}

#[test]
fn layer_whose_factory_fails() {
    let d = errors("[layers.b]\nkind = \"broken\"\n");
    has(
        &d,
        1,
        &["layer `b` (broken): cannot be built: no such device"],
    );
}

#[test]
fn two_devices_on_one_port() {
    let d = errors(
        "[layers.a]\nkind = \"sim-device\"\nport = 7\n[layers.b]\nkind = \"sim-device\"\nport = 7\n[layers.c]\nkind = \"sim-device\"\n",
    );
    has(
        &d,
        4,
        &["device layers `a` (line 1) and `b` both use port 7"],
    );
    assert_eq!(d.0.len(), 1, "{d}");
}

#[test]
fn scenario_errors() {
    let src = format!(
        r#"{HEAD}[scenario]
nodes = 4
expect = "realiable"
duration = "10"
[scenario.link]
loss = 1.5
[[scenario.links]]
from = 0
to = 4
[[scenario.partition]]
at = "2s"
heal = "1s"
groups = [[0, 1], [1, 2], [5]]
[[scenario.crash]]
node = 9
at = "3s"
[[scenario.workload]]
channel = "dta"
messages = 10
pattern = "star"
senders = [0, 7]
"#
    );
    let d = errors(&src);
    has(
        &d,
        13,
        &[
            "key `expect` in [scenario]",
            "did you mean `reliable`?",
            "\"reliable-fifo\"",
        ],
    );
    has(
        &d,
        14,
        &["key `duration` in [scenario]", "`10` has no unit"],
    );
    has(
        &d,
        16,
        &["key `loss` in [scenario.link]: expected a number in 0..=1, found 1.5"],
    );
    has(
        &d,
        17,
        &["[[scenario.links]] #1: node 4 does not exist: the scenario has 4 nodes"],
    );
    has(
        &d,
        20,
        &["[[scenario.partition]] #1: `heal`", "must come after `at`"],
    );
    has(&d, 23, &["node 1 is in two groups"]);
    has(&d, 23, &["node 5 does not exist"]);
    has(&d, 24, &["[[scenario.crash]] #1: node 9 does not exist"]);
    has(&d, 28, &["unknown channel `dta`; did you mean `data`?"]);
    has(
        &d,
        30,
        &[
            "key `pattern`",
            "one of \"all-to-all\", \"ring\", \"to-first\"",
        ],
    );
    has(
        &d,
        31,
        &["`senders` of [[scenario.workload]] #1: node 7 does not exist"],
    );
    let lines: Vec<usize> = d.0.iter().map(|x| x.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "sorted by line");
}

#[test]
fn scenario_missing_and_mistyped_keys() {
    let d = errors(&format!(
        "{HEAD}[scenario]\nseed = -1\n[[scenario.workload]]\nchannel = \"data\"\nstart = 5\n"
    ));
    has(&d, 11, &["[scenario]: missing required key `nodes`"]);
    has(&d, 12, &["key `seed`", "found -1"]);
    has(
        &d,
        13,
        &["[[scenario.workload]] #1: missing required key `messages`"],
    );
    has(&d, 15, &["key `start`", "duration", "found 5"]);
    let d = errors(&format!("{HEAD}[scenario]\nnodes = 2\ncrash = 3\n"));
    has(&d, 13, &["`scenario.crash`: expected an array of tables"]);
}

#[test]
fn independent_errors_are_all_reported_in_line_order() {
    let src = r#"[layers.a]
kind = "ghots"
[layers.b]
kind = "fragment"
mtu = 1
[qos.q]
layers = ["a", "zz"]
[channels.c]
qos = "nope"
[bogus]
"#;
    let d = errors(src);
    let lines: Vec<usize> = d.0.iter().map(|x| x.line).collect();
    assert_eq!(lines, vec![2, 5, 7, 9, 10], "{d}");
    // Display: one `file:line: message` per line.
    let text = d.to_string();
    assert_eq!(text.lines().count(), 5);
    assert!(text.lines().all(|l| l.starts_with("t.toml:")), "{text}");
}

#[test]
fn a_qos_over_an_invalid_layer_is_not_reported_twice() {
    // `frag` exists but is invalid: the QoS naming it is not "unknown layer".
    let d = errors("[layers.frag]\nkind = \"fragment\"\nmtu = 1\n[qos.q]\nlayers = [\"frag\"]\n");
    assert_eq!(d.0.len(), 1, "{d}");
    has(&d, 3, &["parameter `mtu`"]);
}

#[test]
fn odd_shapes_are_errors_not_panics() {
    for (src, line, needle) in [
        (
            "layers = 3\n",
            1,
            "`layers`: expected a table, found integer",
        ),
        (
            "[layers]\nx = 1\n",
            2,
            "layer `x`: expected a table, found integer",
        ),
        ("[layers.x]\nkind = 1\n", 2, "`kind` must be a string"),
        (
            "[qos.q]\nlayers = \"a\"\n",
            2,
            "expected an array of strings",
        ),
        (
            "[qos.q]\nlayers = [1]\n",
            2,
            "expected a string, found integer",
        ),
        (
            "[channels.c]\nbind = 1\nqos = \"q\"\n",
            2,
            "expected a table",
        ),
        ("[layers.x]\nkind = 1979-05-27\n", 2, "found datetime"),
        (
            "[scenario]\nnodes = 0\n",
            2,
            "expected an integer in 1..=65535, found 0",
        ),
    ] {
        let d = errors(src);
        has(&d, line, &[needle]);
    }
}

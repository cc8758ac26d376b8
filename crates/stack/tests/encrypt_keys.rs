//! Where `encrypt` gets its key: `key` in the stack file, `key_file` (resolved against the
//! stack file's directory, owner-only permissions) or `key_env`, exactly one of them. Every
//! refusal is a `file:line:` diagnostic at the parameter's line that names the key file or
//! variable and never contains key material; a key read from a file is the key the layer uses.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    Dest, Direction, Event, Instant, KernelConfig, Message, NodeId, Output, Sendable,
};
use viastack_stack::{build_node, parse, standard_catalog, BuildEnv, BuiltNode, Diagnostics};

/// The group key of these tests.
const KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
/// Another key.
const OTHER: &str = "ffeeddccbbaa99887766554433221100f0e1d2c3b4a5968778695a4b3c2d1e0f";

/// A stack whose `encrypt` layer `enc` takes its key from `key_lines`, which start on line 5.
fn stack(key_lines: &str) -> String {
    format!(
        "[layers.dev]\nkind = \"device\"\n[layers.enc]\nkind = \"encrypt\"\n{key_lines}\n\
         [qos.q]\nlayers = [\"dev\", \"enc\"]\n[channels.data]\nqos = \"q\"\n"
    )
}

/// A scratch directory of one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("viastack-keys-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Writes `name` (under the directory) with `text` and permission bits `mode`.
    fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        set_mode(&path, mode);
        path
    }

    /// The stack file `stack.toml` with `key_lines`, as its path.
    fn stack(&self, key_lines: &str) -> String {
        let path = self.file("stack.toml", &stack(key_lines), 0o644);
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: u32) {}

/// Parses the stack file at `path` (reading it, as the CLI does).
fn parse_at(path: &str) -> Result<viastack_stack::StackFile, Diagnostics> {
    let src = std::fs::read_to_string(path).unwrap();
    parse(path, &src, &standard_catalog())
}

/// The one diagnostic of parsing `path`, which must be at `path:line` and free of key
/// material; returns its message.
#[track_caller]
fn refused(path: &str, line: usize) -> String {
    let d = match parse_at(path) {
        Ok(_) => panic!("{path} parsed"),
        Err(d) => d,
    };
    let text = d.to_string();
    assert_eq!(d.0.len(), 1, "{text}");
    assert!(
        text.starts_with(&format!("{path}:{line}: ")),
        "not at {path}:{line}: {text}"
    );
    for key in [KEY, OTHER] {
        assert!(!text.contains(&key[..16]), "key material in: {text}");
    }
    text
}

/// A unique environment variable name for one test.
fn var(test: &str) -> String {
    format!("VIASTACK_TEST_KEY_{}_{test}", std::process::id())
}

fn node(path: &str, id: u32) -> BuiltNode {
    let file = parse_at(path).unwrap_or_else(|d| panic!("{d}"));
    let env = BuildEnv {
        node: NodeId(id),
        nodes: 2,
        seed: 7,
        ..BuildEnv::default()
    };
    let config = KernelConfig {
        node: NodeId(id),
        seed: u64::from(id) + 1,
        ..KernelConfig::default()
    };
    build_node(&file, &standard_catalog(), &env, config).unwrap_or_else(|d| panic!("{d}"))
}

/// Sends `payload` from `a` (node 0) to `b` (node 1) on channel `data` and returns what `b`
/// delivered.
fn exchange(a: &mut BuiltNode, b: &mut BuiltNode, payload: &[u8]) -> Vec<Vec<u8>> {
    let channel = a.channels[0].1;
    let event = Event::sendable(
        SENDABLE.id(),
        Direction::Down,
        channel,
        Sendable::new(
            NodeId(0),
            Dest::Node(NodeId(1)),
            Message::from_payload(payload),
        ),
    );
    a.kernel.inject(Instant::ZERO, event).unwrap();
    let mut wire = Vec::new();
    while let Some(o) = a.kernel.poll_output() {
        if let Output::Transmit(t) = o {
            wire.push(t.message.as_slice().to_vec());
        }
    }
    assert_eq!(wire.len(), 1);
    assert!(!wire[0].windows(payload.len()).any(|w| w == payload));
    let device = b.devices[0].1;
    for bytes in wire {
        b.kernel
            .handle_datagram(Instant::ZERO, device, NodeId(0), Message::from_wire(bytes));
    }
    let mut got = Vec::new();
    while let Some(o) = b.kernel.poll_output() {
        if let Some(s) = match &o {
            Output::Deliver(e) => e.sendable_ref(),
            Output::Transmit(_) => None,
        } {
            got.push(s.message.as_slice().to_vec());
        }
    }
    got
}

#[test]
fn a_key_file_beside_the_stack_is_the_key_the_layer_uses() {
    let s = Scratch::new("file");
    s.file("group.key", &format!("{KEY}\n"), 0o600);
    let from_file = s.stack("key_file = \"group.key\"");
    let dir = s.0.display().to_string();
    // Inline keys for comparison, in files of their own.
    let same = Scratch::new("file-same");
    let same = (same.stack(&format!("key = \"{KEY}\"")), same);
    let other = Scratch::new("file-other");
    let other = (other.stack(&format!("key = \"{OTHER}\"")), other);

    let parsed = parse_at(&from_file).unwrap();
    let param = parsed.layers["enc"].params.get("key_file").unwrap();
    assert_eq!(
        param.to_string(),
        format!("{:?}", format!("{dir}/group.key"))
    );

    let mut a = node(&from_file, 0);
    let mut b = node(&same.0, 1);
    assert_eq!(
        exchange(&mut a, &mut b, b"attack at dawn"),
        vec![b"attack at dawn"]
    );
    let mut c = node(&other.0, 1);
    assert!(exchange(&mut a, &mut c, b"attack at dawn").is_empty());
    assert_eq!(c.kernel.counters().get("enc.bad_tag"), Some(&1));
}

#[test]
fn relative_key_files_are_read_from_the_stack_files_directory() {
    let s = Scratch::new("relative");
    // Decoys where a wrong resolution would look: the parent of the stack's directory.
    s.file("group.key", OTHER, 0o600);
    s.file("conf/group.key", &format!("  {KEY}  \r\n\n"), 0o600);
    s.file("keys/group.key", KEY, 0o600);
    let same = s.file("same.toml", &stack(&format!("key = \"{KEY}\"")), 0o644);
    for key_file in ["group.key", "../keys/group.key", "./../conf/group.key"] {
        let path = s.file(
            "conf/stack.toml",
            &stack(&format!("key_file = \"{key_file}\"")),
            0o644,
        );
        let mut a = node(&path.display().to_string(), 0);
        let mut b = node(&same.display().to_string(), 1);
        assert_eq!(
            exchange(&mut a, &mut b, key_file.as_bytes()),
            vec![key_file.as_bytes()],
            "{key_file}"
        );
    }
    // An absolute path is taken as it is.
    let abs = s.0.join("keys/group.key").display().to_string();
    let path = s.stack(&format!("key_file = {abs:?}"));
    assert!(parse_at(&path).is_ok());
}

#[test]
fn a_missing_key_file_is_reported_at_its_line_with_its_path() {
    let s = Scratch::new("missing");
    let path = s.stack("replay_window = 64\nkey_file = \"nowhere/group.key\"");
    let e = refused(&path, 6);
    let key_path = s.0.join("nowhere/group.key").display().to_string();
    assert!(
        e.contains("parameter `key_file` of layer `enc` (encrypt)"),
        "{e}"
    );
    assert!(
        e.contains(&format!("cannot read key file `{key_path}`")),
        "{e}"
    );
    // A directory is no key file either.
    let path = s.stack("key_file = \".\"");
    assert!(refused(&path, 5).contains("is not a regular file"));
}

#[test]
fn a_key_file_that_holds_no_key_is_refused_without_echoing_it() {
    let s = Scratch::new("malformed");
    let key_path = s.file("group.key", &KEY[..62], 0o600);
    let path = s.stack("key_file = \"group.key\"");
    let e = refused(&path, 5);
    assert!(
        e.contains(&format!("key file `{}`", key_path.display())),
        "{e}"
    );
    assert!(e.contains("64 hex digits (32 bytes), found 62"), "{e}");
    s.file("group.key", &KEY.replace('f', "g"), 0o600);
    assert!(refused(&path, 5).contains("hex digits 0-9, a-f"));
    s.file("group.key", &format!("{KEY}\n{KEY}\n"), 0o600);
    assert!(refused(&path, 5).contains("64 hex digits"));
    std::fs::write(&key_path, [0xff, 0xfe, 0x00]).unwrap();
    assert!(refused(&path, 5).contains("is not text"));
    s.file("group.key", &"0".repeat(8192), 0o600);
    assert!(refused(&path, 5).contains("longer than 4096 bytes"));
}

#[cfg(unix)]
#[test]
fn a_key_file_others_may_read_is_refused_like_ssh_does() {
    let s = Scratch::new("open");
    let key_path = s.file("group.key", KEY, 0o644);
    let path = s.stack("key_file = \"group.key\"");
    let k = key_path.display();
    for (mode, shown) in [
        (0o644, "0644"),
        (0o640, "0640"),
        (0o604, "0604"),
        (0o620, "0620"),
    ] {
        set_mode(&key_path, mode);
        let e = refused(&path, 5);
        assert!(
            e.contains(&format!("key file `{k}` has permissions {shown}")),
            "{e}"
        );
        assert!(e.contains(&format!("run `chmod 600 {k}`")), "{e}");
    }
    for mode in [0o600, 0o400] {
        set_mode(&key_path, mode);
        assert!(parse_at(&path).is_ok(), "{mode:o}");
    }
}

#[test]
fn a_key_in_the_environment_is_read_and_its_variable_named_when_wrong() {
    let s = Scratch::new("env");
    let name = var("env");
    let path = s.stack(&format!("key_env = \"{name}\""));
    std::env::remove_var(&name);
    let e = refused(&path, 5);
    assert!(
        e.contains(&format!(
            "parameter `key_env` of layer `enc` (encrypt): environment variable `{name}` is not set"
        )),
        "{e}"
    );
    std::env::set_var(&name, &KEY[..40]);
    let e = refused(&path, 5);
    assert!(
        e.contains(&format!(
            "environment variable `{name}`: the key must be 64 hex digits"
        )),
        "{e}"
    );
    std::env::set_var(&name, format!("{KEY}\n"));
    let mut a = node(&path, 0);
    let same = s.file("same.toml", &stack(&format!("key = \"{KEY}\"")), 0o644);
    let mut b = node(&same.display().to_string(), 1);
    assert_eq!(exchange(&mut a, &mut b, b"from env"), vec![b"from env"]);
    std::env::remove_var(&name);
    let path = s.stack("key_env = \"A=B\"");
    assert!(refused(&path, 5).contains("not an environment variable name"));
}

#[test]
fn exactly_one_key_source_is_required() {
    let s = Scratch::new("one");
    let path = s.stack("replay_window = 64");
    let e = refused(&path, 3);
    assert!(
        e.contains(
            "layer `enc` (encrypt): missing one of `key`, `key_file`, `key_env`: give exactly one"
        ),
        "{e}"
    );
    let path = s.stack(&format!("key = \"{KEY}\"\nkey_file = \"group.key\""));
    let e = refused(&path, 6);
    assert!(
        e.contains("parameters `key` (line 5) and `key_file` exclude each other: give exactly one of `key`, `key_file`, `key_env`"),
        "{e}"
    );
    // Three: both later ones are reported, each at its line.
    let path = s.stack(&format!(
        "key_env = \"V\"\nkey_file = \"group.key\"\nkey = \"{KEY}\""
    ));
    let d = parse_at(&path).unwrap_err();
    let lines: Vec<usize> = d.0.iter().map(|x| x.line).collect();
    assert_eq!(lines, vec![6, 7], "{d}");
    assert!(d.mentions("`key_env` (line 5) and `key`"), "{d}");
    assert!(!d.to_string().contains(&KEY[..16]), "{d}");
}

#[test]
fn an_inline_key_is_checked_and_never_printed() {
    let s = Scratch::new("inline");
    let path = s.stack(&format!("key = \"{}\"", &KEY[..63]));
    let e = refused(&path, 5);
    assert!(
        e.contains("parameter `key` of layer `enc` (encrypt): the key must be 64 hex digits"),
        "{e}"
    );
    let path = s.stack(&format!("key = \"{KEY}\""));
    let file = parse_at(&path).unwrap();
    let shown = format!("{file:?} {}", file.layers["enc"].params.get("key").unwrap());
    assert!(!shown.contains(&KEY[..16]), "{shown}");
    assert!(shown.contains("<secret>"), "{shown}");
    // A key written where a file or variable name belongs is refused, and not echoed.
    let path = s.stack(&format!("key_file = \"{KEY}\""));
    assert!(refused(&path, 5).contains("expected a file name, found what looks like a key"));
    let path = s.stack(&format!("key_env = \"{KEY}\""));
    assert!(refused(&path, 5).contains("expected a variable name, found what looks like a key"));
}

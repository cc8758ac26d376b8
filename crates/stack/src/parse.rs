//! The stack-file parser: TOML text → validated [`StackFile`], or every problem found, each as
//! `file:line: message` saying what was expected.
//!
//! Realizes issue 2 §3 / DESIGN.md §4.6 and §6.10. The text is read into a tree of values that
//! keep their byte spans (the private `tree` module), then checked by hand, table by table, so that every
//! message has a line and independent problems are all reported (sorted by line) instead of
//! stopping at the first. Layer parameters and scenario keys are both declared as
//! [`ParamSpec`] tables and read by the same code, which is also what generates the parameter
//! reference. No input makes this module panic (a proptest feeds it random bytes and mutated
//! files).
//!
//! Checks, in order: TOML syntax; unknown keys everywhere (with "did you mean"); layer kinds and
//! parameters; QoS layer names; channel QoS names and bindings; shared-session consistency;
//! Ψ ⊆ Γ for every QoS (its layers are built for node 0); device ports; the scenario.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use viastack_kernel::{Duration, LayerRef, NodeId, Qos};

use crate::catalog::{BuildEnv, Catalog, LayerKind, ParamKind, ParamSpec, ParamValue, Params};
use crate::diag::{closest, did_you_mean, list, Diagnostic, Diagnostics, LineIndex};
use crate::model::{
    ChannelDecl, CrashSpec, Expect, GroupEventSpec, LayerDecl, LeaveSpec, LinkFailureSpec,
    LinkOverride, LinkSpec, MoveSpec, PartitionSpec, Pattern, QosDecl, Role, Scenario, SessionDecl,
    StackFile, TopoLinkDecl, TopoNodeDecl, TopologyDecl, Workload,
};
use crate::tree::{Located, Node};

const TOP_KEYS: &[&str] = &[
    "layers", "qos", "channels", "sessions", "topology", "scenario",
];

/// Most nodes a scenario may have (a capacity, DESIGN.md §6.6).
pub const MAX_NODES: i64 = 65_535;

const NODE_INDEX: ParamKind = ParamKind::Int {
    min: 0,
    max: MAX_NODES - 1,
};
const PROBABILITY: ParamKind = ParamKind::Float { min: 0.0, max: 1.0 };

/// Keys of `[scenario]` (besides the `link`, `links`, `partition`, `crash`, `workload` tables).
pub const SCENARIO_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "nodes",
        kind: ParamKind::Int {
            min: 1,
            max: MAX_NODES,
        },
        default: None,
        doc: "how many nodes, numbered from 0",
    },
    ParamSpec {
        name: "seed",
        kind: ParamKind::Int {
            min: 0,
            max: i64::MAX,
        },
        default: Some("0"),
        doc: "seed of every random choice of the run",
    },
    ParamSpec {
        name: "duration",
        kind: ParamKind::Duration,
        default: Some("\"10s\""),
        doc: "virtual time the run lasts",
    },
    ParamSpec {
        name: "expect",
        kind: ParamKind::Choice(Expect::NAMES),
        default: Some("\"none\""),
        doc: "what the run must show",
    },
];

/// Keys of `[scenario.link]` and, all optional, of `[[scenario.links]]`.
pub const LINK_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "latency",
        kind: ParamKind::Duration,
        default: Some("\"1ms\""),
        doc: "one-way delay",
    },
    ParamSpec {
        name: "jitter",
        kind: ParamKind::Duration,
        default: Some("\"0ms\""),
        doc: "extra delay, uniform in 0..=jitter",
    },
    ParamSpec {
        name: "bandwidth",
        kind: ParamKind::Bandwidth,
        default: None,
        doc: "bits per second (unset: unlimited)",
    },
    ParamSpec {
        name: "loss",
        kind: PROBABILITY,
        default: Some("0.0"),
        doc: "probability a datagram is lost",
    },
    ParamSpec {
        name: "duplicate",
        kind: PROBABILITY,
        default: Some("0.0"),
        doc: "probability a datagram is delivered twice",
    },
    ParamSpec {
        name: "reorder",
        kind: PROBABILITY,
        default: Some("0.0"),
        doc: "probability a datagram is held back by reorder_delay",
    },
    ParamSpec {
        name: "reorder_delay",
        kind: ParamKind::Duration,
        default: Some("\"5ms\""),
        doc: "how long a reordered datagram is held back",
    },
    ParamSpec {
        name: "corrupt",
        kind: PROBABILITY,
        default: Some("0.0"),
        doc: "probability a byte of a datagram is flipped",
    },
];

const LINK_ENDS: &[ParamSpec] = &[
    ParamSpec {
        name: "from",
        kind: NODE_INDEX,
        default: None,
        doc: "sending node",
    },
    ParamSpec {
        name: "to",
        kind: NODE_INDEX,
        default: None,
        doc: "receiving node",
    },
];

const PARTITION_PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "at",
    kind: ParamKind::Duration,
    default: None,
    doc: "when the partition starts",
}];
const HEAL_PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "heal",
    kind: ParamKind::Duration,
    default: None,
    doc: "when it heals (optional)",
}];

const CRASH_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "node",
        kind: NODE_INDEX,
        default: None,
        doc: "the node",
    },
    ParamSpec {
        name: "at",
        kind: ParamKind::Duration,
        default: None,
        doc: "when it crashes",
    },
];
const LEAVE_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "node",
        kind: NODE_INDEX,
        default: None,
        doc: "the node",
    },
    ParamSpec {
        name: "at",
        kind: ParamKind::Duration,
        default: None,
        doc: "when its application leaves (closes its channels)",
    },
];
/// Keys of `[[scenario.move]]`.
const MOVE_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "node",
        kind: NODE_INDEX,
        default: None,
        doc: "the node whose application asks for the move",
    },
    ParamSpec {
        name: "channel",
        kind: ParamKind::Str,
        default: None,
        doc: "the light channel whose light group moves",
    },
    ParamSpec {
        name: "to",
        kind: ParamKind::Str,
        default: None,
        doc: "a light channel of the same `lwg` session on the destination heavy group",
    },
    ParamSpec {
        name: "at",
        kind: ParamKind::Duration,
        default: None,
        doc: "when",
    },
];
/// Keys of `[[scenario.group]]`.
const GROUP_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "node",
        kind: NODE_INDEX,
        default: None,
        doc: "the host",
    },
    ParamSpec {
        name: "action",
        kind: ParamKind::Choice(&["join", "leave"]),
        default: None,
        doc: "whether its application joins or leaves the group",
    },
    ParamSpec {
        name: "group",
        kind: ParamKind::Str,
        default: None,
        doc: "the group (a class D address such as 239.1.1.1)",
    },
    ParamSpec {
        name: "at",
        kind: ParamKind::Duration,
        default: None,
        doc: "when",
    },
];
const RESTART_PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "restart",
    kind: ParamKind::Duration,
    default: None,
    doc: "when it restarts (optional)",
}];

/// Keys of `[[topology.node]]`.
pub const TOPO_NODE_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "name",
        kind: ParamKind::Str,
        default: None,
        doc: "the node's name (unique); nodes are numbered in file order from 0",
    },
    ParamSpec {
        name: "role",
        kind: ParamKind::Choice(Role::NAMES),
        default: Some("\"router\""),
        doc: "router (runs routing, forwards) or host (an end system)",
    },
];

/// Keys of `[[topology.link]]` besides `nodes` and the `[scenario.link]` keys.
const TOPO_LINK_NAME: &[ParamSpec] = &[ParamSpec {
    name: "name",
    kind: ParamKind::Str,
    default: None,
    doc: "the link's name (unique; default: its node names joined by `-`)",
}];

/// Keys of `[[scenario.link_failure]]`.
const LINK_FAILURE_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "link",
        kind: ParamKind::Str,
        default: None,
        doc: "the name of a [[topology.link]]",
    },
    ParamSpec {
        name: "at",
        kind: ParamKind::Duration,
        default: None,
        doc: "when the link fails",
    },
];
const REPAIR_PARAMS: &[ParamSpec] = &[ParamSpec {
    name: "repair",
    kind: ParamKind::Duration,
    default: None,
    doc: "when it is repaired (optional)",
}];

/// Keys of `[[scenario.workload]]` (besides `senders`, a list of nodes).
pub const WORKLOAD_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "channel",
        kind: ParamKind::Str,
        default: None,
        doc: "the channel to send on",
    },
    ParamSpec {
        name: "messages",
        kind: ParamKind::Int {
            min: 0,
            max: i64::MAX,
        },
        default: None,
        doc: "messages per sending node",
    },
    ParamSpec {
        name: "size",
        kind: ParamKind::Bytes,
        default: Some("256"),
        doc: "payload bytes per message",
    },
    ParamSpec {
        name: "interval",
        kind: ParamKind::Duration,
        default: Some("\"1ms\""),
        doc: "time between two messages of one sender",
    },
    ParamSpec {
        name: "start",
        kind: ParamKind::Duration,
        default: Some("\"0ms\""),
        doc: "when the first message is sent",
    },
    ParamSpec {
        name: "pattern",
        kind: ParamKind::Choice(Pattern::NAMES),
        default: Some("\"all-to-all\""),
        doc: "whom each sender sends to",
    },
];

/// Parses and validates a stack file.
///
/// `path` names the file in diagnostics, and its directory is where relative
/// [`ParamKind::Path`] parameters are read from (a name without a directory: the working
/// directory). Layers are built for node 0 to check every QoS's Ψ ⊆ Γ, so `catalog` must hold
/// every kind the file uses, and files or variables that parameters name (`encrypt`'s key) are
/// read already.
///
/// # Errors
/// [`Diagnostics`] with every problem found, sorted by line.
pub fn parse(path: &str, src: &str, catalog: &Catalog) -> Result<StackFile, Diagnostics> {
    let mut cx = Cx {
        path,
        lines: LineIndex::new(src),
        diags: Vec::new(),
        catalog,
    };
    let doc = match Located::parse_document(src) {
        Ok(doc) => doc,
        Err(e) => {
            let line = e.span().map_or(1, |s| cx.lines.line(s.start));
            let message = format!("invalid TOML: {}", e.message().trim());
            return Err(Diagnostics(vec![Diagnostic {
                file: path.to_string(),
                line,
                message,
            }]));
        }
    };
    let file = cx.file(&doc);
    let mut diags = Diagnostics(cx.diags);
    if diags.is_empty() {
        Ok(file)
    } else {
        diags.sort();
        Err(diags)
    }
}

/// A table's entries in file order, with the table's line.
struct Table<'a> {
    entries: Vec<(&'a str, &'a Located)>,
    line: usize,
}

impl<'a> Table<'a> {
    fn get(&self, key: &str) -> Option<&'a Located> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

/// How a group of [`ParamSpec`]s is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Missing keys take their default; a key without default is required.
    Fill,
    /// Every key is optional and nothing is filled.
    Optional,
}

/// Who owns the keys being read, for messages: "parameter `mtu` of layer `frag` (fragment)",
/// "key `loss` in [scenario.link]".
struct Subject<'s> {
    noun: &'s str,
    prep: &'s str,
    owner: &'s str,
}

struct Cx<'a> {
    path: &'a str,
    lines: LineIndex,
    diags: Vec<Diagnostic>,
    catalog: &'a Catalog,
}

fn u32_of(i: i64) -> u32 {
    u32::try_from(i.max(0)).unwrap_or(u32::MAX)
}

fn u64_of(i: i64) -> u64 {
    u64::try_from(i).unwrap_or(0)
}

impl<'a> Cx<'a> {
    fn err(&mut self, line: usize, message: impl Into<String>) {
        self.diags.push(Diagnostic {
            file: self.path.to_string(),
            line,
            message: message.into(),
        });
    }

    /// A relative [`ParamValue::Path`] joined to the stack file's directory (the directory
    /// part of the path the file was given as); other values unchanged.
    fn resolve(&self, value: ParamValue) -> ParamValue {
        match value {
            ParamValue::Path(p) if p.is_relative() => {
                let dir = Path::new(self.path).parent().unwrap_or(Path::new(""));
                ParamValue::Path(dir.join(p))
            }
            ParamValue::Paths(ps) => {
                let dir = Path::new(self.path).parent().unwrap_or(Path::new(""));
                ParamValue::Paths(
                    ps.into_iter()
                        .map(|p| if p.is_relative() { dir.join(p) } else { p })
                        .collect(),
                )
            }
            other => other,
        }
    }

    /// Each [`one_of`](crate::LayerKind::one_of) group of `kind` must be given exactly once
    /// in `t`: reports a group given nowhere (at the table's line) and each member given after
    /// the first (at its line). Returns whether all is well.
    fn exactly_one(&mut self, t: &Table<'_>, kind: &LayerKind, owner: &str) -> bool {
        let mut ok = true;
        for group in kind.one_of {
            let mut given: Vec<(&str, usize)> = group
                .iter()
                .filter_map(|name| t.get(name).map(|v| (*name, self.line_of(v, t.line))))
                .collect();
            given.sort_by_key(|(_, line)| *line);
            match given.as_slice() {
                [_] => {}
                [] => {
                    ok = false;
                    self.err(
                        t.line,
                        format!(
                            "{owner}: missing one of {}: give exactly one",
                            list(group.iter())
                        ),
                    );
                }
                [(first, first_line), rest @ ..] => {
                    ok = false;
                    for (name, line) in rest {
                        self.err(
                            *line,
                            format!(
                                "{owner}: parameters `{first}` (line {first_line}) and `{name}` \
                                 exclude each other: give exactly one of {}",
                                list(group.iter())
                            ),
                        );
                    }
                }
            }
        }
        ok
    }

    fn line_of(&self, v: &Located, fallback: usize) -> usize {
        v.offset().map_or(fallback, |o| self.lines.line(o))
    }

    /// `v` as a table, or an error "`what`: expected a table, found …".
    fn table<'v>(&mut self, v: &'v Located, fallback: usize, what: &str) -> Option<Table<'v>> {
        let line = self.line_of(v, fallback);
        match &v.node {
            Node::Table(entries) => {
                let mut entries: Vec<(&str, &Located)> =
                    entries.iter().map(|(k, v)| (k.as_str(), v)).collect();
                entries.sort_by_key(|(_, v)| v.offset().unwrap_or(usize::MAX));
                Some(Table { entries, line })
            }
            other => {
                self.err(
                    line,
                    format!("{what}: expected a table, found {}", other.type_name()),
                );
                None
            }
        }
    }

    /// Reports keys of `t` that are neither in `groups` nor in `extra`.
    fn unknown_keys(
        &mut self,
        t: &Table<'_>,
        groups: &[(&[ParamSpec], Mode)],
        extra: &[&str],
        s: &Subject<'_>,
    ) {
        let known: Vec<&str> = extra
            .iter()
            .copied()
            .chain(groups.iter().flat_map(|(g, _)| g.iter().map(|p| p.name)))
            .collect();
        for (key, v) in &t.entries {
            if !known.contains(key) {
                let line = self.line_of(v, t.line);
                let sugg = closest(key, known.iter().copied());
                // `extra` keys (like a layer's `kind`) are structure, not parameters: suggest
                // them, but list only the declared parameters as the alternatives.
                let declared: Vec<&str> = known
                    .iter()
                    .copied()
                    .filter(|k| !extra.contains(k))
                    .collect();
                let alternatives = if declared.is_empty() {
                    format!("{} has no {}s", s.owner, s.noun)
                } else {
                    format!("known {}s: {}", s.noun, list(&declared))
                };
                self.err(
                    line,
                    format!(
                        "unknown {} `{key}` {} {}{}; {alternatives}",
                        s.noun,
                        s.prep,
                        s.owner,
                        did_you_mean(&sugg),
                    ),
                );
            }
        }
    }

    /// Reads the keys of `t` declared by `groups` (validating each), reports unknown keys, and
    /// returns the values with `ok == false` if anything was wrong.
    fn read_params(
        &mut self,
        t: &Table<'_>,
        groups: &[(&[ParamSpec], Mode)],
        extra: &[&str],
        s: &Subject<'_>,
        kind: &str,
    ) -> (Params, bool) {
        let before = self.diags.len();
        self.unknown_keys(t, groups, extra, s);
        let mut params = Params::new(kind);
        for (specs, mode) in groups {
            for spec in specs.iter() {
                match t.get(spec.name) {
                    Some(v) => {
                        let line = self.line_of(v, t.line);
                        params.set_line(spec.name, line);
                        match spec.parse_value(&v.node) {
                            Ok(value) => params.insert(spec.name, self.resolve(value)),
                            Err(e) => self.err(
                                line,
                                format!("{} `{}` {} {}: {e}", s.noun, spec.name, s.prep, s.owner),
                            ),
                        }
                    }
                    None if *mode == Mode::Optional => {}
                    None => match spec.default {
                        Some(_) => match spec.default_value() {
                            Ok(value) => params.insert(spec.name, value),
                            Err(e) => self.err(
                                t.line,
                                format!("{}: bad default of `{}`: {e}", s.owner, spec.name),
                            ),
                        },
                        None => self.err(
                            t.line,
                            format!(
                                "{}: missing required {} `{}` ({})",
                                s.owner,
                                s.noun,
                                spec.name,
                                spec.kind.expected()
                            ),
                        ),
                    },
                }
            }
        }
        (params, self.diags.len() == before)
    }

    fn file(&mut self, doc: &Located) -> StackFile {
        let mut file = StackFile {
            path: self.path.to_string(),
            layers: BTreeMap::new(),
            qos: BTreeMap::new(),
            channels: Vec::new(),
            sessions: BTreeMap::new(),
            scenario: None,
            topology: None,
        };
        let Some(top) = self.table(doc, 1, "the file") else {
            return file;
        };
        for (key, v) in &top.entries {
            if !TOP_KEYS.contains(key) {
                let line = self.line_of(v, 1);
                let sugg = closest(key, TOP_KEYS.iter().copied());
                self.err(
                    line,
                    format!(
                        "unknown top-level key `{key}`{}; expected one of {}",
                        did_you_mean(&sugg),
                        list(TOP_KEYS)
                    ),
                );
            }
        }
        // Layers.
        let mut declared_layers: BTreeSet<String> = BTreeSet::new();
        if let Some(v) = top.get("layers") {
            if let Some(t) = self.table(v, 1, "`layers`") {
                for (name, lv) in &t.entries {
                    declared_layers.insert(name.to_string());
                    if let Some(decl) = self.layer(name, lv, t.line) {
                        file.layers.insert(name.to_string(), decl);
                    }
                }
            }
        }
        // QoSs.
        let mut declared_qos: BTreeSet<String> = BTreeSet::new();
        if let Some(v) = top.get("qos") {
            if let Some(t) = self.table(v, 1, "`qos`") {
                for (name, qv) in &t.entries {
                    declared_qos.insert(name.to_string());
                    if let Some(decl) = self.qos(name, qv, t.line, &declared_layers) {
                        file.qos.insert(name.to_string(), decl);
                    }
                }
            }
        }
        // Sessions (before channels, so bindings can be checked against them).
        if let Some(v) = top.get("sessions") {
            if let Some(t) = self.table(v, 1, "`sessions`") {
                for (name, sv) in &t.entries {
                    if let Some(decl) = self.session(name, sv, t.line, &declared_layers) {
                        file.sessions.insert(name.to_string(), decl);
                    }
                }
            }
        }
        // Channels.
        if let Some(v) = top.get("channels") {
            if let Some(t) = self.table(v, 1, "`channels`") {
                let mut bound: BTreeMap<String, (String, String, usize)> = BTreeMap::new();
                for (name, cv) in &t.entries {
                    if let Some(decl) =
                        self.channel(name, cv, t.line, &file, &declared_qos, &mut bound)
                    {
                        file.channels.push(decl);
                    }
                }
            }
        }
        // Topology (before the scenario, whose link failures name its links).
        if let Some(v) = top.get("topology") {
            file.topology = self.topology(v);
        }
        // Scenario.
        if let Some(v) = top.get("scenario") {
            file.scenario = self.scenario(v, &file);
        }
        self.devices(&file);
        self.check_qos_events(&file);
        file
    }

    fn layer(&mut self, name: &str, v: &Located, fallback: usize) -> Option<LayerDecl> {
        let t = self.table(v, fallback, &format!("layer `{name}`"))?;
        let Some(kind_v) = t.get("kind") else {
            self.err(
                t.line,
                format!(
                    "layer `{name}`: missing `kind`; known kinds: {}",
                    list(self.catalog.kinds().iter().map(|k| k.name))
                ),
            );
            return None;
        };
        let kind_line = self.line_of(kind_v, t.line);
        let Node::Str(kind_name) = &kind_v.node else {
            self.err(
                kind_line,
                format!(
                    "layer `{name}`: `kind` must be a string naming a layer kind, found {}",
                    kind_v.node.type_name()
                ),
            );
            return None;
        };
        let Some(kind) = self.catalog.get(kind_name) else {
            let sugg = self.catalog.closest(kind_name);
            let hint = if sugg.is_empty() {
                format!(
                    "; known kinds: {}",
                    list(self.catalog.kinds().iter().map(|k| k.name))
                )
            } else {
                did_you_mean(&sugg)
            };
            self.err(
                kind_line,
                format!("layer `{name}`: unknown layer kind `{kind_name}`{hint}"),
            );
            return None;
        };
        let owner = format!("layer `{name}` ({})", kind.name);
        let subject = Subject {
            noun: "parameter",
            prep: "of",
            owner: &owner,
        };
        // Members of a `one_of` group are optional one by one; the group is checked below.
        let (grouped, single): (Vec<ParamSpec>, Vec<ParamSpec>) = kind
            .params
            .iter()
            .partition(|p| kind.group_of(p.name).is_some());
        let (params, ok) = self.read_params(
            &t,
            &[(&single, Mode::Fill), (&grouped, Mode::Optional)],
            &["kind"],
            &subject,
            kind.name,
        );
        let ok = self.exactly_one(&t, kind, &owner) && ok;
        ok.then(|| LayerDecl {
            name: name.to_string(),
            kind: kind.name.to_string(),
            params,
            line: t.line,
        })
    }

    fn qos(
        &mut self,
        name: &str,
        v: &Located,
        fallback: usize,
        declared_layers: &BTreeSet<String>,
    ) -> Option<QosDecl> {
        let t = self.table(v, fallback, &format!("QoS `{name}`"))?;
        self.unknown_keys(
            &t,
            &[],
            &["layers"],
            &Subject {
                noun: "key",
                prep: "in",
                owner: &format!("QoS `{name}`"),
            },
        );
        let Some(lv) = t.get("layers") else {
            self.err(
                t.line,
                format!("QoS `{name}`: missing `layers` (layer names, bottom first)"),
            );
            return None;
        };
        let names = self.string_list(lv, t.line, &format!("`layers` of QoS `{name}`"))?;
        if names.is_empty() {
            self.err(
                self.line_of(lv, t.line),
                format!("QoS `{name}`: `layers` is empty; a QoS needs at least one layer"),
            );
            return None;
        }
        let mut ok = true;
        let mut seen = BTreeSet::new();
        for (layer, line) in &names {
            if !declared_layers.contains(layer) {
                let sugg = closest(layer, declared_layers.iter().map(String::as_str));
                self.err(
                    *line,
                    format!(
                        "QoS `{name}` names unknown layer `{layer}`{}",
                        if sugg.is_empty() {
                            format!("; declared layers: {}", list(declared_layers))
                        } else {
                            did_you_mean(&sugg)
                        }
                    ),
                );
                ok = false;
            } else if !seen.insert(layer.clone()) {
                self.err(
                    *line,
                    format!("QoS `{name}` lists layer `{layer}` twice; a layer has one slot"),
                );
                ok = false;
            }
        }
        ok.then(|| QosDecl {
            name: name.to_string(),
            layers: names.into_iter().map(|(n, _)| n).collect(),
            line: t.line,
        })
    }

    /// An array of strings, each with its line.
    fn string_list(
        &mut self,
        v: &Located,
        fallback: usize,
        what: &str,
    ) -> Option<Vec<(String, usize)>> {
        let line = self.line_of(v, fallback);
        let Node::Array(items) = &v.node else {
            self.err(
                line,
                format!(
                    "{what}: expected an array of strings, found {}",
                    v.node.type_name()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for item in items {
            let l = self.line_of(item, line);
            match &item.node {
                Node::Str(s) => out.push((s.clone(), l)),
                other => {
                    self.err(
                        l,
                        format!("{what}: expected a string, found {}", other.type_name()),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn session(
        &mut self,
        name: &str,
        v: &Located,
        fallback: usize,
        declared_layers: &BTreeSet<String>,
    ) -> Option<SessionDecl> {
        let t = self.table(v, fallback, &format!("session `{name}`"))?;
        self.unknown_keys(
            &t,
            &[],
            &["layer"],
            &Subject {
                noun: "key",
                prep: "in",
                owner: &format!("session `{name}`"),
            },
        );
        let Some(lv) = t.get("layer") else {
            self.err(t.line, format!("session `{name}`: missing `layer`"));
            return None;
        };
        let line = self.line_of(lv, t.line);
        let Node::Str(layer) = &lv.node else {
            self.err(
                line,
                format!(
                    "session `{name}`: `layer` must be a layer name, found {}",
                    lv.node.type_name()
                ),
            );
            return None;
        };
        if !declared_layers.contains(layer) {
            let sugg = closest(layer, declared_layers.iter().map(String::as_str));
            self.err(
                line,
                format!(
                    "session `{name}` names unknown layer `{layer}`{}",
                    did_you_mean(&sugg)
                ),
            );
            return None;
        }
        Some(SessionDecl {
            name: name.to_string(),
            layer: layer.clone(),
            line: t.line,
        })
    }

    fn channel(
        &mut self,
        name: &str,
        v: &Located,
        fallback: usize,
        file: &StackFile,
        declared_qos: &BTreeSet<String>,
        bound: &mut BTreeMap<String, (String, String, usize)>,
    ) -> Option<ChannelDecl> {
        let t = self.table(v, fallback, &format!("channel `{name}`"))?;
        self.unknown_keys(
            &t,
            &[],
            &["qos", "bind"],
            &Subject {
                noun: "key",
                prep: "in",
                owner: &format!("channel `{name}`"),
            },
        );
        let Some(qv) = t.get("qos") else {
            self.err(t.line, format!("channel `{name}`: missing `qos`"));
            return None;
        };
        let qline = self.line_of(qv, t.line);
        let Node::Str(qos_name) = &qv.node else {
            self.err(
                qline,
                format!(
                    "channel `{name}`: `qos` must be a QoS name, found {}",
                    qv.node.type_name()
                ),
            );
            return None;
        };
        let mut ok = true;
        if !declared_qos.contains(qos_name) {
            let sugg = closest(qos_name, declared_qos.iter().map(String::as_str));
            self.err(
                qline,
                format!(
                    "channel `{name}` names unknown QoS `{qos_name}`{}",
                    if sugg.is_empty() {
                        format!("; declared QoSs: {}", list(declared_qos))
                    } else {
                        did_you_mean(&sugg)
                    }
                ),
            );
            ok = false;
        }
        let qos = file.qos.get(qos_name);
        let mut bind = BTreeMap::new();
        if let Some(bv) = t.get("bind") {
            let bt = self.table(bv, t.line, &format!("`bind` of channel `{name}`"))?;
            for (layer, sv) in &bt.entries {
                let line = self.line_of(sv, bt.line);
                let Node::Str(session) = &sv.node else {
                    self.err(
                        line,
                        format!(
                            "channel `{name}`: `bind.{layer}` must be a session name, found {}",
                            sv.node.type_name()
                        ),
                    );
                    ok = false;
                    continue;
                };
                if let Some(q) = qos {
                    if !q.layers.iter().any(|l| l == layer) {
                        let sugg = closest(layer, q.layers.iter().map(String::as_str));
                        self.err(
                            line,
                            format!(
                                "channel `{name}`: `bind` names layer `{layer}`, which is not in \
                                 QoS `{qos_name}`{}; its layers are {}",
                                did_you_mean(&sugg),
                                list(&q.layers)
                            ),
                        );
                        ok = false;
                        continue;
                    }
                }
                let is_device = file
                    .layers
                    .get(*layer)
                    .and_then(|l| self.catalog.get(&l.kind))
                    .is_some_and(|k| k.device);
                if is_device {
                    self.err(
                        line,
                        format!(
                            "channel `{name}`: layer `{layer}` is a device, whose one session per \
                             node is shared by every channel; it cannot be bound to a named session"
                        ),
                    );
                    ok = false;
                    continue;
                }
                if let Some(decl) = file.sessions.get(session) {
                    if decl.layer != *layer {
                        self.err(
                            line,
                            format!(
                                "session `{session}` is declared with layer `{}` (line {}) but \
                                 bound to layer `{layer}` in channel `{name}`",
                                decl.layer, decl.line
                            ),
                        );
                        ok = false;
                        continue;
                    }
                }
                match bound.get(session) {
                    Some((first_layer, first_channel, first_line)) if first_layer != layer => {
                        self.err(
                            line,
                            format!(
                                "session `{session}` is bound to layer `{first_layer}` in channel \
                                 `{first_channel}` (line {first_line}) but to layer `{layer}` in \
                                 channel `{name}`"
                            ),
                        );
                        ok = false;
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        bound.insert(session.clone(), (layer.to_string(), name.to_string(), line));
                    }
                }
                bind.insert(layer.to_string(), session.clone());
            }
        }
        ok.then(|| ChannelDecl {
            name: name.to_string(),
            qos: qos_name.clone(),
            bind,
            line: t.line,
        })
    }

    /// Two device layers on one port would be one socket for two layers.
    fn devices(&mut self, file: &StackFile) {
        let mut by_line: Vec<&LayerDecl> = file.layers.values().collect();
        by_line.sort_by_key(|l| l.line);
        let mut ports: BTreeMap<u16, (&str, usize)> = BTreeMap::new();
        for l in by_line {
            let Some(port) = device_port(self.catalog, l) else {
                continue;
            };
            match port {
                Ok(port) => {
                    if let Some((other, line)) = ports.get(&port) {
                        self.err(
                            l.line,
                            format!(
                                "device layers `{other}` (line {line}) and `{}` both use port \
                                 {port}; give each device its own `port`",
                                l.name
                            ),
                        );
                    } else {
                        ports.insert(port, (&l.name, l.line));
                    }
                }
                Err(e) => self.err(l.line, format!("layer `{}`: {e}", l.name)),
            }
        }
    }

    /// Ψ ⊆ Γ: builds every valid layer for node 0 and every complete QoS.
    fn check_qos_events(&mut self, file: &StackFile) {
        let env = BuildEnv {
            node: NodeId(0),
            nodes: file.scenario.as_ref().map_or(1, |s| s.nodes),
            seed: file.scenario.as_ref().map_or(0, |s| s.seed),
            topology: file.topology.as_ref().map(|t| t.node_view(0)),
        };
        let mut built: BTreeMap<&str, LayerRef> = BTreeMap::new();
        for l in file.layers.values() {
            match crate::build::build_layer(l, self.catalog, &env) {
                Ok(layer) => {
                    built.insert(&l.name, layer);
                }
                Err((line, e)) => self.err(line, e),
            }
        }
        for q in file.qos.values() {
            let layers: Option<Vec<LayerRef>> = q
                .layers
                .iter()
                .map(|n| built.get(n.as_str()).cloned())
                .collect();
            let Some(layers) = layers else { continue };
            if let Err(e) = Qos::new(q.name.clone(), layers) {
                self.err(q.line, crate::build::refusal_with_hint(&e, &q.layers));
            }
        }
    }

    fn scenario(&mut self, v: &Located, file: &StackFile) -> Option<Scenario> {
        let t = self.table(v, 1, "`scenario`")?;
        let subject = Subject {
            noun: "key",
            prep: "in",
            owner: "[scenario]",
        };
        let (p, mut ok) = self.read_params(
            &t,
            &[(SCENARIO_PARAMS, Mode::Fill)],
            &[
                "link",
                "links",
                "partition",
                "crash",
                "leave",
                "move",
                "workload",
                "link_failure",
                "group",
            ],
            &subject,
            "scenario",
        );
        // Without a valid node count, node indices cannot be checked: skip those checks.
        let nodes = p.get_int("nodes").ok().map(u32_of);
        let mut scenario = Scenario {
            nodes: nodes.unwrap_or(1),
            seed: p.get_int("seed").map_or(0, u64_of),
            duration: p
                .get_duration("duration")
                .unwrap_or(Duration::from_secs(10)),
            expect: p
                .get_str("expect")
                .ok()
                .and_then(|s| Expect::from_name(&s))
                .unwrap_or_default(),
            link: LinkSpec::default(),
            links: Vec::new(),
            partitions: Vec::new(),
            crashes: Vec::new(),
            leaves: Vec::new(),
            moves: Vec::new(),
            workloads: Vec::new(),
            link_failures: Vec::new(),
            groups: Vec::new(),
            topology: file.topology.clone(),
            line: t.line,
        };
        if let (Some(n), Some(topo)) = (nodes, &file.topology) {
            if topo.nodes.len() != n as usize {
                self.err(
                    t.line,
                    format!(
                        "[scenario]: `nodes` = {n} but [topology] declares {} nodes (line {}); \
                         they must agree",
                        topo.nodes.len(),
                        topo.line
                    ),
                );
                ok = false;
            }
        }
        if let Some(lv) = t.get("link") {
            match self.table(lv, t.line, "[scenario.link]") {
                Some(lt) => {
                    let s = Subject {
                        noun: "key",
                        prep: "in",
                        owner: "[scenario.link]",
                    };
                    let (lp, lok) =
                        self.read_params(&lt, &[(LINK_PARAMS, Mode::Optional)], &[], &s, "link");
                    ok &= lok;
                    scenario.link = link_override(&lp, 0).apply(&LinkSpec::default());
                }
                None => ok = false,
            }
        }
        for (i, item) in self.array_of_tables(&t, "links", &mut ok) {
            let owner = format!("[[scenario.links]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (lp, lok) = self.read_params(
                &item,
                &[(LINK_ENDS, Mode::Fill), (LINK_PARAMS, Mode::Optional)],
                &[],
                &s,
                "link",
            );
            ok &= lok;
            let o = link_override(&lp, item.line);
            ok &= self.check_node(o.from, nodes, item.line, &owner);
            ok &= self.check_node(o.to, nodes, item.line, &owner);
            scenario.links.push(o);
        }
        for (i, item) in self.array_of_tables(&t, "partition", &mut ok) {
            let owner = format!("[[scenario.partition]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (pp, pok) = self.read_params(
                &item,
                &[
                    (PARTITION_PARAMS, Mode::Fill),
                    (HEAL_PARAMS, Mode::Optional),
                ],
                &["groups"],
                &s,
                "partition",
            );
            ok &= pok;
            let at = pp.get_duration("at").unwrap_or_default();
            let heal = pp.get_duration("heal").ok();
            if let Some(h) = heal {
                if pok && h <= at {
                    self.err(
                        item.line,
                        format!("{owner}: `heal` ({h:?}) must come after `at` ({at:?})"),
                    );
                    ok = false;
                }
            }
            let groups = self.groups(&item, nodes, &owner);
            ok &= groups.is_some();
            scenario.partitions.push(PartitionSpec {
                at,
                heal,
                groups: groups.unwrap_or_default(),
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "crash", &mut ok) {
            let owner = format!("[[scenario.crash]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (cp, cok) = self.read_params(
                &item,
                &[(CRASH_PARAMS, Mode::Fill), (RESTART_PARAMS, Mode::Optional)],
                &[],
                &s,
                "crash",
            );
            ok &= cok;
            let node = cp.get_int("node").map_or(0, u32_of);
            let at = cp.get_duration("at").unwrap_or_default();
            let restart = cp.get_duration("restart").ok();
            if cok {
                ok &= self.check_node(node, nodes, item.line, &owner);
            }
            if let Some(r) = restart {
                if cok && r <= at {
                    self.err(
                        item.line,
                        format!("{owner}: `restart` ({r:?}) must come after `at` ({at:?})"),
                    );
                    ok = false;
                }
            }
            scenario.crashes.push(CrashSpec {
                node,
                at,
                restart,
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "leave", &mut ok) {
            let owner = format!("[[scenario.leave]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (lp, lok) =
                self.read_params(&item, &[(LEAVE_PARAMS, Mode::Fill)], &[], &s, "leave");
            ok &= lok;
            let node = lp.get_int("node").map_or(0, u32_of);
            if lok {
                ok &= self.check_node(node, nodes, item.line, &owner);
            }
            scenario.leaves.push(LeaveSpec {
                node,
                at: lp.get_duration("at").unwrap_or_default(),
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "move", &mut ok) {
            let owner = format!("[[scenario.move]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (mp, mok) = self.read_params(&item, &[(MOVE_PARAMS, Mode::Fill)], &[], &s, "move");
            ok &= mok;
            let node = mp.get_int("node").map_or(0, u32_of);
            if mok {
                ok &= self.check_node(node, nodes, item.line, &owner);
            }
            let mut channel_of = |key: &str| {
                let name = mp.get_str(key).unwrap_or_default();
                if mok && !file.channels.iter().any(|c| c.name == name) {
                    let line = item
                        .get(key)
                        .map_or(item.line, |v| self.line_of(v, item.line));
                    self.err(line, format!("{owner}: no channel `{name}`"));
                    ok = false;
                }
                name
            };
            let channel = channel_of("channel");
            let to = channel_of("to");
            if scenario.expect == Expect::CrossChannelOrder {
                // One order over every channel cannot hold: a move needs a second heavy group,
                // and two heavy groups' orders are separate (docs/STACK_FILES.md).
                self.err(
                    item.line,
                    format!(
                        "{owner}: `expect = \"cross-channel-order\"` judges one order over every \
                         channel, but a move takes `{channel}`'s light group to another heavy \
                         group, whose order is separate (channels on different heavy groups share \
                         no order; across the move the group's messages are in the old heavy \
                         group's order up to the switch and in the new one's after it): use \
                         `expect = \"total-order\"` (each light channel's own order)"
                    ),
                );
                ok = false;
            }
            scenario.moves.push(MoveSpec {
                node,
                channel,
                to,
                at: mp.get_duration("at").unwrap_or_default(),
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "group", &mut ok) {
            let owner = format!("[[scenario.group]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (gp, gok) =
                self.read_params(&item, &[(GROUP_PARAMS, Mode::Fill)], &[], &s, "group");
            ok &= gok;
            let node = gp.get_int("node").map_or(0, u32_of);
            if gok {
                ok &= self.check_node(node, nodes, item.line, &owner);
            }
            let text = gp.get_str("group").unwrap_or_default();
            let group = match crate::standard::parse_group(&text) {
                Ok(g) => g.0,
                Err(e) => {
                    if gok {
                        let line = item
                            .get("group")
                            .map_or(item.line, |v| self.line_of(v, item.line));
                        self.err(line, format!("{owner}: {e}"));
                    }
                    ok = false;
                    0
                }
            };
            scenario.groups.push(GroupEventSpec {
                node,
                join: gp.get_str("action").is_ok_and(|a| a == "join"),
                group,
                at: gp.get_duration("at").unwrap_or_default(),
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "workload", &mut ok) {
            let owner = format!("[[scenario.workload]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (wp, wok) = self.read_params(
                &item,
                &[(WORKLOAD_PARAMS, Mode::Fill)],
                &["senders"],
                &s,
                "workload",
            );
            ok &= wok;
            let channel = wp.get_str("channel").unwrap_or_default();
            if let (Some(cv), Ok(_)) = (item.get("channel"), wp.get_str("channel")) {
                let known = file.channels.iter().any(|c| c.name == channel);
                if !known {
                    let sugg = closest(&channel, file.channels.iter().map(|c| c.name.as_str()));
                    let line = self.line_of(cv, item.line);
                    self.err(
                        line,
                        format!(
                            "{owner}: unknown channel `{channel}`{}",
                            if sugg.is_empty() {
                                format!(
                                    "; declared channels: {}",
                                    list(file.channels.iter().map(|c| c.name.as_str()))
                                )
                            } else {
                                did_you_mean(&sugg)
                            }
                        ),
                    );
                    ok = false;
                }
            }
            let senders = match item.get("senders") {
                Some(sv) => {
                    let what = format!("`senders` of {owner}");
                    let list = self.node_list(sv, item.line, nodes, &what);
                    ok &= list.is_some();
                    list
                }
                None => None,
            };
            scenario.workloads.push(Workload {
                channel,
                messages: wp.get_int("messages").map_or(0, u64_of),
                size: wp.get_bytes("size").unwrap_or(256),
                interval: wp.get_duration("interval").unwrap_or_default(),
                start: wp.get_duration("start").unwrap_or_default(),
                pattern: wp
                    .get_str("pattern")
                    .ok()
                    .and_then(|s| Pattern::from_name(&s))
                    .unwrap_or_default(),
                senders,
                line: item.line,
            });
        }
        for (i, item) in self.array_of_tables(&t, "link_failure", &mut ok) {
            let owner = format!("[[scenario.link_failure]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (fp, fok) = self.read_params(
                &item,
                &[
                    (LINK_FAILURE_PARAMS, Mode::Fill),
                    (REPAIR_PARAMS, Mode::Optional),
                ],
                &[],
                &s,
                "link_failure",
            );
            ok &= fok;
            let at = fp.get_duration("at").unwrap_or_default();
            let repair = fp.get_duration("repair").ok();
            if let Some(r) = repair {
                if fok && r <= at {
                    self.err(
                        item.line,
                        format!("{owner}: `repair` ({r:?}) must come after `at` ({at:?})"),
                    );
                    ok = false;
                }
            }
            let name = fp.get_str("link").unwrap_or_default();
            let line = item
                .get("link")
                .map_or(item.line, |v| self.line_of(v, item.line));
            let link = match &file.topology {
                None => {
                    if fok {
                        self.err(
                            line,
                            format!("{owner}: link failures need a [topology] with named links"),
                        );
                    }
                    None
                }
                Some(topo) => {
                    let found = topo.link_index(&name);
                    if found.is_none() && fok {
                        let sugg = closest(&name, topo.links.iter().map(|l| l.name.as_str()));
                        self.err(
                            line,
                            format!(
                                "{owner}: unknown link `{name}`{}",
                                if sugg.is_empty() {
                                    format!(
                                        "; the [topology] links are: {}",
                                        list(topo.links.iter().map(|l| l.name.as_str()))
                                    )
                                } else {
                                    did_you_mean(&sugg)
                                }
                            ),
                        );
                    }
                    found
                }
            };
            ok &= link.is_some();
            scenario.link_failures.push(LinkFailureSpec {
                link: link.unwrap_or_default(),
                at,
                repair,
                line: item.line,
            });
        }
        ok.then_some(scenario)
    }

    /// `[topology]`: `[[topology.node]]` and `[[topology.link]]`.
    fn topology(&mut self, v: &Located) -> Option<TopologyDecl> {
        let t = self.table(v, 1, "`topology`")?;
        let mut ok = true;
        for (key, kv) in &t.entries {
            if !["node", "link"].contains(key) {
                let line = self.line_of(kv, t.line);
                let sugg = closest(key, ["node", "link"]);
                self.err(
                    line,
                    format!(
                        "unknown key `{key}` in [topology]{}; expected `[[topology.node]]` or \
                         `[[topology.link]]`",
                        did_you_mean(&sugg)
                    ),
                );
                ok = false;
            }
        }
        let mut topo = TopologyDecl {
            line: t.line,
            ..TopologyDecl::default()
        };
        for (i, item) in self.array_of(&t, "topology", "node", &mut ok) {
            let owner = format!("[[topology.node]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (np, nok) =
                self.read_params(&item, &[(TOPO_NODE_PARAMS, Mode::Fill)], &[], &s, "node");
            ok &= nok;
            let name = np.get_str("name").unwrap_or_default();
            if nok && name.is_empty() {
                self.err(item.line, format!("{owner}: `name` must not be empty"));
                ok = false;
            }
            if let Some(other) = topo.nodes.iter().find(|n| n.name == name && nok) {
                self.err(
                    item.line,
                    format!(
                        "{owner}: node name `{name}` is already used (line {}); node names \
                         must be unique",
                        other.line
                    ),
                );
                ok = false;
            }
            if topo.nodes.len() >= MAX_NODES as usize {
                self.err(item.line, format!("{owner}: more than {MAX_NODES} nodes"));
                ok = false;
                break;
            }
            topo.nodes.push(TopoNodeDecl {
                name,
                role: np
                    .get_str("role")
                    .ok()
                    .and_then(|r| Role::from_name(&r))
                    .unwrap_or_default(),
                line: item.line,
            });
        }
        for (i, item) in self.array_of(&t, "topology", "link", &mut ok) {
            let owner = format!("[[topology.link]] #{}", i + 1);
            let s = Subject {
                noun: "key",
                prep: "in",
                owner: &owner,
            };
            let (lp, lok) = self.read_params(
                &item,
                &[
                    (TOPO_LINK_NAME, Mode::Optional),
                    (LINK_PARAMS, Mode::Optional),
                ],
                &["nodes"],
                &s,
                "link",
            );
            ok &= lok;
            let nodes = self.topo_link_nodes(&item, &topo, &owner);
            ok &= nodes.is_some();
            let nodes = nodes.unwrap_or_default();
            let name = lp.get_str("name").unwrap_or_else(|_| {
                nodes
                    .iter()
                    .filter_map(|&n| topo.nodes.get(n as usize).map(|d| d.name.as_str()))
                    .collect::<Vec<_>>()
                    .join("-")
            });
            if let Some(other) = topo
                .links
                .iter()
                .find(|l| l.name == name && !name.is_empty())
            {
                self.err(
                    item.line,
                    format!(
                        "{owner}: link name `{name}` is already used (line {}); give the links \
                         distinct `name`s",
                        other.line
                    ),
                );
                ok = false;
            }
            topo.links.push(TopoLinkDecl {
                name,
                nodes,
                conditions: link_override(&lp, item.line),
                line: item.line,
            });
        }
        ok.then_some(topo)
    }

    /// `nodes = ["R1", "R2", …]` of a `[[topology.link]]`: at least two distinct known names.
    fn topo_link_nodes(
        &mut self,
        item: &Table<'_>,
        topo: &TopologyDecl,
        owner: &str,
    ) -> Option<Vec<u32>> {
        let Some(v) = item.get("nodes") else {
            self.err(
                item.line,
                format!("{owner}: missing required key `nodes` (an array of node names)"),
            );
            return None;
        };
        let line = self.line_of(v, item.line);
        let Node::Array(items) = &v.node else {
            self.err(
                line,
                format!(
                    "{owner}: `nodes` must be an array of node names, found {}",
                    v.node.type_name()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for it in items {
            let l = self.line_of(it, line);
            let Node::Str(name) = &it.node else {
                self.err(
                    l,
                    format!(
                        "{owner}: `nodes` must hold node names (strings), found {}",
                        it.node.type_name()
                    ),
                );
                ok = false;
                continue;
            };
            match topo.node_index(name) {
                Some(i) if out.contains(&i) => {
                    self.err(l, format!("{owner}: node `{name}` is listed twice"));
                    ok = false;
                }
                Some(i) => out.push(i),
                None => {
                    let sugg = closest(name, topo.nodes.iter().map(|n| n.name.as_str()));
                    self.err(
                        l,
                        format!(
                            "{owner}: unknown node `{name}`{}",
                            if sugg.is_empty() {
                                "; declare it with [[topology.node]] first".to_string()
                            } else {
                                did_you_mean(&sugg)
                            }
                        ),
                    );
                    ok = false;
                }
            }
        }
        if ok && out.len() < 2 {
            self.err(
                line,
                format!(
                    "{owner}: a link joins at least two nodes, found {}",
                    out.len()
                ),
            );
            ok = false;
        }
        ok.then_some(out)
    }

    /// The tables of `[[scenario.KEY]]`, numbered.
    fn array_of_tables<'v>(
        &mut self,
        t: &Table<'v>,
        key: &str,
        ok: &mut bool,
    ) -> Vec<(usize, Table<'v>)> {
        self.array_of(t, "scenario", key, ok)
    }

    /// The tables of `[[SECTION.KEY]]`, numbered.
    fn array_of<'v>(
        &mut self,
        t: &Table<'v>,
        section: &str,
        key: &str,
        ok: &mut bool,
    ) -> Vec<(usize, Table<'v>)> {
        let Some(v) = t.get(key) else {
            return Vec::new();
        };
        let line = self.line_of(v, t.line);
        let Node::Array(items) = &v.node else {
            self.err(
                line,
                format!(
                    "`{section}.{key}`: expected an array of tables (`[[{section}.{key}]]`), \
                     found {}",
                    v.node.type_name()
                ),
            );
            *ok = false;
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match self.table(item, line, &format!("[[{section}.{key}]] #{}", i + 1)) {
                Some(it) => out.push((i, it)),
                None => *ok = false,
            }
        }
        out
    }

    fn check_node(&mut self, node: u32, nodes: Option<u32>, line: usize, owner: &str) -> bool {
        match nodes {
            Some(n) if node >= n => {
                self.err(
                    line,
                    format!(
                        "{owner}: node {node} does not exist: the scenario has {n} nodes (0..={})",
                        n.saturating_sub(1)
                    ),
                );
                false
            }
            _ => true,
        }
    }

    /// An array of node indices below `nodes`.
    fn node_list(
        &mut self,
        v: &Located,
        fallback: usize,
        nodes: Option<u32>,
        what: &str,
    ) -> Option<Vec<u32>> {
        let line = self.line_of(v, fallback);
        let Node::Array(items) = &v.node else {
            self.err(
                line,
                format!(
                    "{what}: expected an array of node indices, found {}",
                    v.node.type_name()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for item in items {
            let l = self.line_of(item, line);
            match &item.node {
                Node::Int(i) if *i >= 0 && *i < MAX_NODES => {
                    let n = u32_of(*i);
                    ok &= self.check_node(n, nodes, l, what);
                    out.push(n);
                }
                other => {
                    let found = match other {
                        Node::Int(i) => format!("{i}"),
                        o => o.type_name().to_string(),
                    };
                    self.err(
                        l,
                        format!(
                            "{what}: expected a node index (an integer in 0..{MAX_NODES}), found \
                             {found}"
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// `groups = [[0, 1], [2, 3]]`: disjoint node lists.
    fn groups(&mut self, t: &Table<'_>, nodes: Option<u32>, owner: &str) -> Option<Vec<Vec<u32>>> {
        let Some(v) = t.get("groups") else {
            self.err(
                t.line,
                format!("{owner}: missing required key `groups` (arrays of node indices)"),
            );
            return None;
        };
        let line = self.line_of(v, t.line);
        let Node::Array(items) = &v.node else {
            self.err(
                line,
                format!(
                    "{owner}: `groups` must be an array of arrays of node indices, found {}",
                    v.node.type_name()
                ),
            );
            return None;
        };
        let mut groups = Vec::new();
        let mut seen = BTreeSet::new();
        let mut ok = true;
        for item in items {
            let what = format!("`groups` of {owner}");
            let Some(g) = self.node_list(item, line, nodes, &what) else {
                ok = false;
                continue;
            };
            for n in &g {
                if !seen.insert(*n) {
                    self.err(
                        self.line_of(item, line),
                        format!("{owner}: node {n} is in two groups; groups must be disjoint"),
                    );
                    ok = false;
                }
            }
            groups.push(g);
        }
        ok.then_some(groups)
    }
}

/// A link override from validated values (`from`/`to` default to 0 when absent).
fn link_override(p: &Params, line: usize) -> LinkOverride {
    LinkOverride {
        from: p.get_int("from").map_or(0, u32_of),
        to: p.get_int("to").map_or(0, u32_of),
        latency: p.get_duration("latency").ok(),
        jitter: p.get_duration("jitter").ok(),
        bandwidth: p.get_bandwidth("bandwidth").ok(),
        loss: p.get_float("loss").ok(),
        duplicate: p.get_float("duplicate").ok(),
        reorder: p.get_float("reorder").ok(),
        reorder_delay: p.get_duration("reorder_delay").ok(),
        corrupt: p.get_float("corrupt").ok(),
        line,
    }
}

/// The port of a device layer: `None` for a non-device, else its `port` parameter (0 when the
/// kind declares none).
pub(crate) fn device_port(catalog: &Catalog, l: &LayerDecl) -> Option<Result<u16, String>> {
    let kind = catalog.get(&l.kind)?;
    if !kind.device {
        return None;
    }
    if kind.param("port").is_none() {
        return Some(Ok(0));
    }
    Some(match l.params.get("port") {
        Some(ParamValue::Int(p)) => {
            u16::try_from(*p).map_err(|_| format!("device port {p} is not in 0..=65535"))
        }
        _ => Err("device parameter `port` must be an integer".to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declared defaults (documentation, `[scenario.link]` reading) and the model's
    /// `Default` are one set of numbers.
    #[test]
    fn declared_link_defaults_match_the_model() {
        let mut p = Params::new("link");
        for spec in LINK_PARAMS {
            if spec.default.is_some() {
                p.insert(
                    spec.name,
                    spec.default_value().unwrap_or(ParamValue::Bool(false)),
                );
            }
        }
        assert_eq!(
            link_override(&p, 0).apply(&LinkSpec::default()),
            LinkSpec::default()
        );
        let expect = SCENARIO_PARAMS
            .iter()
            .find(|s| s.name == "expect")
            .map(|s| s.default);
        assert_eq!(expect, Some(Some("\"none\"")));
        assert_eq!(Expect::default(), Expect::None);
        let pattern = WORKLOAD_PARAMS
            .iter()
            .find(|s| s.name == "pattern")
            .map(|s| s.default);
        assert_eq!(pattern, Some(Some("\"all-to-all\"")));
        assert_eq!(Pattern::default(), Pattern::AllToAll);
        for spec in SCENARIO_PARAMS
            .iter()
            .chain(LINK_PARAMS)
            .chain(WORKLOAD_PARAMS)
        {
            if spec.default.is_some() {
                assert!(spec.default_value().is_ok(), "{}", spec.name);
            }
        }
    }

    #[test]
    fn a_scenario_without_link_uses_the_defaults() {
        let f = parse("t.toml", "[scenario]\nnodes = 2\n", &Catalog::builtin());
        let s = f.map(|f| f.scenario).ok().flatten();
        assert_eq!(s.map(|s| (s.link, s.nodes)), Some((LinkSpec::default(), 2)));
    }
}

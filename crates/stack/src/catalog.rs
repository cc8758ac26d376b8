//! The catalog of layer kinds: what a stack file may name in `[layers.X] kind = "…"`, the
//! parameters each kind takes, and how to build its [`Layer`](viastack_kernel::Layer).
//!
//! Realizes issue 2 §3 / DESIGN.md §6.10: ONE declaration of a layer's parameters
//! ([`LayerKind::params`], a table of [`ParamSpec`]) drives parsing and validation
//! (`ParamSpec::parse_value`, used by the stack-file parser), `viastack check` output and the
//! generated parameter reference ([`Catalog::params_markdown`]). Defaults are written as TOML and
//! read by the same code as the file, so a default can never disagree with what the parser
//! accepts ([`Catalog::register`] refuses a kind whose default does not parse).
//!
//! The catalog is open: [`Catalog::builtin`] holds the kernel's reference layers, and other
//! crates (the simulated device, the protocol library) [`register`](Catalog::register) theirs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use viastack_kernel::layers::{Device, Ghost, Transparent};
use viastack_kernel::{Duration, LayerRef, NodeId};

use crate::diag::{closest, list};
use crate::secret::Secret;
use crate::tree::{Located, Node};
use crate::units;

/// The type (and range) of a parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    /// `true` / `false`.
    Bool,
    /// An integer in `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A number in `min..=max` (integers are accepted).
    Float {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// Any string.
    Str,
    /// A duration string (`"10ms"`), see [`units::parse_duration`].
    Duration,
    /// A byte size: an integer or a string (`"64KiB"`), see [`units::parse_bytes`].
    Bytes,
    /// A bandwidth string in bits/s (`"100Mbit"`), see [`units::parse_bandwidth`].
    Bandwidth,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A file path (a non-empty string). The parser resolves a relative path against the
    /// directory of the stack file, so the file is found wherever the command runs.
    Path,
    /// A list of file paths: one string, paths separated by commas (may be empty). Each
    /// relative path is resolved like [`ParamKind::Path`].
    Paths,
    /// A string that is never printed (key material): read as a [`Secret`].
    Secret,
}

impl ParamKind {
    /// What a value must look like, for "expected …" messages.
    pub fn expected(&self) -> String {
        match self {
            ParamKind::Bool => "a boolean".to_string(),
            ParamKind::Int { min, max } => format!("an integer in {min}..={max}"),
            ParamKind::Float { min, max } => format!("a number in {min}..={max}"),
            ParamKind::Str => "a string".to_string(),
            ParamKind::Duration => {
                "a duration string such as \"10ms\", \"1.5s\", \"200us\"".to_string()
            }
            ParamKind::Bytes => {
                "a byte size (an integer, or a string such as \"64KiB\", \"1MB\")".to_string()
            }
            ParamKind::Bandwidth => {
                "a bandwidth string such as \"100Mbit\", \"1Gbit\", \"10Mbps\"".to_string()
            }
            ParamKind::Choice(options) => format!("one of {}", quoted(options)),
            ParamKind::Path => {
                "a file path (a string; a relative path is read from the stack file's directory)"
                    .to_string()
            }
            ParamKind::Paths => "file paths separated by commas (a string; relative paths are \
                                 read from the stack file's directory)"
                .to_string(),
            ParamKind::Secret => "a string".to_string(),
        }
    }

    /// A short type name for the parameter reference.
    pub fn type_name(&self) -> String {
        match self {
            ParamKind::Bool => "bool".to_string(),
            ParamKind::Int { min, max } => format!("integer {min}..={max}"),
            ParamKind::Float { min, max } => format!("float {min}..={max}"),
            ParamKind::Str => "string".to_string(),
            ParamKind::Duration => "duration".to_string(),
            ParamKind::Bytes => "bytes".to_string(),
            ParamKind::Bandwidth => "bandwidth (bit/s)".to_string(),
            ParamKind::Choice(options) => format!("one of {}", quoted(options)),
            ParamKind::Path => "path (relative to the stack file)".to_string(),
            ParamKind::Paths => "paths, comma-separated (relative to the stack file)".to_string(),
            ParamKind::Secret => "secret string".to_string(),
        }
    }
}

fn quoted(options: &[&str]) -> String {
    let v: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
    v.join(", ")
}

/// A validated parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// From [`ParamKind::Bool`].
    Bool(bool),
    /// From [`ParamKind::Int`].
    Int(i64),
    /// From [`ParamKind::Float`].
    Float(f64),
    /// From [`ParamKind::Str`] and [`ParamKind::Choice`].
    Str(String),
    /// From [`ParamKind::Duration`].
    Duration(Duration),
    /// From [`ParamKind::Bytes`].
    Bytes(u64),
    /// From [`ParamKind::Bandwidth`], bits per second.
    Bandwidth(u64),
    /// From [`ParamKind::Path`], resolved against the stack file's directory.
    Path(PathBuf),
    /// From [`ParamKind::Paths`], each resolved against the stack file's directory.
    Paths(Vec<PathBuf>),
    /// From [`ParamKind::Secret`]; printed as `<secret>`.
    Secret(Secret),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x}"),
            ParamValue::Str(s) => write!(f, "{s:?}"),
            ParamValue::Duration(d) => write!(f, "{d:?}"),
            ParamValue::Bytes(b) => write!(f, "{b}B"),
            ParamValue::Bandwidth(b) => write!(f, "{b}bit/s"),
            ParamValue::Path(p) => write!(f, "{:?}", p.display().to_string()),
            ParamValue::Paths(ps) => {
                let v: Vec<String> = ps.iter().map(|p| p.display().to_string()).collect();
                write!(f, "{:?}", v.join(","))
            }
            ParamValue::Secret(s) => write!(f, "{s}"),
        }
    }
}

/// One parameter of a layer kind (or of a scenario table).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    /// The TOML key.
    pub name: &'static str,
    /// Type and range.
    pub kind: ParamKind,
    /// The default, written as in TOML (`"1500"`, `"\"10ms\""`, `"true"`) and parsed by the same
    /// code as the file; `None` makes the parameter required.
    pub default: Option<&'static str>,
    /// One line of documentation (cite the default's source, DESIGN.md §6.8).
    pub doc: &'static str,
}

impl ParamSpec {
    /// Checks a TOML value against this parameter.
    ///
    /// # Errors
    /// A message "expected …, found …" (without the parameter's name).
    pub(crate) fn parse_value(&self, node: &Node) -> Result<ParamValue, String> {
        let expected = self.kind.expected();
        let found = || format!("expected {expected}, found {}", describe(node));
        match (&self.kind, node) {
            (ParamKind::Bool, Node::Bool(b)) => Ok(ParamValue::Bool(*b)),
            (ParamKind::Int { min, max }, Node::Int(i)) => {
                if (*min..=*max).contains(i) {
                    Ok(ParamValue::Int(*i))
                } else {
                    Err(found())
                }
            }
            (ParamKind::Float { min, max }, Node::Float(_) | Node::Int(_)) => {
                let f = match node {
                    Node::Float(f) => *f,
                    Node::Int(i) => *i as f64,
                    _ => f64::NAN,
                };
                if f >= *min && f <= *max {
                    Ok(ParamValue::Float(f))
                } else {
                    Err(found())
                }
            }
            (ParamKind::Str, Node::Str(s)) => Ok(ParamValue::Str(s.clone())),
            (ParamKind::Path, Node::Str(s)) if s.is_empty() => {
                Err(format!("expected {expected}, found an empty string"))
            }
            (ParamKind::Path, Node::Str(s)) => Ok(ParamValue::Path(PathBuf::from(s))),
            (ParamKind::Paths, Node::Str(s)) => Ok(ParamValue::Paths(
                s.split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect(),
            )),
            (ParamKind::Secret, Node::Str(s)) => Ok(ParamValue::Secret(Secret::new(s.clone()))),
            (ParamKind::Duration, Node::Str(s)) => units::parse_duration(s)
                .map(ParamValue::Duration)
                .map_err(|e| e.to_string()),
            (ParamKind::Bytes, Node::Int(i)) => u64::try_from(*i)
                .map(ParamValue::Bytes)
                .map_err(|_| found()),
            (ParamKind::Bytes, Node::Str(s)) => units::parse_bytes(s)
                .map(ParamValue::Bytes)
                .map_err(|e| e.to_string()),
            (ParamKind::Bandwidth, Node::Str(s)) => units::parse_bandwidth(s)
                .map(ParamValue::Bandwidth)
                .map_err(|e| e.to_string()),
            (ParamKind::Choice(options), Node::Str(s)) => {
                if options.contains(&s.as_str()) {
                    Ok(ParamValue::Str(s.clone()))
                } else {
                    let sugg = closest(s, options.iter().copied());
                    Err(format!(
                        "expected {expected}, found \"{s}\"{}",
                        crate::diag::did_you_mean(&sugg)
                    ))
                }
            }
            _ => Err(found()),
        }
    }

    /// The default value, parsed.
    ///
    /// # Errors
    /// A message when the spec has no default or its default does not parse.
    pub fn default_value(&self) -> Result<ParamValue, String> {
        let text = self
            .default
            .ok_or_else(|| format!("parameter `{}` is required", self.name))?;
        let doc = Located::parse_document(&format!("v = {text}"))
            .map_err(|e| format!("default `{text}` is not a TOML value: {}", e.message()))?;
        let value = match &doc.node {
            Node::Table(entries) => entries
                .iter()
                .find(|(k, _)| k == "v")
                .map(|(_, v)| v.node.clone()),
            _ => None,
        }
        .ok_or_else(|| format!("default `{text}` is not a TOML value"))?;
        self.parse_value(&value)
            .map_err(|e| format!("default `{text}`: {e}"))
    }
}

/// "string", "integer 10", "string \"x\"": what was found, for messages.
fn describe(node: &Node) -> String {
    match node {
        Node::Int(i) => format!("{i}"),
        Node::Float(f) => format!("{f}"),
        Node::Bool(b) => format!("{b}"),
        other => other.type_name().to_string(),
    }
}

/// What a layer is built for: which node of how many, and the scenario's seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildEnv {
    /// The node being built.
    pub node: NodeId,
    /// How many nodes the scenario has.
    pub nodes: u32,
    /// The scenario's seed.
    pub seed: u64,
    /// With a `[topology]`: the node's role and its interfaces' links.
    pub topology: Option<crate::model::NodeTopology>,
}

impl Default for BuildEnv {
    fn default() -> Self {
        BuildEnv {
            node: NodeId(0),
            nodes: 1,
            seed: 0,
            topology: None,
        }
    }
}

/// Why a layer factory refused its parameters: what is wrong and, when one parameter is at
/// fault, which, so that the diagnostic points at the line where it is written.
///
/// Factories mostly write `?` on a `String` or a [`ParamError`] (both convert, without a
/// parameter); [`BuildError::param`] names the parameter. The message never holds a
/// [`Secret`]'s value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BuildError {
    /// The parameter at fault, if the problem is one parameter's.
    pub param: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl BuildError {
    /// A problem of parameter `param`.
    pub fn param(param: impl Into<String>, message: impl Into<String>) -> Self {
        BuildError {
            param: Some(param.into()),
            message: message.into(),
        }
    }
}

impl From<String> for BuildError {
    fn from(message: String) -> Self {
        BuildError {
            param: None,
            message,
        }
    }
}

impl From<&str> for BuildError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

impl From<ParamError> for BuildError {
    fn from(e: ParamError) -> Self {
        e.to_string().into()
    }
}

/// A layer factory: `(layer name in the file, validated parameters, environment)`.
pub type BuildFn =
    fn(layer_name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError>;

/// A kind of layer a stack file may use.
#[derive(Clone, Copy)]
pub struct LayerKind {
    /// The name written in `kind = "…"`.
    pub name: &'static str,
    /// One paragraph for the parameter reference.
    pub doc: &'static str,
    /// Its parameters (the one declaration, DESIGN.md §6.10).
    pub params: &'static [ParamSpec],
    /// Groups of parameters of which a file gives exactly one: alternative sources of one
    /// value, like `encrypt`'s `key`, `key_file` and `key_env`. Members have no default; the
    /// parser reports a group given none or more than once.
    pub one_of: &'static [&'static [&'static str]],
    /// A device: one session per node, shared by every channel that uses the layer, on the port
    /// given by its `port` parameter (0 if it has none).
    pub device: bool,
    /// Builds the layer.
    pub build: BuildFn,
}

impl fmt::Debug for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LayerKind")
            .field("name", &self.name)
            .field("params", &self.params)
            .field("one_of", &self.one_of)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl LayerKind {
    /// The spec of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&'static ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The [`one_of`](LayerKind::one_of) group parameter `name` belongs to.
    pub fn group_of(&self, name: &str) -> Option<&'static [&'static str]> {
        self.one_of.iter().copied().find(|g| g.contains(&name))
    }

    /// Every parameter at its default.
    ///
    /// # Errors
    /// A message naming a required parameter (one without a default).
    pub fn default_params(&self) -> Result<Params, String> {
        let mut params = Params::new(self.name);
        for spec in self.params {
            params.insert(spec.name, spec.default_value()?);
        }
        Ok(params)
    }
}

/// Why a parameter could not be read from [`Params`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// No such parameter (not declared by the kind).
    #[error("layer kind `{kind}` has no parameter `{name}`")]
    Missing {
        /// The kind.
        kind: String,
        /// The parameter.
        name: String,
    },
    /// The parameter has another type.
    #[error("parameter `{name}` of layer kind `{kind}` is not {wanted}")]
    WrongType {
        /// The kind.
        kind: String,
        /// The parameter.
        name: String,
        /// The type asked for.
        wanted: &'static str,
    },
}

impl From<ParamError> for String {
    fn from(e: ParamError) -> String {
        e.to_string()
    }
}

/// Validated parameter values of one layer, defaults filled in, and the line of each value
/// written in the file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params {
    kind: String,
    values: BTreeMap<String, ParamValue>,
    lines: BTreeMap<String, usize>,
}

macro_rules! getter {
    ($(#[$m:meta])* $fn:ident, $variant:ident, $ty:ty, $wanted:literal) => {
        $(#[$m])*
        ///
        /// # Errors
        /// [`ParamError`] if the parameter is absent or of another type (a kind asking for a
        /// parameter it did not declare).
        pub fn $fn(&self, name: &str) -> Result<$ty, ParamError> {
            match self.values.get(name) {
                Some(ParamValue::$variant(v)) => Ok(v.clone()),
                Some(_) => Err(ParamError::WrongType {
                    kind: self.kind.clone(),
                    name: name.to_string(),
                    wanted: $wanted,
                }),
                None => Err(ParamError::Missing {
                    kind: self.kind.clone(),
                    name: name.to_string(),
                }),
            }
        }
    };
}

impl Params {
    /// No values, for layer kind `kind`.
    pub fn new(kind: impl Into<String>) -> Self {
        Params {
            kind: kind.into(),
            values: BTreeMap::new(),
            lines: BTreeMap::new(),
        }
    }

    /// Sets a value (the parser does this after validation; tests may do it by hand).
    pub fn insert(&mut self, name: impl Into<String>, value: ParamValue) {
        self.values.insert(name.into(), value);
    }

    /// Records that parameter `name` is written on `line` of the file (the parser does this).
    pub fn set_line(&mut self, name: impl Into<String>, line: usize) {
        self.lines.insert(name.into(), line);
    }

    /// The line parameter `name` is written on; `None` for a default or a value set by hand.
    pub fn line(&self, name: &str) -> Option<usize> {
        self.lines.get(name).copied()
    }

    /// The layer kind these parameters are for.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// A value, untyped.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.values.get(name)
    }

    /// Every value, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParamValue)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    getter!(
        /// A boolean parameter.
        get_bool, Bool, bool, "a boolean"
    );
    getter!(
        /// An integer parameter.
        get_int, Int, i64, "an integer"
    );
    getter!(
        /// A float parameter.
        get_float, Float, f64, "a number"
    );
    getter!(
        /// A string (or choice) parameter.
        get_str, Str, String, "a string"
    );
    getter!(
        /// A duration parameter.
        get_duration, Duration, Duration, "a duration"
    );
    getter!(
        /// A byte-size parameter.
        get_bytes, Bytes, u64, "a byte size"
    );
    getter!(
        /// A bandwidth parameter, bits per second.
        get_bandwidth, Bandwidth, u64, "a bandwidth"
    );
    getter!(
        /// A path parameter, resolved against the stack file's directory.
        get_path, Path, PathBuf, "a path"
    );
    getter!(
        /// A list-of-paths parameter, each resolved against the stack file's directory.
        get_paths, Paths, Vec<PathBuf>, "a list of paths"
    );
    getter!(
        /// A secret parameter.
        get_secret, Secret, Secret, "a secret"
    );
}

/// Why a kind could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// A kind of that name is registered already.
    #[error("layer kind `{0}` is already registered")]
    Duplicate(String),
    /// A parameter is declared twice.
    #[error("layer kind `{kind}` declares parameter `{param}` twice")]
    DuplicateParam {
        /// The kind.
        kind: String,
        /// The parameter.
        param: String,
    },
    /// A default does not satisfy its own spec, or a range is empty.
    #[error("layer kind `{kind}`, parameter `{param}`: {message}")]
    BadSpec {
        /// The kind.
        kind: String,
        /// The parameter.
        param: String,
        /// What is wrong.
        message: String,
    },
}

/// The layer kinds known to a program.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    kinds: BTreeMap<&'static str, LayerKind>,
}

fn build_transparent(name: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Transparent::new(name)))
}

fn build_ghost(name: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Ghost::new(name)))
}

/// The kernel's `transparent` reference layer (seed 001 §5.2, Table 3).
pub const TRANSPARENT: LayerKind = LayerKind {
    name: "transparent",
    doc: "Accepts no event: it sits in the QoS but is on no route, so it costs nothing at run \
          time (seed 001 §5.2, Table 3).",
    params: &[],
    one_of: &[],
    device: false,
    build: build_transparent,
};

/// The kernel's `ghost` reference layer (seed 001 §5.2, Table 3).
pub const GHOST: LayerKind = LayerKind {
    name: "ghost",
    doc: "Accepts every event and forwards it unchanged: the cost of one hop (seed 001 §5.2, \
          Table 3).",
    params: &[],
    one_of: &[],
    device: false,
    build: build_ghost,
};

fn build_device(name: &str, params: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    let port = params.get_int("port")?;
    let port = u16::try_from(port).map_err(|_| format!("port {port} is not in 0..=65535"))?;
    Ok(Arc::new(Device::new(name, port)))
}

/// The kernel's generic device layer ([`viastack_kernel::layers::Device`]): the bottom of a
/// stack, one session per node on port `port`. Not in [`Catalog::builtin`]: a driver crate
/// registers it (or its own device kind) under this name when it can carry datagrams.
pub const DEVICE: LayerKind = LayerKind {
    name: "device",
    doc: "The bottom of a stack: tags each datagram with its channel and hands it to the \
          driver (simulated links or real sockets). One session per node, shared by every \
          channel that uses the layer.",
    params: &[
        ParamSpec {
            name: "port",
            kind: ParamKind::Int { min: 0, max: 65535 },
            default: Some("0"),
            doc: "which device of the destination node receives the datagrams",
        },
        ParamSpec {
            name: "transport",
            kind: ParamKind::Choice(&["udp", "tcp"]),
            default: Some("\"udp\""),
            doc: "what carries the datagrams on real sockets (`run --net`): UDP, or \
                  length-prefixed frames over TCP; the simulator ignores it",
        },
    ],
    one_of: &[],
    device: true,
    build: build_device,
};

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Catalog::default()
    }

    /// The kernel's reference layers: `transparent` and `ghost`.
    pub fn builtin() -> Self {
        let mut c = Catalog::new();
        for kind in [TRANSPARENT, GHOST] {
            // Both are valid and distinct; an error here would be a bug caught by the tests.
            if let Err(e) = c.register(kind) {
                tracing::error!(error = %e, "builtin layer kind refused");
            }
        }
        c
    }

    /// Adds a kind.
    ///
    /// # Errors
    /// [`CatalogError::Duplicate`] for a name already registered,
    /// [`CatalogError::DuplicateParam`], and [`CatalogError::BadSpec`] when a default does not
    /// parse as its own type or a range is empty.
    pub fn register(&mut self, kind: LayerKind) -> Result<(), CatalogError> {
        if self.kinds.contains_key(kind.name) {
            return Err(CatalogError::Duplicate(kind.name.to_string()));
        }
        for (i, spec) in kind.params.iter().enumerate() {
            if kind.params[..i].iter().any(|p| p.name == spec.name) {
                return Err(CatalogError::DuplicateParam {
                    kind: kind.name.to_string(),
                    param: spec.name.to_string(),
                });
            }
            let bad = |message: String| CatalogError::BadSpec {
                kind: kind.name.to_string(),
                param: spec.name.to_string(),
                message,
            };
            match spec.kind {
                ParamKind::Int { min, max } if min > max => {
                    return Err(bad(format!("empty range {min}..={max}")))
                }
                ParamKind::Float { min, max }
                    if min.partial_cmp(&max).is_none_or(|o| o.is_gt()) =>
                {
                    return Err(bad(format!("empty range {min}..={max}")))
                }
                ParamKind::Choice([]) => return Err(bad("no choices".to_string())),
                _ => {}
            }
            if spec.default.is_some() {
                spec.default_value().map_err(bad)?;
            }
        }
        for (i, group) in kind.one_of.iter().enumerate() {
            let bad = |param: &str, message: String| CatalogError::BadSpec {
                kind: kind.name.to_string(),
                param: param.to_string(),
                message,
            };
            if group.len() < 2 {
                let first = group.first().copied().unwrap_or("");
                return Err(bad(first, "a `one_of` group needs two parameters".into()));
            }
            for name in group.iter() {
                match kind.param(name) {
                    None => return Err(bad(name, "in `one_of` but not declared".into())),
                    Some(spec) if spec.default.is_some() => {
                        return Err(bad(name, "in `one_of` but has a default".into()))
                    }
                    Some(_) => {}
                }
                if kind.one_of[..i].iter().any(|g| g.contains(name)) {
                    return Err(bad(name, "in two `one_of` groups".into()));
                }
            }
        }
        self.kinds.insert(kind.name, kind);
        Ok(())
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&LayerKind> {
        self.kinds.get(name)
    }

    /// Every kind, sorted by name.
    pub fn kinds(&self) -> Vec<&LayerKind> {
        self.kinds.values().collect()
    }

    /// Up to three known kind names close to `name` (for "did you mean").
    pub fn closest(&self, name: &str) -> Vec<&'static str> {
        closest(name, self.kinds.keys().copied())
    }

    /// The parameter reference in Markdown: one section per kind with its documentation and a
    /// table of name, type, default and description. This is the generated docs page.
    pub fn params_markdown(&self) -> String {
        let mut out = String::from(
            "# Layer parameters\n\n\
             Generated from the layer catalog (`Catalog::params_markdown`); do not edit by hand.\n\
             Durations are strings such as `\"10ms\"`; byte sizes are integers or strings such \
             as `\"64KiB\"`; bandwidths are strings such as `\"100Mbit\"` (bits/s).\n",
        );
        for kind in self.kinds.values() {
            out.push_str(&format!("\n## `{}`\n\n{}\n", kind.name, md_cell(kind.doc)));
            if kind.device {
                out.push_str(
                    "\nDevice: one session per node, shared by every channel that uses the \
                     layer.\n",
                );
            }
            if kind.params.is_empty() {
                out.push_str("\nNo parameters.\n");
                continue;
            }
            out.push_str("\n| name | type | default | description |\n| --- | --- | --- | --- |\n");
            for p in kind.params {
                let default = match (p.default, kind.group_of(p.name)) {
                    (Some(d), _) => format!("`{}`", md_cell(d)),
                    (None, Some(group)) => format!("exactly one of {}", list(group.iter())),
                    (None, None) => "required".to_string(),
                };
                out.push_str(&format!(
                    "| `{}` | {} | {} | {} |\n",
                    p.name,
                    md_cell(&p.kind.type_name()),
                    default,
                    md_cell(p.doc)
                ));
            }
        }
        out
    }
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop(_: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
        Err("not built in this test".into())
    }

    const FRAG: LayerKind = LayerKind {
        name: "fragment",
        doc: "Splits | joins.",
        params: &[
            ParamSpec {
                name: "mtu",
                kind: ParamKind::Int {
                    min: 64,
                    max: 65535,
                },
                default: Some("1500"),
                doc: "RFC 894: Ethernet MTU 1500",
            },
            ParamSpec {
                name: "timeout",
                kind: ParamKind::Duration,
                default: Some("\"10ms\""),
                doc: "reassembly timeout",
            },
            ParamSpec {
                name: "mode",
                kind: ParamKind::Choice(&["fast", "safe"]),
                default: None,
                doc: "how",
            },
        ],
        one_of: &[],
        device: false,
        build: noop,
    };

    #[test]
    fn builtin_has_the_reference_layers() {
        let c = Catalog::builtin();
        let names: Vec<&str> = c.kinds().iter().map(|k| k.name).collect();
        assert_eq!(names, vec!["ghost", "transparent"]);
        assert_eq!(c.closest("ghots"), vec!["ghost"]);
        let l = (c.get("ghost").unwrap().build)("g", &Params::new("ghost"), &BuildEnv::default())
            .unwrap();
        assert_eq!(l.name(), "g");
    }

    #[test]
    fn register_rejects_duplicates_and_bad_defaults() {
        let mut c = Catalog::builtin();
        assert_eq!(
            c.register(GHOST),
            Err(CatalogError::Duplicate("ghost".into()))
        );
        c.register(FRAG).unwrap();
        const BAD: LayerKind = LayerKind {
            name: "bad",
            doc: "",
            params: &[ParamSpec {
                name: "mtu",
                kind: ParamKind::Int { min: 64, max: 100 },
                default: Some("1500"),
                doc: "",
            }],
            one_of: &[],
            device: false,
            build: noop,
        };
        let err = c.register(BAD).unwrap_err().to_string();
        assert!(
            err.contains("expected an integer in 64..=100, found 1500"),
            "{err}"
        );
        const UNQUOTED: LayerKind = LayerKind {
            name: "unquoted",
            doc: "",
            params: &[ParamSpec {
                name: "t",
                kind: ParamKind::Duration,
                default: Some("10ms"),
                doc: "",
            }],
            one_of: &[],
            device: false,
            build: noop,
        };
        assert!(matches!(
            c.register(UNQUOTED),
            Err(CatalogError::BadSpec { .. })
        ));
    }

    #[test]
    fn values_parse_by_kind() {
        let mtu = FRAG.params[0];
        assert_eq!(mtu.parse_value(&Node::Int(1500)), Ok(ParamValue::Int(1500)));
        assert_eq!(
            mtu.parse_value(&Node::Str("x".into())).unwrap_err(),
            "expected an integer in 64..=65535, found string"
        );
        assert!(mtu
            .parse_value(&Node::Int(10))
            .unwrap_err()
            .contains("found 10"));
        let mode = FRAG.params[2];
        let e = mode.parse_value(&Node::Str("fats".into())).unwrap_err();
        assert!(e.contains("did you mean `fast`?"), "{e}");
        let p = ParamSpec {
            name: "p",
            kind: ParamKind::Float { min: 0.0, max: 1.0 },
            default: None,
            doc: "",
        };
        assert_eq!(p.parse_value(&Node::Int(1)), Ok(ParamValue::Float(1.0)));
        assert!(p.parse_value(&Node::Float(f64::NAN)).is_err());
        assert!(p.parse_value(&Node::Float(1.5)).is_err());
        let b = ParamSpec {
            name: "b",
            kind: ParamKind::Bytes,
            default: None,
            doc: "",
        };
        assert_eq!(b.parse_value(&Node::Int(1500)), Ok(ParamValue::Bytes(1500)));
        assert_eq!(
            b.parse_value(&Node::Str("1KiB".into())),
            Ok(ParamValue::Bytes(1024))
        );
        assert!(b.parse_value(&Node::Int(-1)).is_err());
    }

    #[test]
    fn params_getters_are_typed_and_never_panic() {
        let mut p = Params::new("fragment");
        p.insert("mtu", ParamValue::Int(1500));
        assert_eq!(p.get_int("mtu"), Ok(1500));
        assert!(matches!(
            p.get_bool("mtu"),
            Err(ParamError::WrongType { .. })
        ));
        assert!(matches!(p.get_int("nope"), Err(ParamError::Missing { .. })));
        let s: String = p.get_str("mtu").unwrap_err().into();
        assert!(s.contains("`mtu`"));
        assert!(FRAG.default_params().is_err(), "mode is required");
    }

    fn fixed(_: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
        Ok(Arc::new(Ghost::new("fixed")))
    }

    const SOURCES: &[ParamSpec] = &[
        ParamSpec {
            name: "token",
            kind: ParamKind::Secret,
            default: None,
            doc: "inline",
        },
        ParamSpec {
            name: "token_file",
            kind: ParamKind::Path,
            default: None,
            doc: "from a file",
        },
        ParamSpec {
            name: "level",
            kind: ParamKind::Int { min: 0, max: 9 },
            default: Some("1"),
            doc: "",
        },
    ];

    const SOURCED: LayerKind = LayerKind {
        name: "sourced",
        doc: "",
        params: SOURCES,
        one_of: &[&["token", "token_file"]],
        device: false,
        build: fixed,
    };

    #[test]
    fn one_of_groups_must_name_declared_parameters_without_defaults() {
        let mut c = Catalog::new();
        c.register(SOURCED).unwrap();
        assert_eq!(
            SOURCED.group_of("token_file"),
            Some(&["token", "token_file"][..])
        );
        assert_eq!(SOURCED.group_of("level"), None);
        let bad = |one_of: &'static [&'static [&'static str]]| {
            let kind = LayerKind {
                name: "bad",
                one_of,
                ..SOURCED
            };
            match Catalog::new().register(kind) {
                Err(CatalogError::BadSpec { param, message, .. }) => format!("{param}: {message}"),
                other => panic!("{one_of:?} registered: {other:?}"),
            }
        };
        assert_eq!(
            bad(&[&["token", "nope"]]),
            "nope: in `one_of` but not declared"
        );
        assert_eq!(
            bad(&[&["token", "level"]]),
            "level: in `one_of` but has a default"
        );
        assert_eq!(
            bad(&[&["token"]]),
            "token: a `one_of` group needs two parameters"
        );
        assert_eq!(
            bad(&[&["token", "token_file"], &["token_file", "token"]]),
            "token_file: in two `one_of` groups"
        );
        let md = c.params_markdown();
        assert!(
            md.contains("| `token_file` | path (relative to the stack file) | exactly one of `token`, `token_file` | from a file |"),
            "{md}"
        );
        assert!(
            md.contains("| `token` | secret string | exactly one of"),
            "{md}"
        );
    }

    #[test]
    fn paths_must_not_be_empty_and_secrets_never_print() {
        let path = SOURCES[1];
        assert_eq!(
            path.parse_value(&Node::Str("k/group.key".into())),
            Ok(ParamValue::Path(PathBuf::from("k/group.key")))
        );
        let e = path.parse_value(&Node::Str(String::new())).unwrap_err();
        assert!(e.contains("found an empty string"), "{e}");
        let token = SOURCES[0]
            .parse_value(&Node::Str("hunter2".into()))
            .unwrap();
        assert_eq!(token, ParamValue::Secret(Secret::new("hunter2")));
        let mut p = Params::new("sourced");
        p.insert("token", token.clone());
        p.set_line("token", 7);
        assert_eq!(format!("{token}"), "<secret>");
        assert!(!format!("{p:?}").contains("hunter2"));
        assert_eq!(p.get_secret("token").unwrap().expose(), "hunter2");
        assert_eq!((p.line("token"), p.line("level")), (Some(7), None));
    }

    #[test]
    fn build_errors_convert_from_strings_and_param_errors() {
        let e: BuildError = "plain".into();
        assert_eq!((e.param, e.message.as_str()), (None, "plain"));
        let e: BuildError = Params::new("k").get_int("n").unwrap_err().into();
        assert!(e.message.contains("`n`"), "{e}");
        let e = BuildError::param("n", "too big");
        assert_eq!(
            (e.param.as_deref(), e.to_string()),
            (Some("n"), "too big".into())
        );
    }

    #[test]
    fn markdown_reference_lists_every_parameter() {
        let mut c = Catalog::builtin();
        c.register(FRAG).unwrap();
        let md = c.params_markdown();
        assert!(md.contains("## `fragment`"));
        assert!(md.contains("Splits \\| joins."));
        assert!(md.contains("| `mtu` | integer 64..=65535 | `1500` | RFC 894: Ethernet MTU 1500 |"));
        assert!(md.contains("| `timeout` | duration | `\"10ms\"` |"));
        assert!(md.contains("| `mode` | one of \"fast\", \"safe\" | required | how |"));
        assert!(md.contains("## `ghost`"));
        assert!(md.contains("No parameters."));
    }
}

//! Terms, the bus's one data type (seed 003 "Term serialization", the ATerm lineage): integers,
//! reals, strings, applications `f(t, …)`, lists `[t, …]`, placeholders `<type>`, blobs
//! `#"hex"`, annotations `t{a, …}`, script variables `X` and result variables `X?`, and
//! references `@ref(owner, var, size, "location", signature)` to values that stay with the
//! tool that owns them.
//!
//! **Maximal sharing.** Every term is built through an [`Arena`] that hash-conses it: two
//! structurally equal terms built by one arena are the same allocation, so equality of shared
//! terms is a pointer comparison and a term's memory is the size of its DAG, not of its tree.
//! [`Arena::purge`] drops the terms only the arena still holds (the arena never grows without
//! bound as long as it is purged).
//!
//! **Text syntax** (ATerm style, [`Arena::parse`] / `Display`):
//!
//! ```text
//! term  ::= prim annos?
//! prim  ::= INT | REAL | STRING | fun ( "(" terms? ")" )? | "[" terms? "]" | "<" term ">"
//!         | "#" STRING-of-hex-digits | VAR "?"? | "@ref(" INT "," INT "," INT "," STRING "," term ")"
//! annos ::= "{" terms "}"          terms ::= term ("," term)*
//! fun   ::= [a-z][A-Za-z0-9_-]*   VAR ::= [A-Z][A-Za-z0-9_-]*
//! ```
//!
//! Errors carry `line:col`. Nesting deeper than [`MAX_DEPTH`] is refused (no stack overflow on
//! hostile input, here or in the binary decoder of [`crate::saf`]).
//!
//! **Matching** ([`Arena::matches`]): a pattern matches a value when they are equal up to
//! annotations, where a bound variable stands for its value, a result variable `X?` binds the
//! value it meets (typed by its [`Scope`]), a placeholder `<int>` (`<real>`, `<str>`, `<blob>`,
//! `<list>`, `<term>`, or `<f>` for applications of `f`) matches any value of that type, and a
//! reference matches through its signature (its shape), so the bus matches values it never holds.

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use thiserror::Error;

/// Deepest nesting the text parser and the binary decoder accept.
pub const MAX_DEPTH: usize = 512;

/// A term: a cheap handle (an `Arc`) on a node of an [`Arena`].
#[derive(Clone)]
pub struct Term(Arc<Node>);

/// A term's node: its kind and its structural hash.
pub struct Node {
    hash: u64,
    kind: Kind,
    /// Whether a reference occurs in the term (so [`Term::refs`] of the many terms without
    /// one — every binding asks — costs nothing).
    has_refs: bool,
    /// Whether a variable occurs where [`Arena::substitute`] replaces them (applications,
    /// lists, an annotated term), so substituting in a term without one returns it as it is.
    has_vars: bool,
}

/// Where a by-reference value lives (seed 003's PUT fields: owner, variable, location) and
/// what it looks like (its signature).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RefInfo {
    /// The tool id of the owner.
    pub owner: u64,
    /// The owner's variable id of the value.
    pub var: u64,
    /// Size of the value's binary encoding in bytes.
    pub size: u64,
    /// Where consumers fetch it ("host:port", "unix:/path", or "" for a passive owner).
    pub location: Arc<str>,
    /// The value's shape: the value with blobs and long strings replaced by placeholders.
    pub sig: Term,
}

/// A blob's bytes: a `Vec` moved in without a copy, or a slice of a shared read-only buffer
/// (the mapped memfd a same-host owner handed over, [`crate::memfd`]): cloning and slicing
/// share, never copy. Dereferences to `[u8]`.
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    end: usize,
    /// The memfd of a [`crate::memfd::shared_blob`] (taken when sealed).
    file: Option<SharedFile>,
}

/// The memfd behind a shared blob, until a `put` seals it.
pub type SharedFile = Arc<std::sync::Mutex<Option<std::os::fd::OwnedFd>>>;

impl Bytes {
    /// The whole of a shared buffer.
    pub fn from_shared(owner: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Bytes {
        let end = (*owner).as_ref().len();
        Bytes {
            owner,
            start: 0,
            end,
            file: None,
        }
    }

    /// These bytes, known to be a memfd's ([`crate::memfd::shared_blob`]).
    pub fn with_file(mut self, file: SharedFile) -> Bytes {
        self.file = Some(file);
        self
    }

    /// The memfd these bytes are in and where they start in it, for a shared blob.
    pub fn file(&self) -> Option<(&SharedFile, usize)> {
        self.file.as_ref().map(|f| (f, self.start))
    }

    /// The same buffer from `before` bytes earlier to the same end (the stream head written
    /// in front of a shared blob).
    pub fn widen(&self, before: usize) -> Option<Bytes> {
        let start = self.start.checked_sub(before)?;
        Some(Bytes {
            owner: self.owner.clone(),
            start,
            end: self.end,
            file: None,
        })
    }

    /// The bytes `range` of these (the same buffer, no copy); `None` when out of bounds.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Option<Bytes> {
        if range.start > range.end || range.end > self.len() {
            return None;
        }
        Some(Bytes {
            owner: self.owner.clone(),
            start: self.start + range.start,
            end: self.start + range.end,
            file: self.file.clone(),
        })
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        (*self.owner)
            .as_ref()
            .get(self.start..self.end)
            .unwrap_or_default()
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self[..] == other[..]
    }
}

impl Eq for Bytes {}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.len())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::from_shared(Arc::new(v))
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Bytes {
        Bytes::from(v.to_vec())
    }
}

impl<const N: usize> From<[u8; N]> for Bytes {
    fn from(v: [u8; N]) -> Bytes {
        Bytes::from(v.to_vec())
    }
}

impl From<&Vec<u8>> for Bytes {
    fn from(v: &Vec<u8>) -> Bytes {
        Bytes::from(v.clone())
    }
}

impl From<Arc<[u8]>> for Bytes {
    fn from(v: Arc<[u8]>) -> Bytes {
        Bytes::from_shared(Arc::new(v))
    }
}

/// The kinds of terms.
#[derive(Clone)]
pub enum Kind {
    /// A signed 64-bit integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// A UTF-8 string.
    Str(Arc<str>),
    /// An application `fun(args)`; a constant when `args` is empty.
    Appl {
        /// Function symbol.
        fun: Arc<str>,
        /// Arguments.
        args: Box<[Term]>,
    },
    /// A list.
    List(Box<[Term]>),
    /// A placeholder `<type>`.
    Placeholder(Term),
    /// Uninterpreted bytes (on the heap, or a slice of a shared buffer: [`Bytes`]).
    Blob(Bytes),
    /// A term with annotations.
    Annot {
        /// The annotated term.
        term: Term,
        /// Its annotations.
        annos: Box<[Term]>,
    },
    /// A script variable `X`, or a result variable `X?` when `result`.
    Var {
        /// The variable's name.
        name: Arc<str>,
        /// Whether it is a result variable.
        result: bool,
    },
    /// A value held by a tool, known by its reference.
    Ref(Box<RefInfo>),
}

impl Kind {
    fn tag(&self) -> u8 {
        match self {
            Kind::Int(_) => 1,
            Kind::Real(_) => 2,
            Kind::Str(_) => 3,
            Kind::Appl { .. } => 4,
            Kind::List(_) => 5,
            Kind::Placeholder(_) => 6,
            Kind::Blob(_) => 7,
            Kind::Annot { .. } => 8,
            Kind::Var { .. } => 9,
            Kind::Ref(_) => 11,
        }
    }

    fn structural_hash(&self) -> u64 {
        let mut h = foldhash::fast::FixedState::with_seed(0x7465_726d).build_hasher();
        h.write_u8(self.tag());
        match self {
            Kind::Int(i) => h.write_i64(*i),
            Kind::Real(r) => h.write_u64(r.to_bits()),
            Kind::Str(s) => s.hash(&mut h),
            Kind::Appl { fun, args } => {
                fun.hash(&mut h);
                h.write_usize(args.len());
                for a in args.iter() {
                    h.write_u64(a.0.hash);
                }
            }
            Kind::List(xs) => {
                h.write_usize(xs.len());
                for a in xs.iter() {
                    h.write_u64(a.0.hash);
                }
            }
            Kind::Placeholder(t) => h.write_u64(t.0.hash),
            Kind::Blob(b) => b[..].hash(&mut h),
            Kind::Annot { term, annos } => {
                h.write_u64(term.0.hash);
                for a in annos.iter() {
                    h.write_u64(a.0.hash);
                }
            }
            Kind::Var { name, result } => {
                name.hash(&mut h);
                h.write_u8(u8::from(*result));
            }
            Kind::Ref(r) => {
                h.write_u64(r.owner);
                h.write_u64(r.var);
                h.write_u64(r.size);
                r.location.hash(&mut h);
                h.write_u64(r.sig.0.hash);
            }
        }
        h.finish()
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        match (self, other) {
            (Kind::Int(a), Kind::Int(b)) => a == b,
            (Kind::Real(a), Kind::Real(b)) => a.to_bits() == b.to_bits(),
            (Kind::Str(a), Kind::Str(b)) => a == b,
            (Kind::Appl { fun: f, args: a }, Kind::Appl { fun: g, args: b }) => f == g && a == b,
            (Kind::List(a), Kind::List(b)) => a == b,
            (Kind::Placeholder(a), Kind::Placeholder(b)) => a == b,
            (Kind::Blob(a), Kind::Blob(b)) => a[..] == b[..],
            (Kind::Annot { term: t, annos: a }, Kind::Annot { term: u, annos: b }) => {
                t == u && a == b
            }
            (Kind::Var { name: n, result: r }, Kind::Var { name: m, result: s }) => {
                n == m && r == s
            }
            (Kind::Ref(a), Kind::Ref(b)) => a == b,
            _ => false,
        }
    }
}

impl Term {
    /// The term's kind.
    pub fn kind(&self) -> &Kind {
        &self.0.kind
    }

    pub(crate) fn node_ptr(&self) -> *const Node {
        Arc::as_ptr(&self.0)
    }

    /// Whether `self` and `other` are the same node (always true for equal terms of one arena).
    pub fn ptr_eq(&self, other: &Term) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The term without its annotations.
    pub fn strip(&self) -> &Term {
        match self.kind() {
            Kind::Annot { term, .. } => term.strip(),
            _ => self,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self.strip().kind() {
            Kind::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self.strip().kind() {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The blob, if this is one.
    pub fn as_blob(&self) -> Option<&Bytes> {
        match self.strip().kind() {
            Kind::Blob(b) => Some(b),
            _ => None,
        }
    }

    /// The reference, if this is one.
    pub fn as_ref_info(&self) -> Option<&RefInfo> {
        match self.strip().kind() {
            Kind::Ref(r) => Some(r),
            _ => None,
        }
    }

    /// The application's function symbol and arguments, if this is one.
    pub fn as_appl(&self) -> Option<(&str, &[Term])> {
        match self.strip().kind() {
            Kind::Appl { fun, args } => Some((fun, args)),
            _ => None,
        }
    }

    /// The direct subterms, in order (arguments, elements, placeholder type, annotated term then
    /// annotations, reference signature).
    pub fn children(&self) -> Vec<&Term> {
        match self.kind() {
            Kind::Appl { args, .. } => args.iter().collect(),
            Kind::List(xs) => xs.iter().collect(),
            Kind::Placeholder(t) => vec![t],
            Kind::Annot { term, annos } => std::iter::once(term).chain(annos.iter()).collect(),
            Kind::Ref(r) => vec![&r.sig],
            _ => Vec::new(),
        }
    }

    /// Number of distinct nodes of the term's DAG.
    pub fn dag_size(&self) -> usize {
        let mut seen: HashSet<*const Node> = HashSet::new();
        let mut stack = vec![self];
        while let Some(t) = stack.pop() {
            if seen.insert(Arc::as_ptr(&t.0)) {
                stack.extend(t.children());
            }
        }
        seen.len()
    }

    /// Every distinct reference in the term (each once).
    pub fn refs(&self) -> Vec<RefInfo> {
        if !self.0.has_refs {
            return Vec::new();
        }
        let mut seen: HashSet<*const Node> = HashSet::new();
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(t) = stack.pop() {
            if !seen.insert(Arc::as_ptr(&t.0)) {
                continue;
            }
            if let Kind::Ref(r) = t.kind() {
                if !out
                    .iter()
                    .any(|o: &RefInfo| o.owner == r.owner && o.var == r.var)
                {
                    out.push((**r).clone());
                }
                continue;
            }
            stack.extend(t.children());
        }
        out
    }
}

impl PartialEq for Term {
    fn eq(&self, other: &Term) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash && self.0.kind == other.0.kind)
    }
}
impl Eq for Term {}

impl Hash for Term {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, xs: &[Term]) -> fmt::Result {
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

/// Writes `s` as a quoted string literal.
pub fn write_quoted(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c if (c as u32) < 0x20 => write!(f, "\\x{:02x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            Kind::Int(i) => write!(f, "{i}"),
            Kind::Real(r) => write!(f, "{r:?}"),
            Kind::Str(s) => write_quoted(f, s),
            Kind::Appl { fun, args } => {
                f.write_str(fun)?;
                if !args.is_empty() {
                    f.write_str("(")?;
                    write_list(f, args)?;
                    f.write_str(")")?;
                }
                Ok(())
            }
            Kind::List(xs) => {
                f.write_str("[")?;
                write_list(f, xs)?;
                f.write_str("]")
            }
            Kind::Placeholder(t) => write!(f, "<{t}>"),
            Kind::Blob(b) => {
                f.write_str("#\"")?;
                for byte in b.iter() {
                    write!(f, "{byte:02x}")?;
                }
                f.write_str("\"")
            }
            Kind::Annot { term, annos } => {
                write!(f, "{term}{{")?;
                write_list(f, annos)?;
                f.write_str("}")
            }
            Kind::Var { name, result } => {
                f.write_str(name)?;
                if *result {
                    f.write_str("?")?;
                }
                Ok(())
            }
            Kind::Ref(r) => {
                write!(f, "@ref({},{},{},", r.owner, r.var, r.size)?;
                write_quoted(f, &r.location)?;
                write!(f, ",{})", r.sig)
            }
        }
    }
}

/// Hasher state that uses a term's precomputed hash as is.
#[derive(Default, Clone, Copy)]
struct PassThrough;
struct PassHasher(u64);
impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
impl BuildHasher for PassThrough {
    type Hasher = PassHasher;
    fn build_hasher(&self) -> PassHasher {
        PassHasher(0)
    }
}

/// The hash-consing arena: builds every term once.
#[derive(Default)]
pub struct Arena {
    set: HashSet<Term, PassThrough>,
    last_len: usize,
}

/// Why text is not a term: what was expected, at `line:col` (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{line}:{col}: {msg}")]
pub struct ParseError {
    /// Line, 1-based.
    pub line: usize,
    /// Column in characters, 1-based.
    pub col: usize,
    /// What was wrong.
    pub msg: String,
}

impl Arena {
    /// An empty arena.
    pub fn new() -> Arena {
        Arena::default()
    }

    /// Number of distinct terms the arena holds.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether the arena holds no term.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Drops the terms no one but the arena holds (repeatedly, so whole unused DAGs go).
    pub fn purge(&mut self) {
        loop {
            let before = self.set.len();
            self.set.retain(|t| Arc::strong_count(&t.0) > 1);
            if self.set.len() == before {
                break;
            }
        }
    }

    /// [`Arena::purge`] once the arena has doubled since the last purge (amortised).
    pub fn purge_if_large(&mut self) {
        if self.set.len() > 2 * self.last_len.max(1024) {
            self.purge();
            self.last_len = self.set.len();
        }
    }

    /// The shared term of `kind`.
    pub fn make(&mut self, kind: Kind) -> Term {
        let hash = kind.structural_hash();
        let has_refs = match &kind {
            Kind::Ref(_) => true,
            Kind::Appl { args: xs, .. } | Kind::List(xs) => xs.iter().any(|x| x.0.has_refs),
            Kind::Placeholder(t) => t.0.has_refs,
            Kind::Annot { term, annos } => term.0.has_refs || annos.iter().any(|x| x.0.has_refs),
            _ => false,
        };
        let has_vars = match &kind {
            Kind::Var { .. } => true,
            Kind::Appl { args: xs, .. } | Kind::List(xs) => xs.iter().any(|x| x.0.has_vars),
            Kind::Annot { term, .. } => term.0.has_vars,
            _ => false,
        };
        let t = Term(Arc::new(Node {
            hash,
            kind,
            has_refs,
            has_vars,
        }));
        if let Some(existing) = self.set.get(&t) {
            return existing.clone();
        }
        self.set.insert(t.clone());
        t
    }

    /// An integer.
    pub fn int(&mut self, i: i64) -> Term {
        self.make(Kind::Int(i))
    }
    /// A real.
    pub fn real(&mut self, r: f64) -> Term {
        self.make(Kind::Real(r))
    }
    /// A string.
    pub fn str(&mut self, s: &str) -> Term {
        self.make(Kind::Str(s.into()))
    }
    /// An application.
    pub fn appl(&mut self, fun: &str, args: Vec<Term>) -> Term {
        self.make(Kind::Appl {
            fun: fun.into(),
            args: args.into(),
        })
    }
    /// A list.
    pub fn list(&mut self, xs: Vec<Term>) -> Term {
        self.make(Kind::List(xs.into()))
    }
    /// A placeholder of the named type (`<int>` for "int").
    pub fn placeholder(&mut self, ty: &str) -> Term {
        let t = self.appl(ty, Vec::new());
        self.make(Kind::Placeholder(t))
    }
    /// A blob.
    pub fn blob(&mut self, bytes: impl Into<Bytes>) -> Term {
        self.make(Kind::Blob(bytes.into()))
    }
    /// `term{annos}`; the term itself when `annos` is empty.
    pub fn annot(&mut self, term: Term, annos: Vec<Term>) -> Term {
        if annos.is_empty() {
            return term;
        }
        self.make(Kind::Annot {
            term,
            annos: annos.into(),
        })
    }
    /// A variable (`result`: `X?`).
    pub fn var(&mut self, name: &str, result: bool) -> Term {
        self.make(Kind::Var {
            name: name.into(),
            result,
        })
    }
    /// A reference.
    pub fn reference(&mut self, r: RefInfo) -> Term {
        self.make(Kind::Ref(Box::new(r)))
    }

    /// Re-interns a term built by another arena (or decoded alone) into this one.
    pub fn import(&mut self, t: &Term) -> Term {
        let kind = match t.kind() {
            Kind::Appl { fun, args } => Kind::Appl {
                fun: fun.clone(),
                args: args.iter().map(|a| self.import(a)).collect(),
            },
            Kind::List(xs) => Kind::List(xs.iter().map(|a| self.import(a)).collect()),
            Kind::Placeholder(p) => Kind::Placeholder(self.import(p)),
            Kind::Annot { term, annos } => Kind::Annot {
                term: self.import(term),
                annos: annos.iter().map(|a| self.import(a)).collect(),
            },
            Kind::Ref(r) => Kind::Ref(Box::new(RefInfo {
                sig: self.import(&r.sig),
                ..(**r).clone()
            })),
            other => other.clone(),
        };
        self.make(kind)
    }

    /// The signature of `t`: its shape, with blobs replaced by `<blob>` and strings longer than
    /// `max_str` bytes by `<str>` (seed 003: the bus keeps what values "look like").
    pub fn signature(&mut self, t: &Term, max_str: usize) -> Term {
        match t.kind() {
            Kind::Blob(_) => self.placeholder("blob"),
            Kind::Str(s) if s.len() > max_str => self.placeholder("str"),
            Kind::Appl { fun, args } => {
                let args = args.iter().map(|a| self.signature(a, max_str)).collect();
                self.make(Kind::Appl {
                    fun: fun.clone(),
                    args,
                })
            }
            Kind::List(xs) => {
                let xs = xs.iter().map(|a| self.signature(a, max_str)).collect();
                self.make(Kind::List(xs))
            }
            Kind::Annot { term, annos } => {
                let term = self.signature(term, max_str);
                self.make(Kind::Annot {
                    term,
                    annos: annos.clone(),
                })
            }
            Kind::Ref(r) => r.sig.clone(),
            _ => t.clone(),
        }
    }

    /// Parses one term from `src` (surrounding white space allowed).
    ///
    /// # Errors
    /// [`ParseError`] at the first character that does not fit the grammar.
    pub fn parse(&mut self, src: &str) -> Result<Term, ParseError> {
        let mut p = TextParser::new(src);
        p.skip_ws();
        let t = p.term(self, 0)?;
        p.skip_ws();
        if p.pos < p.src.len() {
            return Err(p.error("expected the end of the term"));
        }
        Ok(t)
    }

    /// Replaces the bound (non-result) variables of `t` by their values in `scope`; result
    /// variables and unbound variables are kept.
    pub fn substitute(&mut self, t: &Term, scope: &dyn Scope) -> Term {
        if !t.0.has_vars {
            return t.clone();
        }
        match t.kind() {
            Kind::Var {
                name,
                result: false,
            } => scope.value(name).cloned().unwrap_or_else(|| t.clone()),
            Kind::Appl { fun, args } => {
                let args = args.iter().map(|a| self.substitute(a, scope)).collect();
                self.make(Kind::Appl {
                    fun: fun.clone(),
                    args,
                })
            }
            Kind::List(xs) => {
                let xs = xs.iter().map(|a| self.substitute(a, scope)).collect();
                self.make(Kind::List(xs))
            }
            Kind::Annot { term, annos } => {
                let term = self.substitute(term, scope);
                self.make(Kind::Annot {
                    term,
                    annos: annos.clone(),
                })
            }
            _ => t.clone(),
        }
    }

    /// Whether `pattern` matches `value` (see the module doc); on success the result variables'
    /// bindings are appended to `out` (nothing is appended on failure).
    pub fn matches(
        &self,
        pattern: &Term,
        value: &Term,
        scope: &dyn Scope,
        out: &mut Vec<(Arc<str>, Term)>,
    ) -> bool {
        let mark = out.len();
        let ok = match_rec(pattern, value, scope, out, 0);
        if !ok {
            out.truncate(mark);
        }
        ok
    }
}

/// What matching needs of a script's variables.
pub trait Scope {
    /// The value of a bound variable.
    fn value(&self, name: &str) -> Option<&Term>;
    /// Whether result variable `name` may take `value` (its declared type); true by default.
    fn accepts(&self, _name: &str, _value: &Term) -> bool {
        true
    }
}

/// The scope with no variables.
pub struct NoVars;
impl Scope for NoVars {
    fn value(&self, _name: &str) -> Option<&Term> {
        None
    }
}

/// Whether `value` is of the type named `ty` (`int`, `real`, `str`, `blob`, `list`, `term`,
/// or an application symbol). References are typed by their signature.
pub fn has_type(ty: &str, value: &Term) -> bool {
    let v = value.strip();
    if let Kind::Ref(r) = v.kind() {
        return has_type(ty, &r.sig);
    }
    if let Kind::Placeholder(p) = v.kind() {
        return ty == "term" || p.as_appl().is_some_and(|(f, _)| f == ty);
    }
    match ty {
        "term" => true,
        "int" => matches!(v.kind(), Kind::Int(_)),
        "real" => matches!(v.kind(), Kind::Real(_)),
        "str" => matches!(v.kind(), Kind::Str(_)),
        "blob" => matches!(v.kind(), Kind::Blob(_)),
        "list" => matches!(v.kind(), Kind::List(_)),
        "bool" => v
            .as_appl()
            .is_some_and(|(f, a)| a.is_empty() && (f == "true" || f == "false")),
        f => v.as_appl().is_some_and(|(g, _)| g == f),
    }
}

fn match_rec(
    p: &Term,
    v: &Term,
    scope: &dyn Scope,
    out: &mut Vec<(Arc<str>, Term)>,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let p = p.strip();
    let v_full = v;
    let v = v.strip();
    match p.kind() {
        Kind::Var { name, result: true } => {
            if let Some((_, bound)) = out.iter().find(|(n, _)| n == name) {
                return bound.strip() == v;
            }
            if !scope.accepts(name, v_full) {
                return false;
            }
            out.push((name.clone(), v_full.clone()));
            return true;
        }
        Kind::Var {
            name,
            result: false,
        } => {
            return match scope.value(name) {
                Some(bound) => {
                    let bound = bound.clone();
                    match_rec(&bound, v, scope, out, depth + 1)
                }
                None => false,
            }
        }
        Kind::Placeholder(ty) => {
            return ty
                .as_appl()
                .is_some_and(|(ty, args)| args.is_empty() && has_type(ty, v));
        }
        _ => {}
    }
    if p == v {
        return true;
    }
    match (p.kind(), v.kind()) {
        (Kind::Ref(a), Kind::Ref(b)) => a.owner == b.owner && a.var == b.var,
        (_, Kind::Ref(r)) => match_rec(p, &r.sig, scope, out, depth + 1),
        (Kind::Appl { fun: f, args: a }, Kind::Appl { fun: g, args: b }) => {
            f == g
                && a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|(x, y)| match_rec(x, y, scope, out, depth + 1))
        }
        (Kind::List(a), Kind::List(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|(x, y)| match_rec(x, y, scope, out, depth + 1))
        }
        _ => false,
    }
}

/// A cursor over term text, shared with the script parser.
pub(crate) struct TextParser<'a> {
    pub(crate) src: &'a str,
    pub(crate) pos: usize,
}

impl<'a> TextParser<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        TextParser { src, pos: 0 }
    }

    pub(crate) fn line_col(&self, pos: usize) -> (usize, usize) {
        let before = &self.src[..pos.min(self.src.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    pub(crate) fn error(&self, msg: impl Into<String>) -> ParseError {
        let (line, col) = self.line_col(self.pos);
        ParseError {
            line,
            col,
            msg: msg.into(),
        }
    }

    pub(crate) fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    pub(crate) fn peek2(&self) -> Option<char> {
        self.src[self.pos..].chars().nth(1)
    }

    pub(crate) fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    pub(crate) fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, c: char) -> Result<(), ParseError> {
        self.skip_ws();
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{c}'")))
        }
    }

    /// Skips white space and `%` comments (to the end of the line), as in T-scripts.
    pub(crate) fn skip_ws(&mut self) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('%') => {
                    while let Some(c) = self.bump() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                _ => break,
            }
        }
    }

    /// `[A-Za-z0-9_-]*` not ending in '-' (so `a-b` is one name and `X-1` stays readable).
    pub(crate) fn ident(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '_' || (c == '-' && self.pos > start) {
                self.bump();
            } else {
                break;
            }
        }
        while self.pos > start && self.src[..self.pos].ends_with('-') {
            self.pos -= 1;
        }
        &self.src[start..self.pos]
    }

    pub(crate) fn string(&mut self) -> Result<String, ParseError> {
        if !self.eat('"') {
            return Err(self.error("expected '\"'"));
        }
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error("unterminated string")),
                Some('"') => return Ok(s),
                Some('\\') => match self.bump() {
                    Some('"') => s.push('"'),
                    Some('\\') => s.push('\\'),
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('x') => {
                        let start = self.pos;
                        self.bump();
                        self.bump();
                        let code = self
                            .src
                            .get(start..self.pos)
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                            .ok_or_else(|| self.error("expected two hex digits after \\x"))?;
                        s.push(char::from(code));
                    }
                    _ => return Err(self.error("unknown escape")),
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn number(&mut self, arena: &mut Arena) -> Result<Term, ParseError> {
        let start = self.pos;
        self.eat('-');
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        let mut real = false;
        if self.peek() == Some('.') && self.peek2().is_some_and(|c| c.is_ascii_digit()) {
            real = true;
            self.bump();
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            real = true;
            self.bump();
            if matches!(self.peek(), Some('+' | '-')) {
                self.bump();
            }
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
        }
        let text = &self.src[start..self.pos];
        if real {
            match text.parse::<f64>() {
                Ok(r) if r.is_finite() => Ok(arena.real(r)),
                _ => Err(self.error(format!("invalid real '{text}'"))),
            }
        } else {
            text.parse::<i64>()
                .map(|i| arena.int(i))
                .map_err(|_| self.error(format!("invalid integer '{text}'")))
        }
    }

    pub(crate) fn terms(
        &mut self,
        arena: &mut Arena,
        close: char,
        depth: usize,
    ) -> Result<Vec<Term>, ParseError> {
        let mut out = Vec::new();
        self.skip_ws();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            self.skip_ws();
            out.push(self.term(arena, depth + 1)?);
            self.skip_ws();
            if self.eat(close) {
                return Ok(out);
            }
            if !self.eat(',') {
                return Err(self.error(format!("expected ',' or '{close}'")));
            }
        }
    }

    pub(crate) fn term(&mut self, arena: &mut Arena, depth: usize) -> Result<Term, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!("nesting deeper than {MAX_DEPTH}")));
        }
        self.skip_ws();
        let t = match self.peek() {
            None => return Err(self.error("expected a term, found the end")),
            Some(c) if c.is_ascii_digit() || c == '-' => self.number(arena)?,
            Some('"') => {
                let s = self.string()?;
                arena.str(&s)
            }
            Some('[') => {
                self.bump();
                let xs = self.terms(arena, ']', depth)?;
                arena.list(xs)
            }
            Some('<') => {
                self.bump();
                let ty = self.term(arena, depth + 1)?;
                self.expect('>')?;
                arena.make(Kind::Placeholder(ty))
            }
            Some('#') => {
                self.bump();
                let hex = self.string()?;
                let bytes = decode_hex(&hex).ok_or_else(|| self.error("invalid hex in blob"))?;
                arena.blob(bytes)
            }
            Some('@') => {
                self.bump();
                if self.ident() != "ref" {
                    return Err(self.error("expected 'ref' after '@'"));
                }
                self.expect('(')?;
                let mut nums = [0u64; 3];
                for n in &mut nums {
                    self.skip_ws();
                    let t = self.number(arena)?;
                    *n = t
                        .as_int()
                        .and_then(|i| u64::try_from(i).ok())
                        .ok_or_else(|| self.error("expected a non-negative integer"))?;
                    self.expect(',')?;
                }
                self.skip_ws();
                let location = self.string()?;
                self.expect(',')?;
                let sig = self.term(arena, depth + 1)?;
                self.expect(')')?;
                arena.reference(RefInfo {
                    owner: nums[0],
                    var: nums[1],
                    size: nums[2],
                    location: location.into(),
                    sig,
                })
            }
            Some(c) if c.is_ascii_uppercase() => {
                let name = self.ident();
                let result = self.eat('?');
                arena.var(name, result)
            }
            Some(c) if c.is_ascii_lowercase() => {
                let fun = self.ident();
                let args = if self.eat('(') {
                    self.terms(arena, ')', depth)?
                } else {
                    Vec::new()
                };
                arena.appl(fun, args)
            }
            Some(c) => return Err(self.error(format!("unexpected '{c}'"))),
        };
        if self.peek() == Some('{') {
            self.bump();
            let annos = self.terms(arena, '}', depth)?;
            if annos.is_empty() {
                return Err(self.error("empty annotation"));
            }
            return Ok(arena.annot(t, annos));
        }
        Ok(t)
    }
}

/// Hex digits to bytes; `None` if odd-length or not hex.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_print_and_sharing() {
        let mut a = Arena::new();
        let t = a
            .parse(r#"f(g(1, "x"), [g(1,"x"), 2.5], <int>, #"00ff", X?, Y){a}"#)
            .unwrap();
        assert_eq!(
            t.to_string(),
            r#"f(g(1,"x"),[g(1,"x"),2.5],<int>,#"00ff",X?,Y){a}"#
        );
        let (_, args) = t.as_appl().unwrap();
        let (_, l) = (args[0].clone(), args[1].clone());
        let Kind::List(xs) = l.kind() else { panic!() };
        assert!(xs[0].ptr_eq(&args[0]), "equal subterms are one node");
        let again = a.parse(&t.to_string()).unwrap();
        assert!(again.ptr_eq(&t));
    }

    #[test]
    fn errors_have_line_and_column() {
        let mut a = Arena::new();
        let e = a.parse("f(1,\n  2 3)").unwrap_err();
        assert_eq!((e.line, e.col), (2, 5), "{e}");
        let deep = "[".repeat(MAX_DEPTH + 5);
        assert!(a.parse(&deep).unwrap_err().msg.contains("nesting"));
    }

    #[test]
    fn matching_binds_result_variables() {
        let mut a = Arena::new();
        let p = a.parse("msg(X?, <str>, [1, Y?])").unwrap();
        let v = a.parse(r#"msg(f(2), "s", [1, 7]){note}"#).unwrap();
        let mut out = Vec::new();
        assert!(a.matches(&p, &v, &NoVars, &mut out));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.to_string(), "f(2)");
        let w = a.parse(r#"msg(f(2), 3, [1, 7])"#).unwrap();
        let mut out = Vec::new();
        assert!(!a.matches(&p, &w, &NoVars, &mut out));
        assert!(out.is_empty());
        // Same result variable twice must meet equal values.
        let p2 = a.parse("pair(X?, X?)").unwrap();
        let yes = a.parse("pair(1, 1)").unwrap();
        let no = a.parse("pair(1, 2)").unwrap();
        assert!(a.matches(&p2, &yes, &NoVars, &mut Vec::new()));
        assert!(!a.matches(&p2, &no, &NoVars, &mut Vec::new()));
    }

    #[test]
    fn references_match_through_their_signature() {
        let mut a = Arena::new();
        let big = a.parse(r#"data("name", #"0102030405")"#).unwrap();
        let sig = a.signature(&big, 64);
        assert_eq!(sig.to_string(), r#"data("name",<blob>)"#);
        let r = a.reference(RefInfo {
            owner: 3,
            var: 9,
            size: 5,
            location: "127.0.0.1:1".into(),
            sig,
        });
        let p = a.parse("data(N?, <blob>)").unwrap();
        let mut out = Vec::new();
        assert!(a.matches(&p, &r, &NoVars, &mut out));
        assert_eq!(out[0].1.as_str(), Some("name"));
        let reparsed = a.parse(&r.to_string()).unwrap();
        assert!(reparsed.ptr_eq(&r));
        assert_eq!(r.refs().len(), 1);
    }

    #[test]
    fn purge_drops_unused_terms() {
        let mut a = Arena::new();
        let keep = a.parse("f(1)").unwrap();
        {
            let _t = a.parse("g([1,2,3], h(4))").unwrap();
        }
        a.purge();
        assert_eq!(a.len(), keep.dag_size());
    }
}

//! The first-order-logic language of composite events (seed 000 §4.2.1.2, §4.2.4.2, Table 4.6),
//! into which the seed's XQuery (§5.1.2.2) is translated ([`xquery`](super::xquery)).
//!
//! ```text
//! expr     = implies ;
//! implies  = or [ "implies" implies ] ;                      (* right-associative *)
//! or       = and { "or" and } ;
//! and      = unary { "and" unary } ;
//! unary    = "not" unary | quant | "(" expr ")" | "true" | "false" | cmp ;
//! quant    = ( "exists" | "forall" ) IDENT "in" set [ "within" DURATION ] [ ":" expr ] ;
//! set      = EVENT | "node" "." ( "children" | "neighbours" ) ;
//! cmp      = term ( "==" | "!=" | "<" | "<=" | ">" | ">=" ) term ;
//! term     = INT | STRING | IDENT | IDENT "." ATTR | "node" "." ( "address" | "parent" ) ;
//! DURATION = INT ( "ms" | "s" | "m" | "h" ) ;                (* 15s, 500ms *)
//! STRING   = '"' address '"' ;                               (* "100,100" *)
//! ```
//!
//! `forall` needs a body (`forall x in S : P`); `exists x in S` alone means "S is not empty".
//! As usual in logic, a quantifier's body extends as far right as possible (to the end, or to
//! the closing parenthesis): `(exists m in ack : m.source == d) and x` limits it.
//! `not exists …` is `not (exists …)`. Event variables have the message attributes
//! (`m.source`, `m.SourceAddress`, `m.type`, `m.seq`, …; see
//! [`Attr`](super::message::Attr)); timer events have `t.timer`. Node variables (bound over
//! `node.children` / `node.neighbours`) are addresses. `within W` keeps only events of the
//! last W before the evaluation (seed §4.2.2: "whether a message arrived within the last 15
//! seconds").
//!
//! # Type checking
//! [`compile`] rejects, with the offset of the culprit: an unknown event, attribute, variable or
//! node attribute; an event variable used as a value; a set used as a value; a term where a
//! formula is expected (non-boolean); a variable bound twice.
//!
//! # Incremental evaluation
//! Composite events are evaluated when a constituent arrives (§4.2.1.3) — without rescanning
//! the history. Every event quantifier is compiled to an *index*: `exists m in E within W :
//! m.a == k and R(m)` where `k` is an outer node variable, `node.address` or `node.parent` and
//! `R` a condition on `m` alone; `forall m in E : P` is `not exists m in E : not P`. On each
//! arrival of `E` whose message satisfies `R`, the index records `m.a → arrival time` (or just
//! the last arrival time when there is no key). The quantifier is then one lookup: is there an
//! entry for the key's current value, recent enough for W? Node sets are small and iterated.
//! Bodies outside this fragment (a comparison of `m` with an outer variable other than one
//! equality, a node attribute inside `R`, nested event quantifiers) are rejected at load time
//! with a message saying so. Identical quantifiers share one index. A property test compares the
//! incremental evaluation with a naive rescan of the full history ([`Program::eval_naive`]).
//!
//! The incremental form is compiled to closures once at load; the shapes delivery services use
//! (a node set (not) empty, every/some member of a node set keyed in an index, an unkeyed
//! index, each possibly negated; a `foreach` "(not) keyed in an index") are also recognised as
//! kernels evaluated by one direct match, without closures (issue 15 §2).

use std::fmt;
use std::sync::Arc;

use viastack_kernel::time::Instant;

use super::data::{BasicKind, ServiceData};
use super::message::{Addr, Attr, Message, NodeInfo};

/// Most variables one expression may bind (nesting depth of quantifiers).
pub const MAX_VARS: usize = 8;

/// A parse or type error: byte offset into the expression text and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicError {
    /// Byte offset into the expression.
    pub offset: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for LogicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {}: {}", self.offset, self.message)
    }
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, LogicError> {
    Err(LogicError {
        offset,
        message: message.into(),
    })
}

// ---------------------------------------------------------------- lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(i64),
    Str(String),
    Dur(u64),
    LParen,
    RParen,
    Colon,
    Dot,
    Op(CmpOp),
    End,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    fn apply(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }

    fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, LogicError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            b'(' => {
                i += 1;
                Tok::LParen
            }
            b')' => {
                i += 1;
                Tok::RParen
            }
            b':' => {
                i += 1;
                Tok::Colon
            }
            b'.' => {
                i += 1;
                Tok::Dot
            }
            b'=' | b'!' | b'<' | b'>' => {
                let two = b.get(i + 1) == Some(&b'=');
                i += if two { 2 } else { 1 };
                Tok::Op(match (c, two) {
                    (b'=', true) => CmpOp::Eq,
                    (b'!', true) => CmpOp::Ne,
                    (b'<', false) => CmpOp::Lt,
                    (b'<', true) => CmpOp::Le,
                    (b'>', false) => CmpOp::Gt,
                    (b'>', true) => CmpOp::Ge,
                    _ => return err(start, "expected `==`, `!=`, `<`, `<=`, `>` or `>=`"),
                })
            }
            b'"' => {
                let Some(end) = src[i + 1..].find('"') else {
                    return err(start, "unterminated string");
                };
                let s = src[i + 1..i + 1 + end].to_string();
                i += end + 2;
                Tok::Str(s)
            }
            b'0'..=b'9' | b'-' => {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let Ok(n) = src[start..i].parse::<i64>() else {
                    return err(start, "expected an integer");
                };
                let us = i;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
                if us == i {
                    Tok::Int(n)
                } else {
                    let mult: u64 = match &src[us..i] {
                        "ms" => 1_000_000,
                        "s" => 1_000_000_000,
                        "m" => 60_000_000_000,
                        "h" => 3_600_000_000_000,
                        u => {
                            return err(
                                us,
                                format!("unknown time unit `{u}` (expected ms, s, m or h)"),
                            )
                        }
                    };
                    if n < 0 {
                        return err(start, "a duration cannot be negative");
                    }
                    Tok::Dur((n as u64).saturating_mul(mult))
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-')
                {
                    i += 1;
                }
                Tok::Ident(src[start..i].to_string())
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return err(start, format!("unexpected character `{ch}`"));
            }
        };
        out.push((tok, start));
    }
    out.push((Tok::End, src.len()));
    Ok(out)
}

// ---------------------------------------------------------------- syntax tree

/// A set a quantifier ranges over.
#[derive(Clone, Debug, PartialEq)]
pub enum SetRef {
    /// The history of a basic event.
    Event(String),
    /// `node.children`
    Children,
    /// `node.neighbours`
    Neighbours,
}

/// A value term.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    /// An integer literal.
    Int(i64),
    /// An address literal `"x,y"`.
    Addr(String),
    /// A variable.
    Var(String),
    /// `var.attr`
    Attr(String, String),
    /// `node.attr`
    Node(String),
}

/// The parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `true` / `false`
    Const(bool),
    /// `not e`
    Not(Box<Expr>),
    /// `a and b`
    And(Box<Expr>, Box<Expr>),
    /// `a or b`
    Or(Box<Expr>, Box<Expr>),
    /// `a implies b`
    Implies(Box<Expr>, Box<Expr>),
    /// `a op b`, with the offsets of both terms
    Cmp(CmpOp, (Term, usize), (Term, usize)),
    /// `exists`/`forall`
    Quant {
        /// forall?
        all: bool,
        /// bound variable
        var: String,
        /// range
        set: SetRef,
        /// window
        within: Option<u64>,
        /// body
        body: Option<Box<Expr>>,
        /// offset of the quantifier
        offset: usize,
        /// offset of the set
        set_offset: usize,
    },
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    i: usize,
    depth: usize,
}

/// Parses an expression.
///
/// # Errors
/// The first syntax error, with its offset.
pub fn parse(src: &str) -> Result<Expr, LogicError> {
    let mut p = Parser {
        toks: lex(src)?,
        i: 0,
        depth: 0,
    };
    let e = p.expr()?;
    match p.peek() {
        Tok::End => Ok(e),
        t => err(
            p.off(),
            format!("unexpected {} after the expression", describe(t)),
        ),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(n) => format!("`{n}`"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Dur(_) => "a duration".into(),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::Colon => "`:`".into(),
        Tok::Dot => "`.`".into(),
        Tok::Op(_) => "a comparison".into(),
        Tok::End => "end of expression".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.i.min(self.toks.len() - 1)].0
    }
    fn off(&self) -> usize {
        self.toks[self.i.min(self.toks.len() - 1)].1
    }
    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }
    fn kw(&self, k: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == k)
    }
    fn ident(&mut self, what: &str) -> Result<(String, usize), LogicError> {
        let off = self.off();
        match self.bump() {
            Tok::Ident(s) => Ok((s, off)),
            t => err(off, format!("expected {what}, found {}", describe(&t))),
        }
    }

    fn expr(&mut self) -> Result<Expr, LogicError> {
        self.depth += 1;
        if self.depth > 64 {
            return err(
                self.off(),
                "expression nested too deeply (more than 64 levels)",
            );
        }
        let l = self.or()?;
        let r = if self.kw("implies") {
            self.bump();
            let r = self.expr()?;
            Expr::Implies(Box::new(l), Box::new(r))
        } else {
            l
        };
        self.depth -= 1;
        Ok(r)
    }

    fn or(&mut self) -> Result<Expr, LogicError> {
        let mut l = self.and()?;
        while self.kw("or") {
            self.bump();
            let r = self.and()?;
            l = Expr::Or(Box::new(l), Box::new(r));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Expr, LogicError> {
        let mut l = self.unary()?;
        while self.kw("and") {
            self.bump();
            let r = self.unary()?;
            l = Expr::And(Box::new(l), Box::new(r));
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<Expr, LogicError> {
        self.depth += 1;
        if self.depth > 64 {
            return err(
                self.off(),
                "expression nested too deeply (more than 64 levels)",
            );
        }
        let off = self.off();
        let e = match self.peek().clone() {
            Tok::Ident(k) if k == "not" => {
                self.bump();
                Expr::Not(Box::new(self.unary()?))
            }
            Tok::Ident(k) if k == "true" || k == "false" => {
                self.bump();
                Expr::Const(k == "true")
            }
            Tok::Ident(k) if k == "exists" || k == "forall" => {
                self.bump();
                let all = k == "forall";
                let (var, _) = self.ident("a variable name")?;
                if !self.kw("in") {
                    return err(self.off(), format!("expected `in` after `{k} {var}`"));
                }
                self.bump();
                let set_offset = self.off();
                let (s, _) = self.ident("an event name or node.children / node.neighbours")?;
                let set = if s == "node" {
                    if *self.peek() != Tok::Dot {
                        return err(
                            self.off(),
                            "expected `.children` or `.neighbours` after `node`",
                        );
                    }
                    self.bump();
                    let (a, aoff) = self.ident("children or neighbours")?;
                    match a.as_str() {
                        "children" => SetRef::Children,
                        "neighbours" | "neighbors" => SetRef::Neighbours,
                        _ => {
                            return err(
                                aoff,
                                format!(
                                "node.{a} is not a set (expected node.children or node.neighbours)"
                            ),
                            )
                        }
                    }
                } else {
                    SetRef::Event(s)
                };
                let within = if self.kw("within") {
                    self.bump();
                    let woff = self.off();
                    match self.bump() {
                        Tok::Dur(d) => Some(d),
                        t => {
                            return err(
                                woff,
                                format!(
                                    "expected a duration like 15s after `within`, found {}",
                                    describe(&t)
                                ),
                            )
                        }
                    }
                } else {
                    None
                };
                let body = if *self.peek() == Tok::Colon {
                    self.bump();
                    Some(Box::new(self.expr()?))
                } else if all {
                    return err(
                        self.off(),
                        format!("expected `:` and a condition after `forall {var} in …`"),
                    );
                } else {
                    None
                };
                Expr::Quant {
                    all,
                    var,
                    set,
                    within,
                    body,
                    offset: off,
                    set_offset,
                }
            }
            Tok::LParen => {
                self.bump();
                let e = self.expr()?;
                if *self.peek() != Tok::RParen {
                    return err(
                        self.off(),
                        format!("expected `)`, found {}", describe(self.peek())),
                    );
                }
                self.bump();
                e
            }
            _ => {
                let l = self.term()?;
                let opoff = self.off();
                let op = match self.bump() {
                    Tok::Op(op) => op,
                    t => {
                        return err(
                            opoff,
                            format!("expected a comparison (`==`, `!=`, …) after the value, found {}: a composite event's expression must be a formula (true or false), not a value", describe(&t)),
                        )
                    }
                };
                let r = self.term()?;
                Expr::Cmp(op, l, r)
            }
        };
        self.depth -= 1;
        Ok(e)
    }

    fn term(&mut self) -> Result<(Term, usize), LogicError> {
        let off = self.off();
        let t = match self.bump() {
            Tok::Int(n) => Term::Int(n),
            Tok::Str(s) => Term::Addr(s),
            Tok::Ident(v) => {
                if *self.peek() == Tok::Dot {
                    self.bump();
                    let (a, _) = self.ident("an attribute name")?;
                    if v == "node" {
                        Term::Node(a)
                    } else {
                        Term::Attr(v, a)
                    }
                } else {
                    Term::Var(v)
                }
            }
            t => return err(off, format!("expected a value (number, \"address\", variable, var.attribute, node.address), found {}", describe(&t))),
        };
        Ok((t, off))
    }
}

// ---------------------------------------------------------------- typed form

/// What a variable slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VarKind {
    /// An address from a node set.
    Value,
    /// A history entry of a basic event; `timer` for timer events.
    Event { timer: bool },
}

/// An attribute of an event variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EvAttr {
    Msg(Attr),
    TimerId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum T {
    Int(i64),
    Var(u8),
    Attr(u8, EvAttr),
    NodeAddress,
    NodeParent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeSet {
    Children,
    Neighbours,
}

#[derive(Clone, Debug, PartialEq)]
enum F {
    Const(bool),
    Not(Box<F>),
    And(Box<F>, Box<F>),
    Or(Box<F>, Box<F>),
    Cmp(CmpOp, T, T),
    NodeQ {
        all: bool,
        set: NodeSet,
        slot: u8,
        body: Box<F>,
    },
    EventQ {
        all: bool,
        event: u16,
        within: Option<u64>,
        slot: u8,
        body: Option<Box<F>>,
        offset: usize,
    },
    /// Incremental form: is there an entry in index `.0` for the key?
    Idx(u16),
}

/// The key an index is looked up with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyTerm {
    Var(u8),
    NodeAddress,
    NodeParent,
}

/// One index: `exists m in event within W : m.key == k and residual(m)`.
#[derive(Clone, Debug, PartialEq)]
struct IndexDef {
    event: u16,
    within: Option<u64>,
    key: Option<(EvAttr, KeyTerm)>,
    /// Condition on the event alone (its variable is slot `slot`).
    residual: F,
    slot: u8,
}

/// One compiled composite expression.
#[derive(Clone, Debug)]
struct Compiled {
    naive: F,
    /// The incremental form, compiled once the program's indexes are all known.
    incremental: F,
    pred: Pred,
    /// The same formula when it has one of the shapes composite events usually take,
    /// evaluated without closures (see [`Kernel`]).
    kernel: Kernel,
}

/// A composite's incremental formula recognised at load as one of the shapes delivery
/// services use (issue 15 §2: pre-built kernels instead of interpreting the formula), each
/// optionally negated (`neg`): `S` not empty (`exists d in node.children`), every / some
/// member of `S` keyed in an index ("every child acknowledged"), an unkeyed index set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// Not recognised: the closures run.
    General,
    /// A constant.
    Const(bool),
    /// `forall|exists d in S : c` for a constant `c`.
    NodeConst {
        all: bool,
        set: NodeSet,
        c: bool,
        neg: bool,
    },
    /// `forall|exists d in S : (index `id` has d, recent enough)`.
    Keyed {
        all: bool,
        set: NodeSet,
        id: u16,
        within: Option<u64>,
        neg: bool,
    },
    /// Index `id` (unkeyed) set, recent enough.
    Last {
        id: u16,
        within: Option<u64>,
        neg: bool,
    },
}

/// The kernel of an incremental formula.
fn kernel_of(f: &F, indexes: &[IndexDef]) -> Kernel {
    let mut neg = false;
    let mut f = f;
    while let F::Not(a) = f {
        neg = !neg;
        f = a;
    }
    match f {
        F::Const(b) => Kernel::Const(*b != neg),
        F::NodeQ {
            all,
            set,
            slot,
            body,
        } => match **body {
            F::Const(c) => Kernel::NodeConst {
                all: *all,
                set: *set,
                c,
                neg,
            },
            F::Idx(id) => match indexes.get(usize::from(id)) {
                Some(ix) if ix.key.is_some_and(|(_, k)| k == KeyTerm::Var(*slot)) => {
                    Kernel::Keyed {
                        all: *all,
                        set: *set,
                        id,
                        within: ix.within,
                        neg,
                    }
                }
                _ => Kernel::General,
            },
            _ => Kernel::General,
        },
        F::Idx(id) => match indexes.get(usize::from(*id)) {
            Some(ix) if ix.key.is_none() => Kernel::Last {
                id: *id,
                within: ix.within,
                neg,
            },
            _ => Kernel::General,
        },
        _ => Kernel::General,
    }
}

impl Kernel {
    /// Evaluates a recognised shape; `None` for [`Kernel::General`].
    #[inline(always)]
    fn eval(self, state: &State, node: &NodeInfo, now: Instant) -> Option<bool> {
        Some(match self {
            Kernel::General => return None,
            Kernel::Const(b) => b,
            Kernel::NodeConst { all, set, c, neg } => {
                let r = if c != all && !node_set(set, node).is_empty() {
                    !all
                } else {
                    all
                };
                r != neg
            }
            Kernel::Keyed {
                all,
                set,
                id,
                within,
                neg,
            } => {
                let entries: &[(i64, u64)] = match state.slots.get(usize::from(id)) {
                    Some(Slot::Keyed(e)) => e,
                    _ => &[],
                };
                let mut r = all;
                for a in node_set(set, node) {
                    let k = a.0 as i64;
                    let seen = entries
                        .iter()
                        .any(|&(kk, t)| kk == k && in_window(t, within, now));
                    if seen != all {
                        r = !all;
                        break;
                    }
                }
                r != neg
            }
            Kernel::Last { id, within, neg } => {
                let r = match state.slots.get(usize::from(id)) {
                    Some(Slot::Last(t)) => in_window(*t, within, now),
                    _ => false,
                };
                r != neg
            }
        })
    }
}

/// The compiled composite expressions of a service and the indexes they need.
#[derive(Clone, Debug, Default)]
pub struct Program {
    exprs: Vec<Compiled>,
    indexes: Vec<IndexDef>,
    /// Per basic event: the indexes it updates.
    by_event: Vec<Vec<u16>>,
}

/// One entry of the history as the naive evaluator sees it.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Basic event index.
    pub event: u16,
    /// When it arrived.
    pub time: Instant,
    /// The message, for a message event.
    pub message: Option<&'a Message>,
    /// The timer id, for a timer event.
    pub timer: u32,
}

/// Per-instance state of a program's indexes: compact, updated on arrival.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    slots: Vec<Slot>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    /// Last arrival time (ns) of a satisfying event, `u64::MAX` = none.
    Last(u64),
    /// Key → last arrival time (ns).
    Keyed(Vec<(i64, u64)>),
}

const NONE: u64 = u64::MAX;

impl State {
    /// Forgets every arrival, keeping the allocations (a recycled instance).
    pub fn reset(&mut self) {
        for s in &mut self.slots {
            match s {
                Slot::Last(t) => *t = NONE,
                Slot::Keyed(v) => v.clear(),
            }
        }
    }

    /// Feeds the indexes to `h`, arrival times as their age at `now_ns` (so that two states
    /// shifted in time hash alike; the expressions only compare ages). For the explorer.
    pub fn fingerprint<H: std::hash::Hasher>(&self, now_ns: u64, h: &mut H) {
        let age = |t: u64| {
            if t == NONE {
                u64::MAX
            } else {
                now_ns.saturating_sub(t)
            }
        };
        h.write_usize(self.slots.len());
        for s in &self.slots {
            match s {
                Slot::Last(t) => h.write_u64(age(*t)),
                Slot::Keyed(v) => {
                    h.write_usize(v.len());
                    for &(k, t) in v {
                        h.write_i64(k);
                        h.write_u64(age(t));
                    }
                }
            }
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self
                .slots
                .iter()
                .map(|s| match s {
                    Slot::Last(_) => 0,
                    Slot::Keyed(v) => v.capacity() * 16,
                })
                .sum::<usize>()
    }
}

struct Checker<'a> {
    data: &'a ServiceData,
    vars: Vec<(String, VarKind)>,
}

impl Checker<'_> {
    fn slot(&self, name: &str) -> Option<(u8, VarKind)> {
        self.vars
            .iter()
            .rposition(|(n, _)| n == name)
            .map(|i| (i as u8, self.vars[i].1))
    }

    fn term(&self, (t, off): &(Term, usize)) -> Result<T, LogicError> {
        Ok(match t {
            Term::Int(n) => T::Int(*n),
            Term::Addr(s) => match Addr::parse(s) {
                Some(a) => T::Int(a.0 as i64),
                None => return err(*off, format!("\"{s}\" is not an address (expected N or x,y)")),
            },
            Term::Var(v) => match self.slot(v) {
                Some((s, VarKind::Value)) => T::Var(s),
                Some((_, VarKind::Event { .. })) => {
                    return err(*off, format!("`{v}` is an event, not a value: use an attribute such as `{v}.source`"))
                }
                None => return err(*off, format!("unknown variable `{v}` (bind it with exists/forall)")),
            },
            Term::Node(a) => match a.as_str() {
                "address" => T::NodeAddress,
                "parent" => T::NodeParent,
                "children" | "neighbours" | "neighbors" => {
                    return err(*off, format!("node.{a} is a set, not a value: quantify over it (`exists d in node.{a} : …`)"))
                }
                _ => return err(*off, format!("unknown node attribute `{a}` (expected address, parent, children or neighbours)")),
            },
            Term::Attr(v, a) => match self.slot(v) {
                Some((s, VarKind::Event { timer: false })) => match Attr::from_name(a) {
                    Some(at) => T::Attr(s, EvAttr::Msg(at)),
                    None => return err(*off, format!("unknown message attribute `{a}` (expected one of: {})", attr_list())),
                },
                Some((s, VarKind::Event { timer: true })) => match a.as_str() {
                    "timer" | "TimerIdentifier" => T::Attr(s, EvAttr::TimerId),
                    _ => return err(*off, format!("unknown timer attribute `{a}` (expected `timer`)")),
                },
                Some((_, VarKind::Value)) => return err(*off, format!("`{v}` is an address, it has no attribute `{a}`")),
                None => return err(*off, format!("unknown variable `{v}` (bind it with exists/forall)")),
            },
        })
    }

    fn check(&mut self, e: &Expr) -> Result<F, LogicError> {
        Ok(match e {
            Expr::Const(b) => F::Const(*b),
            Expr::Not(a) => F::Not(Box::new(self.check(a)?)),
            Expr::And(a, b) => F::And(Box::new(self.check(a)?), Box::new(self.check(b)?)),
            Expr::Or(a, b) => F::Or(Box::new(self.check(a)?), Box::new(self.check(b)?)),
            Expr::Implies(a, b) => F::Or(
                Box::new(F::Not(Box::new(self.check(a)?))),
                Box::new(self.check(b)?),
            ),
            Expr::Cmp(op, l, r) => F::Cmp(*op, self.term(l)?, self.term(r)?),
            Expr::Quant {
                all,
                var,
                set,
                within,
                body,
                offset,
                set_offset,
            } => {
                if self.slot(var).is_some() {
                    return err(*offset, format!("variable `{var}` is already bound"));
                }
                if self.vars.len() >= MAX_VARS {
                    return err(*offset, format!("at most {MAX_VARS} nested quantifiers"));
                }
                let slot = self.vars.len() as u8;
                match set {
                    SetRef::Event(name) => {
                        let Some(i) = self.data.basic_index(name) else {
                            let hint = if self.data.composite.iter().any(|c| &c.name == name) {
                                " (composite events cannot be quantified over)"
                            } else {
                                ""
                            };
                            return err(
                                *set_offset,
                                format!(
                                    "unknown event `{name}`{hint} (expected a basic event: {})",
                                    self.events()
                                ),
                            );
                        };
                        let timer = matches!(self.data.basic[i].kind, BasicKind::Timer(_));
                        self.vars.push((var.clone(), VarKind::Event { timer }));
                        let body = match body {
                            Some(b) => Some(Box::new(self.check(b)?)),
                            None => None,
                        };
                        self.vars.pop();
                        F::EventQ {
                            all: *all,
                            event: i as u16,
                            within: *within,
                            slot,
                            body,
                            offset: *offset,
                        }
                    }
                    SetRef::Children | SetRef::Neighbours => {
                        if within.is_some() {
                            return err(
                                *set_offset,
                                "`within` applies to event histories, not to node sets",
                            );
                        }
                        self.vars.push((var.clone(), VarKind::Value));
                        let b = match body {
                            Some(b) => self.check(b)?,
                            None => F::Const(true),
                        };
                        self.vars.pop();
                        let set = if *set == SetRef::Children {
                            NodeSet::Children
                        } else {
                            NodeSet::Neighbours
                        };
                        F::NodeQ {
                            all: *all,
                            set,
                            slot,
                            body: Box::new(b),
                        }
                    }
                }
            }
        })
    }

    fn events(&self) -> String {
        self.data
            .basic
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn attr_list() -> String {
    Attr::ALL
        .iter()
        .map(|a| a.short())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Negation normal form of `not f` (no quantifiers inside: used on index residuals and key
/// conjunctions only).
fn negate(f: F) -> F {
    match f {
        F::Const(b) => F::Const(!b),
        F::Not(a) => *a,
        F::And(a, b) => F::Or(Box::new(negate(*a)), Box::new(negate(*b))),
        F::Or(a, b) => F::And(Box::new(negate(*a)), Box::new(negate(*b))),
        F::Cmp(op, l, r) => F::Cmp(op.negate(), l, r),
        other => F::Not(Box::new(other)),
    }
}

fn conjuncts(f: F, out: &mut Vec<F>) {
    match f {
        F::And(a, b) => {
            conjuncts(*a, out);
            conjuncts(*b, out);
        }
        F::Not(a) => match *a {
            F::Or(x, y) => {
                conjuncts(negate(*x), out);
                conjuncts(negate(*y), out);
            }
            F::Not(x) => conjuncts(*x, out),
            other => out.push(F::Not(Box::new(other))),
        },
        other => out.push(other),
    }
}

/// Whether `f` mentions only event slot `s` and constants (no node, no other variable, no
/// quantifier).
fn only_slot(f: &F, s: u8) -> bool {
    let t_ok = |t: &T| match t {
        T::Int(_) => true,
        T::Attr(v, _) => *v == s,
        _ => false,
    };
    match f {
        F::Const(_) => true,
        F::Not(a) => only_slot(a, s),
        F::And(a, b) | F::Or(a, b) => only_slot(a, s) && only_slot(b, s),
        F::Cmp(_, l, r) => t_ok(l) && t_ok(r),
        _ => false,
    }
}

fn key_of(t: &T) -> Option<KeyTerm> {
    match t {
        T::Var(v) => Some(KeyTerm::Var(*v)),
        T::NodeAddress => Some(KeyTerm::NodeAddress),
        T::NodeParent => Some(KeyTerm::NodeParent),
        _ => None,
    }
}

/// Whether `f` mentions variable slot `s`.
fn mentions(f: &F, s: u8) -> bool {
    let t_m = |t: &T| matches!(t, T::Var(v) | T::Attr(v, _) if *v == s);
    match f {
        F::Const(_) | F::Idx(_) => false,
        F::Not(a) => mentions(a, s),
        F::And(a, b) | F::Or(a, b) => mentions(a, s) || mentions(b, s),
        F::Cmp(_, l, r) => t_m(l) || t_m(r),
        F::NodeQ { body, .. } => mentions(body, s),
        F::EventQ { body, .. } => body.as_deref().is_some_and(|b| mentions(b, s)),
    }
}

fn make_incremental(f: &F, indexes: &mut Vec<IndexDef>) -> Result<F, LogicError> {
    Ok(match f {
        F::Const(_) | F::Cmp(..) | F::Idx(_) => f.clone(),
        F::Not(a) => F::Not(Box::new(make_incremental(a, indexes)?)),
        F::And(a, b) => F::And(
            Box::new(make_incremental(a, indexes)?),
            Box::new(make_incremental(b, indexes)?),
        ),
        F::Or(a, b) => F::Or(
            Box::new(make_incremental(a, indexes)?),
            Box::new(make_incremental(b, indexes)?),
        ),
        F::NodeQ {
            all,
            set,
            slot,
            body,
        } => F::NodeQ {
            all: *all,
            set: *set,
            slot: *slot,
            body: Box::new(make_incremental(body, indexes)?),
        },
        F::EventQ {
            all,
            event,
            within,
            slot,
            body,
            offset,
        } => {
            let offset = *offset;
            let b = body.as_deref().cloned().unwrap_or(F::Const(true));
            let b = if *all { negate(b) } else { b };
            let mut cs = Vec::new();
            conjuncts(b, &mut cs);
            let mut key = None;
            let mut residual = F::Const(true);
            let mut hoisted = F::Const(true);
            for c in cs {
                if c == F::Const(true) {
                    // `exists m in E` alone: nothing to test.
                    continue;
                }
                if !mentions(&c, *slot) {
                    // Closed with respect to this event: ∃m (A(m) ∧ C) ≡ (∃m A(m)) ∧ C.
                    let c = make_incremental(&c, indexes)?;
                    hoisted = F::And(Box::new(hoisted), Box::new(c));
                    continue;
                }
                if only_slot(&c, *slot) {
                    residual = F::And(Box::new(residual), Box::new(c));
                    continue;
                }
                let k = match &c {
                    F::Cmp(CmpOp::Eq, T::Attr(s, a), t) | F::Cmp(CmpOp::Eq, t, T::Attr(s, a))
                        if s == slot =>
                    {
                        key_of(t).map(|k| (*a, k))
                    }
                    _ => None,
                };
                match (k, key) {
                    (Some(k), None) => key = Some(k),
                    _ => {
                        return err(
                            offset,
                            "this event quantifier's condition cannot be evaluated incrementally: it may test its event alone, plus one equality `m.attr == x` with an outer variable, node.address or node.parent (docs/spec-format.md, Part II)",
                        )
                    }
                }
            }
            let def = IndexDef {
                event: *event,
                within: *within,
                key,
                residual,
                slot: *slot,
            };
            // One index per distinct quantifier: "every child acknowledged" (a composite) and
            // "the children that have not" (a foreach) share theirs, recorded once.
            let id = match indexes.iter().position(|d| *d == def) {
                Some(i) => i as u16,
                None => {
                    indexes.push(def);
                    (indexes.len() - 1) as u16
                }
            };
            let lookup = match hoisted {
                F::Const(true) => F::Idx(id),
                h => F::And(Box::new(F::Idx(id)), Box::new(h)),
            };
            if *all {
                F::Not(Box::new(lookup))
            } else {
                lookup
            }
        }
    })
}

/// Compiles the composite expressions of a service; `Err` carries, per failing composite, its
/// index and the error.
///
/// # Errors
/// Parse and type errors, with offsets into each composite's expression.
pub fn compile(data: &ServiceData) -> Result<Program, Vec<(usize, LogicError)>> {
    let mut prog = Program {
        by_event: vec![Vec::new(); data.basic.len()],
        ..Program::default()
    };
    let mut errors = Vec::new();
    for (ci, c) in data.composite.iter().enumerate() {
        match compile_one(data, &c.expr, &mut prog.indexes) {
            Ok(comp) => prog.exprs.push(comp),
            Err(e) => {
                errors.push((ci, e));
                prog.exprs.push(Compiled {
                    naive: F::Const(false),
                    incremental: F::Const(false),
                    pred: Pred::new(|_, _| false),
                    kernel: Kernel::Const(false),
                });
            }
        }
    }
    for (i, ix) in prog.indexes.iter().enumerate() {
        prog.by_event[usize::from(ix.event)].push(i as u16);
    }
    for c in &mut prog.exprs {
        c.pred = compile_pred(&c.incremental, &prog.indexes);
        c.kernel = kernel_of(&c.incremental, &prog.indexes);
    }
    if errors.is_empty() {
        Ok(prog)
    } else {
        Err(errors)
    }
}

fn compile_one(
    data: &ServiceData,
    src: &str,
    indexes: &mut Vec<IndexDef>,
) -> Result<Compiled, LogicError> {
    let e = parse(src)?;
    let mut ck = Checker {
        data,
        vars: Vec::new(),
    };
    let naive = ck.check(&e)?;
    let incremental = make_incremental(&naive, indexes)?;
    Ok(Compiled {
        naive,
        incremental,
        pred: Pred::new(|_, _| false),
        kernel: Kernel::General,
    })
}

/// Converts a byte offset into an expression starting at `start` into a file position.
pub fn offset_pos(src: &str, start: super::Pos, offset: usize) -> super::Pos {
    let mut p = start;
    for ch in src[..offset.min(src.len())].chars() {
        if ch == '\n' {
            p.line += 1;
            p.col = 1;
        } else {
            p.col += 1;
        }
    }
    p
}

#[derive(Clone, Copy)]
enum Bind<'a> {
    None,
    Value(i64),
    Event(Entry<'a>),
}

impl Program {
    /// A fresh per-instance state.
    pub fn new_state(&self) -> State {
        State {
            slots: self
                .indexes
                .iter()
                .map(|ix| {
                    if ix.key.is_some() {
                        Slot::Keyed(Vec::new())
                    } else {
                        Slot::Last(NONE)
                    }
                })
                .collect(),
        }
    }

    /// Whether any index listens to basic event `event` (skip [`Program::record`] otherwise).
    #[inline]
    pub fn listens(&self, event: u16) -> bool {
        self.by_event
            .get(usize::from(event))
            .is_some_and(|v| !v.is_empty())
    }

    /// When basic event `event` updates exactly one index, keyed by an attribute of its
    /// message with no other condition (the usual "who answered" index), that index and the
    /// attribute: [`Program::record_keyed`] then records it without the general loop.
    pub(crate) fn direct_keyed(&self, event: u16) -> Option<(u16, Attr)> {
        let [id] = self.by_event.get(usize::from(event))?.as_slice() else {
            return None;
        };
        let ix = self.indexes.get(usize::from(*id))?;
        match (&ix.residual, ix.key) {
            (F::Const(true), Some((EvAttr::Msg(a), _))) => Some((*id, a)),
            _ => None,
        }
    }

    /// Records key `k` at `now` in keyed index `id` (see [`Program::direct_keyed`]).
    #[inline(always)]
    pub(crate) fn record_keyed(&self, state: &mut State, id: u16, k: i64, now: Instant) {
        if let Some(Slot::Keyed(v)) = state.slots.get_mut(usize::from(id)) {
            super::native::key_time(v, k, now.as_nanos());
        }
    }

    /// Records the arrival of a basic event in the instance's indexes.
    #[inline(always)]
    pub fn record(
        &self,
        state: &mut State,
        event: u16,
        now: Instant,
        message: Option<&Message>,
        timer: u32,
    ) {
        let Some(ids) = self.by_event.get(usize::from(event)) else {
            return;
        };
        let entry = Entry {
            event,
            time: now,
            message,
            timer,
        };
        let t = now.as_nanos();
        for &id in ids {
            let Some(ix) = self.indexes.get(usize::from(id)) else {
                continue;
            };
            let Some(slot) = state.slots.get_mut(usize::from(id)) else {
                continue;
            };
            // The usual index: no condition on the event alone.
            if let (F::Const(true), Slot::Keyed(v), Some((a, _))) =
                (&ix.residual, &mut *slot, ix.key)
            {
                super::native::key_time(v, attr_value(&entry, a), t);
                continue;
            }
            if !matches!(ix.residual, F::Const(true)) {
                let mut env = [Bind::None; MAX_VARS];
                env[usize::from(ix.slot)] = Bind::Event(entry);
                let node = NodeInfo::default();
                if !eval_f(&ix.residual, &mut env, &node, now, &[]) {
                    continue;
                }
            }
            match slot {
                Slot::Last(l) => *l = t,
                Slot::Keyed(v) => {
                    let Some((a, _)) = ix.key else { continue };
                    super::native::key_time(v, attr_value(&entry, a), t);
                }
            }
        }
    }

    /// Evaluates composite `i` from the instance's indexes (incremental).
    #[inline(always)]
    pub fn eval(&self, i: usize, state: &State, node: &NodeInfo, now: Instant) -> bool {
        let Some(c) = self.exprs.get(i) else {
            return false;
        };
        if let Some(r) = c.kernel.eval(state, node, now) {
            return r;
        }
        let scope = Scope { node, now, state };
        c.pred.holds(&mut Values::default(), &scope)
    }

    /// Evaluates composite `i` by rescanning a full history (the reference for tests).
    pub fn eval_naive(
        &self,
        i: usize,
        history: &[Entry<'_>],
        node: &NodeInfo,
        now: Instant,
    ) -> bool {
        let mut env = [Bind::None; MAX_VARS];
        self.exprs
            .get(i)
            .is_some_and(|c| eval_f(&c.naive, &mut env, node, now, history))
    }
}

/// The nodes an action's `foreach` addresses: `VAR in node.children|node.neighbours [: P(VAR)]`,
/// where `P` is a formula of this language with `VAR` free (e.g. the children that have not
/// acknowledged: `d in node.children : not exists m in ack : m.source == d`). Compiled with
/// [`Program::compile_selector`] into the service's program, so its event quantifiers are
/// indexes recorded like a composite's; evaluated when the action runs.
#[derive(Clone)]
pub struct Selector {
    set: NodeSet,
    slot: u8,
    pred: Pred,
    /// The usual body, "(not) keyed in index `id`" for the bound address (the children that
    /// have (not) acknowledged), evaluated without closures: (id, window, negated).
    keyed: Option<(u16, Option<u64>, bool)>,
    /// The formula as Rust for the generated code (see [`Selector::rust_parts`]).
    rust: Arc<str>,
    src: Arc<str>,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Selector({:?})", self.src)
    }
}

impl PartialEq for Selector {
    fn eq(&self, other: &Self) -> bool {
        self.src == other.src && self.set == other.set && self.slot == other.slot
    }
}

impl Eq for Selector {}

impl Selector {
    /// The selector's text.
    pub fn source(&self) -> &str {
        &self.src
    }

    /// For the generated code ([`codegen`](super::codegen)): the node set's field name
    /// (`children` / `neighbours`), the variable slot (the code binds `v{slot}`), and a `bool`
    /// expression over `inst`, `node`, `now` and `v{slot}`: the formula.
    pub(crate) fn rust_parts(&self) -> (&'static str, u8, &str) {
        let set = match self.set {
            NodeSet::Children => "children",
            NodeSet::Neighbours => "neighbours",
        };
        (set, self.slot, &self.rust)
    }

    /// Appends to `out`, in the node set's order, the addresses the formula holds for.
    pub fn select(&self, state: &State, node: &NodeInfo, now: Instant, out: &mut Vec<Addr>) {
        self.for_each(state, node, now, |a| out.push(a));
    }

    /// Calls `f`, in the node set's order, with each address the formula holds for.
    #[inline]
    pub fn for_each(&self, state: &State, node: &NodeInfo, now: Instant, mut f: impl FnMut(Addr)) {
        if let Some((id, within, neg)) = self.keyed {
            let entries: &[(i64, u64)] = match state.slots.get(usize::from(id)) {
                Some(Slot::Keyed(e)) => e,
                _ => &[],
            };
            for a in node_set(self.set, node) {
                let k = a.0 as i64;
                let seen = entries
                    .iter()
                    .any(|&(kk, t)| kk == k && in_window(t, within, now));
                if seen != neg {
                    f(*a);
                }
            }
            return;
        }
        let scope = Scope { node, now, state };
        let slot = usize::from(self.slot);
        if slot >= MAX_VARS {
            return;
        }
        let mut v = Values::default();
        v.bound |= 1 << slot;
        for a in node_set(self.set, node) {
            v.value[slot] = a.0 as i64;
            if self.pred.holds(&mut v, &scope) {
                f(*a);
            }
        }
    }
}

impl Program {
    /// Compiles an action's `foreach` selector (see [`Selector`]) into this program: its
    /// event quantifiers become indexes of the program (recorded on arrival like a
    /// composite's), so instances must be created after every selector is compiled.
    ///
    /// # Errors
    /// A syntax or type error (offsets into `src`), a set other than a node set, a body
    /// outside the incremental fragment.
    pub fn compile_selector(
        &mut self,
        data: &ServiceData,
        src: &str,
    ) -> Result<Selector, LogicError> {
        const PREFIX: &str = "exists ";
        let shift = |e: LogicError| LogicError {
            offset: e.offset.saturating_sub(PREFIX.len()),
            message: e.message,
        };
        let text = format!("{PREFIX}{src}");
        let e = parse(&text).map_err(shift)?;
        if !matches!(
            &e,
            Expr::Quant {
                set: SetRef::Children | SetRef::Neighbours,
                ..
            }
        ) {
            return err(
                0,
                "expected `VAR in node.children [: FORMULA]` or `VAR in node.neighbours [: FORMULA]`",
            );
        }
        let mut ck = Checker {
            data,
            vars: Vec::new(),
        };
        let naive = ck.check(&e).map_err(shift)?;
        let first_new = self.indexes.len();
        let inc = make_incremental(&naive, &mut self.indexes).map_err(shift)?;
        if self.by_event.len() < data.basic.len() {
            self.by_event.resize(data.basic.len(), Vec::new());
        }
        for (i, ix) in self.indexes.iter().enumerate().skip(first_new) {
            if let Some(v) = self.by_event.get_mut(usize::from(ix.event)) {
                v.push(i as u16);
            }
        }
        let F::NodeQ {
            set, slot, body, ..
        } = inc
        else {
            return err(0, "expected a node set");
        };
        let keyed = {
            let mut neg = false;
            let mut f = &*body;
            while let F::Not(a) = f {
                neg = !neg;
                f = a;
            }
            match f {
                F::Idx(id) => self
                    .indexes
                    .get(usize::from(*id))
                    .filter(|ix| ix.key.is_some_and(|(_, k)| k == KeyTerm::Var(slot)))
                    .map(|ix| (*id, ix.within, neg)),
                _ => None,
            }
        };
        Ok(Selector {
            set,
            slot,
            keyed,
            pred: compile_pred(&body, &self.indexes),
            rust: Arc::from(self.rust_f(&body, Gen::Composite)),
            src: Arc::from(src.trim()),
        })
    }
}

#[inline]
fn attr_value(e: &Entry<'_>, a: EvAttr) -> i64 {
    match a {
        EvAttr::TimerId => i64::from(e.timer),
        EvAttr::Msg(a) => e.message.map_or(0, |m| m.get(a)),
    }
}

fn term_value(t: &T, env: &[Bind<'_>], node: &NodeInfo) -> i64 {
    match t {
        T::Int(n) => *n,
        T::Var(v) => match env[usize::from(*v)] {
            Bind::Value(x) => x,
            _ => 0,
        },
        T::Attr(v, a) => match env[usize::from(*v)] {
            Bind::Event(e) => attr_value(&e, *a),
            _ => 0,
        },
        T::NodeAddress => node.address.0 as i64,
        T::NodeParent => node.parent.0 as i64,
    }
}

pub(crate) fn in_window(time: u64, within: Option<u64>, now: Instant) -> bool {
    time != NONE && within.is_none_or(|w| time >= now.as_nanos().saturating_sub(w))
}

/// The node-set variables bound while an incremental formula is evaluated (event variables
/// never are: their quantifiers became index lookups).
#[derive(Default)]
struct Values {
    value: [i64; MAX_VARS],
    bound: u8,
}

impl Values {
    #[inline]
    fn get(&self, slot: u8) -> Option<i64> {
        let i = usize::from(slot);
        (i < MAX_VARS && self.bound & (1 << i) != 0).then(|| self.value[i])
    }
}

/// What an incremental formula reads besides its variables.
struct Scope<'a> {
    node: &'a NodeInfo,
    now: Instant,
    state: &'a State,
}

type PredFn = dyn Fn(&mut Values, &Scope<'_>) -> bool + Send + Sync;

/// The incremental form of a composite compiled to closures, once at load: what runs on every
/// constituent event, with no dispatch on the formula's shape left at run time.
#[derive(Clone)]
struct Pred(Arc<PredFn>);

impl std::fmt::Debug for Pred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pred")
    }
}

impl Pred {
    fn new(f: impl Fn(&mut Values, &Scope<'_>) -> bool + Send + Sync + 'static) -> Pred {
        Pred(Arc::new(f))
    }

    #[inline]
    fn holds(&self, v: &mut Values, s: &Scope<'_>) -> bool {
        (self.0)(v, s)
    }
}

#[inline]
fn term_inc(t: T, v: &Values, node: &NodeInfo) -> i64 {
    match t {
        T::Int(n) => n,
        T::Var(x) => v.get(x).unwrap_or(0),
        // Event attributes only occur inside index residuals, evaluated on arrival.
        T::Attr(..) => 0,
        T::NodeAddress => node.address.0 as i64,
        T::NodeParent => node.parent.0 as i64,
    }
}

fn node_set(set: NodeSet, node: &NodeInfo) -> &[Addr] {
    match set {
        NodeSet::Children => &node.children,
        NodeSet::Neighbours => &node.neighbours,
    }
}

/// Compiles an incremental formula (see [`make_incremental`]) over `indexes`.
fn compile_pred(f: &F, indexes: &[IndexDef]) -> Pred {
    match f {
        &F::Const(b) => Pred::new(move |_, _| b),
        F::Not(a) => {
            let a = compile_pred(a, indexes);
            Pred::new(move |v, s| !a.holds(v, s))
        }
        F::And(a, b) => {
            let (a, b) = (compile_pred(a, indexes), compile_pred(b, indexes));
            Pred::new(move |v, s| a.holds(v, s) && b.holds(v, s))
        }
        F::Or(a, b) => {
            let (a, b) = (compile_pred(a, indexes), compile_pred(b, indexes));
            Pred::new(move |v, s| a.holds(v, s) || b.holds(v, s))
        }
        &F::Cmp(op, l, r) => {
            Pred::new(move |v, s| op.apply(term_inc(l, v, s.node), term_inc(r, v, s.node)))
        }
        F::NodeQ {
            all,
            set,
            slot,
            body,
        } => {
            let (all, set, slot) = (*all, *set, usize::from(*slot));
            if slot >= MAX_VARS {
                return Pred::new(|_, _| false);
            }
            if let F::Const(c) = **body {
                // ∀/∃ over a constant: only whether the set is empty matters.
                return Pred::new(move |_, s| {
                    if c != all && !node_set(set, s.node).is_empty() {
                        !all
                    } else {
                        all
                    }
                });
            }
            // ∀/∃ d in set : (an event keyed by d) — "every child acknowledged" — fused into
            // one loop over the set and the index, without a closure call per node.
            if let F::Idx(id) = **body {
                if let Some(ix) = indexes.get(usize::from(id)) {
                    if let Some((_, KeyTerm::Var(x))) = ix.key {
                        if usize::from(x) == slot {
                            let (within, id) = (ix.within, usize::from(id));
                            return Pred::new(move |_, s| {
                                let entries: &[(i64, u64)] = match s.state.slots.get(id) {
                                    Some(Slot::Keyed(e)) => e,
                                    _ => &[],
                                };
                                for a in node_set(set, s.node) {
                                    let k = a.0 as i64;
                                    let seen = entries
                                        .iter()
                                        .any(|&(kk, t)| kk == k && in_window(t, within, s.now));
                                    if seen != all {
                                        return !all;
                                    }
                                }
                                all
                            });
                        }
                    }
                }
            }
            let body = compile_pred(body, indexes);
            Pred::new(move |v, s| {
                let saved = (v.value[slot], v.bound);
                v.bound |= 1 << slot;
                let mut result = all;
                for a in node_set(set, s.node) {
                    v.value[slot] = a.0 as i64;
                    if body.holds(v, s) != all {
                        result = !all;
                        break;
                    }
                }
                (v.value[slot], v.bound) = saved;
                result
            })
        }
        F::EventQ { .. } => Pred::new(|_, _| false),
        &F::Idx(id) => {
            let Some(ix) = indexes.get(usize::from(id)) else {
                return Pred::new(|_, _| false);
            };
            let (within, key, id) = (ix.within, ix.key, usize::from(id));
            Pred::new(move |v, s| match s.state.slots.get(id) {
                Some(Slot::Last(t)) => in_window(*t, within, s.now),
                Some(Slot::Keyed(entries)) => {
                    let Some((_, k)) = key else { return false };
                    let want = match k {
                        KeyTerm::Var(x) => match v.get(x) {
                            Some(x) => x,
                            None => return false,
                        },
                        KeyTerm::NodeAddress => s.node.address.0 as i64,
                        KeyTerm::NodeParent => s.node.parent.0 as i64,
                    };
                    entries
                        .iter()
                        .any(|&(kk, t)| kk == want && in_window(t, within, s.now))
                }
                None => false,
            })
        }
    }
}

fn eval_f<'a>(
    f: &F,
    env: &mut [Bind<'a>; MAX_VARS],
    node: &NodeInfo,
    now: Instant,
    history: &[Entry<'a>],
) -> bool {
    match f {
        F::Const(b) => *b,
        F::Not(a) => !eval_f(a, env, node, now, history),
        F::And(a, b) => eval_f(a, env, node, now, history) && eval_f(b, env, node, now, history),
        F::Or(a, b) => eval_f(a, env, node, now, history) || eval_f(b, env, node, now, history),
        F::Cmp(op, l, r) => op.apply(term_value(l, env, node), term_value(r, env, node)),
        F::NodeQ {
            all,
            set,
            slot,
            body,
        } => {
            let items = match set {
                NodeSet::Children => &node.children,
                NodeSet::Neighbours => &node.neighbours,
            };
            let s = usize::from(*slot);
            let mut result = *all;
            for a in items {
                env[s] = Bind::Value(a.0 as i64);
                let v = eval_f(body, env, node, now, history);
                if v != *all {
                    result = !*all;
                    break;
                }
            }
            env[s] = Bind::None;
            result
        }
        F::EventQ {
            all,
            event,
            within,
            slot,
            body,
            ..
        } => {
            let s = usize::from(*slot);
            let mut result = *all;
            for e in history
                .iter()
                .filter(|e| e.event == *event && in_window(e.time.as_nanos(), *within, now))
            {
                env[s] = Bind::Event(*e);
                let v = body
                    .as_ref()
                    .is_none_or(|b| eval_f(b, env, node, now, history));
                if v != *all {
                    result = !*all;
                    break;
                }
            }
            env[s] = Bind::None;
            result
        }
        // Index lookups only occur in the incremental form ([`eval_inc`]).
        F::Idx(_) => false,
    }
}

/// Where a generated formula runs: a composite's incremental form, or an index residual on
/// the arriving event (whose variable is `slot`).
#[derive(Clone, Copy)]
enum Gen {
    Composite,
    Residual { slot: u8 },
}

/// Rust source for the same formulas, for [`codegen`](super::codegen): the generated code
/// names the instance `inst` (index `I` is its field `xI`), the node `node`, the time `now`,
/// the arriving message `m: Option<&Message>` and timer id `timer: u32`.
impl Program {
    /// Per index: keyed (`Vec<(i64, u64)>` of key and time) or not (`u64`, the last time).
    pub(crate) fn rust_index_keyed(&self) -> Vec<bool> {
        self.indexes.iter().map(|ix| ix.key.is_some()).collect()
    }

    /// A `bool` expression: composite `c` holds.
    pub(crate) fn rust_composite(&self, c: usize) -> String {
        self.exprs.get(c).map_or("false".into(), |e| {
            self.rust_f(&e.incremental, Gen::Composite)
        })
    }

    /// Statements recording basic event `event` in the instance's indexes.
    pub(crate) fn rust_record(&self, event: u16) -> String {
        let mut out = String::new();
        for &id in self.by_event.get(usize::from(event)).map_or(&[][..], |v| v) {
            let ix = &self.indexes[usize::from(id)];
            let cond = match ix.residual {
                F::Const(true) => "true".to_string(),
                ref r => self.rust_f(r, Gen::Residual { slot: ix.slot }),
            };
            let write = match ix.key {
                None => format!("inst.x{id} = now.as_nanos();"),
                Some((a, _)) => format!(
                    "native::key_time(&mut inst.x{id}, {}, now.as_nanos());",
                    rust_event_attr(a)
                ),
            };
            out.push_str(&format!(
                "{{ let rnode = NodeInfo::default(); let _ = &rnode; if {cond} {{ {write} }} }}\n"
            ));
        }
        out
    }

    fn rust_f(&self, f: &F, gen: Gen) -> String {
        let node = match gen {
            Gen::Composite => "node",
            Gen::Residual { .. } => "rnode",
        };
        let term = |t: &T| match *t {
            T::Int(n) => format!("({n}i64)"),
            T::Var(v) => format!("v{v}"),
            T::Attr(s, a) => match gen {
                Gen::Residual { slot } if s == slot => rust_event_attr(a),
                _ => "0i64".into(),
            },
            T::NodeAddress => format!("({node}.address.0 as i64)"),
            T::NodeParent => format!("({node}.parent.0 as i64)"),
        };
        match f {
            F::Const(b) => format!("{b}"),
            F::Not(a) => format!("!({})", self.rust_f(a, gen)),
            F::And(a, b) => format!("({} && {})", self.rust_f(a, gen), self.rust_f(b, gen)),
            F::Or(a, b) => format!("({} || {})", self.rust_f(a, gen), self.rust_f(b, gen)),
            F::Cmp(op, l, r) => {
                let op = match op {
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                    CmpOp::Lt => "<",
                    CmpOp::Le => "<=",
                    CmpOp::Gt => ">",
                    CmpOp::Ge => ">=",
                };
                format!("({} {op} {})", term(l), term(r))
            }
            F::NodeQ {
                all,
                set,
                slot,
                body,
            } => {
                let set = match set {
                    NodeSet::Children => "children",
                    NodeSet::Neighbours => "neighbours",
                };
                let q = if *all { "all" } else { "any" };
                format!(
                    "{node}.{set}.iter().{q}(|a| {{ let v{slot} = a.0 as i64; let _ = v{slot}; {} }})",
                    self.rust_f(body, gen)
                )
            }
            F::EventQ { .. } => "false".into(),
            F::Idx(id) => {
                let Some(ix) = self.indexes.get(usize::from(*id)) else {
                    return "false".into();
                };
                let within = format!("{:?}", ix.within);
                match ix.key {
                    None => format!("native::in_window(inst.x{id}, {within}, now)"),
                    Some((_, k)) => {
                        let want = match k {
                            KeyTerm::Var(x) => format!("v{x}"),
                            KeyTerm::NodeAddress => format!("({node}.address.0 as i64)"),
                            KeyTerm::NodeParent => format!("({node}.parent.0 as i64)"),
                        };
                        format!("inst.x{id}.iter().any(|&(k, t)| k == {want} && native::in_window(t, {within}, now))")
                    }
                }
            }
        }
    }
}

fn rust_event_attr(a: EvAttr) -> String {
    match a {
        EvAttr::Msg(a) => format!("m.map_or(0, |m| m.get(Attr::{a:?}))"),
        EvAttr::TimerId => "i64::from(timer)".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn data(composites: &[&str]) -> ServiceData {
        let comps: String = composites
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "<Event name=\"c{i}\"><ConstituentBasicEvent>ack</ConstituentBasicEvent><Expression>{}</Expression></Event>",
                    c.replace('<', "&lt;").replace('>', "&gt;")
                )
            })
            .collect();
        let src = format!(
            r#"<scxml xmlns="http://www.w3.org/2005/07/scxml" initial="a"><datamodel>
            <data name="service"><ServiceID>1</ServiceID></data>
            <data name="events"><Basic>
              <Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
              <Event name="nack"><Message><MessageType>1</MessageType></Message></Event>
              <Event name="to"><Timer><TimerIdentifier>3</TimerIdentifier></Timer></Event>
            </Basic><Composite>{comps}</Composite></data></datamodel><state id="a"/></scxml>"#
        );
        ServiceData::read("t.scxml", &src).unwrap()
    }

    fn compile_err(expr: &str) -> String {
        match compile(&data(&[expr])) {
            Ok(_) => panic!("`{expr}` compiled"),
            Err(e) => e[0].1.message.clone(),
        }
    }

    /// The shapes delivery services use are recognised as kernels (a regression here would
    /// only slow the flat path down, which the trace-equality tests cannot see), identical
    /// quantifiers share one index, and a kernel agrees with the closures it replaces.
    #[test]
    fn usual_shapes_are_kernels_with_shared_indexes() {
        let exprs = [
            "forall d in node.children : exists m in ack : m.source == d",
            "exists d in node.children",
            "not exists d in node.children",
            "exists m in nack within 2s",
            "not (exists d in node.children : exists m in ack : m.source == d)",
            "exists m in ack : m.source == node.parent and m.seq > 3",
        ];
        let d = data(&exprs);
        let mut prog = compile(&d).unwrap();
        let kernels: Vec<Kernel> = prog.exprs.iter().map(|c| c.kernel).collect();
        assert!(
            matches!(
                kernels[0],
                Kernel::Keyed {
                    all: true,
                    neg: false,
                    ..
                }
            ),
            "{kernels:?}"
        );
        assert!(
            matches!(kernels[1], Kernel::NodeConst { neg: false, .. }),
            "{kernels:?}"
        );
        assert!(
            matches!(kernels[2], Kernel::NodeConst { neg: true, .. }),
            "{kernels:?}"
        );
        assert!(
            matches!(kernels[3], Kernel::Last { neg: false, .. }),
            "{kernels:?}"
        );
        assert!(
            matches!(
                kernels[4],
                Kernel::Keyed {
                    all: false,
                    neg: true,
                    ..
                }
            ),
            "{kernels:?}"
        );
        assert_eq!(kernels[5], Kernel::General);
        // "keyed by source" is one index for expressions 0 and 4.
        assert_eq!(prog.indexes.len(), 3, "{:?}", prog.indexes);
        let sel = prog
            .compile_selector(
                &d,
                "d in node.children : not exists m in ack : m.source == d",
            )
            .unwrap();
        assert!(sel.keyed.is_some());
        assert_eq!(
            prog.indexes.len(),
            3,
            "the foreach shares the composite's index"
        );
        // Kernels and closures agree over a few states and neighbourhoods.
        let mut st = prog.new_state();
        let ack = |src: u64, seq: u64| Message {
            message_type: 2,
            source: Addr(src),
            seq,
            ..Message::default()
        };
        for (k, node) in [vec![], vec![Addr(2)], vec![Addr(2), Addr(3)]]
            .into_iter()
            .enumerate()
        {
            let node = NodeInfo {
                address: Addr(1),
                parent: Addr(9),
                children: node,
                neighbours: vec![],
            };
            for step in 0..4u64 {
                let now = Instant::from_micros(k as u64 * 10_000_000 + step * 1_000_000);
                for (i, c) in prog.exprs.iter().enumerate() {
                    let scope = Scope {
                        node: &node,
                        now,
                        state: &st,
                    };
                    let closures = c.pred.holds(&mut Values::default(), &scope);
                    assert_eq!(
                        prog.eval(i, &st, &node, now),
                        closures,
                        "expr {i} step {step}"
                    );
                }
                let mut by_kernel = Vec::new();
                sel.select(&st, &node, now, &mut by_kernel);
                let scope = Scope {
                    node: &node,
                    now,
                    state: &st,
                };
                let by_closure: Vec<Addr> = node
                    .children
                    .iter()
                    .copied()
                    .filter(|a| {
                        let mut v = Values::default();
                        v.bound |= 1 << sel.slot;
                        v.value[usize::from(sel.slot)] = a.0 as i64;
                        sel.pred.holds(&mut v, &scope)
                    })
                    .collect();
                assert_eq!(by_kernel, by_closure);
                let m = ack(2 + step % 2, step);
                prog.record(&mut st, 0, now, Some(&m), 0);
                if step == 1 {
                    prog.record(&mut st, 1, now, None, 0);
                }
            }
        }
    }

    #[test]
    fn parses_the_issue_example() {
        let e =
            parse("forall d in node.children : exists m in h2hackmessage : m.source == d").unwrap();
        assert!(matches!(
            e,
            Expr::Quant {
                all: true,
                set: SetRef::Children,
                ..
            }
        ));
        assert!(
            parse("not exists m in ack within 15s : m.source == node.parent implies true").is_ok()
        );
    }

    #[test]
    fn type_errors() {
        assert!(compile_err("exists m in nope").contains("unknown event `nope`"));
        assert!(compile_err("exists m in ack : m.colour == 1")
            .contains("unknown message attribute `colour`"));
        assert!(compile_err("exists m in ack : m == 1").contains("is an event, not a value"));
        assert!(compile_err("m.source").contains("must be a formula"));
        assert!(compile_err("exists m in ack : x == 1").contains("unknown variable `x`"));
        assert!(compile_err("node.children == 1").contains("is a set"));
        assert!(compile_err("exists t in to : t.source == 1").contains("unknown timer attribute"));
        assert!(compile_err("exists m in ack : exists m in ack").contains("already bound"));
        assert!(compile_err("forall d in node.children").contains("expected `:`"));
        assert!(compile_err("exists m in ack within 3x").contains("unknown time unit"));
        assert!(
            compile_err("exists m in ack : exists n in nack : m.source == n.source")
                .contains("incrementally")
        );
    }

    #[test]
    fn offsets_map_to_positions() {
        let p = offset_pos("a\n  bc", super::super::Pos { line: 10, col: 5 }, 4);
        assert_eq!(p, super::super::Pos { line: 11, col: 3 });
    }

    #[test]
    fn all_children_acked() {
        let d = data(&["forall d in node.children : exists m in ack : m.source == d"]);
        let p = compile(&d).unwrap();
        let mut st = p.new_state();
        let node = NodeInfo {
            children: vec![Addr(1), Addr(2)],
            ..NodeInfo::default()
        };
        let t = Instant::from_millis(1);
        assert!(!p.eval(0, &st, &node, t));
        let m1 = Message {
            message_type: 2,
            source: Addr(1),
            ..Message::default()
        };
        p.record(&mut st, 0, t, Some(&m1), 0);
        assert!(!p.eval(0, &st, &node, t));
        let m2 = Message {
            message_type: 2,
            source: Addr(2),
            ..Message::default()
        };
        p.record(&mut st, 0, t, Some(&m2), 0);
        assert!(p.eval(0, &st, &node, t));
    }
}

//! The seed's composite events written in XQuery (seed 000 §3.3, §5.1.2.2), translated at load
//! time into the first-order-logic language of [`logic`](super::logic).
//!
//! The seed evaluated `<XQuery>` with Saxon over an XML history of every basic event
//! (`/HistoryOfEvents/Event[@name='E']/Message/…`) and of the node information
//! (`//Node[last()]/Children/LogicalAddress`). viastack keeps no such document; instead the
//! subset of XQuery the seed's listings use is parsed here and rewritten into an equivalent
//! formula, which then compiles to incremental indexes like any `<Expression>`:
//!
//! | XQuery | first-order logic |
//! | --- | --- |
//! | `//Node[last()]/Children/LogicalAddress` (`Neighbours`) | the set `node.children` (`node.neighbours`) |
//! | `//Node[last()]/LogicalAddress`, `…/Parent/LogicalAddress` | `node.address`, `node.parent` |
//! | `//Event[@name="E"]` (or `…/Message`), `…/Message/Attr`, `…/Timer/TimerIdentifier` | the history of basic event `E`; its attribute values |
//! | `let $x := e` | `$x` stands for `e` wherever it is used |
//! | `for $v in S [where W] return R` | `forall v in S : (W implies R)` (see below) |
//! | `some`/`every $v in S satisfies P` | `exists`/`forall v in S : P` |
//! | `if (C) then A else B` | `(C and A) or (not C and B)`, simplified when A, B are constants |
//! | `A = B` (also `!=`, `<`, `<=`, `>`, `>=`, `eq` … `ge`) | existential over sequences: `exists a in A : exists b in B : a == b` |
//! | `count(S) op N` | `exists` chains (`count(S) > 0` is `exists x in S`); above 1 only for node sets |
//! | `exists(S)`, `empty(S)`, `not(P)`, `true()`, `false()`, `boolean(P)`, `and`, `or` | the same |
//! | `<out>true</out>`, `<out>false</out>` | `true`, `false` |
//!
//! **Reading of the seed's `<out>` sequences.** A `for` returns one item per element; the
//! seed's listing returns `<out>true</out>` or `<out>false</out>` per child and its text says
//! the event fires "if for all local node's children … there is an acknowledgement". So a
//! `for … return` holds iff none of its items is false: `forall`. An empty set holds
//! (vacuously), as `forall` does. (Strict XQuery would take the effective boolean value of a
//! non-empty element sequence, true as soon as there is one child, which is not what the seed
//! means.)
//!
//! Entities the seed writes inside the text (`&lt;out&gt;`) are read as the characters they
//! stand for, so a listing pasted verbatim into `<![CDATA[…]]>` loads too. The seed's listing
//! separates its two `let` clauses with a comma (`let $x := …, let $y := …`); that is accepted.
//!
//! # Errors
//! Anything else is refused with the construct named and the byte offset of where it starts:
//! `order by`, positional `at`, arithmetic, ranges, unions, other functions, other element
//! constructors, other paths, sequences of several items, `doc()`…; and what cannot be
//! translated (a value where a condition is expected, comparing whole events, counting events
//! beyond 1). No input makes the parser panic (a fuzz target checks it); nesting is bounded.

use std::fmt;

use super::message::Attr;

/// What the translation supports, for error messages.
pub const SUPPORTED: &str = "supported: let, for, where, return, if/then/else, some/every, count, comparisons, paths over //Node and //Event";

/// Deepest nesting of parentheses and sub-expressions.
const MAX_DEPTH: usize = 64;

/// Longest translation (nested `if`s repeat their condition).
const MAX_TEXT: usize = 64 * 1024;

/// A parse or translation error: byte offset into the XQuery text and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XqError {
    /// Byte offset into the text.
    pub offset: usize,
    /// What is wrong, naming the construct.
    pub message: String,
}

impl fmt::Display for XqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {}: {}", self.offset, self.message)
    }
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, XqError> {
    Err(XqError {
        offset,
        message: message.into(),
    })
}

fn unsupported<T>(offset: usize, what: &str) -> Result<T, XqError> {
    err(
        offset,
        format!("XQuery {what} is not supported ({SUPPORTED})"),
    )
}

/// What the translator needs to know about the service: its basic events.
pub trait Events {
    /// `Some(is_timer)` if `name` is a basic event.
    fn basic(&self, name: &str) -> Option<bool>;
    /// The basic events' names, for messages.
    fn names(&self) -> String;
}

// ---------------------------------------------------------------- lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Var(String),
    Name(String),
    Int(i64),
    Str(String),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Slash,
    SlashSlash,
    At,
    Assign,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Any other punctuation, named for the error.
    Other(&'static str),
    End,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, XqError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // Comments (: … :), possibly nested.
        if b[i..].starts_with(b"(:") {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i..].starts_with(b"(:") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b":)") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            if depth != 0 {
                return err(start, "unterminated comment (: … :)");
            }
            continue;
        }
        // Entities written in the text (the seed's &lt;out&gt;).
        if c == b'&' {
            let ents: [(&[u8], Tok); 2] = [(b"&lt;", Tok::Lt), (b"&gt;", Tok::Gt)];
            if let Some((e, t)) = ents.iter().find(|(e, _)| b[i..].starts_with(e)) {
                // `&lt;=` / `&gt;=` as the comparison.
                let n = e.len();
                if b.get(i + n) == Some(&b'=') {
                    out.push((if *t == Tok::Lt { Tok::Le } else { Tok::Ge }, start));
                    i += n + 1;
                } else {
                    out.push((t.clone(), start));
                    i += n;
                }
                continue;
            }
            return err(start, "unexpected `&` (expected &lt; or &gt;)");
        }
        let two = b.get(i + 1).copied();
        let (tok, len) = match (c, two) {
            (b'/', Some(b'/')) => (Tok::SlashSlash, 2),
            (b'/', _) => (Tok::Slash, 1),
            (b':', Some(b'=')) => (Tok::Assign, 2),
            (b'!', Some(b'=')) => (Tok::Ne, 2),
            (b'<', Some(b'=')) => (Tok::Le, 2),
            (b'>', Some(b'=')) => (Tok::Ge, 2),
            (b'<', _) => (Tok::Lt, 1),
            (b'>', _) => (Tok::Gt, 1),
            (b'=', _) => (Tok::Eq, 1),
            (b'(', _) => (Tok::LParen, 1),
            (b')', _) => (Tok::RParen, 1),
            (b'[', _) => (Tok::LBracket, 1),
            (b']', _) => (Tok::RBracket, 1),
            (b',', _) => (Tok::Comma, 1),
            (b'@', _) => (Tok::At, 1),
            (b'.', Some(b'.')) => (Tok::Other("`..` (parent step)"), 2),
            (b'.', Some(d)) if d.is_ascii_digit() => (Tok::Other("decimal numbers"), 1),
            (b'.', _) => (Tok::Other("`.` (context item)"), 1),
            (b'|', _) => (Tok::Other("`|` (union)"), 1),
            (b'+' | b'-', _) => (Tok::Other("arithmetic (+, -)"), 1),
            (b'*', _) => (Tok::Other("`*` (wildcard or multiplication)"), 1),
            (b'{' | b'}', _) => (Tok::Other("enclosed expressions { … }"), 1),
            (b';', _) => (Tok::Other("`;` (prolog)"), 1),
            (b'?', _) => (Tok::Other("`?` (occurrence indicator)"), 1),
            (b'!', _) => (Tok::Other("`!` (simple map)"), 1),
            (b':', _) => (Tok::Other("`:`"), 1),
            (b'"' | b'\'', _) => {
                let q = c;
                let mut j = i + 1;
                while j < b.len() && b[j] != q {
                    j += 1;
                }
                if j >= b.len() {
                    return err(start, "unterminated string literal");
                }
                let s = src.get(i + 1..j).unwrap_or_default().to_string();
                (Tok::Str(s), j + 1 - i)
            }
            (b'$', _) => {
                let mut j = i + 1;
                while j < b.len() && is_name_byte(b[j]) {
                    j += 1;
                }
                if j == i + 1 {
                    return err(start, "`$` without a variable name");
                }
                let s = src.get(i + 1..j).unwrap_or_default().to_string();
                (Tok::Var(s), j - i)
            }
            (d, _) if d.is_ascii_digit() => {
                let mut j = i;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                if b.get(j) == Some(&b'.') || b.get(j).is_some_and(|x| x.is_ascii_alphabetic()) {
                    return err(start, "only integer literals are supported");
                }
                let s = src.get(i..j).unwrap_or_default();
                match s.parse::<i64>() {
                    Ok(n) => (Tok::Int(n), j - i),
                    Err(_) => return err(start, format!("integer `{s}` is too large")),
                }
            }
            (a, _) if a.is_ascii_alphabetic() || a == b'_' => {
                let mut j = i;
                while j < b.len() && (is_name_byte(b[j]) || b[j] == b'-') {
                    j += 1;
                }
                // A prefix (fn:count, xs:integer) — but not the `:=` of a let.
                if b.get(j) == Some(&b':') && b.get(j + 1).is_some_and(|x| x.is_ascii_alphabetic())
                {
                    j += 1;
                    while j < b.len() && (is_name_byte(b[j]) || b[j] == b'-') {
                        j += 1;
                    }
                }
                let s = src.get(i..j).unwrap_or_default().to_string();
                (Tok::Name(s), j - i)
            }
            _ => {
                let ch = src.get(i..).and_then(|s| s.chars().next()).unwrap_or('?');
                return err(start, format!("unexpected character `{ch}`"));
            }
        };
        out.push((tok, start));
        i += len;
    }
    out.push((Tok::End, src.len()));
    Ok(out)
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Var(v) => format!("`${v}`"),
        Tok::Name(n) => format!("`{n}`"),
        Tok::Int(n) => format!("`{n}`"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::LBracket => "`[`".into(),
        Tok::RBracket => "`]`".into(),
        Tok::Comma => "`,`".into(),
        Tok::Slash => "`/`".into(),
        Tok::SlashSlash => "`//`".into(),
        Tok::At => "`@`".into(),
        Tok::Assign => "`:=`".into(),
        Tok::Eq => "`=`".into(),
        Tok::Ne => "`!=`".into(),
        Tok::Lt => "`<`".into(),
        Tok::Le => "`<=`".into(),
        Tok::Gt => "`>`".into(),
        Tok::Ge => "`>=`".into(),
        Tok::Other(w) => (*w).to_string(),
        Tok::End => "the end of the query".into(),
    }
}

// ---------------------------------------------------------------- syntax

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn text(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    fn negate(self) -> Op {
        match self {
            Op::Eq => Op::Ne,
            Op::Ne => Op::Eq,
            Op::Lt => Op::Ge,
            Op::Le => Op::Gt,
            Op::Gt => Op::Le,
            Op::Ge => Op::Lt,
        }
    }

    fn flip(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            o => o,
        }
    }
}

/// One step of a path: a name and its predicates.
#[derive(Clone, Debug, PartialEq)]
enum Pred {
    Last,
    Name(String),
}

#[derive(Clone, Debug, PartialEq)]
struct Step {
    name: String,
    preds: Vec<Pred>,
    offset: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Clause {
    For(String, X, usize),
    Let(String, X),
    Where(X),
}

#[derive(Clone, Debug, PartialEq)]
enum X {
    Flwor(Vec<Clause>, Box<X>),
    Quant {
        every: bool,
        binds: Vec<(String, X, usize)>,
        body: Box<X>,
    },
    If(Box<X>, Box<X>, Box<X>),
    Or(Box<X>, Box<X>),
    And(Box<X>, Box<X>),
    Cmp(Op, Box<X>, Box<X>, usize),
    Call(String, Vec<X>, usize),
    /// A path from the root (`//…` or `/…`), its steps.
    Root(Vec<Step>, usize),
    /// A path from a variable.
    VarPath(String, Vec<Step>, usize),
    Int(i64),
    Str(String, usize),
    Out(bool),
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    i: usize,
    depth: usize,
}

/// Parses the supported subset.
fn parse(src: &str) -> Result<X, XqError> {
    let mut p = Parser {
        toks: lex(src)?,
        i: 0,
        depth: 0,
    };
    let e = p.expr()?;
    match p.peek() {
        Tok::End => Ok(e),
        Tok::Comma => unsupported(p.off(), "sequence constructor `,` (several items)"),
        t => err(
            p.off(),
            format!("unexpected {} after the query", describe(t)),
        ),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.i).map_or(&Tok::End, |t| &t.0)
    }
    fn peek_at(&self, k: usize) -> &Tok {
        self.toks.get(self.i + k).map_or(&Tok::End, |t| &t.0)
    }
    fn off(&self) -> usize {
        self.toks.get(self.i).map_or(0, |t| t.1)
    }
    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() {
            self.i += 1;
        }
        t
    }
    fn is_kw(&self, k: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if n == k)
    }
    fn expect(&mut self, t: &Tok, what: &str) -> Result<(), XqError> {
        if self.peek() == t {
            self.bump();
            Ok(())
        } else {
            err(
                self.off(),
                format!("expected {what}, found {}", describe(self.peek())),
            )
        }
    }
    fn expect_kw(&mut self, k: &str) -> Result<(), XqError> {
        if self.is_kw(k) {
            self.bump();
            Ok(())
        } else {
            err(
                self.off(),
                format!("expected `{k}`, found {}", describe(self.peek())),
            )
        }
    }
    fn var(&mut self) -> Result<(String, usize), XqError> {
        let off = self.off();
        match self.bump() {
            Tok::Var(v) => Ok((v, off)),
            t => err(off, format!("expected a $variable, found {}", describe(&t))),
        }
    }

    fn enter(&mut self) -> Result<(), XqError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(self.off(), format!("nested deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<X, XqError> {
        self.enter()?;
        let r = self.expr_inner();
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self) -> Result<X, XqError> {
        let off = self.off();
        let next_is_var = matches!(self.peek_at(1), Tok::Var(_));
        match self.peek() {
            Tok::Name(n) if (n == "for" || n == "let") && next_is_var => self.flwor(),
            Tok::Name(n) if (n == "some" || n == "every") && next_is_var => {
                let every = n == "every";
                self.bump();
                let mut binds = Vec::new();
                loop {
                    let (v, voff) = self.var()?;
                    self.expect_kw("in")?;
                    let s = self.or()?;
                    binds.push((v, s, voff));
                    if self.peek() == &Tok::Comma {
                        self.bump();
                        continue;
                    }
                    break;
                }
                self.expect_kw("satisfies")?;
                let body = self.expr()?;
                Ok(X::Quant {
                    every,
                    binds,
                    body: Box::new(body),
                })
            }
            Tok::Name(n) if n == "if" && self.peek_at(1) == &Tok::LParen => {
                self.bump();
                self.bump();
                let c = self.expr()?;
                self.expect(&Tok::RParen, "`)` closing the if condition")?;
                self.expect_kw("then")?;
                let t = self.expr()?;
                self.expect_kw("else")?;
                let e = self.expr()?;
                Ok(X::If(Box::new(c), Box::new(t), Box::new(e)))
            }
            Tok::Name(n) if n == "if" => err(
                off,
                "expected `(` after `if` (XQuery writes if (condition) then … else …)",
            ),
            Tok::Name(n)
                if (n == "typeswitch" || n == "switch") && self.peek_at(1) == &Tok::LParen =>
            {
                unsupported(off, &format!("`{n}`"))
            }
            Tok::Name(n) if n == "declare" || n == "import" || n == "module" || n == "xquery" => {
                unsupported(off, &format!("prolog `{n}`"))
            }
            _ => self.or(),
        }
    }

    fn flwor(&mut self) -> Result<X, XqError> {
        let mut clauses = Vec::new();
        loop {
            let off = self.off();
            if self.is_kw("for") || self.is_kw("let") {
                let is_for = self.is_kw("for");
                self.bump();
                loop {
                    let (v, voff) = self.var()?;
                    if is_for {
                        if self.is_kw("at") {
                            return unsupported(self.off(), "positional variable `at`");
                        }
                        self.expect_kw("in")?;
                        let s = self.or_or_nested()?;
                        clauses.push(Clause::For(v, s, voff));
                    } else {
                        self.expect(&Tok::Assign, "`:=`")?;
                        let s = self.or_or_nested()?;
                        clauses.push(Clause::Let(v, s));
                    }
                    if self.peek() == &Tok::Comma {
                        self.bump();
                        // The seed writes `let $x := …, let $y := …`.
                        if matches!(self.peek(), Tok::Var(_)) {
                            continue;
                        }
                    }
                    break;
                }
                continue;
            }
            if self.is_kw("where") {
                self.bump();
                let w = self.expr()?;
                clauses.push(Clause::Where(w));
                continue;
            }
            if self.is_kw("order") || self.is_kw("stable") {
                return unsupported(off, "`order by`");
            }
            if self.is_kw("group") {
                return unsupported(off, "`group by`");
            }
            if self.is_kw("count") && matches!(self.peek_at(1), Tok::Var(_)) {
                return unsupported(off, "`count $v` clause");
            }
            if self.is_kw("window") || self.is_kw("tumbling") || self.is_kw("sliding") {
                return unsupported(off, "window clauses");
            }
            break;
        }
        self.expect_kw("return")?;
        let r = self.expr()?;
        Ok(X::Flwor(clauses, Box::new(r)))
    }

    /// A binding's expression: a nested FLWOR, quantifier or if is allowed too.
    fn or_or_nested(&mut self) -> Result<X, XqError> {
        let next_is_var = matches!(self.peek_at(1), Tok::Var(_));
        match self.peek() {
            Tok::Name(n)
                if ((n == "for" || n == "let" || n == "some" || n == "every") && next_is_var)
                    || (n == "if" && self.peek_at(1) == &Tok::LParen) =>
            {
                self.expr()
            }
            _ => self.or(),
        }
    }

    fn or(&mut self) -> Result<X, XqError> {
        let mut a = self.and()?;
        while self.is_kw("or") {
            self.bump();
            let b = self.and()?;
            a = X::Or(Box::new(a), Box::new(b));
        }
        Ok(a)
    }

    fn and(&mut self) -> Result<X, XqError> {
        let mut a = self.cmp()?;
        while self.is_kw("and") {
            self.bump();
            let b = self.cmp()?;
            a = X::And(Box::new(a), Box::new(b));
        }
        Ok(a)
    }

    fn cmp(&mut self) -> Result<X, XqError> {
        let a = self.primary()?;
        let off = self.off();
        let op = match self.peek() {
            Tok::Eq => Some(Op::Eq),
            Tok::Ne => Some(Op::Ne),
            Tok::Lt => Some(Op::Lt),
            Tok::Le => Some(Op::Le),
            Tok::Gt => Some(Op::Gt),
            Tok::Ge => Some(Op::Ge),
            Tok::Name(n) => match n.as_str() {
                "eq" => Some(Op::Eq),
                "ne" => Some(Op::Ne),
                "lt" => Some(Op::Lt),
                "le" => Some(Op::Le),
                "gt" => Some(Op::Gt),
                "ge" => Some(Op::Ge),
                "is" => return unsupported(off, "node comparison `is`"),
                "to" => return unsupported(off, "range `to`"),
                "div" | "idiv" | "mod" => return unsupported(off, &format!("arithmetic `{n}`")),
                "union" | "intersect" | "except" => return unsupported(off, &format!("`{n}`")),
                "instance" | "treat" | "castable" | "cast" => {
                    return unsupported(off, &format!("`{n}` (type expressions)"))
                }
                _ => None,
            },
            Tok::Other(w) => return unsupported(off, w),
            _ => None,
        };
        let Some(op) = op else { return Ok(a) };
        self.bump();
        let b = self.primary()?;
        if let Tok::Eq | Tok::Ne | Tok::Lt | Tok::Le | Tok::Gt | Tok::Ge = self.peek() {
            return err(self.off(), "comparisons do not chain (use `and`)");
        }
        Ok(X::Cmp(op, Box::new(a), Box::new(b), off))
    }

    fn primary(&mut self) -> Result<X, XqError> {
        self.enter()?;
        let r = self.primary_inner();
        self.depth -= 1;
        r
    }

    fn primary_inner(&mut self) -> Result<X, XqError> {
        let off = self.off();
        match self.peek().clone() {
            Tok::LParen => {
                self.bump();
                if self.peek() == &Tok::RParen {
                    return unsupported(off, "empty sequence `()`");
                }
                let e = self.expr()?;
                if self.peek() == &Tok::Comma {
                    return unsupported(self.off(), "sequence constructor `,` (several items)");
                }
                self.expect(&Tok::RParen, "`)`")?;
                Ok(e)
            }
            Tok::Int(n) => {
                self.bump();
                Ok(X::Int(n))
            }
            Tok::Str(s) => {
                self.bump();
                Ok(X::Str(s, off))
            }
            Tok::Var(v) => {
                self.bump();
                let steps = self.steps()?;
                Ok(X::VarPath(v, steps, off))
            }
            Tok::SlashSlash | Tok::Slash => {
                let steps = self.steps()?;
                Ok(X::Root(steps, off))
            }
            Tok::Lt => self.constructor(),
            Tok::Name(n) if self.peek_at(1) == &Tok::LParen => {
                self.bump();
                self.bump();
                let mut args = Vec::new();
                if self.peek() != &Tok::RParen {
                    loop {
                        args.push(self.expr()?);
                        if self.peek() == &Tok::Comma {
                            self.bump();
                            continue;
                        }
                        break;
                    }
                }
                self.expect(&Tok::RParen, "`)` closing the arguments")?;
                let name = n.strip_prefix("fn:").unwrap_or(&n).to_string();
                if matches!(name.as_str(), "doc" | "collection" | "doc-available") {
                    return unsupported(
                        off,
                        &format!("function `{name}()` (the history is the only document)"),
                    );
                }
                Ok(X::Call(name, args, off))
            }
            Tok::Name(n) if n == "element" || n == "attribute" || n == "text" || n == "document" => {
                unsupported(off, &format!("computed constructor `{n}`"))
            }
            Tok::Name(n) => err(
                off,
                format!(
                    "`{n}` is not supported here: paths start with // or /, variables with $ ({SUPPORTED})"
                ),
            ),
            Tok::Other(w) => unsupported(off, w),
            t => err(
                off,
                format!("expected a value, a path or a condition, found {}", describe(&t)),
            ),
        }
    }

    /// `<out>true</out>` or `<out>false</out>`.
    fn constructor(&mut self) -> Result<X, XqError> {
        let off = self.off();
        self.bump();
        let name = match self.bump() {
            Tok::Name(n) => n,
            t => {
                return err(
                    off,
                    format!("expected an element name after `<`, found {}", describe(&t)),
                )
            }
        };
        if name != "out" {
            return unsupported(
                off,
                &format!(
                    "element constructor <{name}> (only <out>true</out> and <out>false</out>)"
                ),
            );
        }
        self.expect(
            &Tok::Gt,
            "`>` (only <out>true</out> and <out>false</out> are supported)",
        )?;
        let voff = self.off();
        let v = match self.bump() {
            Tok::Name(n) if n == "true" => true,
            Tok::Name(n) if n == "false" => false,
            _ => {
                return unsupported(
                    voff,
                    "element content other than true or false (only <out>true</out> and <out>false</out>)",
                )
            }
        };
        self.expect(&Tok::Lt, "`</out>`")?;
        self.expect(&Tok::Slash, "`</out>`")?;
        match self.bump() {
            Tok::Name(n) if n == "out" => {}
            _ => return err(voff, "expected `</out>`"),
        }
        self.expect(&Tok::Gt, "`>` of `</out>`")?;
        Ok(X::Out(v))
    }

    /// `/Name[pred]…` steps (possibly none, after a variable). `//` only at the start.
    fn steps(&mut self) -> Result<Vec<Step>, XqError> {
        let mut steps = Vec::new();
        loop {
            let off = self.off();
            match self.peek() {
                Tok::Slash => {
                    self.bump();
                }
                Tok::SlashSlash if steps.is_empty() => {
                    self.bump();
                    steps.push(Step {
                        name: "//".into(),
                        preds: Vec::new(),
                        offset: off,
                    });
                }
                Tok::SlashSlash => return unsupported(off, "`//` inside a path"),
                _ => return Ok(steps),
            }
            let noff = self.off();
            let name = match self.bump() {
                Tok::Name(n) if n.contains("::") || n.contains(':') => {
                    return unsupported(noff, &format!("axis or prefixed name `{n}`"))
                }
                Tok::Name(n) => n,
                Tok::At => return unsupported(noff, "attribute step `@…` outside a predicate"),
                t => {
                    return err(
                        noff,
                        format!("expected a name after `/`, found {}", describe(&t)),
                    )
                }
            };
            if self.peek() == &Tok::LParen {
                return unsupported(noff, &format!("function `{name}()` in a path"));
            }
            let mut preds = Vec::new();
            while self.peek() == &Tok::LBracket {
                let poff = self.off();
                self.bump();
                match (
                    self.peek().clone(),
                    self.peek_at(1).clone(),
                    self.peek_at(2).clone(),
                ) {
                    (Tok::Name(n), Tok::LParen, Tok::RParen) if n == "last" || n == "fn:last" => {
                        self.bump();
                        self.bump();
                        self.bump();
                        preds.push(Pred::Last);
                    }
                    (Tok::At, Tok::Name(a), Tok::Eq) if a == "name" => {
                        self.bump();
                        self.bump();
                        self.bump();
                        match self.bump() {
                            Tok::Str(s) => preds.push(Pred::Name(s)),
                            _ => return err(poff, "expected [@name=\"event\"]"),
                        }
                    }
                    _ => {
                        return unsupported(
                            poff,
                            "predicate (only [last()] and [@name=\"E\"] are supported)",
                        )
                    }
                }
                self.expect(&Tok::RBracket, "`]`")?;
            }
            steps.push(Step {
                name,
                preds,
                offset: noff,
            });
        }
    }
}

// ---------------------------------------------------------------- translation

/// A formula in the logic language, with its binding strength: 0 a quantifier (its body
/// extends to the right), 1 `or`, 2 `and`, 3 an atom.
#[derive(Clone, Debug)]
struct Fo {
    text: String,
    prec: u8,
    /// A constant (for simplification).
    konst: Option<bool>,
    /// For a comparison: its negation (`a == b` → `a != b`).
    neg: Option<String>,
}

impl Fo {
    fn new(text: String, prec: u8) -> Fo {
        Fo {
            text,
            prec,
            konst: None,
            neg: None,
        }
    }
    fn atom(text: String) -> Fo {
        Fo::new(text, 3)
    }
    fn cmp(text: String, neg: String) -> Fo {
        Fo {
            neg: Some(neg),
            ..Fo::atom(text)
        }
    }
    fn konst(b: bool) -> Fo {
        Fo {
            konst: Some(b),
            ..Fo::atom(b.to_string())
        }
    }
    fn wrap(&self, min: u8) -> String {
        if self.prec < min {
            format!("({})", self.text)
        } else {
            self.text.clone()
        }
    }
    fn and(a: Fo, b: Fo) -> Fo {
        match (a.konst, b.konst) {
            (Some(false), _) | (_, Some(false)) => Fo::konst(false),
            (Some(true), _) => b,
            (_, Some(true)) => a,
            _ => Fo::new(format!("{} and {}", a.wrap(2), b.wrap(2)), 2),
        }
    }
    fn or(a: Fo, b: Fo) -> Fo {
        match (a.konst, b.konst) {
            (Some(true), _) | (_, Some(true)) => Fo::konst(true),
            (Some(false), _) => b,
            (_, Some(false)) => a,
            _ => Fo::new(format!("{} or {}", a.wrap(1), b.wrap(1)), 1),
        }
    }
    fn not(a: Fo) -> Fo {
        if let Some(k) = a.konst {
            return Fo::konst(!k);
        }
        if let Some(n) = a.neg {
            return Fo::cmp(n, a.text);
        }
        if let Some(inner) = a.text.strip_prefix("not ") {
            if a.prec == 3 || a.prec == 0 {
                // `not not P`: both dropped (P is one atom or quantifier).
                return Fo::new(inner.to_string(), a.prec);
            }
        }
        match a.prec {
            0 => Fo::new(format!("not {}", a.text), 0),
            3 => Fo::atom(format!("not {}", a.text)),
            _ => Fo::atom(format!("not ({})", a.text)),
        }
    }
    fn implies(a: Fo, b: Fo) -> Fo {
        Fo::or(Fo::not(a), b)
    }
    fn quant(all: bool, var: &str, set: &str, body: Option<Fo>) -> Fo {
        let q = if all { "forall" } else { "exists" };
        match body {
            // `forall x in S : true` is true, `exists x in S : false` false.
            Some(b) if b.konst == Some(all) => Fo::konst(all),
            Some(b) if b.konst == Some(true) => Fo::new(format!("{q} {var} in {set}"), 0),
            Some(b) => Fo::new(format!("{q} {var} in {set} : {}", b.text), 0),
            None => Fo::new(format!("{q} {var} in {set}"), 0),
        }
    }
}

/// A translated sub-expression.
#[derive(Clone, Debug)]
enum Val {
    /// A condition.
    Bool(Fo),
    /// `<out>` items: holds iff none is false.
    Out(Fo),
    /// One value: a term of the logic language.
    Scalar(String),
    /// `node.children` / `node.neighbours`.
    NodeSet(&'static str),
    /// The history of a basic event.
    Events(String),
    /// The values of one attribute over a basic event's history.
    Attrs(String, String),
    /// A variable bound to one event: the logic variable and the event's name.
    Event(String, String),
    /// `count(S)`: only compared with an integer.
    Count(Box<Val>),
}

struct Tr<'a> {
    events: &'a dyn Events,
    /// In scope: XQuery variable → value.
    env: Vec<(String, Val)>,
    /// Names used by the logic formula (to keep fresh names fresh).
    used: Vec<String>,
}

impl Tr<'_> {
    fn fresh(&mut self, base: &str) -> String {
        let mut n = base.to_string();
        let mut k = 2;
        while self.used.iter().any(|u| u == &n) || RESERVED.contains(&n.as_str()) {
            n = format!("{base}{k}");
            k += 1;
        }
        self.used.push(n.clone());
        n
    }

    /// A logic variable for XQuery variable `v` (its own name when free).
    fn logic_var(&mut self, v: &str) -> String {
        let base: String = v
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = if base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            base
        } else {
            format!("v{base}")
        };
        self.fresh(&base)
    }

    fn lookup(&self, v: &str, off: usize) -> Result<Val, XqError> {
        match self.env.iter().rev().find(|(n, _)| n == v) {
            Some((_, val)) => Ok(val.clone()),
            None => err(
                off,
                format!("unknown variable `${v}` (bind it with let, for, some or every)"),
            ),
        }
    }

    fn truth(&mut self, v: Val, off: usize) -> Result<Fo, XqError> {
        Ok(match v {
            Val::Bool(f) | Val::Out(f) => f,
            Val::NodeSet(s) => {
                let x = self.fresh("x");
                Fo::quant(false, &x, s, None)
            }
            Val::Events(e) | Val::Attrs(e, _) => {
                let x = self.fresh("x");
                Fo::quant(false, &x, &e, None)
            }
            Val::Event(..) => Fo::konst(true),
            Val::Count(_) => return err(off, "count(…) must be compared with an integer"),
            Val::Scalar(t) => {
                return err(
                    off,
                    format!(
                        "`{t}` is a value where a condition is expected (compare it, e.g. `… = 1`)"
                    ),
                )
            }
        })
    }

    fn tr(&mut self, x: &X) -> Result<Val, XqError> {
        let v = self.tr_inner(x)?;
        let size = match &v {
            Val::Bool(f) | Val::Out(f) => f.text.len(),
            _ => 0,
        };
        if size > MAX_TEXT {
            return err(
                offset_of(x),
                format!("the translation is longer than {MAX_TEXT} bytes"),
            );
        }
        Ok(v)
    }

    fn tr_inner(&mut self, x: &X) -> Result<Val, XqError> {
        match x {
            X::Int(n) => Ok(Val::Scalar(n.to_string())),
            X::Str(s, off) => match super::message::Addr::parse(s) {
                Some(_) if s.contains(',') => Ok(Val::Scalar(format!("\"{}\"", s.trim()))),
                Some(a) => Ok(Val::Scalar(a.0.to_string())),
                None => err(*off, format!("string \"{s}\" is not an address (N or x,y); other strings are not supported")),
            },
            X::Out(b) => Ok(Val::Out(Fo::konst(*b))),
            X::And(a, b) => {
                let (fa, fb) = (self.cond(a)?, self.cond(b)?);
                Ok(Val::Bool(Fo::and(fa, fb)))
            }
            X::Or(a, b) => {
                let (fa, fb) = (self.cond(a)?, self.cond(b)?);
                Ok(Val::Bool(Fo::or(fa, fb)))
            }
            X::If(c, t, e) => {
                let c = self.cond(c)?;
                let (vt, ve) = (self.tr(t)?, self.tr(e)?);
                let out = matches!(vt, Val::Out(_)) || matches!(ve, Val::Out(_));
                let ft = self.truth(vt, offset_of(t))?;
                let fe = self.truth(ve, offset_of(e))?;
                let f = match (ft.konst, fe.konst) {
                    (Some(true), Some(false)) => c,
                    (Some(false), Some(true)) => Fo::not(c),
                    (Some(a), Some(b)) if a == b => Fo::konst(a),
                    _ => Fo::or(Fo::and(c.clone(), ft), Fo::and(Fo::not(c), fe)),
                };
                Ok(if out { Val::Out(f) } else { Val::Bool(f) })
            }
            X::Cmp(op, a, b, off) => {
                let (va, vb) = (self.tr(a)?, self.tr(b)?);
                self.compare(*op, va, vb, *off).map(Val::Bool)
            }
            X::Quant { every, binds, body } => {
                let mut pushed = 0;
                let mut quants = Vec::new();
                for (v, s, voff) in binds {
                    let set = self.tr(s)?;
                    quants.push(self.bind(v, set, *voff)?);
                    pushed += 1;
                }
                let b = self.cond(body);
                self.env.truncate(self.env.len() - pushed);
                let mut f = b?;
                for (var, set) in quants.into_iter().rev() {
                    f = Fo::quant(*every, &var, &set, Some(f));
                }
                Ok(Val::Bool(f))
            }
            X::Flwor(clauses, ret) => self.flwor(clauses, ret, false),
            X::Call(name, args, off) => self.call(name, args, *off),
            X::Root(steps, off) => self.root_path(steps, *off),
            X::VarPath(v, steps, off) => {
                let val = self.lookup(v, *off)?;
                if steps.is_empty() {
                    return Ok(val);
                }
                match val {
                    Val::Event(logic, e) => {
                        let attr = self.attr_path(&self.events.basic(&e), steps, *off)?;
                        match attr {
                            Some(a) => Ok(Val::Scalar(format!("{logic}.{a}"))),
                            None => Ok(Val::Event(logic, e)),
                        }
                    }
                    Val::Events(e) => match self.attr_path(&self.events.basic(&e), steps, *off)? {
                        Some(a) => Ok(Val::Attrs(e, a)),
                        None => Ok(Val::Events(e)),
                    },
                    _ => unsupported(
                        steps.first().map_or(*off, |s| s.offset),
                        &format!("path below `${v}` (only below an event: $m/Message/Attribute)"),
                    ),
                }
            }
        }
    }

    fn cond(&mut self, x: &X) -> Result<Fo, XqError> {
        let v = self.tr(x)?;
        self.truth(v, offset_of(x))
    }

    /// Binds XQuery variable `v` to the items of `set`; returns the logic quantifier's variable
    /// and set.
    fn bind(&mut self, v: &str, set: Val, off: usize) -> Result<(String, String), XqError> {
        match set {
            Val::NodeSet(s) => {
                let var = self.logic_var(v);
                self.env.push((v.to_string(), Val::Scalar(var.clone())));
                Ok((var, s.to_string()))
            }
            Val::Events(e) => {
                let var = self.logic_var(v);
                self.env.push((v.to_string(), Val::Event(var.clone(), e.clone())));
                Ok((var, e))
            }
            Val::Attrs(e, a) => {
                let var = self.logic_var(v);
                self.env.push((v.to_string(), Val::Scalar(format!("{var}.{a}"))));
                Ok((var, e))
            }
            _ => err(
                off,
                format!("`${v}` must range over a path (node children or neighbours, or an event's history)"),
            ),
        }
    }

    /// `in_for`: a `for` clause of this FLWOR is in scope (its items are read as `forall`).
    fn flwor(&mut self, clauses: &[Clause], ret: &X, in_for: bool) -> Result<Val, XqError> {
        let Some((first, rest)) = clauses.split_first() else {
            return self.tr(ret);
        };
        match first {
            Clause::Let(v, e) => {
                let val = self.tr(e)?;
                self.env.push((v.clone(), val));
                let r = self.flwor(rest, ret, in_for);
                self.env.pop();
                r
            }
            Clause::Where(w) => {
                let c = self.cond(w)?;
                let r = self.flwor(rest, ret, in_for)?;
                Ok(match r {
                    // A filtered-out item outputs nothing: it cannot be false.
                    Val::Out(f) => Val::Out(Fo::implies(c, f)),
                    other if in_for => {
                        Val::Bool(Fo::implies(c, self.truth(other, offset_of(ret))?))
                    }
                    // No `for`: the whole result is there or not.
                    other => Val::Bool(Fo::and(c, self.truth(other, offset_of(ret))?)),
                })
            }
            Clause::For(v, s, off) => {
                let set = self.tr(s)?;
                let (var, setname) = self.bind(v, set, *off)?;
                let r = self.flwor(rest, ret, true);
                self.env.pop();
                let body = match r? {
                    Val::Bool(f) | Val::Out(f) => f,
                    Val::Scalar(t) => {
                        return err(
                            offset_of(ret),
                            format!("`for … return` must return a condition or <out>true</out>/<out>false</out>, not the value `{t}`"),
                        )
                    }
                    _ => {
                        return err(
                            offset_of(ret),
                            "`for … return` must return a condition or <out>true</out>/<out>false</out>, not a sequence",
                        )
                    }
                };
                Ok(Val::Out(Fo::quant(true, &var, &setname, Some(body))))
            }
        }
    }

    fn call(&mut self, name: &str, args: &[X], off: usize) -> Result<Val, XqError> {
        let arity = |n: usize| -> Result<(), XqError> {
            if args.len() == n {
                Ok(())
            } else {
                err(
                    off,
                    format!("{name}() takes {n} argument(s), found {}", args.len()),
                )
            }
        };
        match name {
            "true" | "false" => {
                arity(0)?;
                Ok(Val::Bool(Fo::konst(name == "true")))
            }
            "not" | "boolean" => {
                arity(1)?;
                let f = self.cond(&args[0])?;
                Ok(Val::Bool(if name == "not" { Fo::not(f) } else { f }))
            }
            "exists" | "empty" => {
                arity(1)?;
                let v = self.tr(&args[0])?;
                let f = match v {
                    Val::Scalar(_) | Val::Event(..) => Fo::konst(true),
                    Val::Bool(_) | Val::Out(_) => Fo::konst(true),
                    other => self.truth(other, off)?,
                };
                Ok(Val::Bool(if name == "empty" { Fo::not(f) } else { f }))
            }
            "count" => {
                arity(1)?;
                // Only compared with a number: see `compare`.
                let v = self.tr(&args[0])?;
                match v {
                    Val::NodeSet(_) | Val::Events(_) | Val::Attrs(..) => Ok(Val::Count(Box::new(v))),
                    _ => err(off, "count() of something other than a path over //Node or //Event"),
                }
            }
            "last" | "position" => unsupported(off, &format!("`{name}()` outside a path predicate")),
            "doc" | "collection" | "doc-available" => {
                unsupported(off, &format!("function `{name}()` (the history is the only document)"))
            }
            other => unsupported(
                off,
                &format!("function `{other}()` (functions: count, exists, empty, not, true, false, boolean)"),
            ),
        }
    }

    /// A general comparison (existential over sequences).
    fn compare(&mut self, op: Op, a: Val, b: Val, off: usize) -> Result<Fo, XqError> {
        // count(S) op N
        match (&a, &b) {
            (Val::Count(set), other) | (other, Val::Count(set)) => {
                let Some(n) = int_of(other) else {
                    return err(off, "count(…) can only be compared with an integer literal");
                };
                let op = if matches!(a, Val::Count(_)) {
                    op
                } else {
                    op.flip()
                };
                return self.count_cmp(set, op, n, off);
            }
            _ => {}
        }
        let (qa, ta) = self.items(a, off)?;
        let (qb, tb) = self.items(b, off)?;
        let mut f = Fo::cmp(
            format!("{ta} {} {tb}", op.text()),
            format!("{ta} {} {tb}", op.negate().text()),
        );
        for (var, set) in qb.into_iter().rev().chain(qa.into_iter().rev()) {
            f = Fo::quant(false, &var, &set, Some(f));
        }
        Ok(f)
    }

    /// The items of a value for a comparison: quantifiers to open, and the term.
    fn items(&mut self, v: Val, off: usize) -> Result<(Vec<(String, String)>, String), XqError> {
        match v {
            Val::Scalar(t) => Ok((Vec::new(), t)),
            Val::NodeSet(s) => {
                let x = self.fresh("a");
                Ok((vec![(x.clone(), s.to_string())], x))
            }
            Val::Attrs(e, a) => {
                let m = self.fresh("m");
                Ok((vec![(m.clone(), e)], format!("{m}.{a}")))
            }
            Val::Events(_) | Val::Event(..) => err(
                off,
                "whole events cannot be compared: compare an attribute (…/Message/SourceAddress)",
            ),
            Val::Bool(_) | Val::Out(_) => err(off, "conditions cannot be compared"),
            Val::Count(_) => err(off, "count(…) can only be compared with an integer literal"),
        }
    }

    /// `count(S) op n` as quantifiers.
    fn count_cmp(&mut self, set: &Val, op: Op, n: i64, off: usize) -> Result<Fo, XqError> {
        let at_least = |tr: &mut Tr<'_>, k: i64| tr.at_least(set, k, off);
        Ok(match op {
            Op::Ge => at_least(self, n)?,
            Op::Gt => at_least(self, n.saturating_add(1))?,
            Op::Lt => Fo::not(at_least(self, n)?),
            Op::Le => Fo::not(at_least(self, n.saturating_add(1))?),
            Op::Eq => Fo::and(
                at_least(self, n)?,
                Fo::not(at_least(self, n.saturating_add(1))?),
            ),
            Op::Ne => Fo::not(Fo::and(
                at_least(self, n)?,
                Fo::not(at_least(self, n.saturating_add(1))?),
            )),
        })
    }

    fn at_least(&mut self, set: &Val, k: i64, off: usize) -> Result<Fo, XqError> {
        if k <= 0 {
            return Ok(Fo::konst(true));
        }
        let (name, node) = match set {
            Val::NodeSet(s) => (s.to_string(), true),
            Val::Events(e) | Val::Attrs(e, _) => (e.clone(), false),
            _ => return err(off, "count() of something other than a path"),
        };
        if k == 1 {
            let x = self.fresh("x");
            return Ok(Fo::quant(false, &x, &name, None));
        }
        if !node {
            return err(
                off,
                format!("count(…) of an event history compared with {k}: events cannot be told apart in the first-order language (only 0 and 1 can be translated)"),
            );
        }
        if k > 6 {
            return err(
                off,
                format!("count(…) of a node set compared with {k}: at most 6 can be translated"),
            );
        }
        // k distinct members: exists a1 : exists a2 : a2 != a1 and exists a3 : …
        let vars: Vec<String> = (0..k).map(|_| self.fresh("n")).collect();
        let mut f: Option<Fo> = None;
        for (i, v) in vars.iter().enumerate().rev() {
            let distinct = (0..i)
                .map(|j| Fo::atom(format!("{v} != {}", vars[j])))
                .fold(Fo::konst(true), Fo::and);
            let body = match f.take() {
                Some(inner) => Fo::and(distinct, inner),
                None => distinct,
            };
            let body = if body.konst == Some(true) {
                None
            } else {
                Some(body)
            };
            f = Some(Fo::quant(false, v, &name, body));
        }
        Ok(f.unwrap_or(Fo::konst(true)))
    }

    /// A path from the root.
    fn root_path(&mut self, steps: &[Step], off: usize) -> Result<Val, XqError> {
        let mut s: &[Step] = steps;
        // `//`, `/HistoryOfEvents/`, `/HistoryOfEvents//`, `//HistoryOfEvents/`.
        let mut rooted = false;
        if s.first().is_some_and(|x| x.name == "//") {
            s = &s[1..];
            rooted = true;
        }
        if s.first()
            .is_some_and(|x| x.name == "HistoryOfEvents" && x.preds.is_empty())
        {
            s = &s[1..];
            rooted = true;
            if s.first().is_some_and(|x| x.name == "//") {
                s = &s[1..];
            }
        }
        let bad = || {
            unsupported(
                off,
                "path (supported: //Node[last()]/Children/LogicalAddress, …/Neighbours/LogicalAddress, …/LogicalAddress, …/Parent/LogicalAddress, //Event[@name=\"E\"][/Message[/Attribute]], //Event[@name=\"E\"]/Timer/TimerIdentifier)",
            )
        };
        if !rooted {
            return bad();
        }
        let Some((head, rest)) = s.split_first() else {
            return bad();
        };
        match head.name.as_str() {
            "Node" => {
                if head.preds != [Pred::Last] {
                    return unsupported(
                        head.offset,
                        "//Node without [last()] (the node information is the last one)",
                    );
                }
                let names: Vec<&str> = rest.iter().map(|x| x.name.as_str()).collect();
                if rest.iter().any(|x| !x.preds.is_empty()) {
                    return bad();
                }
                match names.as_slice() {
                    ["Children"] | ["Children", "LogicalAddress"] => {
                        Ok(Val::NodeSet("node.children"))
                    }
                    ["Neighbours" | "Neighbors"]
                    | ["Neighbours" | "Neighbors", "LogicalAddress"] => {
                        Ok(Val::NodeSet("node.neighbours"))
                    }
                    ["LogicalAddress"] | ["Address"] => Ok(Val::Scalar("node.address".into())),
                    ["Parent"] | ["Parent", "LogicalAddress"] => {
                        Ok(Val::Scalar("node.parent".into()))
                    }
                    _ => bad(),
                }
            }
            "Event" => {
                let [Pred::Name(e)] = head.preds.as_slice() else {
                    return unsupported(head.offset, "//Event without exactly one [@name=\"E\"]");
                };
                let kind = self.events.basic(e);
                if kind.is_none() {
                    return err(
                        head.offset,
                        format!(
                            "unknown event `{e}` in //Event[@name=…] (expected a basic event: {})",
                            self.events.names()
                        ),
                    );
                }
                match self.attr_path(&kind, rest, off)? {
                    Some(a) => Ok(Val::Attrs(e.clone(), a)),
                    None => Ok(Val::Events(e.clone())),
                }
            }
            _ => bad(),
        }
    }

    /// `/Message[/Attr]` or `/Timer/TimerIdentifier` below an event: the attribute's name in
    /// the logic language, or `None` for the event itself.
    fn attr_path(
        &self,
        kind: &Option<bool>,
        steps: &[Step],
        off: usize,
    ) -> Result<Option<String>, XqError> {
        if steps.iter().any(|x| !x.preds.is_empty()) {
            return unsupported(off, "predicate below an event");
        }
        let names: Vec<&str> = steps.iter().map(|x| x.name.as_str()).collect();
        let timer = *kind == Some(true);
        match names.as_slice() {
            [] | ["Message"] if !timer => Ok(None),
            [] | ["Timer"] if timer => Ok(None),
            ["Message", a] if !timer => match Attr::from_name(a) {
                Some(at) => Ok(Some(at.name().to_string())),
                None => err(
                    steps[1].offset,
                    format!(
                        "unknown message attribute `{a}` (expected one of: {})",
                        attr_names()
                    ),
                ),
            },
            ["Timer", "TimerIdentifier"] if timer => Ok(Some("timer".into())),
            _ => unsupported(
                steps.first().map_or(off, |s| s.offset),
                if timer {
                    "path below a timer event (only /Timer/TimerIdentifier)"
                } else {
                    "path below a message event (only /Message/Attribute)"
                },
            ),
        }
    }
}

/// Names the logic language reserves.
const RESERVED: &[&str] = &[
    "exists", "forall", "in", "within", "not", "and", "or", "implies", "true", "false", "node",
];

fn attr_names() -> String {
    Attr::ALL
        .iter()
        .map(|a| a.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn int_of(v: &Val) -> Option<i64> {
    match v {
        Val::Scalar(t) => t.parse().ok(),
        _ => None,
    }
}

fn offset_of(x: &X) -> usize {
    match x {
        X::Cmp(_, _, _, o)
        | X::Call(_, _, o)
        | X::Root(_, o)
        | X::VarPath(_, _, o)
        | X::Str(_, o) => *o,
        X::Flwor(cs, r) => cs
            .iter()
            .find_map(|c| match c {
                Clause::For(_, _, o) => Some(*o),
                _ => None,
            })
            .unwrap_or_else(|| offset_of(r)),
        X::Quant { binds, .. } => binds.first().map_or(0, |b| b.2),
        X::If(c, _, _) | X::Or(c, _) | X::And(c, _) => offset_of(c),
        X::Int(_) | X::Out(_) => 0,
    }
}

/// Translates an XQuery composite-event expression into the logic language
/// ([`logic`](super::logic) syntax), e.g. the seed's §5.1.2.2 listing into
/// `forall i in node.children : exists m in h2hackmessage : i == m.SourceAddress`.
///
/// # Errors
/// The first unsupported construct or translation error, with its byte offset in `src`.
pub fn translate(src: &str, events: &dyn Events) -> Result<String, XqError> {
    let x = parse(src)?;
    let mut tr = Tr {
        events,
        env: Vec::new(),
        used: Vec::new(),
    };
    let v = tr.tr(&x)?;
    let f = tr.truth(v, offset_of(&x))?;
    Ok(f.text)
}

/// Only parses (the fuzz target's entry): whether `src` is in the supported subset's syntax.
///
/// # Errors
/// The first syntax error or unsupported construct.
pub fn check_syntax(src: &str) -> Result<(), XqError> {
    parse(src).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Ev;
    impl Events for Ev {
        fn basic(&self, name: &str) -> Option<bool> {
            match name {
                "ack" | "h2hackmessage" | "payload" => Some(false),
                "tick" => Some(true),
                _ => None,
            }
        }
        fn names(&self) -> String {
            "ack, h2hackmessage, payload, tick".into()
        }
    }

    fn t(src: &str) -> String {
        translate(src, &Ev).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    fn e(src: &str) -> XqError {
        translate(src, &Ev).unwrap_err()
    }

    #[test]
    fn the_seed_listing_becomes_forall_exists() {
        let src = r#"let $x := //Node[last()]/Children/LogicalAddress,
let $y := //Event[@name="h2hackmessage"]/Message/SourceAddress return
for $i in $x return
if ($i = $y) then <out>true</out> else <out>false</out>"#;
        assert_eq!(
            t(src),
            "forall i in node.children : exists m in h2hackmessage : i == m.SourceAddress"
        );
        // The seed's text with its entities, as printed (pasted into CDATA).
        let printed = src
            .replace("<out>true</out>", "<out&gt;true&lt;/out&gt;")
            .replace("<out>false</out>", "&lt;out&gt;false&lt;/out&gt;");
        assert_eq!(t(&printed), t(src));
    }

    #[test]
    fn constructs() {
        assert_eq!(
            t(
                r#"some $d in //Node[last()]/Neighbours/LogicalAddress satisfies $d = //Event[@name="ack"]/Message/SourceAddress"#
            ),
            "exists d in node.neighbours : exists m in ack : d == m.SourceAddress"
        );
        assert_eq!(
            t(r#"every $m in //Event[@name="ack"] satisfies $m/Message/SequenceNumber > 3"#),
            "forall m in ack : m.SequenceNumber > 3"
        );
        assert_eq!(
            t(r#"count(//Event[@name="ack"]) = 0"#),
            "not exists x in ack"
        );
        assert_eq!(t(r#"count(//Event[@name="ack"]) ge 1"#), "exists x in ack");
        assert_eq!(
            t("count(//Node[last()]/Children/LogicalAddress) >= 2"),
            "exists n in node.children : exists n2 in node.children : n2 != n"
        );
        assert_eq!(
            t("empty(//Node[last()]/Children)"),
            "not exists x in node.children"
        );
        assert_eq!(
            t(
                r#"for $c in //Node[last()]/Children/LogicalAddress where $c != 4 return $c = //Event[@name="ack"]/Message/SourceAddress"#
            ),
            "forall c in node.children : c == 4 or (exists m in ack : c == m.SourceAddress)"
        );
        assert_eq!(
            t(
                r#"//Node[last()]/Parent/LogicalAddress = "100,100" and not(//Event[@name="tick"]/Timer/TimerIdentifier = 3)"#
            ),
            "node.parent == \"100,100\" and (not exists m in tick : m.timer == 3)"
        );
        assert_eq!(
            t(
                r#"if (exists(//Event[@name="payload"])) then count(//Event[@name="ack"]) > 0 else false()"#
            ),
            "(exists x in payload) and (exists x2 in ack)"
        );
    }

    #[test]
    fn refusals_name_the_construct() {
        let cases: &[(&str, &str, usize)] = &[
            (
                "for $x in //Node[last()]/Children order by $x return true()",
                "`order by`",
                34,
            ),
            (
                "for $x at $i in //Node[last()]/Children return true()",
                "positional variable `at`",
                7,
            ),
            (
                r#"for $x in doc("nodes.xml")/NodeA/NodeB/NodeC return if $x=100 then <out>true</out> else <out>false</out>"#,
                "function `doc()`",
                10,
            ),
            ("count(//Node[last()]/Children) + 1 = 2", "arithmetic", 31),
            ("<result>true</result>", "element constructor <result>", 0),
            ("string-length(\"x\") = 1", "function `string-length()`", 0),
            ("//Node[last()]/Children[1] = 2", "predicate", 23),
            ("(1, 2) = 1", "sequence constructor", 2),
            (
                r#"count(//Event[@name="ack"]) >= 2"#,
                "events cannot be told apart",
                28,
            ),
        ];
        for (src, what, off) in cases {
            let x = e(src);
            assert!(x.message.contains(what), "{src}: {x}");
            assert_eq!(x.offset, *off, "{src}: {x}");
        }
        assert!(e(r#"//Event[@name="nope"] = 1"#)
            .message
            .contains("unknown event `nope`"));
        assert!(e("//Node[last()]/LogicalAddress")
            .message
            .contains("value where a condition"));
    }

    #[test]
    fn no_panic_on_junk() {
        for src in [
            "",
            "(",
            "((((",
            "for",
            "for $",
            "let $x :=",
            "<out>",
            "<out>true</out",
            "&",
            "$",
            "'",
            "(:",
            "if (",
            "1 = = 2",
            "//",
            "/",
            "$x/",
            "some $x in",
        ] {
            let _ = translate(src, &Ev);
        }
        let deep = "(".repeat(10_000);
        assert!(translate(&deep, &Ev)
            .unwrap_err()
            .message
            .contains("nested deeper"));
    }
}

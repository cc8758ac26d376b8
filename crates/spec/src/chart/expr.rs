//! viastack's datamodel expression language (used by `cond`, `expr`, `location`, …).
//!
//! A small, ECMAScript-flavoured, side-effect-free language; the grammar (EBNF) is in
//! `docs/spec-format.md`:
//!
//! ```text
//! expr    = or ;
//! or      = and { ("||" | "or") and } ;
//! and     = cmp { ("&&" | "and") cmp } ;
//! cmp     = add [ ("==" | "!=" | "===" | "!==" | "<" | "<=" | ">" | ">=") add ] ;
//! add     = mul { ("+" | "-") mul } ;
//! mul     = unary { ("*" | "/" | "%") unary } ;
//! unary   = ("!" | "not" | "-") unary | postfix ;
//! postfix = primary { "." ident | "[" expr "]" } ;
//! primary = number | string | "true" | "false" | "null" | ident | ident "(" [ expr { "," expr } ] ")"
//!         | "(" expr ")" | "[" [ expr { "," expr } ] "]" | "{" [ key ":" expr { "," key ":" expr } ] "}" ;
//! ```
//!
//! Identifiers are variables, resolved to slots when the chart is compiled (no string lookup
//! at run time); `_event`, `_sessionid`, `_name` and `_ioprocessors` are the system variables.
//! Functions: `In('state')` (resolved to a state index at compile time), `isBound(x)`,
//! `len(x)`, `str(x)`, `num(x)`, `typeof(x)`, `contains(list_or_map_or_string, x)`,
//! `startsWith(string, prefix)`; `isBound` also takes a system variable (`isBound(_event)`).
//!
//! `<script>` holds statements ([`parse_script`]): `var x = e`, `loc = e`, `loc += e`, …
//!
//! Types are strict: `!`, `&&`, `||` and conditions need booleans, arithmetic needs numbers
//! (`+` also concatenates when either side is a string); a type error, an unknown member, an
//! index out of range, or reading an undeclared variable is a run-time error that the engine
//! turns into `error.execution`. A syntax error is found when the chart is compiled and
//! reported with its position.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::value::Value;

/// Longest expression text accepted (bytes).
pub const MAX_LEN: usize = 16 * 1024;
/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 64;
/// Longest string (bytes) or list (elements) `+` may build: a chart that doubles a value in a
/// loop gets a run-time error, not an exhausted node.
pub const MAX_VALUE_LEN: usize = 1 << 20;

/// A field of `_event`, read without building the `_event` map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventField {
    /// `_event.name`.
    Name,
    /// `_event.type`: "platform", "internal" or "external".
    Type,
    /// `_event.sendid`.
    SendId,
    /// `_event.origin`.
    Origin,
    /// `_event.origintype`.
    OriginType,
    /// `_event.invokeid`.
    InvokeId,
    /// `_event.data`.
    Data,
}

impl EventField {
    fn from_name(s: &str) -> Option<EventField> {
        Some(match s {
            "name" => EventField::Name,
            "type" => EventField::Type,
            "sendid" => EventField::SendId,
            "origin" => EventField::Origin,
            "origintype" => EventField::OriginType,
            "invokeid" => EventField::InvokeId,
            "data" => EventField::Data,
            _ => return None,
        })
    }
}

/// System variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// `_event`.
    Event,
    /// `_sessionid`.
    SessionId,
    /// `_name`.
    Name,
    /// `_ioprocessors`.
    IoProcessors,
}

impl System {
    fn from_name(s: &str) -> Option<System> {
        Some(match s {
            "_event" => System::Event,
            "_sessionid" => System::SessionId,
            "_name" => System::Name,
            "_ioprocessors" => System::IoProcessors,
            _ => return None,
        })
    }

    /// The variable's name.
    pub fn name(self) -> &'static str {
        match self {
            System::Event => "_event",
            System::SessionId => "_sessionid",
            System::Name => "_name",
            System::IoProcessors => "_ioprocessors",
        }
    }
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// Built-in functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Func {
    Len,
    Str,
    Num,
    Typeof,
    Contains,
    /// `startsWith(s, prefix)`.
    StartsWith,
    /// `isBound(_event)` and the like: the system variable has a value.
    Bound,
}

/// A compiled expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal.
    Lit(Value),
    /// A variable slot.
    Var(u32),
    /// A system variable.
    System(System),
    /// A field of `_event`.
    Event(EventField),
    /// `e.name`.
    Member(Box<Expr>, Arc<str>),
    /// `e[i]`.
    Index(Box<Expr>, Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `!e`.
    Not(Box<Expr>),
    /// `a op b`.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `a && b` (short-circuit).
    And(Box<Expr>, Box<Expr>),
    /// `a || b` (short-circuit).
    Or(Box<Expr>, Box<Expr>),
    /// `In('id')`: a state index.
    In(u32),
    /// `isBound(var)`.
    IsBound(u32),
    /// A built-in call.
    Call(Func, Vec<Expr>),
    /// `[a, b]`.
    List(Vec<Expr>),
    /// `{k: v}`.
    Map(Vec<(String, Expr)>),
    /// An expression of the chart's ECMAScript or XPath datamodel, evaluated by its
    /// [`HostModel`](super::host::HostModel).
    Host(Arc<str>),
}

/// A syntax error: byte offset into the text and message (with what was expected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// Character offset (0-based) into the expression text.
    pub offset: usize,
    /// What went wrong.
    pub message: String,
}

/// Name resolution at compile time.
pub trait Names {
    /// The slot of variable `name` (interning it).
    fn var(&mut self, name: &str) -> u32;
    /// The index of state `id`, if it exists.
    fn state(&self, id: &str) -> Option<u32>;
}

/// A [`Names`] that accepts every state and numbers variables in order (for checking syntax
/// alone, e.g. by the fuzzer).
#[derive(Debug, Default)]
pub struct AnyNames(pub Vec<String>);

impl Names for AnyNames {
    fn var(&mut self, name: &str) -> u32 {
        if let Some(i) = self.0.iter().position(|n| n == name) {
            return u32::try_from(i).unwrap_or(u32::MAX);
        }
        self.0.push(name.to_string());
        u32::try_from(self.0.len() - 1).unwrap_or(u32::MAX)
    }
    fn state(&self, _id: &str) -> Option<u32> {
        Some(0)
    }
}

/// What an expression reads at run time.
pub trait Scope {
    /// Variable `slot`, or `None` if it was never declared or assigned.
    fn var(&self, slot: u32) -> Option<&Value>;
    /// The name of variable `slot` (for messages).
    fn var_name(&self, slot: u32) -> &str;
    /// A system variable.
    fn system(&self, v: System) -> Option<Value>;
    /// A field of the current event (`None` before the first event).
    fn event_field(&self, f: EventField) -> Option<Value>;
    /// Whether state `index` is active.
    fn in_state(&self, index: u32) -> bool;
    /// Evaluates an [`Expr::Host`] expression in the chart's datamodel.
    ///
    /// # Errors
    /// Whatever the datamodel reports (the default: there is none).
    fn host_eval(&self, src: &str) -> Result<Value, String> {
        Err(format!("no datamodel to evaluate \"{src}\""))
    }
    /// Evaluates an [`Expr::Host`] condition (the datamodel's conversion to a boolean).
    ///
    /// # Errors
    /// As [`Scope::host_eval`].
    fn host_cond(&self, src: &str) -> Result<bool, String> {
        Err(format!("no datamodel to evaluate \"{src}\""))
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Punct(&'static str),
    End,
}

struct Lexer {
    toks: Vec<(Tok, usize)>,
}

const PUNCTS: &[&str] = &[
    "===", "!==", "==", "!=", "<=", ">=", "&&", "||", "<", ">", "+", "-", "*", "/", "%", "!", "(",
    ")", "[", "]", "{", "}", ",", ".", ":",
];

fn lex(src: &str) -> Result<Lexer, SyntaxError> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let err = |offset: usize, message: String| SyntaxError { offset, message };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let save = i;
                i += 1;
                if i < chars.len() && (chars[i] == '+' || chars[i] == '-') {
                    i += 1;
                }
                if i < chars.len() && chars[i].is_ascii_digit() {
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                } else {
                    i = save;
                }
            }
            let text: String = chars[start..i].iter().collect();
            let n = text
                .parse::<f64>()
                .map_err(|_| err(start, format!("bad number \"{text}\"")))?;
            toks.push((Tok::Num(n), start));
        } else if c == '\'' || c == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err(err(
                        start,
                        "unterminated string (expected a closing quote)".into(),
                    ));
                };
                i += 1;
                if d == c {
                    break;
                }
                if d == '\\' {
                    let Some(&e) = chars.get(i) else {
                        return Err(err(
                            start,
                            "unterminated string (expected a closing quote)".into(),
                        ));
                    };
                    i += 1;
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                } else {
                    s.push(d);
                }
            }
            toks.push((Tok::Str(s), start));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            toks.push((Tok::Ident(chars[start..i].iter().collect()), start));
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) else {
                return Err(err(
                    start,
                    format!("unexpected character '{c}' (expected a value, a name or an operator)"),
                ));
            };
            i += p.chars().count();
            toks.push((Tok::Punct(p), start));
        }
    }
    toks.push((Tok::End, chars.len()));
    Ok(Lexer { toks })
}

struct Parser<'n> {
    toks: Vec<(Tok, usize)>,
    at: usize,
    depth: usize,
    names: &'n mut dyn Names,
}

/// Parses an expression, resolving names through `names`.
///
/// # Errors
/// A syntax error (with its offset), an unknown state in `In()`, an unknown function.
pub fn parse(src: &str, names: &mut dyn Names) -> Result<Expr, SyntaxError> {
    if src.len() > MAX_LEN {
        return Err(SyntaxError {
            offset: 0,
            message: format!("expression longer than {MAX_LEN} bytes"),
        });
    }
    let lexer = lex(src)?;
    let mut p = Parser {
        toks: lexer.toks,
        at: 0,
        depth: 0,
        names,
    };
    if p.peek() == &Tok::End {
        return Err(p.error("empty expression (expected an expression)".into()));
    }
    let e = p.expr()?;
    if p.peek() != &Tok::End {
        return Err(p.error(format!(
            "unexpected {} (expected an operator or the end)",
            p.describe()
        )));
    }
    Ok(e)
}

/// An assignable location: a variable (or system variable) and a path of members/indexes.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    /// A datamodel variable with a path below it.
    Var(u32, Vec<PathStep>),
    /// A system variable (assigning one is a run-time error).
    System(System),
    /// A location of the chart's ECMAScript or XPath datamodel.
    Host(Arc<str>),
}

/// One step of a [`Location`] path.
#[derive(Clone, Debug, PartialEq)]
pub enum PathStep {
    /// `.name`.
    Member(Arc<str>),
    /// `[expr]`.
    Index(Expr),
}

/// Parses a location (`x`, `x.a`, `x[0].b`).
///
/// # Errors
/// A syntax error, or an expression that is not a location.
pub fn parse_location(src: &str, names: &mut dyn Names) -> Result<Location, SyntaxError> {
    let e = parse(src, names)?;
    let mut path = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            Expr::Var(slot) => {
                path.reverse();
                return Ok(Location::Var(slot, path));
            }
            Expr::System(s) if path.is_empty() => return Ok(Location::System(s)),
            Expr::Event(_) if path.is_empty() => return Ok(Location::System(System::Event)),
            Expr::Member(inner, name) => {
                path.push(PathStep::Member(name));
                cur = *inner;
            }
            Expr::Index(inner, idx) => {
                path.push(PathStep::Index(*idx));
                cur = *inner;
            }
            _ => {
                return Err(SyntaxError {
                    offset: 0,
                    message: format!(
                        "\"{src}\" is not a location (expected a variable, optionally with .member or [index])"
                    ),
                })
            }
        }
    }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.at.min(self.toks.len() - 1)].0
    }

    fn offset(&self) -> usize {
        self.toks[self.at.min(self.toks.len() - 1)].1
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.at < self.toks.len() - 1 {
            self.at += 1;
        }
        t
    }

    fn error(&self, message: String) -> SyntaxError {
        SyntaxError {
            offset: self.offset(),
            message,
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            Tok::Num(n) => format!("number {n}"),
            Tok::Str(s) => format!("string '{s}'"),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Punct(p) => format!("'{p}'"),
            Tok::End => "end of expression".into(),
        }
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(q) if q == w)
    }

    fn expect(&mut self, p: &str) -> Result<(), SyntaxError> {
        if self.is_punct(p) {
            self.bump();
            Ok(())
        } else {
            Err(self.error(format!("unexpected {} (expected '{p}')", self.describe())))
        }
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("expression nested deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, SyntaxError> {
        self.enter()?;
        let mut l = self.and()?;
        while self.is_punct("||") || self.is_word("or") {
            self.bump();
            let r = self.and()?;
            l = Expr::Or(Box::new(l), Box::new(r));
        }
        self.depth -= 1;
        Ok(l)
    }

    fn and(&mut self) -> Result<Expr, SyntaxError> {
        let mut l = self.cmp()?;
        while self.is_punct("&&") || self.is_word("and") {
            self.bump();
            let r = self.cmp()?;
            l = Expr::And(Box::new(l), Box::new(r));
        }
        Ok(l)
    }

    fn cmp(&mut self) -> Result<Expr, SyntaxError> {
        let l = self.add()?;
        let op = match self.peek() {
            Tok::Punct("==" | "===") => BinOp::Eq,
            Tok::Punct("!=" | "!==") => BinOp::Ne,
            Tok::Punct("<") => BinOp::Lt,
            Tok::Punct("<=") => BinOp::Le,
            Tok::Punct(">") => BinOp::Gt,
            Tok::Punct(">=") => BinOp::Ge,
            _ => return Ok(l),
        };
        self.bump();
        let r = self.add()?;
        Ok(Expr::Bin(op, Box::new(l), Box::new(r)))
    }

    fn add(&mut self) -> Result<Expr, SyntaxError> {
        let mut l = self.mul()?;
        loop {
            let op = match self.peek() {
                Tok::Punct("+") => BinOp::Add,
                Tok::Punct("-") => BinOp::Sub,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.mul()?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
    }

    fn mul(&mut self) -> Result<Expr, SyntaxError> {
        let mut l = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Punct("*") => BinOp::Mul,
                Tok::Punct("/") => BinOp::Div,
                Tok::Punct("%") => BinOp::Rem,
                _ => return Ok(l),
            };
            self.bump();
            let r = self.unary()?;
            l = Expr::Bin(op, Box::new(l), Box::new(r));
        }
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        self.enter()?;
        let e = if self.is_punct("!") || self.is_word("not") {
            self.bump();
            Expr::Not(Box::new(self.unary()?))
        } else if self.is_punct("-") {
            self.bump();
            match self.unary()? {
                Expr::Lit(Value::Number(n)) => Expr::Lit(Value::Number(-n)),
                e => Expr::Neg(Box::new(e)),
            }
        } else {
            self.postfix()?
        };
        self.depth -= 1;
        Ok(e)
    }

    fn postfix(&mut self) -> Result<Expr, SyntaxError> {
        let mut e = self.primary()?;
        loop {
            if self.is_punct(".") {
                self.bump();
                let Tok::Ident(name) = self.bump() else {
                    return Err(self.error("expected a member name after '.'".into()));
                };
                e = match e {
                    Expr::System(System::Event) => match EventField::from_name(&name) {
                        Some(f) => Expr::Event(f),
                        None => Expr::Member(Box::new(e), Arc::from(name.as_str())),
                    },
                    e => Expr::Member(Box::new(e), Arc::from(name.as_str())),
                };
            } else if self.is_punct("[") {
                self.bump();
                let i = self.expr()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(i));
            } else {
                return Ok(e);
            }
        }
    }

    fn args(&mut self, close: &str) -> Result<Vec<Expr>, SyntaxError> {
        let mut out = Vec::new();
        if self.is_punct(close) {
            self.bump();
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.is_punct(",") {
                self.bump();
            } else {
                self.expect(close)?;
                return Ok(out);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        let start = self.offset();
        match self.bump() {
            Tok::Num(n) => Ok(Expr::Lit(Value::Number(n))),
            Tok::Str(s) => Ok(Expr::Lit(Value::str(&s))),
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Punct("[") => Ok(Expr::List(self.args("]")?)),
            Tok::Punct("{") => {
                let mut entries = Vec::new();
                if self.is_punct("}") {
                    self.bump();
                    return Ok(Expr::Map(entries));
                }
                loop {
                    let key = match self.bump() {
                        Tok::Ident(k) | Tok::Str(k) => k,
                        _ => return Err(self.error("expected a key (a name or a string)".into())),
                    };
                    self.expect(":")?;
                    entries.push((key, self.expr()?));
                    if self.is_punct(",") {
                        self.bump();
                    } else {
                        self.expect("}")?;
                        return Ok(Expr::Map(entries));
                    }
                }
            }
            Tok::Ident(w) => match w.as_str() {
                "true" => Ok(Expr::Lit(Value::Bool(true))),
                "false" => Ok(Expr::Lit(Value::Bool(false))),
                "null" | "undefined" => Ok(Expr::Lit(Value::Null)),
                _ if self.is_punct("(") => {
                    self.bump();
                    self.call(&w, start)
                }
                _ => Ok(match System::from_name(&w) {
                    Some(s) => Expr::System(s),
                    None => Expr::Var(self.names.var(&w)),
                }),
            },
            Tok::Punct(p) => Err(SyntaxError {
                offset: start,
                message: format!("unexpected '{p}' (expected a value, a variable or '(')"),
            }),
            Tok::End => Err(SyntaxError {
                offset: start,
                message: "unexpected end of expression (expected a value)".into(),
            }),
        }
    }

    fn call(&mut self, name: &str, start: usize) -> Result<Expr, SyntaxError> {
        let args = self.args(")")?;
        let arity = |n: usize| -> Result<(), SyntaxError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(SyntaxError {
                    offset: start,
                    message: format!("{name}() takes {n} argument(s), got {}", args.len()),
                })
            }
        };
        match name {
            "In" => {
                arity(1)?;
                let Expr::Lit(Value::String(id)) = &args[0] else {
                    return Err(SyntaxError {
                        offset: start,
                        message: "In() takes a state id as a string literal (expected In('id'))"
                            .into(),
                    });
                };
                match self.names.state(id) {
                    Some(i) => Ok(Expr::In(i)),
                    None => Err(SyntaxError {
                        offset: start,
                        message: format!("In('{id}'): no state with id \"{id}\""),
                    }),
                }
            }
            "isBound" => {
                arity(1)?;
                match &args[0] {
                    Expr::Var(slot) => Ok(Expr::IsBound(*slot)),
                    Expr::System(_) => Ok(Expr::Call(Func::Bound, args)),
                    _ => Err(SyntaxError {
                        offset: start,
                        message: "isBound() takes a variable name".into(),
                    }),
                }
            }
            "len" | "str" | "num" | "typeof" => {
                arity(1)?;
                let f = match name {
                    "len" => Func::Len,
                    "str" => Func::Str,
                    "num" => Func::Num,
                    _ => Func::Typeof,
                };
                Ok(Expr::Call(f, args))
            }
            "contains" => {
                arity(2)?;
                Ok(Expr::Call(Func::Contains, args))
            }
            "startsWith" => {
                arity(2)?;
                Ok(Expr::Call(Func::StartsWith, args))
            }
            _ => Err(SyntaxError {
                offset: start,
                message: format!(
                    "unknown function {name}() (expected In, isBound, len, str, num, typeof, contains or startsWith)"
                ),
            }),
        }
    }
}

fn bool_of(v: &Value, what: &str) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(format!("{what} needs a boolean, got {}", other.type_name())),
    }
}

fn num_of(v: &Value, what: &str) -> Result<f64, String> {
    match v {
        Value::Number(n) => Ok(*n),
        other => Err(format!("{what} needs numbers, got {}", other.type_name())),
    }
}

/// Evaluates a condition: must give a boolean.
///
/// # Errors
/// Any run-time error, or a non-boolean result.
pub fn eval_cond(e: &Expr, s: &dyn Scope) -> Result<bool, String> {
    match e {
        // Fast paths that do not build values.
        Expr::Lit(Value::Bool(b)) => Ok(*b),
        Expr::Host(src) => s.host_cond(src),
        Expr::In(i) => Ok(s.in_state(*i)),
        Expr::IsBound(slot) => Ok(s.var(*slot).is_some_and(|v| *v != Value::Null)),
        Expr::Not(inner) => Ok(!eval_cond(inner, s)?),
        Expr::And(a, b) => Ok(eval_cond(a, s)? && eval_cond(b, s)?),
        Expr::Or(a, b) => Ok(eval_cond(a, s)? || eval_cond(b, s)?),
        _ => bool_of(&eval(e, s)?, "a condition"),
    }
}

/// Evaluates an expression.
///
/// # Errors
/// A type error, an undeclared variable, a missing member or index.
pub fn eval(e: &Expr, s: &dyn Scope) -> Result<Value, String> {
    Ok(match e {
        Expr::Lit(v) => v.clone(),
        Expr::Host(src) => s.host_eval(src)?,
        Expr::Var(slot) => match s.var(*slot) {
            Some(v) => v.clone(),
            None => return Err(format!("variable {} is not declared", s.var_name(*slot))),
        },
        Expr::System(v) => s
            .system(*v)
            .ok_or_else(|| format!("{} is not bound", v.name()))?,
        Expr::Event(f) => s
            .event_field(*f)
            .ok_or_else(|| "_event is not bound (no event yet)".to_string())?,
        Expr::Member(inner, name) => {
            let v = eval(inner, s)?;
            match &v {
                Value::Map(m) => match m.get(&**name) {
                    Some(x) => x.clone(),
                    None => return Err(format!("no member \"{name}\"")),
                },
                Value::List(l) if &**name == "length" => Value::Number(l.len() as f64),
                Value::String(st) if &**name == "length" => {
                    Value::Number(st.chars().count() as f64)
                }
                other => {
                    return Err(format!(
                        "member \"{name}\" of a {} (expected a map)",
                        other.type_name()
                    ))
                }
            }
        }
        Expr::Index(inner, idx) => {
            let v = eval(inner, s)?;
            let i = eval(idx, s)?;
            index(&v, &i)?.clone()
        }
        Expr::Neg(inner) => Value::Number(-num_of(&eval(inner, s)?, "'-'")?),
        Expr::Not(_) | Expr::And(..) | Expr::Or(..) | Expr::In(_) | Expr::IsBound(_) => {
            Value::Bool(eval_cond(e, s)?)
        }
        Expr::Bin(op, a, b) => binary(*op, &eval(a, s)?, &eval(b, s)?)?,
        Expr::Call(Func::Bound, args) => {
            Value::Bool(eval(&args[0], s).is_ok_and(|v| v != Value::Null))
        }
        Expr::Call(f, args) => {
            let a = eval(&args[0], s)?;
            match f {
                Func::Len => Value::Number(match &a {
                    Value::List(l) => l.len() as f64,
                    Value::Map(m) => m.len() as f64,
                    Value::String(st) => st.chars().count() as f64,
                    other => return Err(format!("len() of a {}", other.type_name())),
                }),
                Func::Str => match a {
                    Value::String(_) => a,
                    other => Value::str(&other.to_string()),
                },
                Func::Num => match &a {
                    Value::Number(_) => a,
                    Value::Bool(b) => Value::Number(f64::from(u8::from(*b))),
                    Value::String(st) => Value::Number(
                        st.trim()
                            .parse::<f64>()
                            .map_err(|_| format!("num('{st}'): not a number"))?,
                    ),
                    other => return Err(format!("num() of a {}", other.type_name())),
                },
                Func::Typeof => Value::str(a.type_name()),
                Func::Bound => Value::Bool(a != Value::Null),
                Func::StartsWith => {
                    let b = eval(&args[1], s)?;
                    match (&a, &b) {
                        (Value::String(h), Value::String(p)) => Value::Bool(h.starts_with(&**p)),
                        (x, y) => {
                            return Err(format!(
                                "startsWith() needs strings, got {} and {}",
                                x.type_name(),
                                y.type_name()
                            ))
                        }
                    }
                }
                Func::Contains => {
                    let b = eval(&args[1], s)?;
                    Value::Bool(match (&a, &b) {
                        (Value::List(l), x) => l.iter().any(|y| y.loose_eq(x)),
                        (Value::Map(m), Value::String(k)) => m.contains_key(&**k),
                        (Value::String(h), Value::String(n)) => h.contains(&**n),
                        (other, _) => return Err(format!("contains() in a {}", other.type_name())),
                    })
                }
            }
        }
        Expr::List(items) => Value::list(
            items
                .iter()
                .map(|x| eval(x, s))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Expr::Map(entries) => {
            let mut m = BTreeMap::new();
            for (k, x) in entries {
                m.insert(k.clone(), eval(x, s)?);
            }
            Value::map(m)
        }
    })
}

/// `v[i]` for lists (numeric index) and maps (string key).
///
/// # Errors
/// Out of range, missing key, or not indexable.
pub fn index<'v>(v: &'v Value, i: &Value) -> Result<&'v Value, String> {
    match (v, i) {
        (Value::List(l), Value::Number(n)) => {
            if n.fract() != 0.0 || *n < 0.0 || *n >= l.len() as f64 {
                return Err(format!("index {n} out of range (list of {})", l.len()));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok(&l[*n as usize])
        }
        (Value::Map(m), Value::String(k)) => m.get(&**k).ok_or_else(|| format!("no key \"{k}\"")),
        (a, b) => Err(format!(
            "cannot index a {} with a {}",
            a.type_name(),
            b.type_name()
        )),
    }
}

pub(crate) fn binary(op: BinOp, a: &Value, b: &Value) -> Result<Value, String> {
    Ok(match op {
        BinOp::Eq => Value::Bool(a.loose_eq(b)),
        BinOp::Ne => Value::Bool(!a.loose_eq(b)),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let ord = match (a, b) {
                (Value::Number(x), Value::Number(y)) => x.partial_cmp(y),
                (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                _ => {
                    return Err(format!(
                        "cannot compare a {} with a {}",
                        a.type_name(),
                        b.type_name()
                    ))
                }
            };
            let Some(ord) = ord else {
                return Ok(Value::Bool(false));
            };
            Value::Bool(match op {
                BinOp::Lt => ord.is_lt(),
                BinOp::Le => ord.is_le(),
                BinOp::Gt => ord.is_gt(),
                _ => ord.is_ge(),
            })
        }
        BinOp::Add => match (a, b) {
            (Value::Number(x), Value::Number(y)) => Value::Number(x + y),
            (Value::String(_), _) | (_, Value::String(_)) => {
                let s = format!("{a}{b}");
                if s.len() > MAX_VALUE_LEN {
                    return Err(format!("string longer than {MAX_VALUE_LEN} bytes"));
                }
                Value::str(&s)
            }
            (Value::List(x), Value::List(y)) => {
                if x.len() + y.len() > MAX_VALUE_LEN {
                    return Err(format!("list longer than {MAX_VALUE_LEN} elements"));
                }
                let mut v = Vec::with_capacity(x.len() + y.len());
                v.extend(x.iter().cloned());
                v.extend(y.iter().cloned());
                Value::list(v)
            }
            _ => {
                return Err(format!(
                    "'+' of a {} and a {}",
                    a.type_name(),
                    b.type_name()
                ))
            }
        },
        BinOp::Sub => Value::Number(num_of(a, "'-'")? - num_of(b, "'-'")?),
        BinOp::Mul => Value::Number(num_of(a, "'*'")? * num_of(b, "'*'")?),
        BinOp::Div => Value::Number(num_of(a, "'/'")? / num_of(b, "'/'")?),
        BinOp::Rem => Value::Number(num_of(a, "'%'")? % num_of(b, "'%'")?),
    })
}

/// One statement of a `<script>` (W3C SCXML §5.8, in viastack's language).
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `var x`, `var x = e`: declares `x` (null when no value).
    Var(Location, Option<Expr>),
    /// `loc = e`; also `loc += e`, `loc -= e`, `loc++`, `loc--` (as `loc = loc op e`).
    Assign(Location, Expr),
    /// An expression evaluated for its errors alone.
    Expr(Expr),
}

/// Splits script text into statements at `;` and line ends outside strings and brackets.
fn statements(src: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0usize);
    let mut prev = ' ';
    for (i, c) in src.char_indices() {
        match quote {
            Some(q) if c == q && prev != '\\' => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ';' | '\n' if depth <= 0 => {
                    out.push((start, &src[start..i]));
                    start = i + 1;
                }
                _ => {}
            },
        }
        prev = c;
    }
    out.push((start, &src[start..]));
    out.retain(|(_, s)| !s.trim().is_empty());
    out
}

/// The byte offset of a top-level `=` (not `==`, `!=`, `<=`, `>=`), with the operator before
/// it (`+` or `-` for `+=`/`-=`).
fn assignment_at(s: &str) -> Option<(usize, Option<BinOp>)> {
    let b = s.as_bytes();
    let (mut depth, mut quote) = (0i32, None::<u8>);
    for i in 0..b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == q && (i == 0 || b[i - 1] != b'\\') {
                quote = None;
            }
            continue;
        }
        match c {
            b'\'' | b'"' => quote = Some(c),
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'=' if depth == 0 => {
                let next = b.get(i + 1).copied();
                let before = if i > 0 { b[i - 1] } else { b' ' };
                if next == Some(b'=') || matches!(before, b'=' | b'!' | b'<' | b'>') {
                    return None;
                }
                let op = match before {
                    b'+' => Some(BinOp::Add),
                    b'-' => Some(BinOp::Sub),
                    b'*' => Some(BinOp::Mul),
                    b'/' => Some(BinOp::Div),
                    _ => None,
                };
                return Some((i, op));
            }
            _ => {}
        }
    }
    None
}

/// Parses `<script>` text: statements separated by `;` or line ends — `var x [= e]`,
/// `loc = e`, `loc += e` / `-=` / `*=` / `/=`, `loc++`, `loc--`, or an expression.
///
/// # Errors
/// The first statement that does not parse (offset into the whole text).
pub fn parse_script(src: &str, names: &mut dyn Names) -> Result<Vec<Stmt>, SyntaxError> {
    if src.len() > MAX_LEN * 4 {
        return Err(SyntaxError {
            offset: 0,
            message: format!("script longer than {} bytes", MAX_LEN * 4),
        });
    }
    let mut out = Vec::new();
    for (start, text) in statements(src) {
        let at = |e: SyntaxError| SyntaxError {
            offset: src[..start].chars().count() + e.offset,
            message: e.message,
        };
        let t = text.trim();
        if let Some(rest) = t.strip_prefix("var ") {
            let (name, value) = match assignment_at(rest) {
                Some((i, None)) => (&rest[..i], Some(parse(&rest[i + 1..], names).map_err(at)?)),
                _ => (rest, None),
            };
            out.push(Stmt::Var(
                parse_location(name.trim(), names).map_err(at)?,
                value,
            ));
        } else if let Some(loc) = t.strip_suffix("++").or_else(|| t.strip_suffix("--")) {
            let op = if t.ends_with("++") {
                BinOp::Add
            } else {
                BinOp::Sub
            };
            let l = parse_location(loc.trim(), names).map_err(at)?;
            let cur = parse(loc.trim(), names).map_err(at)?;
            let one = Box::new(Expr::Lit(Value::Number(1.0)));
            out.push(Stmt::Assign(l, Expr::Bin(op, Box::new(cur), one)));
        } else if let Some((i, op)) = assignment_at(t) {
            let lhs = if op.is_some() { &t[..i - 1] } else { &t[..i] };
            let l = parse_location(lhs.trim(), names).map_err(at)?;
            let e = parse(&t[i + 1..], names).map_err(at)?;
            out.push(match op {
                Some(op) => {
                    let cur = parse(lhs.trim(), names).map_err(at)?;
                    Stmt::Assign(l, Expr::Bin(op, Box::new(cur), Box::new(e)))
                }
                None => Stmt::Assign(l, e),
            });
        } else {
            out.push(Stmt::Expr(parse(t, names).map_err(at)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct S(Vec<Option<Value>>);
    impl Scope for S {
        fn var(&self, slot: u32) -> Option<&Value> {
            self.0.get(slot as usize).and_then(Option::as_ref)
        }
        fn var_name(&self, _slot: u32) -> &str {
            "x"
        }
        fn system(&self, _v: System) -> Option<Value> {
            None
        }
        fn event_field(&self, f: EventField) -> Option<Value> {
            (f == EventField::Name).then(|| Value::str("ev.a"))
        }
        fn in_state(&self, i: u32) -> bool {
            i == 0
        }
    }

    fn run(src: &str) -> Result<Value, String> {
        let mut names = AnyNames(vec!["a".into(), "b".into()]);
        let e = parse(src, &mut names).map_err(|e| e.message)?;
        let mut vars = vec![Some(Value::Number(2.0)), Some(Value::str("s"))];
        vars.resize(names.0.len().max(2), None);
        eval(&e, &S(vars))
    }

    #[test]
    fn arithmetic_precedence_and_comparison() {
        assert_eq!(run("1 + 2 * 3").unwrap(), Value::Number(7.0));
        assert_eq!(run("(1 + 2) * 3 == 9").unwrap(), Value::Bool(true));
        assert_eq!(run("a + 1").unwrap(), Value::Number(3.0));
        assert_eq!(run("b + 1").unwrap(), Value::str("s1"));
        assert_eq!(run("not (a > 1) or a >= 2").unwrap(), Value::Bool(true));
        assert_eq!(run("!true || false && true").unwrap(), Value::Bool(false));
        assert_eq!(run("-a").unwrap(), Value::Number(-2.0));
    }

    #[test]
    fn structures_members_and_functions() {
        assert_eq!(run("[1,2,3][1]").unwrap(), Value::Number(2.0));
        assert_eq!(run("{k: 'v', 'x y': 1}.k").unwrap(), Value::str("v"));
        assert_eq!(run("len([1,2])").unwrap(), Value::Number(2.0));
        assert_eq!(run("_event.name").unwrap(), Value::str("ev.a"));
        assert_eq!(run("In('s')").unwrap(), Value::Bool(true));
        assert_eq!(run("contains([1,2], 2)").unwrap(), Value::Bool(true));
        assert_eq!(run("typeof(a)").unwrap(), Value::str("number"));
    }

    #[test]
    fn run_time_errors() {
        assert!(run("zz").unwrap_err().contains("not declared"));
        assert!(run("1 + true").is_err());
        assert!(run("[1][5]").is_err());
        assert!(run("null.x").is_err());
        let mut names = AnyNames::default();
        let e = parse("b + b", &mut names).unwrap();
        let big = Value::str(&"x".repeat(MAX_VALUE_LEN / 2 + 1));
        assert!(eval(&e, &S(vec![Some(big)]))
            .unwrap_err()
            .contains("longer than"));
    }

    #[test]
    fn syntax_errors_have_offsets() {
        let mut n = AnyNames::default();
        let e = parse("1 + ", &mut n).unwrap_err();
        assert_eq!(e.offset, 4);
        let e = parse("a b", &mut n).unwrap_err();
        assert_eq!(e.offset, 2);
        assert!(parse("'abc", &mut n).is_err());
        assert!(parse("foo(1)", &mut n).is_err());
        assert!(parse(&"(".repeat(200), &mut n).is_err());
    }
}

//! T-scripts, the ToolBus process language (seed 003 "The ToolBus"; the ToolBus lineage of
//! Bergstra and Klint): the subset this bus runs, its parser and its static checks. The
//! interpreter is [`crate::interp`]; `docs/BUS.md` is the reference for script writers.
//!
//! ```text
//! script   ::= ( process | tool | "toolbus" "(" call ("," call)* ")" )*
//! process  ::= "process" NAME ( "(" VAR ":" TYPE ("," VAR ":" TYPE)* ")" )? "is" expr
//! tool     ::= "tool" NAME "is" "{" ( NAME "=" STRING )* "}"
//! call     ::= NAME ( "(" term ("," term)* ")" )?
//! expr     ::= choice ( "||" choice )*                    merge, lowest precedence
//! choice   ::= seq ( "+" seq )* | seq ( "+>" seq )*       choice / biased choice
//! seq      ::= iter ( "." iter )*                         sequence
//! iter     ::= prim ( "*" prim )?                         iteration, highest precedence
//! prim     ::= "(" expr ")" | "delta" | atom attr*
//!            | "if" term "then" expr ( "else" expr )? "fi"
//!            | "let" VAR ":" TYPE ("," VAR ":" TYPE)* "in" expr "endlet"
//! atom     ::= "tau" | VAR ":=" term | "create" "(" call "," VAR "?" ")" | OP "(" term ("," term)* ")"
//! attr     ::= "delay" "(" time ")" | "timeout" "(" time ")"     time ::= INT (ms) | sec(INT) | msec(INT)
//! ```
//!
//! Precedence, from loosest to tightest: `||`, then `+` and `+>`, then `.`, then `*`. The
//! historical grammars disagree on two points, so this one requires parentheses there: `+`
//! and `+>` may not be mixed at one level (`a + b +> c` is an error), and `*` does not chain
//! (`a * b * c` is an error; write `(a * b) * c` or `a * (b * c)`). Comments run from `%` to
//! the end of the line. Variables start with a capital; `X?` is a result variable.
//!
//! Every error names `file:line:col`. The checks: each variable used is declared (as a formal
//! or by `let`), each type is known (`int real str term list blob bool`, or a tool's name),
//! each `create` and `toolbus` entry names a defined process with the right number of
//! arguments, and each atom has its arity.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use crate::term::{Arena, Kind, ParseError, Term, TextParser};

/// A position in a script file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, 1-based.
    pub line: usize,
    /// Column, 1-based.
    pub col: usize,
}

/// A script error: `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{file}:{line}:{col}: {msg}")]
pub struct ScriptError {
    /// The file's name as given.
    pub file: String,
    /// Line, 1-based.
    pub line: usize,
    /// Column, 1-based.
    pub col: usize,
    /// What was wrong.
    pub msg: String,
}

/// The kinds of atoms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The silent step.
    Tau,
    /// `V := expr`.
    Assign,
    /// `create(P(args), Pid?)`.
    Create(String),
    /// `snd-msg(T)`.
    SndMsg,
    /// `rec-msg(T)`.
    RecMsg,
    /// `snd-note(T)`.
    SndNote,
    /// `rec-note(T)`.
    RecNote,
    /// `no-note(T)`.
    NoNote,
    /// `subscribe(T)`.
    Subscribe,
    /// `unsubscribe(T)`.
    Unsubscribe,
    /// `execute(tool, Tid?)`.
    Execute,
    /// `rec-connect(Tid?)`.
    RecConnect,
    /// `rec-disconnect(Tid)`.
    RecDisconnect,
    /// `snd-eval(Tid, T)`.
    SndEval,
    /// `rec-value(Tid, T)`.
    RecValue,
    /// `snd-do(Tid, T)`.
    SndDo,
    /// `rec-event(Tid, T)`.
    RecEvent,
    /// `snd-ack-event(Tid, T)`.
    SndAckEvent,
    /// `snd-terminate(Tid, T)`.
    SndTerminate,
}

impl Op {
    fn from_name(s: &str) -> Option<(Op, usize)> {
        Some(match s {
            "snd-msg" => (Op::SndMsg, 1),
            "rec-msg" => (Op::RecMsg, 1),
            "snd-note" => (Op::SndNote, 1),
            "rec-note" => (Op::RecNote, 1),
            "no-note" => (Op::NoNote, 1),
            "subscribe" => (Op::Subscribe, 1),
            "unsubscribe" => (Op::Unsubscribe, 1),
            "execute" => (Op::Execute, 2),
            "rec-connect" => (Op::RecConnect, 1),
            "rec-disconnect" => (Op::RecDisconnect, 1),
            "snd-eval" => (Op::SndEval, 2),
            "rec-value" => (Op::RecValue, 2),
            "snd-do" => (Op::SndDo, 2),
            "rec-event" => (Op::RecEvent, 2),
            "snd-ack-event" => (Op::SndAckEvent, 2),
            "snd-terminate" => (Op::SndTerminate, 2),
            _ => return None,
        })
    }

    /// The atom's name in scripts.
    pub fn name(&self) -> &str {
        match self {
            Op::Tau => "tau",
            Op::Assign => ":=",
            Op::Create(_) => "create",
            Op::SndMsg => "snd-msg",
            Op::RecMsg => "rec-msg",
            Op::SndNote => "snd-note",
            Op::RecNote => "rec-note",
            Op::NoNote => "no-note",
            Op::Subscribe => "subscribe",
            Op::Unsubscribe => "unsubscribe",
            Op::Execute => "execute",
            Op::RecConnect => "rec-connect",
            Op::RecDisconnect => "rec-disconnect",
            Op::SndEval => "snd-eval",
            Op::RecValue => "rec-value",
            Op::SndDo => "snd-do",
            Op::RecEvent => "rec-event",
            Op::SndAckEvent => "snd-ack-event",
            Op::SndTerminate => "snd-terminate",
        }
    }
}

/// One atom of a process expression.
#[derive(Debug, Clone)]
pub struct Atom {
    /// What it does.
    pub op: Op,
    /// Its arguments (for `:=`: the variable, then the expression; for `create`: the
    /// arguments, then the result variable).
    pub args: Vec<Term>,
    /// Not before this many ms after the process's last step.
    pub delay_ms: Option<u64>,
    /// Not after this many ms after the process's last step.
    pub timeout_ms: Option<u64>,
    /// Where it is written.
    pub pos: Pos,
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.op {
            Op::Tau => f.write_str("tau"),
            Op::Assign => write!(
                f,
                "{} := {}",
                self.args
                    .first()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                self.args
                    .get(1)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
            op => {
                write!(f, "{}", op.name())?;
                if let Op::Create(p) = op {
                    write!(f, "({p}")?;
                } else {
                    f.write_str("(")?;
                }
                for (i, a) in self.args.iter().enumerate() {
                    if i > 0 || matches!(op, Op::Create(_)) {
                        f.write_str(",")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A process expression.
#[derive(Debug, Clone)]
pub enum Proc {
    /// Successful termination (nothing left to do).
    Nil,
    /// Deadlock: never does anything.
    Delta,
    /// One atom.
    Atom(Arc<Atom>),
    /// `p . q`.
    Seq(Arc<Proc>, Arc<Proc>),
    /// `p + q`.
    Alt(Arc<Proc>, Arc<Proc>),
    /// `p +> q`: `q` only when no atom of `p` can step.
    Biased(Arc<Proc>, Arc<Proc>),
    /// `p * q`: `p` any number of times, then `q`.
    Iter(Arc<Proc>, Arc<Proc>),
    /// `p || q`.
    Merge(Arc<Proc>, Arc<Proc>),
    /// `if c then p else q fi`.
    If(Term, Arc<Proc>, Arc<Proc>),
}

/// A process definition.
#[derive(Debug, Clone)]
pub struct ProcessDef {
    /// Its name.
    pub name: String,
    /// Its formal parameters: name and type.
    pub formals: Vec<(String, String)>,
    /// Every variable (formals and `let`s): name and type.
    pub vars: BTreeMap<String, String>,
    /// Its body.
    pub body: Arc<Proc>,
    /// Where it is defined.
    pub pos: Pos,
}

/// A tool declaration (`tool NAME is { command = "…" }`).
#[derive(Debug, Clone, Default)]
pub struct ToolDef {
    /// The command that starts it (for `execute`), if any.
    pub command: Option<String>,
}

/// A parsed and checked script.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Process definitions by name.
    pub processes: BTreeMap<String, ProcessDef>,
    /// Tool declarations by name.
    pub tools: BTreeMap<String, ToolDef>,
    /// The processes started at the beginning, with their arguments.
    pub toolbus: Vec<(String, Vec<Term>, Pos)>,
}

/// The types a variable may have besides tool names.
pub const BASE_TYPES: [&str; 7] = ["int", "real", "str", "term", "list", "blob", "bool"];

struct Parser<'a, 'b> {
    p: TextParser<'a>,
    file: &'b str,
    arena: &'b mut Arena,
    /// Variables declared in the process being parsed.
    vars: BTreeMap<String, String>,
    /// Uses of types, checked once every tool is known.
    type_uses: Vec<(String, Pos)>,
    /// Uses of processes, checked at the end.
    creates: Vec<(String, usize, Pos)>,
    /// Variables used, checked against the process's declarations at its end.
    var_uses: Vec<(String, Pos)>,
}

impl Script {
    /// Parses and checks a script; `file` names it in errors.
    ///
    /// # Errors
    /// The first [`ScriptError`].
    pub fn parse(file: &str, src: &str, arena: &mut Arena) -> Result<Script, ScriptError> {
        let mut ps = Parser {
            p: TextParser::new(src),
            file,
            arena,
            vars: BTreeMap::new(),
            type_uses: Vec::new(),
            creates: Vec::new(),
            var_uses: Vec::new(),
        };
        let mut script = Script::default();
        loop {
            ps.p.skip_ws();
            if ps.p.peek().is_none() {
                break;
            }
            let pos = ps.pos();
            match ps.p.ident() {
                "process" => {
                    let def = ps.process(pos)?;
                    if script.processes.contains_key(&def.name) {
                        return Err(ps.err_at(pos, format!("process {} defined twice", def.name)));
                    }
                    script.processes.insert(def.name.clone(), def);
                }
                "tool" => {
                    let (name, def) = ps.tool()?;
                    script.tools.insert(name, def);
                }
                "toolbus" => {
                    ps.p.expect('(').map_err(|e| ps.conv(e))?;
                    loop {
                        ps.p.skip_ws();
                        let pos = ps.pos();
                        let (name, args) = ps.call()?;
                        ps.creates.push((name.clone(), args.len(), pos));
                        script.toolbus.push((name, args, pos));
                        ps.p.skip_ws();
                        if ps.p.eat(')') {
                            break;
                        }
                        ps.p.expect(',').map_err(|e| ps.conv(e))?;
                    }
                }
                "" => return Err(ps.err(format!("unexpected '{}'", ps.p.peek().unwrap_or(' ')))),
                other => {
                    return Err(ps.err_at(
                        pos,
                        format!("expected 'process', 'tool' or 'toolbus', found '{other}'"),
                    ))
                }
            }
        }
        for (ty, pos) in &ps.type_uses {
            if !BASE_TYPES.contains(&ty.as_str()) && !script.tools.contains_key(ty) {
                return Err(ps.err_at(
                    *pos,
                    format!("unknown type '{ty}' (not a base type nor a declared tool)"),
                ));
            }
        }
        for (name, n, pos) in &ps.creates {
            match script.processes.get(name) {
                None => return Err(ps.err_at(*pos, format!("no process named {name}"))),
                Some(def) if def.formals.len() != *n => {
                    return Err(ps.err_at(
                        *pos,
                        format!("{name} takes {} arguments, given {n}", def.formals.len()),
                    ))
                }
                Some(_) => {}
            }
        }
        if script.toolbus.is_empty() {
            return Err(ps.err_at(
                Pos { line: 1, col: 1 },
                "no toolbus(...) entry: nothing to run",
            ));
        }
        Ok(script)
    }
}

impl From<ParseError> for Pos {
    fn from(e: ParseError) -> Pos {
        Pos {
            line: e.line,
            col: e.col,
        }
    }
}

impl<'a> Parser<'a, '_> {
    fn pos(&self) -> Pos {
        let (line, col) = self.p.line_col(self.p.pos);
        Pos { line, col }
    }

    fn err_at(&self, pos: Pos, msg: impl Into<String>) -> ScriptError {
        ScriptError {
            file: self.file.to_string(),
            line: pos.line,
            col: pos.col,
            msg: msg.into(),
        }
    }

    fn err(&self, msg: impl Into<String>) -> ScriptError {
        self.err_at(self.pos(), msg)
    }

    fn conv(&self, e: ParseError) -> ScriptError {
        ScriptError {
            file: self.file.to_string(),
            line: e.line,
            col: e.col,
            msg: e.msg,
        }
    }

    fn keyword(&mut self, kw: &str) -> Result<(), ScriptError> {
        self.p.skip_ws();
        let save = self.p.pos;
        if self.p.ident() == kw {
            Ok(())
        } else {
            self.p.pos = save;
            Err(self.err(format!("expected '{kw}'")))
        }
    }

    fn peek_ident(&mut self) -> &'a str {
        self.p.skip_ws();
        let save = self.p.pos;
        let id = self.p.ident();
        self.p.pos = save;
        id
    }

    fn name(&mut self) -> Result<String, ScriptError> {
        self.p.skip_ws();
        let id = self.p.ident();
        if id.is_empty() || !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(self.err("expected a name"));
        }
        Ok(id.to_string())
    }

    fn term(&mut self) -> Result<Term, ScriptError> {
        self.p.skip_ws();
        let pos = self.pos();
        let t = self.p.term(self.arena, 0).map_err(|e| self.conv(e))?;
        self.note_vars(&t, pos);
        Ok(t)
    }

    fn note_vars(&mut self, t: &Term, pos: Pos) {
        let mut stack = vec![t.clone()];
        while let Some(t) = stack.pop() {
            if let Kind::Var { name, .. } = t.kind() {
                self.var_uses.push((name.to_string(), pos));
            }
            stack.extend(t.children().into_iter().cloned());
        }
    }

    fn decls(&mut self) -> Result<Vec<(String, String)>, ScriptError> {
        let mut out = Vec::new();
        loop {
            self.p.skip_ws();
            let pos = self.pos();
            let var = self.p.ident();
            if !var.starts_with(|c: char| c.is_ascii_uppercase()) {
                return Err(self.err_at(pos, "expected a variable (a capitalised name)"));
            }
            self.p.expect(':').map_err(|e| self.conv(e))?;
            self.p.skip_ws();
            let tpos = self.pos();
            let ty = self.p.ident();
            if ty.is_empty() {
                return Err(self.err("expected a type"));
            }
            self.type_uses.push((ty.to_string(), tpos));
            if self.vars.insert(var.to_string(), ty.to_string()).is_some() {
                return Err(self.err_at(pos, format!("variable {var} declared twice")));
            }
            out.push((var.to_string(), ty.to_string()));
            self.p.skip_ws();
            if !self.p.eat(',') {
                return Ok(out);
            }
        }
    }

    fn process(&mut self, pos: Pos) -> Result<ProcessDef, ScriptError> {
        let name = self.name()?;
        self.vars.clear();
        self.var_uses.clear();
        self.p.skip_ws();
        let formals = if self.p.eat('(') {
            let d = self.decls()?;
            self.p.expect(')').map_err(|e| self.conv(e))?;
            d
        } else {
            Vec::new()
        };
        self.keyword("is")?;
        let body = self.expr()?;
        for (v, vpos) in &self.var_uses {
            if !self.vars.contains_key(v) {
                return Err(self.err_at(
                    *vpos,
                    format!("variable {v} is not declared in process {name}"),
                ));
            }
        }
        Ok(ProcessDef {
            name,
            formals,
            vars: self.vars.clone(),
            body,
            pos,
        })
    }

    fn tool(&mut self) -> Result<(String, ToolDef), ScriptError> {
        let name = self.name()?;
        self.keyword("is")?;
        self.p.expect('{').map_err(|e| self.conv(e))?;
        let mut def = ToolDef::default();
        loop {
            self.p.skip_ws();
            if self.p.eat('}') {
                return Ok((name, def));
            }
            let key = self.name()?;
            self.p.expect('=').map_err(|e| self.conv(e))?;
            self.p.skip_ws();
            let val = self.p.string().map_err(|e| self.conv(e))?;
            if key == "command" {
                def.command = Some(val);
            }
        }
    }

    fn call(&mut self) -> Result<(String, Vec<Term>), ScriptError> {
        let name = self.name()?;
        self.p.skip_ws();
        let args = if self.p.eat('(') {
            let pos = self.pos();
            let args = self.p.terms(self.arena, ')', 0).map_err(|e| self.conv(e))?;
            for a in &args {
                self.note_vars(a, pos);
            }
            args
        } else {
            Vec::new()
        };
        Ok((name, args))
    }

    fn expr(&mut self) -> Result<Arc<Proc>, ScriptError> {
        let mut left = self.choice()?;
        loop {
            self.p.skip_ws();
            if self.p.src[self.p.pos..].starts_with("||") {
                self.p.pos += 2;
                let right = self.choice()?;
                left = Arc::new(Proc::Merge(left, right));
            } else {
                return Ok(left);
            }
        }
    }

    fn choice(&mut self) -> Result<Arc<Proc>, ScriptError> {
        let mut left = self.seq()?;
        let mut kind: Option<bool> = None;
        loop {
            self.p.skip_ws();
            let rest = &self.p.src[self.p.pos..];
            let biased = if rest.starts_with("+>") {
                true
            } else if rest.starts_with('+') {
                false
            } else {
                return Ok(left);
            };
            if kind.is_some_and(|k| k != biased) {
                return Err(self.err("'+' and '+>' mixed at one level: add parentheses"));
            }
            kind = Some(biased);
            self.p.pos += if biased { 2 } else { 1 };
            let right = self.seq()?;
            left = Arc::new(if biased {
                Proc::Biased(left, right)
            } else {
                Proc::Alt(left, right)
            });
        }
    }

    fn seq(&mut self) -> Result<Arc<Proc>, ScriptError> {
        let mut left = self.iter()?;
        loop {
            self.p.skip_ws();
            if self.p.peek() == Some('.') {
                self.p.bump();
                let right = self.iter()?;
                left = Arc::new(Proc::Seq(left, right));
            } else {
                return Ok(left);
            }
        }
    }

    fn iter(&mut self) -> Result<Arc<Proc>, ScriptError> {
        let left = self.prim()?;
        self.p.skip_ws();
        if self.p.peek() != Some('*') {
            return Ok(left);
        }
        self.p.bump();
        let right = self.prim()?;
        self.p.skip_ws();
        if self.p.peek() == Some('*') {
            return Err(self.err("'*' does not chain: add parentheses"));
        }
        Ok(Arc::new(Proc::Iter(left, right)))
    }

    fn time(&mut self) -> Result<u64, ScriptError> {
        self.p.expect('(').map_err(|e| self.conv(e))?;
        let t = self.term()?;
        self.p.expect(')').map_err(|e| self.conv(e))?;
        let ms = match (t.as_int(), t.as_appl()) {
            (Some(ms), _) => Some(ms),
            (None, Some(("sec", [n]))) => n.as_int().and_then(|s| s.checked_mul(1000)),
            (None, Some(("msec", [n]))) => n.as_int(),
            _ => None,
        };
        ms.and_then(|ms| u64::try_from(ms).ok())
            .ok_or_else(|| self.err("expected a time: ms, sec(N) or msec(N)"))
    }

    fn prim(&mut self) -> Result<Arc<Proc>, ScriptError> {
        self.p.skip_ws();
        let pos = self.pos();
        if self.p.eat('(') {
            let e = self.expr()?;
            self.p.expect(')').map_err(|e| self.conv(e))?;
            return Ok(e);
        }
        let word = self.peek_ident();
        let atom = match word {
            "delta" => {
                self.p.ident();
                return Ok(Arc::new(Proc::Delta));
            }
            "if" => {
                self.p.ident();
                let cond = self.term()?;
                self.keyword("then")?;
                let then = self.expr()?;
                let els = if self.peek_ident() == "else" {
                    self.p.ident();
                    self.expr()?
                } else {
                    Arc::new(Proc::Nil)
                };
                self.keyword("fi")?;
                return Ok(Arc::new(Proc::If(cond, then, els)));
            }
            "let" => {
                self.p.ident();
                self.decls()?;
                self.keyword("in")?;
                let e = self.expr()?;
                self.keyword("endlet")?;
                return Ok(e);
            }
            "tau" => {
                self.p.ident();
                Atom {
                    op: Op::Tau,
                    args: Vec::new(),
                    delay_ms: None,
                    timeout_ms: None,
                    pos,
                }
            }
            "create" => {
                self.p.ident();
                self.p.expect('(').map_err(|e| self.conv(e))?;
                self.p.skip_ws();
                let cpos = self.pos();
                let (name, mut args) = self.call()?;
                self.creates.push((name.clone(), args.len(), cpos));
                self.p.expect(',').map_err(|e| self.conv(e))?;
                let pid = self.term()?;
                if !matches!(pid.kind(), Kind::Var { result: true, .. }) {
                    return Err(
                        self.err_at(cpos, "create's second argument is a result variable (Pid?)")
                    );
                }
                self.p.expect(')').map_err(|e| self.conv(e))?;
                args.push(pid);
                Atom {
                    op: Op::Create(name),
                    args,
                    delay_ms: None,
                    timeout_ms: None,
                    pos,
                }
            }
            w if w.starts_with(|c: char| c.is_ascii_uppercase()) => {
                let var = self.term()?;
                self.p.skip_ws();
                if !self.p.src[self.p.pos..].starts_with(":=") {
                    return Err(self.err("expected ':=' after a variable"));
                }
                self.p.pos += 2;
                let value = self.term()?;
                Atom {
                    op: Op::Assign,
                    args: vec![var, value],
                    delay_ms: None,
                    timeout_ms: None,
                    pos,
                }
            }
            w => {
                let Some((op, arity)) = Op::from_name(w) else {
                    return Err(self.err_at(
                        pos,
                        if w.is_empty() {
                            "expected a process expression".to_string()
                        } else {
                            format!("unknown atom '{w}'")
                        },
                    ));
                };
                self.p.ident();
                self.p.expect('(').map_err(|e| self.conv(e))?;
                let apos = self.pos();
                let args = self.p.terms(self.arena, ')', 0).map_err(|e| self.conv(e))?;
                for a in &args {
                    self.note_vars(a, apos);
                }
                if args.len() != arity {
                    return Err(self.err_at(
                        pos,
                        format!("{w} takes {arity} argument(s), given {}", args.len()),
                    ));
                }
                Atom {
                    op,
                    args,
                    delay_ms: None,
                    timeout_ms: None,
                    pos,
                }
            }
        };
        let mut atom = atom;
        loop {
            match self.peek_ident() {
                "delay" => {
                    self.p.ident();
                    atom.delay_ms = Some(self.time()?);
                }
                "timeout" => {
                    self.p.ident();
                    atom.timeout_ms = Some(self.time()?);
                }
                _ => break,
            }
        }
        Ok(Arc::new(Proc::Atom(Arc::new(atom))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Script, ScriptError> {
        Script::parse("t.tb", src, &mut Arena::new())
    }

    #[test]
    fn precedence_table() {
        let s = parse(
            "process P is let X : int in tau . X := 1 + tau . tau * delta || tau endlet toolbus(P)",
        )
        .unwrap();
        // (a . b + c . (d * e)) || f
        let body = &s.processes["P"].body;
        let Proc::Merge(l, _) = &**body else {
            panic!("{body:?}")
        };
        let Proc::Alt(_, r) = &**l else {
            panic!("{l:?}")
        };
        let Proc::Seq(_, it) = &**r else {
            panic!("{r:?}")
        };
        assert!(matches!(&**it, Proc::Iter(..)));
    }

    #[test]
    fn errors_name_file_line_col() {
        let e = parse("process P is\n  tau +> tau + tau\ntoolbus(P)").unwrap_err();
        assert_eq!((e.line, e.col), (2, 14), "{e}");
        assert!(e.to_string().starts_with("t.tb:2:14:"), "{e}");
        let e = parse("process P is tau * tau * tau toolbus(P)").unwrap_err();
        assert!(e.msg.contains("chain"), "{e}");
        let e = parse("process P is\n snd-msg(X) toolbus(P)").unwrap_err();
        assert_eq!(
            (e.line, e.msg.contains("X is not declared")),
            (2, true),
            "{e}"
        );
        let e = parse("process P(X : widget) is tau toolbus(P(1))").unwrap_err();
        assert!(e.msg.contains("unknown type 'widget'"), "{e}");
        let e =
            parse("process P is let Pid : int in create(Q, Pid?) endlet toolbus(P)").unwrap_err();
        assert!(e.msg.contains("no process named Q"), "{e}");
        let e = parse("process P is snd-eval(1) toolbus(P)").unwrap_err();
        assert!(e.msg.contains("takes 2"), "{e}");
    }

    #[test]
    fn tools_lets_attributes() {
        let s = parse(
            r#"tool producer is { command = "python3 p.py" }
               process Main is
                 let T : producer, V : term in
                   execute(producer, T?) . snd-eval(T, make) . (rec-value(T, V?) + tau timeout(sec(5)))
                 endlet
               toolbus(Main)"#,
        )
        .unwrap();
        assert_eq!(s.tools["producer"].command.as_deref(), Some("python3 p.py"));
        assert_eq!(s.processes["Main"].vars.len(), 2);
    }
}

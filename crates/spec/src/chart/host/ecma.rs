//! The ECMAScript datamodel (W3C SCXML §B.2) on QuickJS (`rquickjs`): one runtime and context
//! per session, variables as global properties, `_event`/`_sessionid`/`_name`/`_ioprocessors`
//! read-only, `In()`, a minimal XML DOM (`getElementsByTagName`, `getAttribute`,
//! `textContent`, …) for XML data, `Math.random` seeded from the session id and `Date` frozen
//! at the epoch (a run is a function of its inputs). Issue 15 §1.
//!
//! Every operation is a call into a small JavaScript prelude that catches exceptions and returns
//! a JSON envelope; values cross as JSON (XML values as `{"$xml": markup}` plus a parsed
//! tree). A run is stopped after [`STEP_BUDGET`](super::STEP_BUDGET) interrupt ticks and the
//! heap is limited to [`MEMORY_LIMIT`](super::MEMORY_LIMIT).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rquickjs::{Context, Runtime};

use super::{as_xml, HostModel, Init, MEMORY_LIMIT, STEP_BUDGET};
use crate::chart::value::Value;

const PRELUDE: &str = r#"
var __vs = (function () {
  var G = globalThis, geval = eval, stack = [];
  function Node(t) {
    this.nodeType = 1; this.tagName = this.nodeName = this.localName = t.n;
    this.__a = t.a; this.childNodes = [];
    for (var i = 0; i < t.c.length; i++) {
      var c = t.c[i];
      var n = typeof c === 'string' ? new Text(c) : new Node(c);
      n.parentNode = this; this.childNodes.push(n);
    }
  }
  function Text(s) { this.nodeType = 3; this.nodeName = '#text'; this.nodeValue = this.data = s; }
  Object.defineProperty(Text.prototype, 'textContent', { get: function () { return this.data; } });
  function walk(e, name, out) {
    for (var i = 0; i < e.childNodes.length; i++) {
      var c = e.childNodes[i];
      if (c.nodeType === 1) { if (name === '*' || c.tagName === name) out.push(c); walk(c, name, out); }
    }
    return out;
  }
  Node.prototype.getAttribute = function (n) { return Object.prototype.hasOwnProperty.call(this.__a, n) ? this.__a[n] : null; };
  Node.prototype.hasAttribute = function (n) { return Object.prototype.hasOwnProperty.call(this.__a, n); };
  Node.prototype.setAttribute = function (n, v) { this.__a[n] = String(v); };
  Node.prototype.getElementsByTagName = function (n) { return walk(this, n, []); };
  Object.defineProperty(Node.prototype, 'textContent', { get: function () {
    var s = ''; for (var i = 0; i < this.childNodes.length; i++) s += this.childNodes[i].textContent; return s; } });
  Object.defineProperty(Node.prototype, 'firstChild', { get: function () { return this.childNodes[0] || null; } });
  function Doc(markup, tree) {
    this.nodeType = 9; this.nodeName = '#document'; this.__vs_xml = markup;
    this.documentElement = new Node(tree); this.documentElement.parentNode = this;
    this.childNodes = [this.documentElement];
  }
  Doc.prototype.getElementsByTagName = function (n) { return walk(this, n, []); };
  Object.defineProperty(Doc.prototype, 'textContent', { get: function () { return this.documentElement.textContent; } });
  function revive(k, v) {
    if (v && typeof v === 'object' && typeof v['$xml'] === 'string' && v['$tree']) return new Doc(v['$xml'], v['$tree']);
    return v;
  }
  function out(k, v) {
    if (v && typeof v === 'object' && typeof v.__vs_xml === 'string') return { '$xml': v.__vs_xml };
    if (typeof v === 'function') return String(v);
    if (v === undefined) return null;
    return v;
  }
  function wrap(f) {
    try {
      var s = JSON.stringify(f(), out);
      return '{"ok":' + (s === undefined ? 'null' : s) + '}';
    } catch (e) {
      return JSON.stringify({ err: (e && e.name ? e.name + ': ' + e.message : String(e)) });
    }
  }
  // Expressions come from the chart (a bounded set): each is compiled once, as a function
  // evaluated in the global scope.
  var compiled = Object.create(null);
  function expr(src) {
    var f = compiled[src];
    if (f === undefined) { f = geval('(function () { return (' + src + '\n); })'); compiled[src] = f; }
    return f();
  }
  function put(loc, v) {
    G.__vs_tmp = v;
    try { geval('"use strict"; ' + loc + ' = __vs_tmp;'); } finally { G.__vs_tmp = undefined; }
  }
  var ident = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
  function ro(name, v) { Object.defineProperty(G, name, { value: v, writable: false, enumerable: true, configurable: true }); }
  G.In = function (s) { return __vs.active.indexOf(s) >= 0; };
  return {
    active: [],
    ro: ro,
    ev: function (src) { return wrap(function () { return expr(src); }); },
    cond: function (src) { return wrap(function () { return !!expr(src); }); },
    exec: function (src) { return wrap(function () { geval(src); return null; }); },
    declx: function (name, src) { return wrap(function () {
      if (!ident.test(name)) throw new SyntaxError('illegal variable name ' + name);
      G[name] = undefined; G[name] = expr(src); return null; }); },
    declu: function (name) { return wrap(function () {
      if (!ident.test(name)) throw new SyntaxError('illegal variable name ' + name);
      G[name] = undefined; return null; }); },
    declv: function (name, json) { return wrap(function () {
      if (!ident.test(name)) throw new SyntaxError('illegal variable name ' + name);
      G[name] = JSON.parse(json, revive); return null; }); },
    asgx: function (loc, src) { return wrap(function () { put(loc, expr(src)); return null; }); },
    asgv: function (loc, json) { return wrap(function () { put(loc, JSON.parse(json, revive)); return null; }); },
    setev: function (json) { return wrap(function () {
      var e = JSON.parse(json, revive);
      // A field without a value is undefined (W3C SCXML §B.2.3), still present.
      for (var k in e) if (e[k] === null) e[k] = undefined;
      ro('_event', e); return null; }); },
    fe: function (src) { return wrap(function () {
      var a = expr(src);
      if (!Array.isArray(a)) throw new TypeError('foreach over ' + typeof a + ' (expected an array)');
      stack.push(a.slice()); return a.length; }); },
    feb: function (item, index, i) { return wrap(function () {
      var a = stack[stack.length - 1];
      if (ident.test(item) && !(item in G)) G[item] = undefined;
      put(item, a[i]);
      if (index !== null) { if (ident.test(index) && !(index in G)) G[index] = undefined; put(index, i); }
      return null; }); },
    fend: function () { stack.pop(); }
  };
})();
"#;

/// An ECMAScript datamodel: a QuickJS runtime and context.
pub struct Ecma {
    // The context holds the runtime alive; both are dropped together.
    ctx: Context,
    _rt: Runtime,
    ticks: Arc<AtomicU32>,
    stopped: Arc<AtomicU32>,
}

fn js_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A value as JSON for the prelude's `revive`: XML values carry their parsed tree.
fn to_js_json(v: &Value) -> serde_json::Value {
    if let Some(markup) = as_xml(v) {
        let tree = roxmltree::Document::parse(markup)
            .map(|d| tree_json(d.root_element()))
            .unwrap_or(serde_json::Value::Null);
        return serde_json::json!({ "$xml": markup, "$tree": tree });
    }
    match v {
        Value::List(l) => serde_json::Value::Array(l.iter().map(to_js_json).collect()),
        Value::Map(m) => {
            serde_json::Value::Object(m.iter().map(|(k, x)| (k.clone(), to_js_json(x))).collect())
        }
        other => other.to_json(),
    }
}

fn tree_json(n: roxmltree::Node<'_, '_>) -> serde_json::Value {
    let attrs: serde_json::Map<String, serde_json::Value> = n
        .attributes()
        .map(|a| {
            (
                a.name().to_string(),
                serde_json::Value::String(a.value().into()),
            )
        })
        .collect();
    let children: Vec<serde_json::Value> = n
        .children()
        .filter_map(|c| {
            if c.is_element() {
                Some(tree_json(c))
            } else if c.is_text() {
                c.text().map(|t| serde_json::Value::String(t.to_string()))
            } else {
                None
            }
        })
        .collect();
    serde_json::json!({ "n": n.tag_name().name(), "a": attrs, "c": children })
}

impl Ecma {
    /// A fresh context with the prelude and the system variables.
    ///
    /// # Errors
    /// QuickJS could not allocate its runtime.
    pub fn new(session: u64, name: &str) -> Result<Ecma, String> {
        let rt = Runtime::new().map_err(|e| format!("ECMAScript runtime: {e}"))?;
        rt.set_memory_limit(MEMORY_LIMIT);
        rt.set_max_stack_size(512 << 10);
        let ticks = Arc::new(AtomicU32::new(0));
        let stopped = Arc::new(AtomicU32::new(0));
        let (t, s) = (ticks.clone(), stopped.clone());
        rt.set_interrupt_handler(Some(Box::new(move || {
            if t.fetch_add(1, Ordering::Relaxed) >= STEP_BUDGET {
                s.store(1, Ordering::Relaxed);
                true
            } else {
                false
            }
        })));
        let ctx = Context::full(&rt).map_err(|e| format!("ECMAScript context: {e}"))?;
        let mut m = Ecma {
            ctx,
            _rt: rt,
            ticks,
            stopped,
        };
        let loc = format!("#_scxml_{session}");
        let seed = session % 2_147_483_647;
        let setup = format!(
            "{PRELUDE}
(function () {{
  var s = {seed} || 1;
  Math.random = function () {{ s = (s * 48271) % 2147483647; return s / 2147483647; }};
  var D = Date;
  var F = function Date(a, b, c, d, e, f, g) {{
    if (!(this instanceof F)) return new D(0).toString();
    return arguments.length === 0 ? new D(0) : new (Function.prototype.bind.apply(D, [null].concat(Array.prototype.slice.call(arguments))))();
  }};
  F.prototype = D.prototype; F.now = function () {{ return 0; }}; F.UTC = D.UTC; F.parse = D.parse;
  globalThis.Date = F;
  Object.defineProperty(globalThis, 'performance', {{ value: {{ now: function () {{ return 0; }}, timeOrigin: 0 }},
    writable: false, enumerable: false, configurable: false }});
  var io = {{ location: {loc} }};
  __vs.ro('_event', undefined);
  __vs.ro('_sessionid', {sid});
  __vs.ro('_name', {name});
  __vs.ro('_ioprocessors', {{ 'scxml': io, 'http://www.w3.org/TR/scxml/#SCXMLEventProcessor': io }});
}})();
'{{\"ok\":null}}'",
            loc = js_str(&loc),
            sid = js_str(&session.to_string()),
            name = js_str(name),
        );
        m.call(&setup)?;
        Ok(m)
    }

    /// Runs `js` (which returns an envelope) within the budget.
    fn call(&mut self, js: &str) -> Result<Value, String> {
        self.run(Code::Script(js))
    }

    /// Calls the prelude's `__vs[name](arg)` without parsing a script (the hot path).
    fn call1(&mut self, name: &str, arg: &str) -> Result<Value, String> {
        self.run(Code::Call(name, arg))
    }

    fn run(&mut self, code: Code<'_>) -> Result<Value, String> {
        self.ticks.store(0, Ordering::Relaxed);
        self.stopped.store(0, Ordering::Relaxed);
        let r: Result<String, String> = self.ctx.with(|ctx| {
            let r = match code {
                Code::Script(js) => ctx.eval::<String, _>(js),
                Code::Call(name, arg) => ctx
                    .globals()
                    .get::<_, rquickjs::Object>("__vs")
                    .and_then(|vs| vs.get::<_, rquickjs::Function>(name))
                    .and_then(|f| f.call::<_, String>((arg.to_string(),))),
            };
            match r {
                Ok(s) => Ok(s),
                Err(e) => {
                    let caught = ctx.catch();
                    let msg = caught
                        .as_exception()
                        .and_then(rquickjs::Exception::message)
                        .unwrap_or_else(|| e.to_string());
                    Err(msg)
                }
            }
        });
        if self.stopped.load(Ordering::Relaxed) != 0 {
            return Err(format!(
                "script stopped: it ran past the step budget ({STEP_BUDGET} interrupt ticks)"
            ));
        }
        let text = r?;
        let j: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("datamodel result: {e}"))?;
        if let Some(err) = j.get("err") {
            return Err(err.as_str().unwrap_or("error").to_string());
        }
        Ok(j.get("ok").map(Value::from_json).unwrap_or(Value::Null))
    }
}

/// What [`Ecma::run`] runs.
enum Code<'a> {
    /// A script returning an envelope.
    Script(&'a str),
    /// `__vs[name](arg)`.
    Call(&'a str, &'a str),
}

/// An expression as written, without trailing semicolons (`expr="new f();"`).
fn clean(src: &str) -> &str {
    src.trim()
        .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
}

impl HostModel for Ecma {
    fn declare(&mut self, name: &str, init: Init<'_>) -> Result<(), String> {
        let js = match init {
            Init::None => format!("__vs.declu({})", js_str(name)),
            Init::Expr(src) => format!("__vs.declx({}, {})", js_str(name), js_str(clean(src))),
            Init::Value(v) => format!(
                "__vs.declv({}, {})",
                js_str(name),
                js_str(&to_js_json(v).to_string())
            ),
        };
        self.call(&js).map(drop)
    }

    fn eval(&mut self, expr: &str) -> Result<Value, String> {
        self.call1("ev", clean(expr))
    }

    fn cond(&mut self, expr: &str) -> Result<bool, String> {
        match self.call1("cond", clean(expr))? {
            Value::Bool(b) => Ok(b),
            other => Err(format!("condition gave {other}")),
        }
    }

    fn assign(
        &mut self,
        location: &str,
        value: Init<'_>,
        kind: Option<&str>,
        _attr: Option<&str>,
    ) -> Result<(), String> {
        if let Some(k) = kind {
            return Err(format!(
                "<assign type=\"{k}\"> belongs to the XPath datamodel"
            ));
        }
        let loc = js_str(location.trim());
        let js = match value {
            Init::None => format!("__vs.asgv({loc}, 'null')"),
            Init::Expr(src) => format!("__vs.asgx({loc}, {})", js_str(clean(src))),
            Init::Value(v) => format!("__vs.asgv({loc}, {})", js_str(&to_js_json(v).to_string())),
        };
        self.call(&js).map(drop)
    }

    fn script(&mut self, src: &str) -> Result<(), String> {
        self.call1("exec", src).map(drop)
    }

    fn set_event(&mut self, event: &Value) -> Result<(), String> {
        self.call(&format!(
            "__vs.setev({})",
            js_str(&to_js_json(event).to_string())
        ))
        .map(drop)
    }

    fn set_active(&mut self, active: &[&str]) {
        let list = serde_json::Value::Array(
            active
                .iter()
                .map(|s| serde_json::Value::String((*s).to_string()))
                .collect(),
        );
        let _ = self.call(&format!("__vs.active = {list}; '{{\"ok\":null}}'"));
    }

    fn foreach_start(&mut self, array: &str) -> Result<usize, String> {
        match self.call(&format!("__vs.fe({})", js_str(clean(array))))? {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Value::Number(n) if n >= 0.0 => Ok(n as usize),
            other => Err(format!("foreach length {other}")),
        }
    }

    fn foreach_bind(&mut self, item: &str, index: Option<&str>, i: usize) -> Result<(), String> {
        let index = index.map_or_else(|| "null".to_string(), |x| js_str(x.trim()));
        self.call(&format!("__vs.feb({}, {index}, {i})", js_str(item.trim())))
            .map(drop)
    }

    fn foreach_end(&mut self) {
        let _ = self.call("__vs.fend(); '{\"ok\":null}'");
    }

    fn read(&mut self, name: &str) -> Result<Value, String> {
        self.eval(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Ecma {
        Ecma::new(7, "t").expect("runtime")
    }

    #[test]
    fn expressions_scripts_and_errors() {
        let mut m = model();
        m.declare("x", Init::Expr("1")).unwrap();
        assert_eq!(m.eval("x + 1").unwrap(), Value::Number(2.0));
        assert!(m.cond("++x == 2").unwrap());
        m.script("function f(a) { return a * 10; }").unwrap();
        assert_eq!(m.eval("f(x)").unwrap(), Value::Number(20.0));
        // Errors are values, not panics.
        assert!(m
            .eval("nosuch.field")
            .unwrap_err()
            .contains("ReferenceError"));
        assert!(m.eval("(((").unwrap_err().contains("SyntaxError"));
        assert!(m.script("throw 5").is_err());
        // Undeclared locations and system variables cannot be assigned.
        assert!(m.assign("undeclared", Init::Expr("1"), None, None).is_err());
        assert!(m.assign("_sessionid", Init::Expr("1"), None, None).is_err());
        assert_eq!(m.eval("_sessionid").unwrap(), Value::str("7"));
        assert!(m.cond("'foo'").unwrap());
    }

    #[test]
    fn an_endless_loop_is_stopped_and_the_model_stays_usable() {
        let mut m = model();
        let e = m.script("while (true) {}").unwrap_err();
        assert!(e.contains("step budget"), "{e}");
        let e = m.eval("(function f() { for (;;) { try { while(1){} } catch (e) {} } })()");
        assert!(e.is_err());
        assert_eq!(m.eval("1 + 1").unwrap(), Value::Number(2.0));
    }

    #[test]
    fn no_host_time_or_randomness() {
        let (mut a, mut b) = (model(), model());
        assert_eq!(a.eval("Date.now()").unwrap(), Value::Number(0.0));
        assert_eq!(a.eval("new Date().getTime()").unwrap(), Value::Number(0.0));
        assert_eq!(a.eval("performance.now()").unwrap(), Value::Number(0.0));
        assert_eq!(
            a.eval("new Date(2020, 1, 2).getFullYear()").unwrap(),
            Value::Number(2020.0)
        );
        // Nothing of the host: no modules, no IO, no timers.
        assert_eq!(
            a.eval("[typeof std, typeof os, typeof setTimeout, typeof require]")
                .unwrap(),
            Value::list(vec![Value::str("undefined"); 4])
        );
        assert_eq!(
            a.eval("[Math.random(), Math.random()]").unwrap(),
            b.eval("[Math.random(), Math.random()]").unwrap()
        );
    }

    #[test]
    fn xml_values_have_a_dom() {
        let mut m = model();
        let v = super::super::xml_value("<books><book title='a'/><book title='b'>x</book></books>");
        m.declare("d", Init::Value(&v)).unwrap();
        assert_eq!(
            m.eval("d.getElementsByTagName('book')[1].getAttribute('title')")
                .unwrap(),
            Value::str("b")
        );
        assert_eq!(m.eval("d").unwrap(), v);
        m.set_active(&["s1"]);
        assert!(m.cond("In('s1') && !In('s2')").unwrap());
    }
}

//! Any bytes as an expression, condition, location, script and inline content of the
//! ECMAScript and XPath datamodels (`chart::host`, issue 15 §1): every call returns a value or
//! an error, never panics, and a model stays usable after any failure (a script that never
//! ends is stopped by the step budget).
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_spec::chart::host::{self, Datamodel, HostModel, Init};
use viastack_spec::chart::Value;

fn exercise(m: &mut dyn HostModel, kind: Datamodel, src: &str) {
    let _ = m.declare("x", Init::Expr(src));
    let _ = m.eval(src);
    let _ = m.cond(src);
    let _ = m.script(src);
    let _ = m.assign(src, Init::Expr("1"), None, None);
    let _ = m.assign("$x", Init::Expr(src), Some("lastchild"), None);
    let v = host::text_value(kind, src);
    let _ = m.declare("y", Init::Value(&v));
    let _ = m.set_event(&Value::map(
        [("data".to_string(), v), ("name".to_string(), Value::str(src))]
            .into_iter()
            .collect(),
    ));
    if let Ok(n) = m.foreach_start(src) {
        for i in 0..n.min(4) {
            let _ = m.foreach_bind(src, Some("i"), i);
        }
        m.foreach_end();
    }
    // Still usable.
    assert!(m.eval("1").is_ok());
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    for kind in [Datamodel::Ecmascript, Datamodel::Xpath] {
        let mut m = host::create(kind, 1, "fuzz").expect("a datamodel");
        exercise(m.as_mut(), kind, &src);
    }
});

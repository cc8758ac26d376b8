
/// Hostile inputs straight to both datamodels (what the `spec_datamodels` fuzz target does
/// with any bytes): errors, never panics, and the model stays usable.
#[test]
fn hostile_inputs_are_errors_and_the_models_stay_usable() {
    use viastack_spec::chart::host::{self, Datamodel, Init};
    let inputs = [
        "",
        "(((",
        "}{",
        "function f() { f(); } f()",
        "var a = []; for (;;) a.push(new Array(100000).fill(1))",
        "while (true) {}",
        "'\u{0}'",
        "$",
        "//*[",
        "<a><b></a>",
        "<a xmlns='urn:x'><b c='1'/></a>",
        "_event = 1",
        "\"use strict\"; undeclared = 1",
        "throw {toString: function () { throw 1; }}",
        "$x/../../..",
        "count(//*) > 0",
    ];
    for kind in [Datamodel::Ecmascript, Datamodel::Xpath] {
        let mut m = host::create(kind, 1, "t").unwrap();
        for src in inputs {
            let _ = m.declare("x", Init::Expr(src));
            let _ = m.eval(src);
            let _ = m.cond(src);
            let _ = m.script(src);
            let _ = m.assign(src, Init::Expr("1"), None, None);
            let v = host::text_value(kind, src);
            let _ = m.declare("y", Init::Value(&v));
            let _ = m.assign("$x", Init::Value(&v), Some("lastchild"), None);
            if let Ok(n) = m.foreach_start(src) {
                for i in 0..n.min(3) {
                    let _ = m.foreach_bind(src, Some("i"), i);
                }
                m.foreach_end();
            }
            assert_eq!(m.eval("1 + 1").unwrap(), Value::Number(2.0), "{kind:?} after {src}");
        }
    }
}

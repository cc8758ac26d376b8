//! Any bytes as a datamodel expression and as a location: parsing returns a tree or a syntax
//! error whose offset lies inside the text; evaluating the tree returns a value or an error,
//! never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_spec::chart::expr::{self, AnyNames, EventField, Scope, System};
use viastack_spec::chart::Value;

struct Vars(Vec<Option<Value>>);

impl Scope for Vars {
    fn var(&self, slot: u32) -> Option<&Value> {
        self.0.get(slot as usize).and_then(Option::as_ref)
    }
    fn var_name(&self, _slot: u32) -> &str {
        "v"
    }
    fn system(&self, _v: System) -> Option<Value> {
        Some(Value::str("sys"))
    }
    fn event_field(&self, _f: EventField) -> Option<Value> {
        Some(Value::Number(1.0))
    }
    fn in_state(&self, index: u32) -> bool {
        index % 2 == 0
    }
}

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let chars = src.chars().count();
    let mut names = AnyNames::default();
    match expr::parse(&src, &mut names) {
        Ok(e) => {
            let vars = Vars(
                (0..names.0.len())
                    .map(|i| match i % 4 {
                        0 => Some(Value::Number(i as f64)),
                        1 => Some(Value::str("s")),
                        2 => Some(Value::list(vec![Value::Null, Value::Bool(true)])),
                        _ => None,
                    })
                    .collect(),
            );
            let _ = expr::eval(&e, &vars);
            let _ = expr::eval_cond(&e, &vars);
        }
        Err(err) => assert!(err.offset <= chars, "offset {} of {chars}", err.offset),
    }
    let _ = expr::parse_location(&src, &mut names);
});

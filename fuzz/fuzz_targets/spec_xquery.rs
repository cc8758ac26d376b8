//! Any text as a composite event's `<XQuery>` (viastack_spec::service::xquery): parsing and
//! translation never panic, every error's offset lies inside the text, and whatever
//! translates is a formula the first-order-logic parser accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use viastack_spec::service::logic;
use viastack_spec::service::xquery::{self, Events};

struct Ev;

impl Events for Ev {
    fn basic(&self, name: &str) -> Option<bool> {
        match name {
            "ack" | "payload" => Some(false),
            "to" => Some(true),
            _ => None,
        }
    }
    fn names(&self) -> String {
        "ack, payload, to".into()
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = xquery::check_syntax(text);
    match xquery::translate(text, &Ev) {
        Ok(formula) => {
            if let Err(e) = logic::parse(&formula) {
                panic!("translation of {text:?} is not a formula: {formula:?}: {e}");
            }
        }
        Err(e) => assert!(e.offset <= text.len(), "offset {} past the end", e.offset),
    }
});

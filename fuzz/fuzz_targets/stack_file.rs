//! Any bytes as a stack file: parsing returns a model or diagnostics, never panics, and every
//! diagnostic's line lies inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let catalog = viastack_stack::standard_catalog();
    if let Err(diags) = viastack_stack::parse("fuzz.toml", &src, &catalog) {
        let lines = src.lines().count().max(1);
        for d in &diags.0 {
            assert!(d.line >= 1 && d.line <= lines + 1, "line {} of {}", d.line, lines);
        }
    }
});

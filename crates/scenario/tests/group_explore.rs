#![allow(clippy::unwrap_used)]
use viastack_scenario::group::Entry;
use viastack_scenario::{run_recorded, RunOptions};
#[test]
#[ignore]
fn explore() {
    let path = std::env::var("GROUP_FILE").unwrap();
    let src = std::fs::read_to_string(&path).unwrap();
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("x.toml", &src, &catalog).unwrap();
    let (r, rec) = run_recorded(&file, &catalog, &RunOptions::default(), |_| {}).unwrap();
    println!("{r}");
    for (n, incs) in &rec.group.nodes {
        for (k, inc) in incs.iter().enumerate() {
            println!("{n}.{k} booted {}", inc.booted);
            let mut d = 0;
            let mut s = 0;
            for e in &inc.entries {
                match e {
                    Entry::View { at, id, members } => {
                        println!("   [{d} delivered, {s} sent] {at} view {id:?} {members:?}");
                        d = 0;
                        s = 0;
                    }
                    Entry::Delivered(_) => d += 1,
                    Entry::Sent(_) => s += 1,
                }
            }
            println!("   [{d} delivered, {s} sent] end");
        }
    }
}

//! Properties in, protocol out (seed 004, "Advantages of Composite Protocols": "Properties-in
//! Protocol-out"; its property-oriented and control-oriented components): what each layer kind provides, requires and excludes, and where it sits —
//! declared once here, beside the catalog, shown by `viastack layers` and docs/LAYERS.md — and
//! [`compose`], which builds a stack file from a set of wanted properties.
//!
//! **Property-oriented** components give the delivered messages a property (integrity,
//! multicast delivery, reliability, order); their order in the stack matters, so each has a
//! slot (bottom = 0) and a stack lists them by slot. **Control-oriented** components run a
//! control protocol beside the data (routing, group membership); they share one slot and their
//! order among themselves does not matter (the composer lists them in catalog order).
//!
//! A composition picks one provider per wanted property, adds what the providers require
//! (transitively), and refuses — with the reason — a property nobody provides, a requirement
//! nobody provides, two properties that exclude each other, or two components in one slot.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::catalog::Catalog;

/// How a component takes part in a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orientation {
    /// Gives the messages a property: its place in the stack matters (its slot).
    Property,
    /// Runs a control protocol beside the data: its order among the other control components
    /// of its slot does not matter.
    Control,
}

impl fmt::Display for Orientation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Orientation::Property => "property-oriented",
            Orientation::Control => "control-oriented",
        })
    }
}

/// One layer kind's composition declaration.
#[derive(Debug, Clone, Copy)]
pub struct Composition {
    /// The layer kind (`kind = "…"`).
    pub kind: &'static str,
    /// Property- or control-oriented.
    pub orientation: Orientation,
    /// Its place, bottom = 0: a stack lists its components by slot; property-oriented
    /// components of one slot are alternatives (one per stack), control-oriented ones share it.
    pub slot: u8,
    /// The properties it provides.
    pub provides: &'static [&'static str],
    /// The properties it needs from other components of the stack.
    pub requires: &'static [&'static str],
    /// Properties that cannot be in one stack with it.
    pub excludes: &'static [&'static str],
}

/// The properties a composition can be asked for, with what each means.
pub const PROPERTIES: &[(&str, &str)] = &[
    (
        "link",
        "datagrams travel one link of a node's interface (a router or host with several links)",
    ),
    (
        "integrity",
        "damaged datagrams are dropped, never delivered",
    ),
    ("routing", "multicast routes per source network (DVMRP)"),
    ("membership", "hosts join and leave groups (IGMPv2)"),
    (
        "multicast",
        "a message reaches every host joined to the group, across routers",
    ),
    (
        "reliable",
        "every message reaches every receiver that stays joined (loss repaired)",
    ),
    (
        "ordered",
        "each receiver delivers a sender's messages in the order they were sent",
    ),
    ("unicast", "a message goes to one peer"),
];

/// Properties no stack provides together.
pub const EXCLUSIVE: &[(&str, &str)] = &[("multicast", "unicast")];

/// Properties that are refused without another one asked for explicitly (not silently added):
/// (property, the one it needs, why).
pub const ASKED_TOGETHER: &[(&str, &str, &str)] = &[(
    "ordered",
    "reliable",
    "without repair a lost message would hold back every later one",
)];

/// The declarations, one per composable layer kind (DESIGN.md §6.10: the one declaration).
pub const COMPOSITIONS: &[Composition] = &[
    Composition {
        kind: "interface",
        orientation: Orientation::Property,
        slot: 0,
        provides: &["link"],
        requires: &[],
        excludes: &["unicast"],
    },
    Composition {
        kind: "checksum",
        orientation: Orientation::Property,
        slot: 1,
        provides: &["integrity"],
        requires: &[],
        excludes: &[],
    },
    Composition {
        kind: "dvmrp",
        orientation: Orientation::Control,
        slot: 2,
        provides: &["routing"],
        requires: &["link"],
        excludes: &[],
    },
    Composition {
        kind: "igmp",
        orientation: Orientation::Control,
        slot: 2,
        provides: &["membership"],
        requires: &["link"],
        excludes: &[],
    },
    Composition {
        kind: "mcast-reliable",
        orientation: Orientation::Property,
        slot: 3,
        provides: &["reliable"],
        requires: &["multicast"],
        excludes: &[],
    },
    Composition {
        kind: "mcast-order",
        orientation: Orientation::Property,
        slot: 4,
        provides: &["ordered"],
        requires: &["multicast", "reliable"],
        excludes: &[],
    },
    Composition {
        kind: "mcast-forward",
        orientation: Orientation::Property,
        slot: 5,
        provides: &["multicast"],
        requires: &["routing", "membership", "link"],
        excludes: &["unicast"],
    },
    Composition {
        kind: "reliable-fifo",
        orientation: Orientation::Property,
        slot: 6,
        provides: &["unicast", "reliable", "ordered"],
        requires: &[],
        excludes: &["multicast"],
    },
];

/// The declaration of layer kind `kind`, if it has one.
pub fn composition(kind: &str) -> Option<&'static Composition> {
    COMPOSITIONS.iter().find(|c| c.kind == kind)
}

/// Why properties cannot be composed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// Nothing was asked for.
    #[error("no property asked for (known: {0})")]
    Empty(String),
    /// A property nobody knows.
    #[error("`{0}` is not a property of the layer catalog (known: {1})")]
    Unknown(String, String),
    /// No registered component provides a property in a combination that holds.
    #[error("{0}")]
    Refused(String),
}

/// A composed stack: its components bottom first and the stack file's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    /// The layer kinds, bottom first.
    pub kinds: Vec<&'static str>,
    /// Why each is there: the property it provides that was asked for or required.
    pub reasons: Vec<String>,
    /// The stack file.
    pub text: String,
}

fn known() -> String {
    PROPERTIES
        .iter()
        .map(|(p, _)| *p)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The requirements of `chosen` that no member provides: the reason of the first.
fn unmet(chosen: &[&'static Composition]) -> Result<(), String> {
    let provided: BTreeSet<&str> = chosen
        .iter()
        .flat_map(|c| c.provides.iter().copied())
        .collect();
    for c in chosen {
        for r in c.requires {
            if !provided.contains(r) {
                return Err(format!(
                    "`{}` requires `{r}`, which nothing provides",
                    c.kind
                ));
            }
        }
    }
    Ok(())
}

/// Exclusions violated and property-oriented alternatives in one slot: the reason of the
/// first.
fn conflicts(chosen: &[&'static Composition]) -> Result<(), String> {
    let provided: BTreeMap<&str, &str> = chosen
        .iter()
        .flat_map(|c| c.provides.iter().map(move |p| (*p, c.kind)))
        .collect();
    for c in chosen {
        for x in c.excludes {
            if let Some(by) = provided.get(x) {
                return Err(format!(
                    "`{}` excludes `{x}` (provided by `{by}`): they cannot be in one stack",
                    c.kind
                ));
            }
        }
    }
    let mut slots: BTreeMap<u8, &str> = BTreeMap::new();
    for c in chosen
        .iter()
        .filter(|c| c.orientation == Orientation::Property)
    {
        if let Some(other) = slots.insert(c.slot, c.kind) {
            return Err(format!(
                "`{other}` and `{}` are alternatives (the same place in the stack)",
                c.kind
            ));
        }
    }
    Ok(())
}

/// Every way of providing `wanted` and what it requires with components of `catalog`: the
/// smallest consistent one, or the reason of the first refusal.
fn choose(
    wanted: &BTreeSet<String>,
    catalog: &Catalog,
) -> Result<Vec<&'static Composition>, String> {
    let available: Vec<&'static Composition> = COMPOSITIONS
        .iter()
        .filter(|c| catalog.get(c.kind).is_some())
        .collect();
    let mut best: Option<Vec<&'static Composition>> = None;
    let mut first_refusal: Option<String> = None;
    // Depth-first over choices of a provider for each property still needed.
    fn search(
        needed: Vec<String>,
        chosen: Vec<&'static Composition>,
        available: &[&'static Composition],
        best: &mut Option<Vec<&'static Composition>>,
        refusal: &mut Option<String>,
    ) {
        let provided: BTreeSet<&str> = chosen
            .iter()
            .flat_map(|c| c.provides.iter().copied())
            .collect();
        let missing: Vec<String> = needed
            .iter()
            .filter(|p| !provided.contains(p.as_str()))
            .cloned()
            .collect();
        let Some(next) = missing.first() else {
            match unmet(&chosen).and_then(|()| conflicts(&chosen)) {
                Ok(()) => {
                    if best.as_ref().is_none_or(|b| chosen.len() < b.len()) {
                        *best = Some(chosen);
                    }
                }
                Err(why) => {
                    refusal.get_or_insert(why);
                }
            }
            return;
        };
        let providers: Vec<&&'static Composition> = available
            .iter()
            .filter(|c| c.provides.contains(&next.as_str()))
            .collect();
        // Declared providers this catalog does not register.
        let absent: Vec<&str> = COMPOSITIONS
            .iter()
            .filter(|c| c.provides.contains(&next.as_str()))
            .filter(|c| !available.iter().any(|a| a.kind == c.kind))
            .map(|c| c.kind)
            .collect();
        let mut fits = false;
        for c in providers {
            if chosen.iter().any(|x| x.kind == c.kind) {
                continue;
            }
            let mut n = needed.clone();
            n.extend(c.requires.iter().map(|r| (*r).to_string()));
            let mut ch = chosen.clone();
            ch.push(c);
            if let Err(why) = conflicts(&ch) {
                refusal.get_or_insert(why);
                continue;
            }
            fits = true;
            search(n, ch, available, best, refusal);
        }
        if !fits {
            // The most telling reason: it overrides a conflict met on the way.
            if !absent.is_empty() {
                *refusal = Some(format!(
                    "`{next}` needs `{}` here, which this catalog does not register",
                    absent.join("` or `")
                ));
            } else if refusal.is_none() {
                *refusal = Some(format!("no component provides `{next}`"));
            }
        }
    }
    search(
        wanted.iter().cloned().collect(),
        Vec::new(),
        &available,
        &mut best,
        &mut first_refusal,
    );
    best.ok_or_else(|| first_refusal.unwrap_or_else(|| "no composition holds".into()))
}

/// Builds a stack file providing `properties` from the components of `catalog`.
///
/// # Errors
/// [`ComposeError`] with the reason: nothing asked, an unknown property, or no consistent
/// choice of components (a property or requirement nobody provides, mutually exclusive
/// properties, alternatives in one place).
pub fn compose(properties: &[String], catalog: &Catalog) -> Result<Composed, ComposeError> {
    if properties.is_empty() {
        return Err(ComposeError::Empty(known()));
    }
    let mut wanted = BTreeSet::new();
    for p in properties {
        if !PROPERTIES.iter().any(|(k, _)| k == p) {
            return Err(ComposeError::Unknown(p.clone(), known()));
        }
        wanted.insert(p.clone());
    }
    // Refusals stated by the declarations themselves, before any search.
    for &(a, b) in EXCLUSIVE {
        if wanted.contains(a) && wanted.contains(b) {
            return Err(ComposeError::Refused(format!(
                "`{a}` and `{b}` exclude each other: no stack provides both"
            )));
        }
    }
    for (p, needs, why) in ASKED_TOGETHER {
        if wanted.contains(*p) && !wanted.contains(*needs) {
            return Err(ComposeError::Refused(format!(
                "`{p}` needs `{needs}`: {why} (ask for `{needs} {p} …`)"
            )));
        }
    }
    let mut chosen = choose(&wanted, catalog).map_err(ComposeError::Refused)?;
    chosen.sort_by_key(|c| c.slot);
    let reasons = chosen
        .iter()
        .map(|c| {
            let why: Vec<&str> = c.provides.to_vec();
            let asked = why.iter().any(|p| wanted.contains(*p));
            format!(
                "{} ({}, slot {}): provides {}{}",
                c.kind,
                c.orientation,
                c.slot,
                why.join(", "),
                if asked { "" } else { " (required)" }
            )
        })
        .collect();
    let text = stack_text(properties, &chosen);
    Ok(Composed {
        kinds: chosen.iter().map(|c| c.kind).collect(),
        reasons,
        text,
    })
}

/// How many interfaces a composed multi-link stack gets (a router of the 15-node network has
/// up to four links).
const INTERFACES: u16 = 4;

/// The stack file for `chosen` (bottom first).
fn stack_text(asked: &[String], chosen: &[&'static Composition]) -> String {
    let mut out = format!(
        "# Composed by `viastack compose {}` from the layer catalog's declared properties\n\
         # (seed 004, properties-in protocol-out). Components, bottom first:\n",
        asked.join(" ")
    );
    for c in chosen {
        out += &format!(
            "#   {:<15} {:<18} slot {}  provides {}\n",
            c.kind,
            c.orientation.to_string(),
            c.slot,
            c.provides.join(", ")
        );
    }
    let name = |kind: &str| kind.replace('-', "_");
    let multi_link = chosen.iter().any(|c| c.kind == "interface");
    let upper: Vec<&&'static Composition> =
        chosen.iter().filter(|c| c.kind != "interface").collect();
    if multi_link {
        out += "# One channel per interface (`ifk` on port k); each multicast component is one\n\
                # session per node bound into every interface channel.\n";
        for k in 0..INTERFACES {
            out += &format!("\n[layers.if{k}_dev]\nkind = \"interface\"\nport = {k}\n");
        }
    } else {
        out += "\n[layers.dev]\nkind = \"device\"\n";
    }
    for c in &upper {
        out += &format!("\n[layers.{}]\nkind = \"{}\"\n", name(c.kind), c.kind);
        if c.kind == "mcast-forward" {
            out += "group = \"239.1.1.1\"\n";
        }
    }
    let shared: Vec<&&&'static Composition> = upper
        .iter()
        .filter(|c| multi_link && c.kind != "checksum")
        .collect();
    let channels: Vec<(String, String)> = if multi_link {
        (0..INTERFACES)
            .map(|k| (format!("if{k}"), format!("if{k}_dev")))
            .collect()
    } else {
        vec![("data".into(), "dev".into())]
    };
    for (ch, dev) in &channels {
        let mut layers = vec![format!("\"{dev}\"")];
        layers.extend(upper.iter().map(|c| format!("\"{}\"", name(c.kind))));
        out += &format!("\n[qos.{ch}]\nlayers = [{}]\n", layers.join(", "));
    }
    if !shared.is_empty() {
        out += "\n";
        for c in &shared {
            out += &format!(
                "[sessions.{}_s]\nlayer = \"{}\"\n",
                name(c.kind),
                name(c.kind)
            );
        }
    }
    for (ch, _) in &channels {
        out += &format!("\n[channels.{ch}]\nqos = \"{ch}\"\n");
        if !shared.is_empty() {
            let bind: Vec<String> = shared
                .iter()
                .map(|c| format!("{} = \"{}_s\"", name(c.kind), name(c.kind)))
                .collect();
            out += &format!("bind = {{ {} }}\n", bind.join(", "));
        }
    }
    out
}

/// The declarations as Markdown (a section of docs/LAYERS.md).
pub fn markdown() -> String {
    let mut out = String::from(
        "## Composition (`viastack compose`)\n\n\
         What each composable layer kind provides, requires and excludes, and its place \
         (slot, bottom = 0): property-oriented components are ordered by slot; \
         control-oriented ones share their slot in any order (seed 004, properties-in \
         protocol-out).\n\n\
         | kind | orientation | slot | provides | requires | excludes |\n\
         |---|---|---|---|---|---|\n",
    );
    let list = |v: &[&str]| {
        if v.is_empty() {
            "—".to_string()
        } else {
            v.iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    for c in COMPOSITIONS {
        out += &format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            c.kind,
            c.orientation,
            c.slot,
            list(c.provides),
            list(c.requires),
            list(c.excludes)
        );
    }
    out += "\nProperties:\n\n";
    for (p, what) in PROPERTIES {
        out += &format!("- `{p}`: {what}\n");
    }
    out += "\nRefused combinations:\n\n";
    for &(a, b) in EXCLUSIVE {
        out += &format!("- `{a}` with `{b}`: no stack provides both\n");
    }
    for (p, needs, why) in ASKED_TOGETHER {
        out += &format!("- `{p}` without `{needs}`: {why}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::standard::standard_catalog;

    fn props(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Kinds declared here that the standard catalog does not register (yet): none.
    const PENDING: &[&str] = &[];

    #[test]
    fn every_declaration_names_a_registered_kind_and_a_known_property() {
        let catalog = standard_catalog();
        for c in COMPOSITIONS {
            assert!(
                catalog.get(c.kind).is_some() || PENDING.contains(&c.kind),
                "{} is not in the catalog",
                c.kind
            );
            for p in c.provides.iter().chain(c.requires).chain(c.excludes) {
                assert!(PROPERTIES.iter().any(|(k, _)| k == p), "{}: {p}", c.kind);
            }
        }
    }

    #[test]
    fn multicast_is_forwarding_over_routing_and_membership_over_interfaces_and_it_parses() {
        let catalog = standard_catalog();
        let c = compose(&props("integrity multicast"), &catalog).unwrap();
        assert_eq!(
            c.kinds,
            ["interface", "checksum", "dvmrp", "igmp", "mcast-forward"]
        );
        let file = crate::parse("composed.toml", &c.text, &catalog).unwrap();
        assert_eq!(file.channels.len(), usize::from(INTERFACES));
        // Without integrity no checksum.
        let c = compose(&props("multicast"), &catalog).unwrap();
        assert_eq!(c.kinds, ["interface", "dvmrp", "igmp", "mcast-forward"]);
        crate::parse("composed.toml", &c.text, &catalog).unwrap();
    }

    #[test]
    fn reliable_ordered_multicast_adds_repair_and_order_below_forwarding() {
        let catalog = standard_catalog();
        match compose(&props("reliable ordered multicast"), &catalog) {
            Ok(c) => {
                assert_eq!(
                    c.kinds,
                    [
                        "interface",
                        "dvmrp",
                        "igmp",
                        "mcast-reliable",
                        "mcast-order",
                        "mcast-forward"
                    ]
                );
                crate::parse("composed.toml", &c.text, &catalog).unwrap();
            }
            // Before h-rmc's layers are registered the refusal names them.
            Err(e) => {
                assert!(catalog.get("mcast-reliable").is_none(), "{e}");
                let e = e.to_string();
                assert!(e.contains("does not register"), "{e}");
                assert!(
                    e.contains("mcast-order") || e.contains("mcast-reliable"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn reliable_ordered_unicast_is_reliable_fifo_alone() {
        let catalog = standard_catalog();
        let c = compose(&props("reliable ordered unicast"), &catalog).unwrap();
        assert_eq!(c.kinds, ["reliable-fifo"]);
        crate::parse("composed.toml", &c.text, &catalog).unwrap();
    }

    #[test]
    fn impossible_combinations_are_refused_with_the_reason() {
        let catalog = standard_catalog();
        let e = compose(&props("ordered multicast"), &catalog).unwrap_err();
        assert!(e.to_string().contains("`ordered` needs `reliable`"), "{e}");
        let e = compose(&props("multicast unicast"), &catalog).unwrap_err();
        assert!(e.to_string().contains("exclude each other"), "{e}");
        let e = compose(&props("reliable multicast teleport"), &catalog).unwrap_err();
        assert!(
            e.to_string().contains("`teleport` is not a property"),
            "{e}"
        );
        let e = compose(&[], &catalog).unwrap_err();
        assert!(matches!(e, ComposeError::Empty(_)), "{e}");
        // A requirement nobody registers: a catalog without IGMP cannot multicast.
        let mut small = Catalog::new();
        for k in standard_catalog().kinds() {
            if k.name != "igmp" {
                small.register(*k).unwrap();
            }
        }
        let e = compose(&props("multicast"), &small).unwrap_err();
        assert!(e.to_string().contains("igmp"), "{e}");
    }

    #[test]
    fn control_components_share_a_slot_property_components_do_not() {
        for a in COMPOSITIONS {
            for b in COMPOSITIONS {
                if a.kind != b.kind && a.slot == b.slot && a.orientation == Orientation::Property {
                    assert_eq!(b.orientation, Orientation::Property);
                }
            }
        }
        assert_eq!(
            composition("dvmrp").unwrap().slot,
            composition("igmp").unwrap().slot
        );
        assert!(markdown().contains("| `igmp` | control-oriented | 2 |"));
    }
}

//! Stack files: composing, checking and building protocol stacks from one TOML file.
//!
//! Realizes issue 2 §3 and DESIGN.md §6.10 (one declaration of a layer's parameters drives
//! parsing, validation, `viastack check` output and the generated docs):
//! - [`catalog`]: the layer kinds a file may name, their parameters ([`ParamSpec`]) and
//!   factories; [`Catalog::params_markdown`] renders the parameter reference;
//! - [`units`]: durations, byte sizes and bandwidths as written in files;
//! - [`model`]: the validated file as plain data ([`StackFile`], [`Scenario`], …);
//! - [`parse()`]: TOML → [`StackFile`], or every problem as `file:line: message`
//!   ([`Diagnostics`]); no input makes it panic (DESIGN.md §4.6);
//! - [`secret`]: key files and environment variables that layer parameters name, read with
//!   owner-only permissions and never printed;
//! - [`build`]: a node's [`Kernel`](viastack_kernel::Kernel) with every channel bound and
//!   started ([`build_node`]), and the route tables `viastack check` prints ([`route_tables`]).
//!
//! The file format is documented in `docs/STACK_FILES.md`.
#![deny(unsafe_code)]

pub mod build;
pub mod catalog;
pub mod compose;
pub mod diag;
pub mod model;
pub mod parse;
pub mod secret;
pub mod standard;
mod tree;
pub mod units;

pub use build::{
    build_node, channel_bindings, qos_tables, route_tables, BuiltNode, QosTable, SlotBinding,
};
pub use catalog::{
    BuildEnv, BuildError, BuildFn, Catalog, CatalogError, LayerKind, ParamError, ParamKind,
    ParamSpec, ParamValue, Params,
};
pub use diag::{Diagnostic, Diagnostics};
pub use model::{
    ChannelDecl, CrashSpec, Expect, LayerDecl, LinkFailureSpec, LinkOverride, LinkSpec,
    NodeTopology, PartitionSpec, Pattern, QosDecl, Role, Scenario, SessionDecl, StackFile,
    TopoLinkDecl, TopoNodeDecl, TopologyDecl, Workload,
};
pub use parse::parse;
pub use secret::{Secret, SecretError};
pub use standard::standard_catalog;

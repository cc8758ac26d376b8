//! # viastack: protocol stacks for applications
//!
//! Open a node of a stack file on real sockets, send bytes on its channels, receive messages
//! and the stack's notices, read its counters — or run the same application logic in the
//! simulator with virtual time and injected faults.
//!
//! ```no_run
//! use viastack::{Deployment, Node, NodeEvent, NodeId};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let deployment = Deployment::from_file("deploy.toml")?.with_id(NodeId(0));
//! let node = Node::open("stacks/reliable.toml", deployment)?;
//! let data = node.channel("data")?;
//! data.send(NodeId(1), b"hello".to_vec())?;
//! while let Some(event) = node.recv() {
//!     match event {
//!         NodeEvent::Message(m) => println!("{} says {:?}", m.from, m.payload),
//!         NodeEvent::Notice(n) => println!("notice: {n:?}"),
//!     }
//! #   break;
//! }
//! node.close()?;
//! # Ok(()) }
//! ```
//!
//! ## The parts
//! - [`Deployment`]: where every node is (a file or code), which one this process is.
//! - [`Node`] / [`NodeBuilder`]: the stack's event loop over UDP or TCP, on a thread of its
//!   own ([`NodeBuilder::open`]) or as a task of your tokio runtime ([`NodeBuilder::open_on`]);
//!   per channel a [`Channel`] handle with blocking ([`Channel::send`], [`Channel::try_send`]) and
//!   async ([`Channel::send_async`]) sends; [`Node::recv`] and [`Node::recv_async`] for
//!   [`NodeEvent`]s; bounded queues both ways (back-pressure, never unbounded growth);
//!   [`Node::close`] settles or reports every message.
//! - [`NodeEvent`], [`Notice`], [`FailureKind`]: messages with their source, and the notices
//!   (`Suspect`, `Alive`, failures naming the [`Tag`]s `send` returned).
//! - [`Metrics`]: per-layer, per-channel and transport counters, also as Prometheus text.
//! - [`Application`] + [`app::run`] + [`sim::Harness`]: application logic written once, run on
//!   sockets or in the simulator over seeds.
//! - [`NodeBuilder::register`] / [`LayerKind`]: the application's own layers in stack files.
//! - [`NodeCore`]: the sans-IO node both drivers share, for custom drivers.
//! - [`overlay::OverlaySocket`]: an application's membership in an overlay network (join,
//!   leave, send with a delivery mode and a service, receive, neighbourhood changes and
//!   stability, a status snapshot).
//! - [`group::Group`]: an application's membership in a virtual-synchrony group (join, leave,
//!   send to the group, receive its messages in total order and its views).
//!
//! The application guide is `docs/APPLICATIONS.md`; stack files are described in
//! `docs/STACK_FILES.md`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod app;
pub mod deployment;
pub mod engine;
pub mod event;
mod event_loop;
pub mod group;
pub mod metrics;
pub mod node;
pub mod overlay;
pub mod sim;

pub use app::{AppNode, Application};
pub use deployment::{Deployment, DeploymentError};
pub use engine::{NodeCore, SendError};
pub use event::{FailureKind, NodeEvent, Notice, Received};
pub use group::{Group, GroupError, GroupEvent, GroupMessage, View};
pub use metrics::{ChannelStats, Metrics};
pub use node::{Channel, CloseReport, Events, Node, NodeBuilder, OpenError, RecvError};
pub use viastack_kernel::{Duration, Instant, NodeId, Tag};
/// Quantities written as stack files write them (`"20ms"`, `"1.5s"`, `"64KiB"`), for an
/// application's own options ([`units::parse_duration`], [`units::parse_bytes`]).
pub use viastack_stack::units;
pub use viastack_stack::{BuildError, Catalog, LayerKind, ParamKind, ParamSpec, Params};

/// The kernel, for application-defined layers ([`viastack_kernel::Layer`],
/// [`viastack_kernel::Session`], events, messages).
pub use viastack_kernel as kernel;

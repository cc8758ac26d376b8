//! Building a node from a stack file: layers, QoSs, sessions and started channels in a
//! [`Kernel`].
//!
//! Realizes issue 2 §3 / DESIGN.md §6.10. Rules, for every node alike (so channel and session
//! ids agree across nodes):
//! - each declared layer is built once into one [`LayerRef`], shared by every QoS that lists it;
//! - a device kind's layer gets ONE session per node (one socket), bound explicitly into every
//!   channel whose QoS lists it; its port is the layer's `port` parameter (0 if the kind has
//!   none), and two devices on one port are an error;
//! - a named session (`bind = { layer = "name" }`) is created once and bound explicitly into
//!   every channel that names it: this is how channels share a session (seed 001 Figure 1);
//! - the remaining slots are filled by the kernel's automatic, then default, binding;
//! - channels are created and started in file order at the kernel's start time
//!   ([`KernelConfig::start`]: a restarted node starts its channels at its restart time).

use std::collections::BTreeMap;
use std::sync::Arc;

use viastack_kernel::event::INBOUND;
use viastack_kernel::{
    ChannelId, Kernel, KernelConfig, LayerRef, NodeId, Qos, QosError, SessionId,
};

use crate::catalog::{BuildEnv, Catalog};
use crate::diag::{Diagnostic, Diagnostics};
use crate::model::{LayerDecl, StackFile};
use crate::parse::device_port;

/// A node's kernel with its channels started.
pub struct BuiltNode {
    /// The kernel.
    pub kernel: Kernel,
    /// Channels by name, in file order.
    pub channels: Vec<(String, ChannelId)>,
    /// Device sessions by port, ascending: the driver delivers datagrams for a port to its
    /// session.
    pub devices: Vec<(u16, SessionId)>,
    /// Named sessions (`[sessions.x]`, `bind = { layer = "x" }`), by name.
    pub sessions: Vec<(String, SessionId)>,
}

impl std::fmt::Debug for BuiltNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltNode")
            .field("node", &self.kernel.node())
            .field("channels", &self.channels)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

/// Builds one layer with its kind's factory.
///
/// # Errors
/// `(line, message)`: "layer `x` (kind): …" at the layer's line when the kind is unknown or
/// its factory fails, or "parameter `p` of layer `x` (kind): …" at the parameter's line when
/// the factory blames one parameter ([`BuildError::param`](crate::BuildError::param)).
pub(crate) fn build_layer(
    decl: &LayerDecl,
    catalog: &Catalog,
    env: &BuildEnv,
) -> Result<LayerRef, (usize, String)> {
    let kind = catalog.get(&decl.kind).ok_or_else(|| {
        (
            decl.line,
            format!("layer `{}`: unknown layer kind `{}`", decl.name, decl.kind),
        )
    })?;
    (kind.build)(&decl.name, &decl.params, env).map_err(|e| match &e.param {
        Some(p) => (
            decl.params.line(p).unwrap_or(decl.line),
            format!(
                "parameter `{p}` of layer `{}` ({}): {}",
                decl.name, kind.name, e.message
            ),
        ),
        None => (
            decl.line,
            format!(
                "layer `{}` ({}): cannot be built: {}",
                decl.name, kind.name, e.message
            ),
        ),
    })
}

struct Built {
    layers: BTreeMap<String, LayerRef>,
    qos: BTreeMap<String, Arc<Qos>>,
}

fn build_all(file: &StackFile, catalog: &Catalog, env: &BuildEnv) -> Result<Built, Diagnostics> {
    let mut diags = Vec::new();
    let diag = |line: usize, message: String| Diagnostic {
        file: file.path.clone(),
        line,
        message,
    };
    let mut layers = BTreeMap::new();
    for l in file.layers.values() {
        match build_layer(l, catalog, env) {
            Ok(layer) => {
                layers.insert(l.name.clone(), layer);
            }
            Err((line, e)) => diags.push(diag(line, e)),
        }
    }
    let mut qos = BTreeMap::new();
    for q in file.qos.values() {
        let mut refs = Vec::new();
        for name in &q.layers {
            match layers.get(name) {
                Some(l) => refs.push(Arc::clone(l)),
                None if file.layers.contains_key(name) => {} // reported above
                None => diags.push(diag(
                    q.line,
                    format!("QoS `{}` names unknown layer `{name}`", q.name),
                )),
            }
        }
        if refs.len() != q.layers.len() {
            continue;
        }
        match Qos::new(q.name.clone(), refs) {
            Ok(built) => {
                qos.insert(q.name.clone(), built);
            }
            Err(e) => diags.push(diag(q.line, refusal_with_hint(&e, &q.layers))),
        }
    }
    if diags.is_empty() {
        Ok(Built { layers, qos })
    } else {
        let mut d = Diagnostics(diags);
        d.sort();
        Err(d)
    }
}

/// The kernel's reason for refusing a QoS, with what to do about it (issue 13 §2).
pub(crate) fn refusal_with_hint(e: &QosError, layers: &[String]) -> String {
    let hint = match e {
        QosError::MissingEvent { event, .. } if event == INBOUND.id().name() => {
            "; hint: a stack reaches the network only through a transport at its bottom: declare a \
             layer of kind `device` and list it first (`sp` and every other layer run above one)"
                .to_string()
        }
        QosError::MissingEvent { event, .. } => {
            format!("; hint: add a layer that generates `{event}` to the QoS")
        }
        QosError::TransportNotAtBottom { layer, .. } => {
            let mut order = vec![format!("\"{layer}\"")];
            order.extend(
                layers
                    .iter()
                    .filter(|l| *l != layer)
                    .map(|l| format!("\"{l}\"")),
            );
            format!(
                "; hint: layers are listed bottom first, so put it first: layers = [{}]",
                order.join(", ")
            )
        }
        QosError::Empty { .. } | QosError::TooManyLayers { .. } => String::new(),
    };
    format!("{e}{hint}")
}

/// Builds node `env.node`: a kernel (from `kernel_config`) with every channel of the file
/// created, bound and started in file order.
///
/// # Errors
/// [`Diagnostics`] pointing into the file when a layer cannot be built, a QoS is refused,
/// two devices share a port, a name does not resolve (a hand-made [`StackFile`]) or a binding
/// is refused by the kernel.
pub fn build_node(
    file: &StackFile,
    catalog: &Catalog,
    env: &BuildEnv,
    kernel_config: KernelConfig,
) -> Result<BuiltNode, Diagnostics> {
    let built = build_all(file, catalog, env)?;
    let mut diags = Vec::new();
    let diag = |line: usize, message: String| Diagnostic {
        file: file.path.clone(),
        line,
        message,
    };

    // Device layers and their ports.
    let mut device_ports: BTreeMap<&str, u16> = BTreeMap::new();
    let mut port_owner: BTreeMap<u16, &str> = BTreeMap::new();
    for l in file.layers.values() {
        match device_port(catalog, l) {
            None => {}
            Some(Ok(port)) => {
                if let Some(other) = port_owner.get(&port) {
                    diags.push(diag(
                        l.line,
                        format!(
                            "device layers `{other}` and `{}` both use port {port}",
                            l.name
                        ),
                    ));
                } else {
                    port_owner.insert(port, &l.name);
                    device_ports.insert(&l.name, port);
                }
            }
            Some(Err(e)) => diags.push(diag(l.line, format!("layer `{}`: {e}", l.name))),
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }

    let mut kernel = Kernel::new(kernel_config);
    // Sessions shared by channels, created in file order of first use so ids agree across
    // nodes: device sessions (by layer) and named sessions (by name).
    let mut device_sessions: BTreeMap<&str, SessionId> = BTreeMap::new();
    let mut named: BTreeMap<&str, (SessionId, &str)> = BTreeMap::new();
    for ch in &file.channels {
        let Some(qos) = file.qos.get(&ch.qos) else {
            diags.push(diag(
                ch.line,
                format!("channel `{}` names unknown QoS `{}`", ch.name, ch.qos),
            ));
            continue;
        };
        for layer_name in &qos.layers {
            let Some(layer) = built.layers.get(layer_name) else {
                continue;
            };
            if let Some(session) = ch.bind.get(layer_name) {
                match named.get(session.as_str()) {
                    Some((_, l)) if *l != layer_name.as_str() => diags.push(diag(
                        ch.line,
                        format!(
                            "session `{session}` is bound to layer `{l}` and to layer \
                             `{layer_name}`"
                        ),
                    )),
                    Some(_) => {}
                    None => {
                        let sid = kernel.create_session(layer);
                        named.insert(session, (sid, layer_name));
                    }
                }
            } else if device_ports.contains_key(layer_name.as_str())
                && !device_sessions.contains_key(layer_name.as_str())
            {
                let sid = kernel.create_session(layer);
                device_sessions.insert(layer_name, sid);
            }
        }
        for layer_name in ch.bind.keys() {
            if !qos.layers.contains(layer_name) {
                diags.push(diag(
                    ch.line,
                    format!(
                        "channel `{}`: `bind` names layer `{layer_name}`, which is not in QoS `{}`",
                        ch.name, ch.qos
                    ),
                ));
            }
        }
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }

    let mut channels = Vec::new();
    for ch in &file.channels {
        let (Some(decl), Some(qos)) = (file.qos.get(&ch.qos), built.qos.get(&ch.qos)) else {
            continue;
        };
        let id = kernel.create_channel(ch.name.clone(), qos);
        let bind_result = (|| {
            let mut cursor = kernel.cursor(id)?;
            for (slot, layer_name) in decl.layers.iter().enumerate() {
                let session = match ch.bind.get(layer_name) {
                    Some(s) => named.get(s.as_str()).map(|(sid, _)| *sid),
                    None => device_sessions.get(layer_name.as_str()).copied(),
                };
                if let Some(sid) = session {
                    cursor.jump_to(slot)?.set_session(sid)?;
                }
            }
            Ok::<(), viastack_kernel::BindError>(())
        })();
        if let Err(e) = bind_result {
            diags.push(diag(ch.line, format!("channel `{}`: {e}", ch.name)));
            continue;
        }
        if let Err(e) = kernel.start_channel(id, kernel.now()) {
            diags.push(diag(ch.line, format!("channel `{}`: {e}", ch.name)));
            continue;
        }
        tracing::debug!(node = %env.node, channel = %ch.name, "channel built");
        channels.push((ch.name.clone(), id));
    }
    if !diags.is_empty() {
        return Err(Diagnostics(diags));
    }
    let mut devices: Vec<(u16, SessionId)> = device_sessions
        .iter()
        .filter_map(|(name, sid)| device_ports.get(name).map(|p| (*p, *sid)))
        .collect();
    devices.sort();
    let sessions = named
        .iter()
        .map(|(name, (sid, _))| ((*name).to_string(), *sid))
        .collect();
    Ok(BuiltNode {
        kernel,
        channels,
        devices,
        sessions,
    })
}

/// One slot of a started channel, as `viastack check` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotBinding {
    /// The slot's layer.
    pub layer: String,
    /// The session: a named session's name, the device layer's name for its one session per
    /// node, or `#id` for a session of its own.
    pub session: String,
    /// How the slot got it: explicitly (a `bind` or a device), automatically (by a session
    /// already bound, e.g. `sync` bringing the sessions it shares) or by default.
    pub mode: viastack_kernel::BindMode,
}

/// Every channel of node 0, started, with how each slot was bound (bottom first).
///
/// # Errors
/// The same [`Diagnostics`] as [`build_node`].
pub fn channel_bindings(
    file: &StackFile,
    catalog: &Catalog,
) -> Result<Vec<(String, Vec<SlotBinding>)>, Diagnostics> {
    let env = BuildEnv {
        node: NodeId(0),
        nodes: file.scenario.as_ref().map_or(1, |s| s.nodes),
        seed: file.scenario.as_ref().map_or(0, |s| s.seed),
        topology: file.topology.as_ref().map(|t| t.node_view(0)),
    };
    let node = build_node(file, catalog, &env, KernelConfig::default())?;
    let label = |sid: SessionId, layer: &str| {
        if let Some((name, _)) = node.sessions.iter().find(|(_, s)| *s == sid) {
            name.clone()
        } else if node.devices.iter().any(|(_, s)| *s == sid) {
            layer.to_string()
        } else {
            format!("#{}", sid.0)
        }
    };
    Ok(node
        .channels
        .iter()
        .map(|(name, id)| {
            let layers = file
                .channels
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| file.qos.get(&c.qos))
                .map(|q| q.layers.clone())
                .unwrap_or_default();
            let sessions = node.kernel.channel_sessions(*id);
            let modes = node.kernel.channel_bind_modes(*id);
            let slots = layers
                .iter()
                .zip(sessions.iter().zip(&modes))
                .map(|(layer, (sid, mode))| SlotBinding {
                    layer: layer.clone(),
                    session: sid.map_or_else(|| "-".to_string(), |s| label(s, layer)),
                    mode: *mode,
                })
                .collect();
            (name.clone(), slots)
        })
        .collect())
}

/// What `viastack check` shows of one QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosTable {
    /// The QoS's name.
    pub name: String,
    /// Event type → the layers it visits, bottom first.
    pub routes: Vec<(String, Vec<String>)>,
    /// Every requirement (Ψ) and who meets it: `(layer, event type, provider)`; the provider
    /// is a layer of the QoS or `kernel`.
    pub requires: Vec<(String, String, String)>,
    /// What the application on top of the QoS may count on (e.g. `reliable fifo`).
    pub delivery: String,
}

/// Every QoS of the file, built and described for `viastack check`.
///
/// # Errors
/// The same [`Diagnostics`] as building a node.
pub fn qos_tables(file: &StackFile, catalog: &Catalog) -> Result<Vec<QosTable>, Diagnostics> {
    let env = BuildEnv {
        node: NodeId(0),
        nodes: file.scenario.as_ref().map_or(1, |s| s.nodes),
        seed: file.scenario.as_ref().map_or(0, |s| s.seed),
        topology: file.topology.as_ref().map(|t| t.node_view(0)),
    };
    let built = build_all(file, catalog, &env)?;
    Ok(built
        .qos
        .iter()
        .map(|(name, q)| QosTable {
            name: name.clone(),
            routes: q
                .route_table()
                .into_iter()
                .map(|(ty, layers)| (ty.name().to_string(), layers))
                .collect(),
            requires: q
                .providers()
                .into_iter()
                .map(|(layer, ty, provider)| (layer, ty.name().to_string(), provider))
                .collect(),
            delivery: q.delivery_below(q.layers().len()).to_string(),
        })
        .collect())
}

/// The route tables of every QoS: (QoS, [(event type, layers bottom first)]).
///
/// # Errors
/// The same [`Diagnostics`] as building a node.
#[allow(clippy::type_complexity)]
pub fn route_tables(
    file: &StackFile,
    catalog: &Catalog,
) -> Result<Vec<(String, Vec<(String, Vec<String>)>)>, Diagnostics> {
    Ok(qos_tables(file, catalog)?
        .into_iter()
        .map(|t| (t.name, t.routes))
        .collect())
}

//! Qualities of service: ordered layers, the Ψ ⊆ Γ check and per-event routes (seed 001 §3.4,
//! §3.5, §4 "QoS definition").
//!
//! A [`Qos`] is an ordered list of layers, bottom (index 0, the device) first. Creating one
//! fails unless every event type some layer requires is provided by some layer of the QoS or by
//! the kernel (a provided subtype satisfies a required parent). At creation the QoS computes, for
//! every event type registered so far, the ascending list of layer positions whose Φ contains the
//! type or one of its ancestors: the route. Channels map routes to sessions; dispatch then only
//! walks a precomputed array, so a layer that does not accept an event costs nothing.
//!
//! A transport (a layer that provides [`INBOUND`](crate::event::INBOUND): messages received from
//! the network, like a device) must be the bottom layer: above the bottom it would hand datagrams
//! to the network that the layers below it never see, and the layers below it would have no way
//! out. Together with the layers' requirement of `Inbound`, this refuses the stacks that cannot
//! work (issue 13 §2): no transport at all, or one that is not at the bottom.
//!
//! The QoS also folds, from the bottom up, what each layer promises the layers above it
//! ([`Layer::delivery`](crate::Layer::delivery)): [`Qos::delivery_below`] tells a layer
//! whether it stands on a reliable, ordered path, so it knows whether what is still missing
//! will come.

use std::sync::Arc;

use crate::event::{ensure_builtins, kernel_provided, EventType, INBOUND, SENDABLE};
use crate::layer::{Delivery, LayerRef};

/// Why a QoS was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    /// A QoS needs at least one layer.
    #[error("QoS `{qos}` has no layers")]
    Empty {
        /// The QoS.
        qos: String,
    },
    /// More layers than a route position can address.
    #[error("QoS `{qos}` has {layers} layers; at most {max} are supported")]
    TooManyLayers {
        /// The QoS.
        qos: String,
        /// How many it has.
        layers: usize,
        /// The limit.
        max: usize,
    },
    /// A transport (a layer providing `Inbound`, such as a device) that is not the bottom layer.
    #[error(
        "QoS `{qos}`: layer `{layer}` is a transport (it provides `Inbound`, messages from the \
         network) but sits at position {position} from the bottom; a transport must be the \
         bottom layer"
    )]
    TransportNotAtBottom {
        /// The QoS.
        qos: String,
        /// The transport layer.
        layer: String,
        /// Its position, bottom = 0.
        position: usize,
    },
    /// Ψ ⊄ Γ: a layer requires an event type that no layer provides.
    #[error(
        "QoS `{qos}`: layer `{layer}` requires event `{event}`, which no layer of the QoS provides"
    )]
    MissingEvent {
        /// The QoS.
        qos: String,
        /// The layer with the unmet requirement.
        layer: String,
        /// The event type nobody provides.
        event: String,
    },
}

/// Most layers one QoS may hold.
pub const MAX_LAYERS: usize = 4096;

/// An ordered stack of layers with precomputed routes.
pub struct Qos {
    name: String,
    layers: Vec<LayerRef>,
    accepts: Vec<Vec<EventType>>,
    provided: Vec<EventType>,
    /// `delivery[i]`: what the layers below position `i` promise (one more entry: the top).
    delivery: Vec<Delivery>,
    routes: Vec<Box<[u16]>>,
}

impl Qos {
    /// Builds a QoS from layers listed bottom first.
    ///
    /// # Errors
    /// [`QosError::MissingEvent`] when Ψ ⊄ Γ (naming the first layer and type at fault),
    /// [`QosError::Empty`], [`QosError::TooManyLayers`].
    pub fn new(name: impl Into<String>, layers: Vec<LayerRef>) -> Result<Arc<Qos>, QosError> {
        let name = name.into();
        ensure_builtins();
        if layers.is_empty() {
            return Err(QosError::Empty { qos: name });
        }
        if layers.len() > MAX_LAYERS {
            return Err(QosError::TooManyLayers {
                qos: name,
                layers: layers.len(),
                max: MAX_LAYERS,
            });
        }
        if let Some((position, l)) = layers
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, l)| l.provides().contains(&INBOUND.id()))
        {
            return Err(QosError::TransportNotAtBottom {
                qos: name,
                layer: l.name().to_string(),
                position,
            });
        }
        let mut provided = kernel_provided();
        for l in &layers {
            for t in l.provides() {
                if !provided.contains(&t) {
                    provided.push(t);
                }
            }
        }
        for l in &layers {
            for req in l.requires() {
                if !provided.iter().any(|p| p.is_a(req)) {
                    return Err(QosError::MissingEvent {
                        qos: name,
                        layer: l.name().to_string(),
                        event: req.name().to_string(),
                    });
                }
            }
        }
        let accepts: Vec<Vec<EventType>> = layers.iter().map(|l| l.accepts()).collect();
        let mut delivery = Vec::with_capacity(layers.len() + 1);
        delivery.push(Delivery::NONE);
        for (l, acc) in layers.iter().zip(&accepts) {
            let below = delivery[delivery.len() - 1];
            // A layer that is never handed a sendable cannot lose, copy or reorder one.
            let sees_sendables = acc
                .iter()
                .any(|a| SENDABLE.id().is_a(*a) || a.is_a(SENDABLE.id()));
            delivery.push(if sees_sendables {
                l.delivery(below)
            } else {
                below
            });
        }
        let mut qos = Qos {
            name,
            layers,
            accepts,
            provided,
            delivery,
            routes: Vec::new(),
        };
        qos.routes = EventType::all()
            .into_iter()
            .map(|t| qos.compute_route(t))
            .collect();
        Ok(Arc::new(qos))
    }

    /// The QoS's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The layers, bottom first.
    pub fn layers(&self) -> &[LayerRef] {
        &self.layers
    }

    /// What the layers below position `pos` (bottom = 0) promise about the sendables they hand
    /// up; `pos` = the number of layers gives what the application gets.
    pub fn delivery_below(&self, pos: usize) -> Delivery {
        self.delivery.get(pos).copied().unwrap_or_default()
    }

    /// Γ of the whole QoS, kernel-provided types included.
    pub fn provided(&self) -> &[EventType] {
        &self.provided
    }

    /// For every event type a layer requires (Ψ), who provides it: `(layer, required type,
    /// provider)` in layer order, bottom first; the provider is the lowest layer whose Γ holds
    /// the type or a subtype, or `"kernel"` for the channel's own events.
    pub fn providers(&self) -> Vec<(String, EventType, String)> {
        let kernel = kernel_provided();
        let mut out = Vec::new();
        for l in &self.layers {
            for req in l.requires() {
                let provider = self
                    .layers
                    .iter()
                    .find(|p| p.provides().iter().any(|t| t.is_a(req)))
                    .map(|p| p.name().to_string())
                    .or_else(|| {
                        kernel
                            .iter()
                            .any(|t| t.is_a(req))
                            .then(|| "kernel".to_string())
                    })
                    .unwrap_or_default();
                out.push((l.name().to_string(), req, provider));
            }
        }
        out
    }

    /// Positions (bottom = 0) of the layers that accept `ty`, ascending.
    pub fn route(&self, ty: EventType) -> Box<[u16]> {
        match self.routes.get(ty.index()) {
            Some(r) => r.clone(),
            // A type registered after this QoS was built: computed now, same rule.
            None => self.compute_route(ty),
        }
    }

    fn compute_route(&self, ty: EventType) -> Box<[u16]> {
        self.accepts
            .iter()
            .enumerate()
            .filter(|(_, acc)| acc.iter().any(|a| ty.is_a(*a)))
            .map(|(pos, _)| pos as u16)
            .collect()
    }

    /// The route table for display: every type the QoS provides (Γ plus the kernel's, and the
    /// application's `Sendable`) and the
    /// names of the layers it visits, bottom first.
    pub fn route_table(&self) -> Vec<(EventType, Vec<String>)> {
        let mut types = self.provided.clone();
        // The application at the top launches sendables down: their route is shown too.
        if !types.contains(&SENDABLE.id()) {
            types.push(SENDABLE.id());
        }
        types.sort_by_key(|t| t.name());
        types
            .into_iter()
            .map(|t| {
                let names = self
                    .route(t)
                    .iter()
                    .map(|&p| self.layers[p as usize].name().to_string())
                    .collect();
                (t, names)
            })
            .collect()
    }
}

impl std::fmt::Debug for Qos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.layers.iter().map(|l| l.name()).collect();
        f.debug_struct("Qos")
            .field("name", &self.name)
            .field("layers", &names)
            .finish()
    }
}

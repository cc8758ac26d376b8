//! The seed's delivery-service layer: service data, basic and composite events, actions, host.

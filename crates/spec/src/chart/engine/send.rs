//! `<send>` (W3C SCXML §6.2): evaluating its attributes, routing by target (`#_internal`,
//! this session, `#_parent`, `#_<invokeid>`; other `#_scxml_…` sessions and unknown `#_…`
//! targets are `error.communication`, anything else `error.execution`) and delaying it on the
//! virtual clock. An error carries the `sendid` of the send that failed (§5.10.1).

use std::collections::BTreeMap;
use std::sync::Arc;

use viastack_kernel::time::Duration;

use super::super::compile::{parse_delay, SendOp};
use super::super::expr;
use super::super::value::Value;
use super::{
    Dest, EvKind, EvName, Event, Host, Instance, Meta, Pending, Rt, MAX_QUEUED, SCXML_PROCESSOR,
};

impl Instance {
    pub(super) fn send<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        s: &SendOp,
    ) -> Result<(), (bool, String)> {
        let chart = rt.chart;
        let x = |m: String| (false, m);
        let sendid: Option<Arc<str>> = if let Some(id) = &s.id {
            Some(id.clone())
        } else if let Some(loc) = &s.idlocation {
            self.next_seq += 1;
            let id: Arc<str> =
                Arc::from(format!("send.{}.{}", self.session, self.next_seq).as_str());
            self.assign(chart, loc, Value::String(id.clone()), false)
                .map_err(x)?;
            Some(id)
        } else {
            None
        };
        match self.send_with_id(rt, s, sendid.clone()) {
            Err((comm, msg)) if !msg.is_empty() && sendid.is_some() => {
                self.raise_error_for(rt, comm, &msg, sendid);
                Err((comm, String::new()))
            }
            r => r,
        }
    }

    fn send_with_id<A, H: Host<A>>(
        &mut self,
        rt: &mut Rt<'_, A, H>,
        s: &SendOp,
        sendid: Option<Arc<str>>,
    ) -> Result<(), (bool, String)> {
        let chart = rt.chart;
        let x = |m: String| (false, m);
        let name = match &s.event {
            Some(Ok(sym)) => EvName::Sym(*sym),
            Some(Err(e)) => {
                let v = expr::eval(e, &self.env(chart)).map_err(x)?;
                let n = v.to_string();
                match chart.symbol(&n) {
                    Some(sym) => EvName::Sym(sym),
                    None => EvName::Dyn(Arc::from(n)),
                }
            }
            None => return Err(x("<send> without an event".into())),
        };
        let target = match &s.target {
            Some(t) => Some(self.eval_spec(chart, t).map_err(x)?.to_string()),
            None => None,
        };
        if let Some(t) = &s.type_ {
            let ty = self.eval_spec(chart, t).map_err(x)?.to_string();
            if ty != SCXML_PROCESSOR && ty != "scxml" {
                return Err(x(format!("unsupported send type \"{ty}\"")));
            }
        }
        let delay = match &s.delay {
            None => Duration::ZERO,
            Some(Ok(d)) => *d,
            Some(Err(e)) => match expr::eval(e, &self.env(chart)).map_err(x)? {
                Value::String(st) => parse_delay(&st)
                    .ok_or_else(|| x(format!("bad delay \"{st}\" (expected e.g. 1s or 200ms)")))?,
                Value::Number(n) if n >= 0.0 => Duration::from_secs_f64(n / 1000.0),
                other => return Err(x(format!("bad delay {other}"))),
            },
        };
        let data = if let Some(c) = &s.content {
            self.eval_spec(chart, c).map_err(x)?
        } else if s.params.is_empty() && s.namelist.is_empty() {
            Value::Null
        } else {
            let mut m = BTreeMap::new();
            for (name, slot) in &s.namelist {
                match self.namelist_value(chart, name, *slot) {
                    Some(v) => {
                        m.insert(name.to_string(), v);
                    }
                    None => return Err(x(format!("namelist variable {name} is not declared"))),
                }
            }
            for (k, e) in &s.params {
                let v = expr::eval(e, &self.env(chart)).map_err(x)?;
                m.insert(k.to_string(), v);
            }
            Value::map(m)
        };
        let own = format!("#_scxml_{}", self.session);
        let queued = match target.as_deref() {
            Some("#_internal") => self.internal.len(),
            _ if delay.is_zero() => self.external.len(),
            _ => self.pending.len(),
        };
        if queued >= MAX_QUEUED {
            return Err(x(format!("queue full ({MAX_QUEUED} events)")));
        }
        let dest = match target.as_deref() {
            Some("#_internal") => {
                self.internal.push_back(Event {
                    name,
                    kind: EvKind::Internal,
                    data,
                    meta: sendid.map(|id| {
                        Box::new(Meta {
                            sendid: Some(id),
                            ..Meta::default()
                        })
                    }),
                });
                return Ok(());
            }
            None => Dest::Own,
            Some(t) if t == own => Dest::Own,
            Some("#_parent") if self.is_child => Dest::Parent,
            Some(t) if t.starts_with("#_scxml_") => {
                return Err((true, format!("cannot reach session \"{t}\"")));
            }
            Some(t) => match t.strip_prefix("#_") {
                // A child may be started before a delayed send is due: checked on delivery.
                Some(id) if !delay.is_zero() || self.children.iter().any(|c| &*c.id == id) => {
                    Dest::Child(Arc::from(id))
                }
                Some(_) => return Err((true, format!("cannot reach target \"{t}\""))),
                None => return Err(x(format!("unsupported target \"{t}\""))),
            },
        };
        let event = Event {
            name,
            kind: EvKind::External,
            data,
            meta: Some(Box::new(Meta {
                sendid: sendid.clone(),
                origin: Some(Arc::from(own.as_str())),
                origintype: Some(Arc::from(SCXML_PROCESSOR)),
                invokeid: None,
            })),
        };
        if delay.is_zero() {
            self.dispatch(rt, dest, event);
        } else {
            self.next_seq += 1;
            self.pending.push(Pending {
                at: rt.now + delay,
                seq: self.next_seq,
                id: sendid,
                dest,
                event,
            });
        }
        Ok(())
    }
}

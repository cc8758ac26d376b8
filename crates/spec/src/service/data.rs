//! The seed's service data, read from the SCXML source (seed 000 §5.1.2.1, §5.1.2.2).
//!
//! Three `<data>` elements of the datamodel carry it; the chart keeps them opaque, this module
//! reads them with positions:
//!
//! ```xml
//! <data name="service">
//!   <Name>h2hack</Name> <ServiceID>1</ServiceID>
//!   <Delivery>message</Delivery>                       <!-- one instance per data message -->
//!   <DeliveryModes>unicast multicast</DeliveryModes>
//! </data>
//! <data name="metaops">
//!   <messageStoreWillForwardMessage>false</messageStoreWillForwardMessage>
//!   <processIntermediateUnicastMessage>true</processIntermediateUnicastMessage>
//! </data>
//! <data name="events">
//!   <Basic>
//!     <Event name="payloadmessage"><Message><MessageType>-128</MessageType></Message></Event>
//!     <Event name="acktimeout"><Timer><TimerIdentifier>3</TimerIdentifier></Timer></Event>
//!   </Basic>
//!   <Composite>
//!     <Event name="allacks">
//!       <ConstituentBasicEvent>h2hackmessage</ConstituentBasicEvent>
//!       <Expression>forall d in node.children : exists m in h2hackmessage : m.source == d</Expression>
//!     </Event>
//!   </Composite>
//! </data>
//! ```
//!
//! A `<Message>` filter may test any attribute (§4.2.1.3): the known ones of
//! [`Attr`](super::message::Attr) by the seed's element names, any other one by text; the value
//! `local` of an address attribute means the local node's address (Table 4.3). An empty
//! `<Message/>` matches every message (Table 4.2); an empty `<Timer/>` every timer. A composite's
//! expression is an `<Expression>` in the language of [`logic`](super::logic), or the seed's
//! `<XQuery>`, translated into it by [`xquery`](super::xquery).
//!
//! # Errors
//! Every problem is a [`Diagnostic`] at the element's `file:line:col`: missing or malformed
//! ServiceID, unknown metaops, duplicate event names, an event that is neither `<Message>` nor
//! `<Timer>`, an unparsable attribute value, a composite event without constituents or
//! expression, an undefined constituent.

use super::diag::{error, Diagnostic, Diagnostics, Pos};
use super::message::Attr;

/// How instances are created (seed §5.1.2.1: "message-oriented delivery").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// One instance per data message (per MessageID).
    Message,
}

/// The delivery modes a service supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryMode {
    /// Unicast.
    Unicast,
    /// Multicast.
    Multicast,
    /// Flood.
    Flood,
}

/// `<data name="metaops">` (seed §5.1.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaOps {
    /// MessageStore forwards data messages itself (no clone is forwarded first).
    pub message_store_will_forward_message: bool,
    /// Intermediate nodes of a unicast process the message.
    pub process_intermediate_unicast_message: bool,
}

impl Default for MetaOps {
    /// Seed §5.1.2.1: by default the message is forwarded as soon as it is received and a
    /// clone is processed; intermediate unicast processing is on in the h2hack example.
    fn default() -> Self {
        MetaOps {
            message_store_will_forward_message: false,
            process_intermediate_unicast_message: true,
        }
    }
}

/// What one message filter compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterAttr {
    /// A known attribute.
    Known(Attr),
    /// Any other attribute, compared as text.
    Extra(String),
}

/// The value a filter requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterValue {
    /// A known attribute's integer value.
    Int(i64),
    /// The local node's address (`local`, Table 4.3).
    Local,
    /// An extra attribute's text.
    Text(String),
}

/// One `attribute = value` filter (seed §4.2.1.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The attribute.
    pub attr: FilterAttr,
    /// The required value.
    pub value: FilterValue,
    /// Where it is written.
    pub pos: Pos,
}

/// What a basic event matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BasicKind {
    /// A message arrival whose attributes pass every filter.
    Message(Vec<Filter>),
    /// A timer expiry; `None` matches every timer.
    Timer(Option<u32>),
}

/// A `<Basic><Event>` declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicDef {
    /// Event name, as used in `<transition event=…>`.
    pub name: String,
    /// Where it is declared.
    pub pos: Pos,
    /// What it matches.
    pub kind: BasicKind,
}

/// A `<Composite><Event>` declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompositeDef {
    /// Event name.
    pub name: String,
    /// Where it is declared.
    pub pos: Pos,
    /// Indices into [`ServiceData::basic`] of the constituents: the basic events on whose
    /// arrival the expression is evaluated.
    pub constituents: Vec<usize>,
    /// The first-order-logic expression's text (for an `<XQuery>`, its translation).
    pub expr: String,
    /// Where the expression text (or the XQuery) starts.
    pub expr_pos: Pos,
    /// The seed's `<XQuery>` text this expression was translated from
    /// ([`xquery`](super::xquery)), if it was written so.
    pub xquery: Option<String>,
}

/// Everything the seed's `<data>` elements say about a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceData {
    /// Service name (`<Name>`, else the `<scxml name>`).
    pub name: String,
    /// ServiceID.
    pub service_id: u32,
    /// Instance creation.
    pub delivery: Delivery,
    /// Supported delivery modes.
    pub modes: Vec<DeliveryMode>,
    /// Meta operations.
    pub metaops: MetaOps,
    /// Basic events, in declaration order.
    pub basic: Vec<BasicDef>,
    /// Composite events, in declaration order.
    pub composite: Vec<CompositeDef>,
}

impl ServiceData {
    /// Index of a basic event by name.
    pub fn basic_index(&self, name: &str) -> Option<usize> {
        self.basic.iter().position(|b| b.name == name)
    }

    /// Reads the service data of an SCXML source.
    ///
    /// # Errors
    /// All problems found, each with its position (see the module doc).
    pub fn read(file: &str, src: &str) -> Result<ServiceData, Diagnostics> {
        let doc = match roxmltree::Document::parse(src) {
            Ok(d) => d,
            Err(e) => {
                let p = e.pos();
                return Err(Diagnostics(vec![error(
                    file,
                    Pos {
                        line: p.row,
                        col: p.col,
                    },
                    format!("not well-formed XML: {e}"),
                )]));
            }
        };
        let mut r = Reader {
            file,
            doc: &doc,
            diags: Vec::new(),
        };
        let data = r.read();
        if r.diags.is_empty() {
            Ok(data)
        } else {
            Err(Diagnostics(r.diags))
        }
    }
}

struct Reader<'a, 'input> {
    file: &'a str,
    doc: &'a roxmltree::Document<'input>,
    diags: Vec<Diagnostic>,
}

type Node<'a, 'input> = roxmltree::Node<'a, 'input>;

impl<'a, 'input> Reader<'a, 'input> {
    fn pos(&self, n: Node<'_, '_>) -> Pos {
        let p = self.doc.text_pos_at(n.range().start);
        Pos {
            line: p.row,
            col: p.col,
        }
    }

    fn err(&mut self, n: Node<'_, '_>, msg: impl Into<String>) {
        let pos = self.pos(n);
        self.diags.push(error(self.file, pos, msg));
    }

    fn read(&mut self) -> ServiceData {
        let root = self.doc.root_element();
        let mut data = ServiceData {
            name: root.attribute("name").unwrap_or_default().to_string(),
            service_id: 0,
            delivery: Delivery::Message,
            modes: vec![DeliveryMode::Unicast, DeliveryMode::Multicast],
            metaops: MetaOps::default(),
            basic: Vec::new(),
            composite: Vec::new(),
        };
        if root.tag_name().name() != "scxml" {
            self.err(
                root,
                format!(
                    "expected <scxml> as the root element, found <{}>",
                    root.tag_name().name()
                ),
            );
            return data;
        }
        let mut seen_service = false;
        let datas: Vec<Node<'_, '_>> = root
            .descendants()
            .filter(|n| n.is_element() && n.tag_name().name() == "data")
            .filter(|n| {
                n.parent_element()
                    .is_some_and(|p| p.tag_name().name() == "datamodel")
            })
            .collect();
        let mut composites = Vec::new();
        for d in datas {
            match d.attribute("name").or_else(|| d.attribute("id")) {
                Some("service") => {
                    seen_service = true;
                    self.read_service(d, &mut data);
                }
                Some("metaops") => self.read_metaops(d, &mut data.metaops),
                Some("events") => self.read_events(d, &mut data, &mut composites),
                _ => {}
            }
        }
        if !seen_service {
            self.err(root, "expected <data name=\"service\"> with a <ServiceID> in the datamodel (seed §5.1.2.1)");
        }
        for (name, pos, constituents, (expr, is_xquery), expr_pos, node) in composites {
            let (expr, xquery) = if is_xquery {
                match super::xquery::translate(&expr, &Basics(&data)) {
                    Ok(t) => (t, Some(expr)),
                    Err(e) => {
                        let at = super::logic::offset_pos(&expr, expr_pos, e.offset);
                        self.diags.push(error(
                            self.file,
                            at,
                            format!("composite event `{name}`: {}", e.message),
                        ));
                        (String::from("false"), Some(expr))
                    }
                }
            } else {
                (expr, None)
            };
            let mut idx = Vec::new();
            let none_written = constituents.is_empty();
            for (c, cn) in constituents {
                match data.basic_index(&c) {
                    Some(i) => idx.push(i),
                    None => self.err(
                        cn,
                        format!(
                            "constituent `{c}` is not a basic event (expected one of: {})",
                            names(&data)
                        ),
                    ),
                }
            }
            if none_written {
                self.err(
                    node,
                    format!("composite event `{name}` needs at least one <ConstituentBasicEvent>"),
                );
            }
            data.composite.push(CompositeDef {
                name,
                pos,
                constituents: idx,
                expr,
                expr_pos,
                xquery,
            });
        }
        data
    }

    fn read_service(&mut self, d: Node<'_, '_>, data: &mut ServiceData) {
        let mut have_id = false;
        for c in d.children().filter(|c| c.is_element()) {
            let text = c.text().unwrap_or_default().trim().to_string();
            match c.tag_name().name() {
                "Name" | "name" => data.name = text,
                "ServiceID" | "ServiceId" | "serviceID" | "ServiceIdentifier" => match text.parse() {
                    Ok(v) => {
                        data.service_id = v;
                        have_id = true;
                    }
                    Err(_) => self.err(c, format!("ServiceID `{text}`: expected an integer 0..=4294967295")),
                },
                "Delivery" => match text.to_ascii_lowercase().as_str() {
                    "message" | "message-oriented" => data.delivery = Delivery::Message,
                    _ => self.err(c, format!("delivery `{text}`: expected `message` (one instance per data message)")),
                },
                "DeliveryModes" | "DeliveryMode" => {
                    let mut modes = Vec::new();
                    let words: Vec<String> = if c.children().any(|x| x.is_element()) {
                        c.children().filter(|x| x.is_element()).map(|x| x.text().unwrap_or_default().trim().to_string()).collect()
                    } else {
                        text.split(|ch: char| ch.is_whitespace() || ch == ',').filter(|w| !w.is_empty()).map(str::to_string).collect()
                    };
                    for w in words {
                        match w.to_ascii_lowercase().as_str() {
                            "unicast" => modes.push(DeliveryMode::Unicast),
                            "multicast" => modes.push(DeliveryMode::Multicast),
                            "flood" => modes.push(DeliveryMode::Flood),
                            _ => self.err(c, format!("delivery mode `{w}`: expected unicast, multicast or flood")),
                        }
                    }
                    data.modes = modes;
                }
                other => self.err(c, format!("unknown service element <{other}> (expected Name, ServiceID, Delivery, DeliveryModes)")),
            }
        }
        if !have_id {
            self.err(d, "<data name=\"service\"> needs a <ServiceID>");
        }
    }

    fn read_metaops(&mut self, d: Node<'_, '_>, m: &mut MetaOps) {
        for c in d.children().filter(|c| c.is_element()) {
            let text = c.text().unwrap_or_default().trim();
            let v = match text {
                "true" => true,
                "false" => false,
                _ => {
                    self.err(c, format!("`{text}`: expected true or false"));
                    continue;
                }
            };
            match c.tag_name().name() {
                "messageStoreWillForwardMessage" => m.message_store_will_forward_message = v,
                "processIntermediateUnicastMessage" => m.process_intermediate_unicast_message = v,
                other => self.err(
                    c,
                    format!("unknown meta operation <{other}> (expected messageStoreWillForwardMessage or processIntermediateUnicastMessage)"),
                ),
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn read_events(
        &mut self,
        d: Node<'a, 'input>,
        data: &mut ServiceData,
        composites: &mut Vec<(
            String,
            Pos,
            Vec<(String, Node<'a, 'input>)>,
            (String, bool),
            Pos,
            Node<'a, 'input>,
        )>,
    ) {
        for group in d.children().filter(|c| c.is_element()) {
            let composite = match group.tag_name().name() {
                "Basic" => false,
                "Composite" => true,
                other => {
                    self.err(group, format!("unknown element <{other}> in the events (expected <Basic> or <Composite>)"));
                    continue;
                }
            };
            for ev in group.children().filter(|c| c.is_element()) {
                if ev.tag_name().name() != "Event" {
                    self.err(
                        ev,
                        format!(
                            "unknown element <{}> (expected <Event name=\"…\">)",
                            ev.tag_name().name()
                        ),
                    );
                    continue;
                }
                let Some(name) = ev.attribute("name").map(str::to_string) else {
                    self.err(ev, "<Event> needs a name attribute");
                    continue;
                };
                let pos = self.pos(ev);
                let dup = data.basic.iter().any(|b| b.name == name)
                    || composites.iter().any(|c| c.0 == name);
                if dup {
                    self.err(ev, format!("duplicate event `{name}`"));
                    continue;
                }
                if composite {
                    let mut cons = Vec::new();
                    let mut expr: Option<(String, Pos, bool)> = None;
                    for c in ev.children().filter(|c| c.is_element()) {
                        match c.tag_name().name() {
                            "ConstituentBasicEvent" => cons.push((c.text().unwrap_or_default().trim().to_string(), c)),
                            "Expression" | "Logic" => {
                                let t = c.first_child().filter(|t| t.is_text());
                                let p = match t {
                                    Some(t) => self.pos(t),
                                    None => self.pos(c),
                                };
                                expr = Some((c.text().unwrap_or_default().to_string(), p, false));
                            }
                            "XQuery" => {
                                // The text of every child (the seed's listing may be split by
                                // CDATA sections or entities).
                                let text: String = c
                                    .children()
                                    .filter(|t| t.is_text())
                                    .filter_map(|t| t.text())
                                    .collect();
                                let p = match c.first_child().filter(|t| t.is_text()) {
                                    Some(t) => {
                                        let mut p = self.pos(t);
                                        let cdata = self
                                            .doc
                                            .input_text()
                                            .get(t.range().start..)
                                            .is_some_and(|r| r.starts_with("<![CDATA["));
                                        if cdata {
                                            p.col += 9;
                                        }
                                        p
                                    }
                                    None => self.pos(c),
                                };
                                expr = Some((text, p, true));
                            }
                            other => self.err(c, format!("unknown element <{other}> (expected <ConstituentBasicEvent>, <Expression> or <XQuery>)")),
                        }
                    }
                    match expr {
                        Some((e, p, xq)) => composites.push((name, pos, cons, (e, xq), p, ev)),
                        None => self.err(
                            ev,
                            format!(
                                "composite event `{name}` needs an <Expression> or an <XQuery>"
                            ),
                        ),
                    }
                } else {
                    let kinds: Vec<Node<'_, '_>> =
                        ev.children().filter(|c| c.is_element()).collect();
                    if kinds.len() != 1 {
                        self.err(
                            ev,
                            format!(
                                "basic event `{name}`: expected exactly one <Message> or <Timer>"
                            ),
                        );
                        continue;
                    }
                    let k = kinds[0];
                    let kind = match k.tag_name().name() {
                        "Message" => BasicKind::Message(self.read_filters(k)),
                        "Timer" => {
                            let mut id = None;
                            for c in k.children().filter(|c| c.is_element()) {
                                let t = c.text().unwrap_or_default().trim();
                                if c.tag_name().name() == "TimerIdentifier" {
                                    match t.parse() {
                                        Ok(v) => id = Some(v),
                                        Err(_) => self.err(c, format!("TimerIdentifier `{t}`: expected an integer 0..=4294967295")),
                                    }
                                } else {
                                    self.err(c, format!("unknown timer attribute <{}> (expected <TimerIdentifier>)", c.tag_name().name()));
                                }
                            }
                            BasicKind::Timer(id)
                        }
                        other => {
                            self.err(k, format!("basic event `{name}`: unknown <{other}> (expected <Message> or <Timer>)"));
                            continue;
                        }
                    };
                    data.basic.push(BasicDef { name, pos, kind });
                }
            }
        }
    }

    fn read_filters(&mut self, m: Node<'_, '_>) -> Vec<Filter> {
        let mut out = Vec::new();
        for c in m.children().filter(|c| c.is_element()) {
            let tag = c.tag_name().name();
            let text = c.text().unwrap_or_default().trim();
            let pos = self.pos(c);
            match Attr::from_name(tag) {
                Some(a) if a.is_address() && text == "local" => out.push(Filter {
                    attr: FilterAttr::Known(a),
                    value: FilterValue::Local,
                    pos,
                }),
                Some(a) => match a.parse_value(text) {
                    Some(v) => out.push(Filter {
                        attr: FilterAttr::Known(a),
                        value: FilterValue::Int(v),
                        pos,
                    }),
                    None => self.err(
                        c,
                        format!(
                            "{tag} `{text}`: expected {}",
                            if a.is_address() {
                                "an address (N, x,y or local)"
                            } else {
                                "an integer in range"
                            }
                        ),
                    ),
                },
                None => out.push(Filter {
                    attr: FilterAttr::Extra(tag.to_string()),
                    value: FilterValue::Text(text.to_string()),
                    pos,
                }),
            }
        }
        out
    }
}

/// The basic events, as the XQuery translator sees them.
struct Basics<'d>(&'d ServiceData);

impl super::xquery::Events for Basics<'_> {
    fn basic(&self, name: &str) -> Option<bool> {
        self.0
            .basic
            .iter()
            .find(|b| b.name == name)
            .map(|b| matches!(b.kind, BasicKind::Timer(_)))
    }

    fn names(&self) -> String {
        names(self.0)
    }
}

fn names(data: &ServiceData) -> String {
    data.basic
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SRC: &str = r#"<?xml version="1.0"?>
<scxml version="1.0" xmlns="http://www.w3.org/2005/07/scxml" initialstate="init">
 <datamodel>
  <data name="service"><Name>h2hack</Name><ServiceID>1</ServiceID><DeliveryModes>unicast multicast</DeliveryModes></data>
  <data name="metaops">
    <messageStoreWillForwardMessage>false</messageStoreWillForwardMessage>
    <processIntermediateUnicastMessage>true</processIntermediateUnicastMessage>
  </data>
  <data name="events">
   <Basic>
    <Event name="ack"><Message><MessageType>2</MessageType></Message></Event>
    <Event name="payload"><Message><MessageType>-128</MessageType></Message></Event>
    <Event name="own"><Message><MessageType>2</MessageType><SourceAddress>local</SourceAddress><Color>red</Color></Message></Event>
    <Event name="any"><Message/></Event>
    <Event name="t3"><Timer><TimerIdentifier>3</TimerIdentifier></Timer></Event>
   </Basic>
   <Composite>
    <Event name="all"><ConstituentBasicEvent>ack</ConstituentBasicEvent>
      <Expression>forall d in node.children : exists m in ack : m.source == d</Expression></Event>
   </Composite>
  </data>
 </datamodel>
 <state id="init"/>
</scxml>"#;

    #[test]
    fn reads_the_seed_layout() {
        let d = ServiceData::read("h.scxml", SRC).unwrap();
        assert_eq!(d.name, "h2hack");
        assert_eq!(d.service_id, 1);
        assert_eq!(d.basic.len(), 5);
        assert_eq!(
            d.basic[1].kind,
            BasicKind::Message(vec![Filter {
                attr: FilterAttr::Known(Attr::MessageType),
                value: FilterValue::Int(128),
                pos: d.basic[1].kind_pos()
            }])
        );
        assert_eq!(d.basic[4].kind, BasicKind::Timer(Some(3)));
        assert_eq!(d.composite[0].constituents, vec![0]);
        assert_eq!(d.composite[0].expr_pos.line, 19);
    }

    #[test]
    fn errors_have_positions() {
        let bad = SRC
            .replace("<TimerIdentifier>3", "<TimerIdentifier>x")
            .replace("<ConstituentBasicEvent>ack", "<ConstituentBasicEvent>nope");
        let e = ServiceData::read("h.scxml", &bad).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("h.scxml:15:29: error: TimerIdentifier"), "{s}");
        assert!(s.contains("TimerIdentifier `x`"), "{s}");
        assert!(s.contains("constituent `nope` is not a basic event"), "{s}");
        let dup = SRC.replace("name=\"any\"", "name=\"ack\"");
        assert!(ServiceData::read("h.scxml", &dup)
            .unwrap_err()
            .to_string()
            .contains("h.scxml:14:5: error: duplicate event `ack`"));
        // An XQuery outside the supported subset: refused, naming the construct, at its
        // line and column.
        let xq = SRC.replace(
            "<Expression>forall d in node.children : exists m in ack : m.source == d</Expression>",
            "<XQuery>for $c in //Node[last()]/Children order by $c return true()</XQuery>",
        );
        let e = ServiceData::read("h.scxml", &xq).unwrap_err().to_string();
        assert!(
            e.contains("XQuery `order by` is not supported (supported: let, for"),
            "{e}"
        );
        let line = xq.lines().position(|l| l.contains("order by")).unwrap() + 1;
        let col = xq.lines().nth(line - 1).unwrap().find("order").unwrap() + 1;
        assert!(e.contains(&format!("h.scxml:{line}:{col}: error")), "{e}");
    }

    impl BasicDef {
        fn kind_pos(&self) -> Pos {
            match &self.kind {
                BasicKind::Message(f) => f[0].pos,
                BasicKind::Timer(_) => self.pos,
            }
        }
    }
}

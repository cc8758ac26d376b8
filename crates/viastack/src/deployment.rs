//! Where the nodes of a stack run: a deployment file gives every node's address (node ids
//! `0..N`, the ids the stack's layers use), and optionally which node this process is and the
//! address it binds.
//!
//! ```toml
//! # deployment.toml, shared by every node of the deployment
//! node = 1                      # optional: this node (or `--id`, or `Deployment::with_id`)
//! listen = "0.0.0.0:7001"       # optional: bind here instead of this node's address below
//!
//! [nodes]                       # every node, by id: the address its peers send to
//! 0 = "10.0.0.1:7000"
//! 1 = "10.0.0.2:7001"
//! 2 = "[fd00::3]:7000"          # IPv6
//! 3 = "db-3.example:7000"       # a host name, resolved when the file is read
//! ```
//!
//! A node's device binds its own listed address unless `listen` says otherwise; over UDP a
//! peer is recognised by the address it sends from, so a node must send from the address the
//! others list for it (bind the listed address, or the unspecified address with its port).
//!
//! # Errors
//! Every problem is a [`DeploymentError`] with `file:line` and what was expected: a mistyped
//! address, a host name that does not resolve, ids that are not `0..N`, unknown keys.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use viastack_kernel::NodeId;

/// A deployment: every node's address, and possibly this node's id and bind address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// This node, if the file (or the caller) says which.
    pub id: Option<NodeId>,
    /// The address to bind instead of this node's listed one.
    pub listen: Option<SocketAddr>,
    /// Every node's address, indexed by node id.
    pub nodes: Vec<SocketAddr>,
}

/// A deployment file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", if *line > 0 { format!(":{line}") } else { String::new() })]
pub struct DeploymentError {
    /// The file (as given), or the command-line flag at fault.
    pub file: String,
    /// 1-based line (1 when the problem has no better place; 0 for a flag).
    pub line: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    node: Option<Spanned<u32>>,
    listen: Option<Spanned<String>>,
    nodes: Spanned<BTreeMap<Spanned<String>, Spanned<String>>>,
}

impl Deployment {
    /// A deployment of `nodes` (node `i` at `nodes[i]`), with no id chosen yet.
    pub fn new(nodes: Vec<SocketAddr>) -> Self {
        Deployment {
            id: None,
            listen: None,
            nodes,
        }
    }

    /// The deployment of command-line flags: this node `id` at `addr`, and `peers` as
    /// `(id, "host:port")`; checked as a file would be, errors naming the flag at fault
    /// (`source` names the flags together, e.g. `--addr/--peer`).
    ///
    /// # Errors
    /// [`DeploymentError`]: a peer with this node's id or given twice, bad addresses, ids
    /// that are not `0..N`.
    pub fn from_flags(
        source: &str,
        id: NodeId,
        addr: SocketAddr,
        peers: &[(u32, String)],
    ) -> Result<Self, DeploymentError> {
        let flag_error = |flag: String, message: String| DeploymentError {
            file: flag,
            line: 0,
            message,
        };
        let mut listed = vec![(id.0, addr.to_string(), format!("--addr {addr}"))];
        for (n, a) in peers {
            let flag = format!("--peer {n}={a}");
            if *n == id.0 {
                return Err(flag_error(
                    flag,
                    format!("{n} is this node's own id (--id {n}); list only the other nodes"),
                ));
            }
            if listed.iter().any(|(m, _, _)| m == n) {
                return Err(flag_error(flag, format!("node {n} is given twice")));
            }
            listed.push((*n, a.clone(), flag));
        }
        listed.sort();
        let mut text = String::from("[nodes]\n");
        for (n, a, _) in &listed {
            // Debug quoting escapes what the user typed, so the text stays one TOML string.
            text += &format!("{n} = {a:?}\n");
        }
        match Self::parse(source, &text) {
            Ok(d) => Ok(d.with_id(id)),
            // Line k + 2 of the text is the k-th node listed: blame its flag.
            Err(e) => Err(match e.line.checked_sub(2).and_then(|k| listed.get(k)) {
                Some((_, _, flag)) => flag_error(flag.clone(), e.message),
                None => flag_error(source.to_string(), e.message),
            }),
        }
    }

    /// This deployment as seen by node `id`.
    pub fn with_id(mut self, id: NodeId) -> Self {
        self.id = Some(id);
        self
    }

    /// This deployment binding `addr` instead of the node's listed address.
    pub fn with_listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// Reads and checks a deployment file.
    ///
    /// # Errors
    /// [`DeploymentError`]: unreadable file, bad TOML, bad addresses or ids.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, DeploymentError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| DeploymentError {
            file: name.clone(),
            line: 1,
            message: format!("cannot read the deployment file: {e}"),
        })?;
        Self::parse(&name, &text)
    }

    /// Parses deployment text; `file` names it in errors.
    ///
    /// # Errors
    /// [`DeploymentError`] with the line of the first problem.
    pub fn parse(file: &str, text: &str) -> Result<Self, DeploymentError> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let err = |offset: usize, message: String| DeploymentError {
            file: file.to_string(),
            line: line_of(offset),
            message,
        };
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            err(at, e.message().to_string())
        })?;
        let mut listed = Vec::new();
        for (key, value) in raw.nodes.get_ref() {
            let id: u32 = key.get_ref().parse().map_err(|_| {
                err(
                    key.span().start,
                    format!("node ids are integers 0, 1, …; found `{}`", key.get_ref()),
                )
            })?;
            let addr = resolve(value.get_ref()).map_err(|m| err(value.span().start, m))?;
            listed.push((id, key.span().start, addr));
        }
        // The map orders keys as text ("10" before "2"): check them as numbers.
        listed.sort_by_key(|(id, _, _)| *id);
        let mut nodes = Vec::new();
        for (i, (id, at, addr)) in listed.into_iter().enumerate() {
            if id as usize != i {
                return Err(err(
                    at,
                    format!("node ids must be 0..N without gaps: expected {i}, found {id}"),
                ));
            }
            nodes.push(addr);
        }
        if nodes.is_empty() {
            return Err(err(
                raw.nodes.span().start,
                "[nodes] lists no node: give every node's address, `0 = \"host:port\"`".into(),
            ));
        }
        let id = raw.node.map(|n| (n.span(), NodeId(*n.get_ref())));
        if let Some((span, NodeId(n))) = &id {
            if *n as usize >= nodes.len() {
                return Err(err(
                    span.start,
                    format!("node {n} is not in [nodes] (ids 0..{})", nodes.len() - 1),
                ));
            }
        }
        let listen = match raw.listen {
            Some(l) => Some(resolve(l.get_ref()).map_err(|m| err(l.span().start, m))?),
            None => None,
        };
        Ok(Deployment {
            id: id.map(|(_, n)| n),
            listen,
            nodes,
        })
    }

    /// The address node `id` binds: `listen` for this node if given, else its listed address.
    pub fn bind_addr(&self, id: NodeId) -> Option<SocketAddr> {
        if self.id == Some(id) {
            if let Some(l) = self.listen {
                return Some(l);
            }
        }
        self.nodes.get(id.0 as usize).copied()
    }
}

/// `host:port` or `ip:port` to one socket address.
fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !text.contains(':') {
        return Err(format!(
            "`{text}` has no port: write `host:port`, `a.b.c.d:port` or `[v6]:port`"
        ));
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("`{text}` resolves to no address")),
        Err(e) => Err(format!("`{text}` is not an address: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_file_with_v4_v6_and_an_override() {
        let d = Deployment::parse(
            "d.toml",
            "node = 1\nlisten = \"0.0.0.0:7001\"\n[nodes]\n0 = \"10.0.0.1:7000\"\n1 = \"10.0.0.2:7001\"\n2 = \"[fd00::3]:7000\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.id, Some(NodeId(1)));
        assert_eq!(d.nodes.len(), 3);
        assert!(d.nodes[2].is_ipv6());
        assert_eq!(d.bind_addr(NodeId(1)), "0.0.0.0:7001".parse().ok());
        assert_eq!(d.bind_addr(NodeId(0)), "10.0.0.1:7000".parse().ok());
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases = [
            ("[nodes]\n0 = \"10.0.0.1\"\n", 2, "no port"),
            (
                "[nodes]\n0 = \"1.2.3.4:1\"\n2 = \"1.2.3.4:2\"\n",
                3,
                "without gaps",
            ),
            (
                "[nodes]\n0 = \"1.2.3.4:1\"\nx = \"1.2.3.4:2\"\n",
                3,
                "integers",
            ),
            (
                "node = 4\n[nodes]\n0 = \"1.2.3.4:1\"\n",
                1,
                "not in [nodes]",
            ),
            ("nodes = {}\n", 1, "lists no node"),
            (
                "colour = 1\n[nodes]\n0 = \"1.2.3.4:1\"\n",
                1,
                "unknown field",
            ),
            (
                "[nodes]\n0 = \"no-such-host.invalid:7\"\n",
                2,
                "not an address",
            ),
        ];
        for (text, line, what) in cases {
            let e = Deployment::parse("d.toml", text).err();
            let e = e.unwrap_or_else(|| panic!("{text:?} accepted"));
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn flag_mistakes_name_the_flag() {
        let me: SocketAddr = "127.0.0.1:7000".parse().unwrap_or_else(|e| panic!("{e}"));
        let peers = |list: &[(u32, &str)]| -> Vec<(u32, String)> {
            list.iter().map(|(n, a)| (*n, a.to_string())).collect()
        };
        let cases = [
            (
                vec![(0, "127.0.0.1:7001")],
                "--peer 0=127.0.0.1:7001: 0 is this node's own id",
            ),
            (
                vec![(1, "127.0.0.1:7001"), (1, "127.0.0.1:7002")],
                "--peer 1=127.0.0.1:7002: node 1 is given twice",
            ),
            (
                vec![(1, "127.0.0.1")],
                "--peer 1=127.0.0.1: `127.0.0.1` has no port",
            ),
            (vec![(2, "127.0.0.1:7002")], "--peer 2=127.0.0.1:7002: "),
            (vec![(1, "a\"b:1")], "--peer 1=a\"b:1: "),
        ];
        for (list, want) in cases {
            let e = Deployment::from_flags("--addr/--peer", NodeId(0), me, &peers(&list))
                .err()
                .unwrap_or_else(|| panic!("{list:?} accepted"));
            assert!(e.to_string().starts_with(want), "{list:?}: {e}");
        }
        let d = Deployment::from_flags(
            "--addr/--peer",
            NodeId(1),
            "127.0.0.1:7001".parse().unwrap_or_else(|e| panic!("{e}")),
            &peers(&[(0, "127.0.0.1:7000")]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.id, d.nodes.len()), (Some(NodeId(1)), 2));
    }

    #[test]
    fn ids_beyond_nine_are_ordered_as_numbers() {
        let mut text = String::from("[nodes]\n");
        for i in 0..12 {
            text += &format!("{i} = \"127.0.0.1:{}\"\n", 7000 + i);
        }
        let d = Deployment::parse("d.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.nodes[10].port(), 7010);
    }
}

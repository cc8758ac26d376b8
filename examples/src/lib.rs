//! What the examples share: where the nodes are, from the command line.
#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use viastack::{Deployment, NodeId};

/// The deployment options every example takes.
#[derive(clap::Args, Debug)]
pub struct Where {
    /// This node's id (0..N-1).
    #[arg(long)]
    pub id: u32,
    /// A deployment file listing every node (docs/APPLICATIONS.md).
    #[arg(long)]
    pub deployment: Option<PathBuf>,
    /// This node's address (instead of a deployment file).
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Another node as ID=HOST:PORT; repeat for each.
    #[arg(long = "peer")]
    pub peers: Vec<String>,
}

impl Where {
    /// The deployment, seen from this node.
    ///
    /// # Errors
    /// A bad file, a malformed `--peer`, or neither given.
    pub fn deployment(&self) -> anyhow::Result<Deployment> {
        let d = match (&self.deployment, self.addr) {
            (Some(path), _) => Deployment::from_file(path)?,
            (None, Some(addr)) => {
                let mut peers = Vec::new();
                for p in &self.peers {
                    let (id, a) = p
                        .split_once('=')
                        .with_context(|| format!("--peer {p}: write ID=HOST:PORT"))?;
                    let id: u32 = id.parse().with_context(|| format!("--peer {p}: bad id"))?;
                    peers.push((id, a.to_string()));
                }
                Deployment::from_flags("--addr/--peer", NodeId(self.id), addr, &peers)?
            }
            (None, None) => bail!("say where the nodes are: --deployment FILE or --addr/--peer"),
        };
        Ok(d.with_id(NodeId(self.id)))
    }
}

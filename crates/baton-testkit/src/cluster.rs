//! A JetStream cluster of real `nats-server` processes on random ports.

use std::fmt::Write as _;
use std::io;
use std::net::TcpListener;

use baton_nats_server::{NatsServer, ServerOptions};
use tempfile::TempDir;

/// Nodes of one cluster, each with its own temporary store, that write
/// every message to disk before acknowledging it (`sync_interval: always`).
/// Every node is killed on drop.
#[derive(Debug)]
pub struct NatsCluster {
    /// The nodes, `n1`, `n2`, … in order.
    pub nodes: Vec<NatsServer>,
    /// Holds the nodes' configuration files.
    _configs: TempDir,
}

impl NatsCluster {
    /// Starts `size` nodes routed to each other. The cluster may still be
    /// electing its JetStream leader when this returns: wait for
    /// `account_info` to succeed before relying on it.
    ///
    /// # Errors
    ///
    /// When a node does not come up (the message quotes its log).
    pub fn start(size: usize) -> io::Result<Self> {
        let configs = tempfile::Builder::new()
            .prefix("baton-cluster-")
            .tempdir()?;
        let routes = free_ports(size)?;
        let mut nodes = Vec::with_capacity(size);
        for (index, own) in routes.iter().enumerate() {
            let mut config = format!(
                "server_name: n{}\njetstream {{ sync_interval: always }}\ncluster {{\n  name: baton\n  listen: \"127.0.0.1:{own}\"\n  routes: [\n",
                index + 1
            );
            for port in routes.iter().filter(|port| *port != own) {
                let _ = writeln!(config, "    \"nats-route://127.0.0.1:{port}\"");
            }
            config.push_str("  ]\n}\n");
            let path = configs.path().join(format!("n{}.conf", index + 1));
            std::fs::write(&path, config)?;
            let options = ServerOptions::default().arg("-c").arg(&path);
            let node = NatsServer::start_with(options).map_err(io::Error::other)?;
            nodes.push(node);
        }
        Ok(Self {
            nodes,
            _configs: configs,
        })
    }

    /// The nodes' client URLs as a comma-separated server list.
    #[must_use]
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `count` distinct ports that were free a moment ago.
fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect()
}

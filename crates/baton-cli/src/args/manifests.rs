//! `baton manifests`' options.

use std::path::PathBuf;

use baton_proto::AgentName;
use clap::Args;

/// What `baton manifests` generates, and for which cluster.
#[derive(Debug, Args)]
pub struct ManifestsArgs {
    /// Spec files, one agent type each (as `baton worker --spec` takes them).
    #[arg(required = true, value_name = "SPEC")]
    pub specs: Vec<PathBuf>,

    /// Write the manifests into DIR: a file per agent type, router.yaml, registry.yaml,
    /// namespace.yaml and kustomization.yaml [default: print them all to stdout]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// The container image with `baton` (built from the repository's Dockerfile)
    /// [default: baton:<this version>]
    #[arg(long)]
    pub image: Option<String>,

    /// Namespace of every resource.
    #[arg(long, default_value = "baton")]
    pub namespace: String,

    /// NATS_URL of the pods: the NATS service in the cluster.
    #[arg(
        long,
        default_value = "nats://nats.nats.svc.cluster.local:4222",
        value_name = "URL"
    )]
    pub pod_nats_url: String,

    /// NATS monitoring endpoint (host:port) that KEDA reads `/jsz` from. On a cluster KEDA asks
    /// the consumer's leader at `<server name>.<this host>`, so give the headless service of
    /// the NATS StatefulSet (as the official Helm chart names it).
    #[arg(
        long,
        default_value = "nats-headless.nats.svc.cluster.local:8222",
        value_name = "HOST:PORT"
    )]
    pub nats_monitoring: String,

    /// NATS account Baton's streams live in, for KEDA (`$G` without accounts).
    #[arg(long, default_value = "$G")]
    pub nats_account: String,

    /// Replicas of Baton's streams (BATON_REPLICAS of every pod).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub stream_replicas: u8,

    /// Fewest pods per agent type; 0 lets KEDA stop an idle type's pods.
    #[arg(long, default_value_t = 1)]
    pub min_pods: u32,

    /// Most pods per agent type.
    #[arg(long, default_value_t = 10)]
    pub max_pods: u32,

    /// The router's agent type for tasks that name neither `to` nor `requires`.
    #[arg(long)]
    pub default_agent: Option<AgentName>,

    /// The router's fallback when no agent type fits a task's `requires`.
    #[arg(long)]
    pub fallback: Option<AgentName>,
}

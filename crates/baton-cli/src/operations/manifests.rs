//! `baton manifests`: writes what [`baton_ops::manifests`] generates, to a
//! directory or to stdout.

use std::path::PathBuf;

use anyhow::Context as _;
use baton_ops::manifests::{ManifestOptions, generate, yaml};
use baton_proto::{AgentName, Subjects};
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

pub fn run(args: &ManifestsArgs, subjects: &Subjects) -> anyhow::Result<std::process::ExitCode> {
    let options = ManifestOptions {
        specs: args.specs.clone(),
        image: args.image.clone(),
        namespace: args.namespace.clone(),
        pod_nats_url: args.pod_nats_url.clone(),
        nats_monitoring: args.nats_monitoring.clone(),
        nats_account: args.nats_account.clone(),
        stream_replicas: args.stream_replicas,
        min_pods: args.min_pods,
        max_pods: args.max_pods,
        default_agent: args.default_agent.clone(),
        fallback: args.fallback.clone(),
    };
    let files = generate(&options, subjects)?;
    let Some(dir) = &args.out else {
        let mut text = String::new();
        for (name, documents) in files
            .iter()
            .filter(|(name, _)| *name != "kustomization.yaml")
        {
            text.push_str(&format!("# {name}\n{}", yaml(documents)?));
        }
        let mut out = std::io::stdout().lock();
        return match std::io::Write::write_all(&mut out, text.as_bytes()) {
            Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(err).context("cannot write to stdout")
            }
            _ => Ok(std::process::ExitCode::SUCCESS),
        };
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, documents) in &files {
        let path = dir.join(name);
        std::fs::write(&path, yaml(documents)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("wrote {} files to {}", files.len(), dir.display());
    Ok(std::process::ExitCode::SUCCESS)
}

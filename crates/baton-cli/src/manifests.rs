//! `baton manifests`: writes what [`baton_ops::manifests`] generates, to a
//! directory or to stdout.

use anyhow::Context as _;
use baton_ops::manifests::{ManifestOptions, generate, yaml};
use baton_proto::Subjects;

use crate::args::ManifestsArgs;

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

//! `baton check`: validate agent spec files.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Spec files (TOML).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Also reach each LLM spec's [[mcp]] servers (starting `command` ones) and list every
    /// tool with its class: read-only, idempotent or keyed (an unknown outcome is repeated)
    /// or not repeatable (it goes to a person), and whether its calls need approval.
    #[arg(long)]
    pub tools: bool,
}

/// `baton check FILE…`: errors with file, line and fix; cross-spec warnings;
/// with `--tools`, every MCP tool's class.
pub async fn run(args: &CheckArgs) -> std::process::ExitCode {
    let report = baton_agents::check(&args.files);
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    let mut failed = false;
    for spec in &report.specs {
        println!(
            "ok: {} ({}, tier {}) from {}",
            spec.name,
            match spec.kind {
                baton_agents::Kind::Exec(_) => "exec",
                baton_agents::Kind::Llm(_) => "llm",
                baton_agents::Kind::Human(_) => "human",
                baton_agents::Kind::Chain(_) => "chain",
                baton_agents::Kind::A2a(_) => "a2a",
            },
            spec.profile.tier,
            spec.file.display()
        );
        if spec.mcp.is_empty() {
            continue;
        }
        if !args.tools {
            println!(
                "  {} MCP server(s): run `baton check --tools` to list each tool's class",
                spec.mcp.len()
            );
            continue;
        }
        match baton_agents::tool_classes(spec).await {
            Ok(tools) => {
                for (name, class, approve) in tools {
                    let approve = if approve { ", approval required" } else { "" };
                    println!("  tool {name}: {class}{approve}");
                }
            }
            Err(err) => {
                eprintln!("error: {}: {err}", spec.file.display());
                failed = true;
            }
        }
    }
    if report.errors.is_empty() && !failed {
        return std::process::ExitCode::SUCCESS;
    }
    if !report.errors.is_empty() {
        eprintln!(
            "{} error(s) in {} file(s)",
            report.errors.len(),
            args.files.len() - report.specs.len()
        );
    }
    std::process::ExitCode::FAILURE
}

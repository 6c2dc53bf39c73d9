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
pub async fn run(
    args: &CheckArgs,
    nats: &crate::nats::NatsArgs,
    subjects: baton_proto::Subjects,
) -> std::process::ExitCode {
    let report = baton_agents::check(&args.files);
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    let mut failed = false;
    // Kept open while the servers are reached.
    let signed = if args.tools {
        sign_ins(nats, &subjects, &report.specs).await
    } else {
        None
    };
    let tokens = signed.as_ref().map(|(_, tokens)| tokens.clone());
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
        match baton_agents::tool_classes(spec, tokens.as_ref()).await {
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

/// The OAuth sign-ins kept in JetStream, when a spec's `[[mcp]]` uses one
/// (`auth = "oauth"`); without them such a server is reported unreachable.
pub(crate) async fn sign_ins(
    nats: &crate::nats::NatsArgs,
    subjects: &baton_proto::Subjects,
    specs: &[baton_agents::AgentSpec],
) -> Option<(baton_nats::Connection, baton_mcp_client::Tokens)> {
    let wanted = specs.iter().flat_map(|spec| &spec.mcp);
    if !wanted
        .into_iter()
        .any(|mcp| mcp.auth == Some(baton_agents::spec::McpAuth::Oauth))
    {
        return None;
    }
    let role = baton_ops::Role::of(baton_ops::RoleKind::Operator);
    let connection = match crate::nats::connect(nats, None, &role).await {
        Ok(connection) => connection,
        Err(err) => {
            eprintln!(
                "warning: cannot read the OAuth sign-ins: {}",
                crate::report(&err)
            );
            return None;
        }
    };
    match baton_mcp_client::Tokens::existing(connection.client(), subjects).await {
        Ok(Some(tokens)) => Some((connection, tokens)),
        Ok(None) => None,
        Err(err) => {
            eprintln!(
                "warning: cannot read the OAuth sign-ins: {}",
                baton_nats::error_chain(&err)
            );
            None
        }
    }
}

//! `baton new agent --python NAME`: a working agent and its spec, to start
//! from.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};

/// What `baton new` writes.
#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Write a working agent and its spec: NAME.py, a Python agent written with the `baton`
    /// package (a journaled step, a message, an answer), and NAME.toml, which runs it as a
    /// persistent exec program. Start it with `baton worker --spec NAME.toml`.
    Agent(NewAgentArgs),
}

#[derive(Debug, Args)]
pub struct NewAgentArgs {
    /// The agent type: letters, digits, `_` and `-`.
    pub name: String,
    /// Write a Python agent (the default, and for now the only kind).
    #[arg(long)]
    pub python: bool,
    /// Where to write the files.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Overwrite files that exist.
    #[arg(long)]
    pub force: bool,
}

/// The agent: the handler's whole life in a few lines.
const AGENT: &str = r#""""NAME: a Baton agent in Python (docs/agents/python.md).

Run it with `baton worker --spec NAME.toml`, then `baton send --to NAME --wait "hello"`.
"""

import baton

agent = baton.Agent()


def count_words(text: str) -> dict:
    """A step: its result is kept in the hop journal, so it runs once per task."""
    return {"words": len(text.split())}


@agent.task
async def handle(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    counted = await ctx.step("count_words", count_words, task.text)
    await ctx.say(f"I read {counted['words']} words.")
    return baton.complete({"echo": task.text, **counted})


if __name__ == "__main__":
    agent.run()
"#;

/// The spec; `PYTHONPATH` is added when the package is found beside this build.
const SPEC: &str = r#"# NAME: a Python agent (NAME.py), run by `baton worker --spec NAME.toml`.
name = "NAME"
description = "Counts the words of a message"
capabilities = ["NAME"]
kind = "exec"
concurrency = 16
timeout_ms = 30000

[exec]
command = ["python3", "NAME.py"]
mode = "persistent"

# ctx.model calls this model, with the shared limits, budgets and journal of
# an LLM agent; ctx.tool calls the tools of [[mcp]] servers.
# [llm]
# base_url = "http://127.0.0.1:8080/v1"
# model = "your-model"
"#;

/// The package beside the binary's sources (a build from the repository).
fn package() -> Option<PathBuf> {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    sdk.join("baton/__init__.py")
        .exists()
        .then(|| sdk.canonicalize().unwrap_or(sdk))
}

/// Writes the files.
///
/// # Errors
///
/// A name that is not an agent type, a file that exists (without --force),
/// or a folder that cannot be written.
pub fn run(command: NewCommand) -> anyhow::Result<ExitCode> {
    let NewCommand::Agent(args) = command;
    let name = baton_proto::AgentName::new(args.name.as_str())
        .map_err(|err| anyhow::anyhow!("{err}: the name is the agent type, e.g. `greeter`"))?;
    let _ = args.python;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let program = args.dir.join(format!("{name}.py"));
    let spec = args.dir.join(format!("{name}.toml"));
    for path in [&program, &spec] {
        anyhow::ensure!(
            args.force || !path.exists(),
            "{} exists: choose another name or --dir, or pass --force to overwrite it",
            path.display()
        );
    }
    let mut spec_text = SPEC.replace("NAME", name.as_str());
    let found = package();
    if let Some(sdk) = &found {
        spec_text = spec_text.replace(
            "mode = \"persistent\"\n",
            &format!(
                "mode = \"persistent\"\n\n[exec.env]\nPYTHONPATH = {:?}\n",
                sdk.to_string_lossy()
            ),
        );
    }
    std::fs::write(&program, AGENT.replace("NAME", name.as_str()))
        .with_context(|| format!("cannot write {}", program.display()))?;
    std::fs::write(&spec, spec_text).with_context(|| format!("cannot write {}", spec.display()))?;
    println!("wrote {} and {}", program.display(), spec.display());
    if found.is_none() {
        println!(
            "install the package first: pip install ./sdk/python (from a clone of the repository)"
        );
    }
    println!("run it:   baton worker --spec {}", spec.display());
    println!("try it:   baton send --to {name} --wait \"hello there\"");
    Ok(ExitCode::SUCCESS)
}

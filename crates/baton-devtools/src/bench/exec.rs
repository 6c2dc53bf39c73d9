//! `baton bench --exec`: one exec agent run per task (a process per task)
//! against the same agent run persistent (one process, lines of JSON), and
//! the same agent written with the Python package (`sdk/python`), answering
//! at once and after three journaled steps, in the same run, each as a real
//! `baton worker --spec` process.

use super::median;
use super::scale::{ScaleOut, measure};

/// An agent that answers at once, in either mode: it reads `BATON_EXEC_MODE`.
/// Its reply is the package agent's, `baton.complete(text)`: the output,
/// also said in the conversation.
const AGENT: &str = r#"import json, os, sys
def reply(envelope):
    text = envelope["context"]["initial_query"]
    return {"action": "terminate", "output": text, "say": text}
if os.environ.get("BATON_EXEC_MODE") == "persistent":
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(json.dumps({"id": request["id"], "reply": reply(request["envelope"])}) + "\n")
        sys.stdout.flush()
else:
    print(json.dumps(reply(json.load(sys.stdin))))
"#;

/// The same agent written with the package: it answers at once, or
/// (`STEPS=3`) after three journaled steps, each a plain function (run in
/// a thread) or, with `ASYNC_STEPS=1`, an `async def` (awaited).
const PACKAGE_AGENT: &str = r#"import os
import baton

agent = baton.Agent()
STEPS = int(os.environ.get("STEPS", "0"))

def noted(n):
    return n

async def noted_async(n):
    return n

STEP = noted_async if os.environ.get("ASYNC_STEPS") == "1" else noted

@agent.task
async def handle(task, ctx):
    for n in range(STEPS):
        await ctx.step(f"step-{n}", STEP, n)
    return baton.complete(task.text)

agent.run()
"#;

/// Where the package is: the repository's `sdk/python`, when this binary
/// was built from one, else wherever Python finds it installed.
fn package_path() -> Option<std::path::PathBuf> {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    here.join("baton/__init__.py").exists().then_some(here)
}

/// The agents compared: a label, the program, the mode and its environment.
fn agents(
    package: Option<&std::path::Path>,
) -> Vec<(&'static str, &'static str, &'static str, String)> {
    let path = package.map_or_else(String::new, |p| {
        format!("\n[exec.env]\nPYTHONPATH = {:?}\n", p.to_string_lossy())
    });
    let env = |more: &str| {
        if path.is_empty() {
            format!("\n[exec.env]\n{more}")
        } else {
            format!("{path}{more}")
        }
    };
    vec![
        ("per_task", "echo.py", "per_task", String::new()),
        ("persistent", "echo.py", "persistent", String::new()),
        ("package", "package.py", "persistent", path.clone()),
        (
            "package, 3 steps",
            "package.py",
            "persistent",
            env("STEPS = \"3\"\n"),
        ),
        (
            "package, 3 async steps",
            "package.py",
            "persistent",
            env("STEPS = \"3\"\nASYNC_STEPS = \"1\"\n"),
        ),
    ]
}

/// Tasks a per-task round runs at most: a process per task costs the same
/// at any count, and thousands would take minutes.
const PER_TASK_MOST: u64 = 200;

/// Runs `tasks` tasks through each mode, `rounds` times, the modes taking
/// turns, and prints each mode's median tasks/s, the medians of the ratios
/// of each round, and what a ctx call adds. Each round's worker first
/// serves one task outside the clock (it starts the program): its time is
/// shown apart, as `first task ms`.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64, rounds: u64) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("echo.py"), AGENT)?;
    std::fs::write(dir.path().join("package.py"), PACKAGE_AGENT)?;
    let package = package_path();
    println!(
        "exec bench: {tasks} tasks (per task: at most {PER_TASK_MOST}) through one worker of a Python agent, concurrency {}, {rounds} rounds, medians",
        bench.concurrency
    );
    println!();
    let agents = agents(package.as_deref());
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); agents.len()];
    let mut firsts: Vec<Vec<f64>> = vec![Vec::new(); agents.len()];
    for round_no in 0..rounds {
        for (n, (_, program, mode, env)) in agents.iter().enumerate() {
            let spec = dir.path().join(format!("agent_{n}.toml"));
            std::fs::write(
                &spec,
                format!(
                    "name = \"echo\"\nkind = \"exec\"\nconcurrency = {}\ntimeout_ms = 60000\n\n[exec]\ncommand = [\"python3\", {program:?}]\nmode = \"{mode}\"\n{env}",
                    bench.concurrency
                ),
            )?;
            let prefix = format!("bench_exec_{round_no}_{n}");
            let count = if *mode == "per_task" {
                tasks.min(PER_TASK_MOST)
            } else {
                tasks
            };
            let measured = measure(bench, (&spec, "echo", &prefix), 1, count, true).await?;
            rates[n].push(measured.rate);
            firsts[n].extend(measured.first.map(|first| first.as_secs_f64() * 1e3));
        }
    }
    println!(
        "{:<22} {:>10} {:>12} {:>14}",
        "mode", "tasks/s", "ms/task", "first task ms"
    );
    for (((label, ..), rates), firsts) in agents.iter().zip(&rates).zip(&firsts) {
        let rate = median(rates.iter().copied());
        let first = median(firsts.iter().copied());
        println!(
            "{label:<22} {rate:>10.1} {:>12.2} {first:>14.0}",
            1000.0 / rate
        );
    }
    let ratio = |a: usize, b: usize| median(rates[a].iter().zip(&rates[b]).map(|(a, b)| a / b));
    println!();
    println!("persistent / per_task {:>10.2}", ratio(1, 0));
    println!("package / persistent  {:>10.2}", ratio(2, 1));
    println!("3 steps / persistent  {:>10.2}", ratio(3, 1));
    println!("3 async steps / persistent {:>5.2}", ratio(4, 1));
    // What a step adds to a task, in the worker's and the program's time.
    let per_call = |steps: usize| {
        median(
            (rates[steps].iter().zip(&rates[2]))
                .map(|(steps, none)| (1.0 / steps - 1.0 / none) / 3.0 * 1e6),
        )
    };
    println!("µs per ctx call       {:>10.0}", per_call(3));
    println!("µs per async ctx call {:>10.0}", per_call(4));
    Ok(())
}

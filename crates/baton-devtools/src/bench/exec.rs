//! `baton bench --exec`: one exec agent run per task (a process per task)
//! against the same agent run persistent (one process, lines of JSON), in
//! the same run, each as a real `baton worker --spec` process.

use super::scale::{ScaleOut, round};

/// An agent that answers at once, in either mode: it reads `BATON_EXEC_MODE`.
const AGENT: &str = r#"import json, os, sys
def reply(envelope):
    return {"action": "terminate", "output": envelope["context"]["initial_query"]}
if os.environ.get("BATON_EXEC_MODE") == "persistent":
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(json.dumps({"id": request["id"], "reply": reply(request["envelope"])}) + "\n")
        sys.stdout.flush()
else:
    print(json.dumps(reply(json.load(sys.stdin))))
"#;

/// Runs `tasks` tasks through each mode and prints tasks/s and the ratio.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("echo.py"), AGENT)?;
    println!(
        "exec bench: {tasks} tasks through one worker of a Python agent that answers at once, concurrency {}",
        bench.concurrency
    );
    println!();
    println!("{:<22} {:>10} {:>12}", "mode", "tasks/s", "ms/task");
    let mut rates = Vec::new();
    for mode in ["per_task", "persistent"] {
        let spec = dir.path().join(format!("{mode}.toml"));
        std::fs::write(
            &spec,
            format!(
                "name = \"echo\"\nkind = \"exec\"\nconcurrency = {}\ntimeout_ms = 60000\n\n[exec]\ncommand = [\"python3\", \"echo.py\"]\nmode = \"{mode}\"\n",
                bench.concurrency
            ),
        )?;
        let prefix = format!("bench_exec_{mode}");
        let rate = round(bench, &spec, "echo", &prefix, 1, tasks).await?;
        println!("{mode:<22} {rate:>10.1} {:>12.2}", 1000.0 / rate);
        rates.push(rate);
    }
    println!();
    println!("persistent / per_task {:>10.2}", rates[1] / rates[0]);
    Ok(())
}

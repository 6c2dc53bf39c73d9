//! The rules of the crates: the runtime's crates point one way, no crate
//! holds more than a fifth of the code, the gateways, telemetry and the
//! CLI's commands for callers stand apart from the worker loop, and test
//! support stays out of what ships.

use std::path::Path;

use crate::{crates, depends_on, rust_files, shown};

/// The files under `room` of crate `krate` that name a module under any of
/// `others` (as `crate::<other>`), with the line.
fn reaching(krate: &str, room: &str, others: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(krate)
        .join("src");
    let mut found = Vec::new();
    for file in rust_files(&src.join(room)) {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (number, line) in text.lines().enumerate() {
            for other in others {
                if line.contains(&format!("crate::{other}::"))
                    || line.contains(&format!("crate::{other}}}"))
                {
                    found.push(format!("{}:{}: {}", shown(&file), number + 1, line.trim()));
                }
            }
        }
    }
    found
}

/// The rooms of `baton-nats`, bottom first, each with the rooms above it,
/// which it may not name.
const ROOMS: [(&str, &[&str]); 2] = [("nats", &["state", "pipeline"]), ("state", &["pipeline"])];

/// The runtime's crates, bottom first, each with the crates it may not
/// depend on: those above it, and its peer on the top floor.
const RUNTIME: [(&str, &[&str]); 4] = [
    (
        "baton-nats",
        &["baton-client", "baton-worker", "baton-router"],
    ),
    ("baton-client", &["baton-worker", "baton-router"]),
    ("baton-worker", &["baton-router"]),
    ("baton-router", &["baton-worker"]),
];

/// The crates of `RUNTIME` that `krate` depends on though it may not, and
/// every source line of it that names one of them.
fn reaching_up(krate: &str, above: &[&str]) -> Vec<String> {
    let all = depends_on(krate);
    let mut found: Vec<String> = above
        .iter()
        .filter(|other| all.contains(&(**other).to_owned()))
        .map(|other| format!("{krate} depends on {other}"))
        .collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(krate)
        .join("src");
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (number, line) in text.lines().enumerate() {
            for other in above {
                if line.contains(&format!("{}::", other.replace('-', "_"))) {
                    found.push(format!("{}:{}: {}", shown(&file), number + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_runtime_points_one_way() {
    let mut found = Vec::new();
    for (krate, above) in RUNTIME {
        found.extend(reaching_up(krate, above));
    }
    assert!(
        found.is_empty(),
        "a crate of the runtime reaches up (baton-nats → baton-client → baton-worker, baton-router): {found:#?}; move what both use down"
    );
    let mut found = Vec::new();
    for (room, above) in ROOMS {
        found.extend(reaching("baton-nats", room, above));
    }
    assert!(
        found.is_empty(),
        "a room of baton-nats names a room above it (nats → state → pipeline): {found:#?}; move what both use down"
    );
    // The checks see a reach when there is one.
    assert!(!reaching_up("baton-worker", &["baton-client"]).is_empty());
    assert!(!reaching("baton-nats", "pipeline", &["nats"]).is_empty());
    // No room is called `path` (the session's path is `Envelope.path`).
    for krate in RUNTIME.map(|(krate, _)| krate) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates")
            .join(krate)
            .join("src");
        assert!(!src.join("path").exists() && !src.join("path.rs").exists());
    }
}

/// The lines of the `.rs` files under `dir`.
fn lines_under(dir: &Path) -> usize {
    rust_files(dir)
        .iter()
        .map(|file| {
            std::fs::read_to_string(file)
                .expect("a readable source file")
                .lines()
                .count()
        })
        .sum()
}

#[test]
fn no_crate_holds_more_than_a_fifth_of_the_code() {
    let sizes: Vec<(String, usize)> = crates()
        .into_iter()
        .map(|(name, src)| (name, lines_under(&src)))
        .collect();
    let total: usize = sizes.iter().map(|(_, lines)| lines).sum();
    let big: Vec<String> = sizes
        .iter()
        .filter(|(_, lines)| lines * 5 > total)
        .map(|(name, lines)| format!("{name}: {lines} of {total} lines"))
        .collect();
    assert!(
        big.is_empty(),
        "crates holding more than 20 % of the lines under crates/*/src: {big:?}; split them by product"
    );
    // The check counts every crate.
    assert!(
        sizes
            .iter()
            .any(|(name, lines)| name == "baton-worker" && *lines > 0)
    );
}

/// What must not depend on the worker loop: the gateways and telemetry.
const CALLERS: [&str; 5] = [
    "baton-a2a",
    "baton-mcp",
    "baton-console",
    "baton-gateway",
    "baton-telemetry",
];

#[test]
fn gateways_and_telemetry_do_not_depend_on_the_worker_loop() {
    let found: Vec<String> = CALLERS
        .iter()
        .filter(|krate| depends_on(krate).contains(&"baton-worker".to_owned()))
        .map(|krate| (*krate).to_owned())
        .collect();
    assert!(
        found.is_empty(),
        "{found:?} depend on baton-worker, directly or through another crate of the workspace; a gateway needs baton-client, and telemetry baton-nats"
    );
    // The check sees a dependency on the loop when there is one.
    assert!(depends_on("baton-cli").contains(&"baton-worker".to_owned()));
    // The CLI's commands for callers use the client too: only the processes
    // it runs (`processes/`: a worker, `baton dev`) name the loop.
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/baton-cli/src");
    let mut named = Vec::new();
    for file in rust_files(&cli) {
        if file.starts_with(cli.join("processes")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (number, line) in text.lines().enumerate() {
            if line.contains("baton_worker::") {
                named.push(format!("{}:{}: {}", shown(&file), number + 1, line.trim()));
            }
        }
    }
    assert!(
        named.is_empty(),
        "a command of the CLI for callers names the worker loop: {named:#?}; use baton-client"
    );
    // The source of `baton-worker` still runs the loop.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/baton-worker/src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("baton-worker's lib.rs");
    assert!(
        lib.contains("pub use start::Worker;"),
        "baton-worker runs the loop"
    );
}

#[test]
fn no_shipped_crate_takes_the_test_kit() {
    let found: Vec<String> = crates()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| depends_on(name).contains(&"baton-testkit".to_owned()))
        .collect();
    assert!(
        found.is_empty(),
        "{found:?} take baton-testkit as a dependency, so test support ships in the binary; take it as a dev-dependency, or move what the crate uses out of the kit"
    );
    // The check sees the kit's own dependencies.
    assert!(depends_on("baton-testkit").contains(&"baton-nats-server".to_owned()));
}

#[test]
fn the_gateways_settle_nothing() {
    // A message is settled by the pipeline, and a turn closed by the
    // conversations' `Turn` or the router's keeper: the gateways only map
    // their protocol.
    let gateways = ["baton-a2a", "baton-mcp", "baton-console", "baton-gateway"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut named = Vec::new();
    for krate in gateways {
        for file in rust_files(&root.join(krate).join("src")) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            for (number, line) in text.lines().enumerate() {
                if line.to_lowercase().contains("settle") || line.contains("keep_one(") {
                    named.push(format!("{}:{}: {}", shown(&file), number + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        named.is_empty(),
        "a gateway settles (or says it does): {named:#?}; follow a conversation's turn with `Turn::events`, which closes it at its end"
    );
}

#[test]
fn the_wire_types_name_agents_and_versions_with_their_types() {
    // A field that holds an agent type or a version is an `AgentName` or a
    // `Version` (serde-transparent: the wire does not change), never a
    // `String` to parse again where it is used. `Ref::from` is a JSON
    // pointer, not an agent.
    let named = [
        "agent",
        "agents",
        "version",
        "versions",
        "holder",
        "entry",
        "current",
        "previous",
        "retired",
        "upgrading",
        "credited",
        "exclude",
        "to",
        "from",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/baton-proto/src");
    let mut stringly = Vec::new();
    for file in rust_files(&src) {
        if file.ends_with("events/refs.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (number, line) in text.lines().enumerate() {
            let Some(field) = line.trim().strip_prefix("pub ") else {
                continue;
            };
            let Some((name, ty)) = field.split_once(": ") else {
                continue;
            };
            if named.contains(&name) && ty.contains("String") {
                stringly.push(format!("{}:{}: {}", shown(&file), number + 1, line.trim()));
            }
        }
    }
    assert!(
        stringly.is_empty(),
        "wire fields that name agents or versions as String: {stringly:#?}; use AgentName or Version"
    );
}

/// The error parameter of each `Result<_, E>` on `line`, as written.
fn error_params(line: &str) -> Vec<String> {
    let mut params = Vec::new();
    for (at, _) in line.match_indices("Result<") {
        let rest = &line[at + "Result<".len()..];
        let (mut depth, mut comma, mut end) = (0_i32, None, None);
        for (i, c) in rest.char_indices() {
            match c {
                '<' | '(' => depth += 1,
                '>' | ')' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '>' | ')' => depth -= 1,
                ',' if depth == 0 => comma = Some(i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (comma, end) {
            params.push(rest[comma + 1..end].trim().to_owned());
        }
    }
    params
}

#[test]
fn each_library_crate_has_one_error_type_in_one_shape() {
    // One error per library crate, declared with `baton_proto::error_type!`:
    // a kind, a message that ends with the cause, the cause as `source()`.
    // What an agent answers (`AgentError`) and what the wire carries about
    // a failed call (`ExecCallError`) are values, not failures. The wire's
    // own error keeps its dead-letter reason by hand, and the nats-server
    // finder stands alone without the wire crate.
    let values = ["AgentError", "ExecCallError"];
    let by_hand = ["baton-proto", "baton-nats-server"];
    let (mut many, mut shaped_by_hand, mut stringly) = (Vec::new(), Vec::new(), Vec::new());
    for (krate, src) in crates() {
        if krate == "baton-cli" {
            continue;
        }
        let mut declared = Vec::new();
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            // Inside a `baton_proto::error_type! { ... }` invocation.
            let mut in_macro = false;
            for (number, line) in text.lines().enumerate() {
                let at = format!("{}:{}", shown(&file), number + 1);
                let trimmed = line.trim();
                if trimmed.starts_with("baton_proto::error_type! {") {
                    in_macro = true;
                } else if in_macro && trimmed == "}" {
                    in_macro = false;
                }
                let declaration = ["pub struct ", "pub enum "]
                    .iter()
                    .find_map(|start| trimmed.strip_prefix(start));
                if let Some(rest) = declaration {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if name.ends_with("Error") && !values.contains(&name.as_str()) {
                        let by_macro = in_macro && rest.ends_with(");");
                        if !by_macro && !by_hand.contains(&krate.as_str()) {
                            shaped_by_hand.push(format!("{at}: {trimmed}"));
                        }
                        declared.push(format!("{at}: {name}"));
                    }
                }
                if !trimmed.starts_with("//")
                    && error_params(trimmed).iter().any(|param| param == "String")
                {
                    stringly.push(format!("{at}: {trimmed}"));
                }
            }
        }
        if declared.len() > 1 {
            many.push(format!("{krate}: {declared:?}"));
        }
    }
    assert!(
        many.is_empty(),
        "library crates with more than one error type: {many:#?}; give the crate's one error a kind for each"
    );
    assert!(
        shaped_by_hand.is_empty(),
        "error types written by hand: {shaped_by_hand:#?}; declare them with baton_proto::error_type!"
    );
    assert!(
        stringly.len() <= 5,
        "Result<_, String> in library crates: {stringly:#?}; return the crate's error"
    );
    // The checks see what they look for.
    assert_eq!(
        error_params("fn f() -> Result<(String, BTreeMap<String, String>), Error> {"),
        ["Error"]
    );
    assert_eq!(error_params("-> Result<u8, String>"), ["String"]);
}

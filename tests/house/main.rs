//! Guard rails that keep the source in order, checked on every test run:
//!
//! - no non-test source file over 500 lines (a file's inline
//!   `#[cfg(test)]` module does not count);
//! - no function over 80 lines outside tests;
//! - no import circles between the modules of a crate, through `crate::`,
//!   `super::` or `self::` paths;
//! - no folder holding more than 20 source files, tests included;
//! - the runtime's crates point one way: the plumbing (`baton-nats`) at
//!   the bottom, then the client (`baton-client`), and on top the worker
//!   loop (`baton-worker`) and the router (`baton-router`), which do not
//!   depend on each other; inside `baton-nats`, `nats/` at the bottom, then
//!   `state/`, then the message pipeline (`pipeline/`);
//! - no crate holds more than a fifth of the lines under `crates/*/src`;
//! - no gateway (`baton-a2a`, `baton-mcp`, `baton-console`,
//!   `baton-gateway`), nor `baton-telemetry`, depends on the worker loop
//!   (`baton-worker`), directly or through another crate;
//! - no crate takes the test kit (`baton-testkit`) but as a
//!   dev-dependency;
//! - the agent authors' crate (`baton-author`) does not depend on
//!   `async-nats`, directly or through another crate of the workspace;
//! - each command of the CLI's table (`cli.rs`) runs in the module that
//!   holds its arguments.
//! - the gateways settle nothing: no message, no turn (the word
//!   `settle` is not theirs).
//! - the wire types name agents and versions as `AgentName` and
//!   `Version`, never as `String`.
//!
//! Each failure names the file and what to do.

mod commands;
mod crate_rules;
mod lexer;
mod modules;

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 80;

/// The workspace's crates: (name, its `src` directory).
fn crates() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut crates: Vec<_> = std::fs::read_dir(&root)
        .expect("the crates directory")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("src").is_dir())
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path.join("src"))
        })
        .collect();
    crates.sort();
    crates
}

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = folders(dir)
        .into_iter()
        .flat_map(|(_, files)| files)
        .collect();
    files.sort();
    files
}

/// `dir` and every folder below it, each with its own `.rs` files.
fn folders(dir: &Path) -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut folders = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir)
            .expect("a readable directory")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
        folders.push((dir, files));
    }
    folders
}

/// A file that holds only tests: `tests.rs`, or anything under a `tests` directory.
fn is_test_file(src: &Path, file: &Path) -> bool {
    let relative = file.strip_prefix(src).unwrap_or(file);
    relative.file_name().is_some_and(|name| name == "tests.rs")
        || relative
            .components()
            .any(|part| part.as_os_str() == "tests")
}

/// The non-test source files of every crate: (crate, src, file, code).
/// The code stops at the file's first top-level `#[cfg(test)]`.
fn sources() -> Vec<(String, PathBuf, PathBuf, String)> {
    let mut sources = Vec::new();
    for (name, src) in crates() {
        for file in rust_files(&src) {
            if is_test_file(&src, &file) {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let code = match text.find("\n#[cfg(test)]") {
                Some(end) => text[..=end].to_owned(),
                None => text,
            };
            sources.push((name.clone(), src.clone(), file, code));
        }
    }
    sources
}

fn shown(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_source_file_passes_500_lines() {
    let long: Vec<String> = sources()
        .iter()
        .map(|(_, _, file, code)| (file, code.lines().count()))
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(file, lines)| format!("{} has {lines} lines", shown(file)))
        .collect();
    assert!(
        long.is_empty(),
        "source files over {MAX_FILE_LINES} lines (tests excluded); split them by what they do:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_passes_80_lines() {
    let mut long = Vec::new();
    for (_, _, file, code) in sources() {
        for function in lexer::functions(&code) {
            if function.lines > MAX_FN_LINES {
                long.push(format!(
                    "{}:{} fn {} has {} lines",
                    shown(&file),
                    function.line,
                    function.name,
                    function.lines
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (tests excluded); give their steps names:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut circles = Vec::new();
    let mut by_crate: std::collections::BTreeMap<String, Vec<(PathBuf, String)>> =
        std::collections::BTreeMap::new();
    let mut roots = std::collections::BTreeMap::new();
    for (name, src, file, code) in sources() {
        roots.insert(name.clone(), src.clone());
        by_crate.entry(name).or_default().push((file, code));
    }
    for (name, files) in by_crate {
        let graph = modules::graph(&roots[&name], &files);
        for circle in modules::circles(&graph) {
            circles.push(format!("{name}: {}", circle.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "modules that import each other in a circle; move what both need below them:\n{}",
        circles.join("\n")
    );
}

/// The checks themselves catch what they claim to.
#[test]
fn the_checks_see_long_functions_and_circles() {
    let code = format!(
        "fn short() {{}}\nfn long() {{\n{}}}\nconst S: &str = \"fn fake() {{\";\n// fn commented() {{\nfn array() -> [u8; 2] {{\n    let q = '\\'';\n    [0, 1]\n}}\nfn declared();\n",
        "    let x = '{';\n".repeat(90)
    );
    let found = lexer::functions(&code);
    let names: Vec<_> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(names, [("short", 1), ("long", 92), ("array", 4)]);
    let src = Path::new("/x/src");
    let files = vec![
        (
            src.join("lib.rs"),
            "mod a;\nmod b;\npub use a::A;\n".to_owned(),
        ),
        (
            src.join("a.rs"),
            "use crate::b::B;\npub struct A;\n".to_owned(),
        ),
        (src.join("b.rs"), "pub struct B(crate::A);\n".to_owned()),
    ];
    let graph = modules::graph(src, &files);
    assert_eq!(modules::circles(&graph), [vec!["a", "b", "a"]]);
    // A circle through relative paths: `super::` from a file (and from an
    // inline module in it, one level further down), and `self::`.
    let files = vec![
        (src.join("lib.rs"), "mod c;\nmod d;\n".to_owned()),
        (
            src.join("c.rs"),
            "mod x;\nmod y;\nuse self::x::X;\n".to_owned(),
        ),
        (
            src.join("c/x.rs"),
            "use super::y::Y;\npub struct X;\n".to_owned(),
        ),
        (
            src.join("c/y.rs"),
            "mod inner {\n    use super::super::x::X;\n}\npub struct Y;\n".to_owned(),
        ),
        (src.join("d.rs"), "use super::c::X;\n".to_owned()),
    ];
    let graph = modules::graph(src, &files);
    assert_eq!(modules::circles(&graph), [vec!["c::x", "c::y", "c::x"]]);
    assert!(graph[&vec!["d".to_owned()]].contains(&vec!["c".to_owned()]));
}

/// The crates `manifest`'s `[dependencies]` names.
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("a readable Cargo.toml");
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        let name = line.split(['.', '=', ' ']).next().unwrap_or_default();
        if inside && !name.is_empty() && !name.starts_with('#') {
            names.push(name.to_owned());
        }
    }
    names
}

/// Every crate `name` (a crate of the workspace) depends on, through the
/// workspace's crates too.
fn depends_on(name: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut seen: Vec<String> = Vec::new();
    let mut stack = vec![name.to_owned()];
    while let Some(krate) = stack.pop() {
        for dependency in dependencies(&root.join(&krate).join("Cargo.toml")) {
            if seen.contains(&dependency) {
                continue;
            }
            if root.join(&dependency).join("Cargo.toml").is_file() {
                stack.push(dependency.clone());
            }
            seen.push(dependency);
        }
    }
    seen
}

#[test]
fn the_authors_crate_does_not_depend_on_nats() {
    let all = depends_on("baton-author");
    assert!(all.contains(&"baton-proto".to_owned()), "{all:?}");
    assert!(
        !all.contains(&"async-nats".to_owned()),
        "baton-author depends on async-nats ({all:?}): the agent authors' API must compile without the JetStream runtime; move what needs NATS to baton-worker"
    );
    // The check sees a dependency when there is one.
    assert!(depends_on("baton-worker").contains(&"async-nats".to_owned()));
}

/// The folders under `dir` (itself included) that hold more than `most`
/// `.rs` files of their own, with how many.
fn crowded(dir: &Path, most: usize) -> Vec<(PathBuf, usize)> {
    folders(dir)
        .into_iter()
        .map(|(dir, files)| (dir, files.len()))
        .filter(|(_, files)| *files > most)
        .collect()
}

#[test]
fn no_folder_holds_more_than_20_source_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crowded = Vec::new();
    for dir in ["crates", "tests", "examples"] {
        crowded.extend(crowded_in(&root.join(dir)));
    }
    assert!(
        crowded.is_empty(),
        "folders with more than 20 source files: {crowded:?}; group their files into folders by idea, each with a mod.rs that says what it holds"
    );
    // The check sees a crowded folder.
    assert!(!crate::crowded(&root.join("crates/baton-proto/src"), 1).is_empty());
}

fn crowded_in(dir: &Path) -> Vec<String> {
    crowded(dir, 20)
        .into_iter()
        .filter(|(path, _)| !path.components().any(|part| part.as_os_str() == "target"))
        .map(|(path, files)| format!("{} ({files})", shown(&path)))
        .collect()
}

#[test]
fn each_cli_command_runs_in_the_module_that_holds_its_arguments() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/baton-cli/src");
    let cli = std::fs::read_to_string(src.join("cli.rs")).expect("the CLI's table");
    let sources_of = |module: &str| commands::module_sources(&src, module);
    let found = commands::mismatches(&cli, &sources_of);
    assert!(
        found.is_empty(),
        "the CLI's commands and their modules part: {found:#?}; give each command one module holding its arguments and its run"
    );
    // The check sees a command run elsewhere than its arguments, and one
    // that is not run at all.
    let table = "pub enum Command {\n    /// Send.\n    Send(send::SendArgs),\n    Watch(watch::WatchArgs),\n}\n        Self::Send(args) => watch::run(nats, args).await,\n";
    let found = commands::mismatches(table, &sources_of);
    assert!(
        found.iter().any(|f| f.contains("arguments are in send")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("Watch is not dispatched")),
        "{found:?}"
    );
}

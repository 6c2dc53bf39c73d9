//! Guard rails that keep the source in order, checked on every test run:
//!
//! - no non-test source file over 500 lines (a file's inline
//!   `#[cfg(test)]` module does not count);
//! - no function over 80 lines outside tests;
//! - no import circles between the modules of a crate.
//!
//! Each failure names the file and what to do.

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
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
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
    }
    files.sort();
    files
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
}

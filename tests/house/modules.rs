//! A crate's module graph, from the `crate::`, `super::` and `self::` paths
//! its files use (the relative ones resolved from the module they are written
//! in, inline `mod x { … }` blocks included), and the circles in it. A module may use its ancestors and descendants freely (a
//! parent and its children are one room); an edge between two modules
//! where neither contains the other is an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::lexer::blank;

/// A module by its path inside the crate, `["worker", "plan"]`.
type Module = Vec<String>;

/// For each module, the modules it imports.
pub(crate) type Graph = BTreeMap<Module, BTreeSet<Module>>;

/// The module a file defines.
fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Module = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The names the crate root re-exports (`pub use a::b::{C, D};`), with the
/// module each comes from.
fn root_exports(root: &str) -> BTreeMap<String, Module> {
    let mut exports = BTreeMap::new();
    for statement in root.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        for path in expand(rest) {
            if let Some((name, module)) = path.split_last() {
                exports.insert(name.clone(), module.to_vec());
            }
        }
    }
    exports
}

/// The paths a `use` tree names: `a::{b, c::d}` is `a::b` and `a::c::d`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(&tree);
        return vec![
            path.split("::")
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        ];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut paths = Vec::new();
    for part in split_top(inner) {
        for mut tail in expand(part) {
            let mut path = prefix.clone();
            path.append(&mut tail);
            paths.push(path);
        }
    }
    paths
}

/// `inner` split at its top-level commas.
fn split_top(inner: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Every `crate::…`, `super::…` and `self::…` path in `code`, the file of
/// module `file_module`, `use` groups expanded: as paths from the crate root.
fn crate_paths(code: &str, file_module: &[String]) -> Vec<Vec<String>> {
    let inline = inline_modules(code);
    let mut paths = Vec::new();
    let mut at = 0;
    while let Some((offset, keyword)) = next_path(&code[at..]) {
        let start = at + offset;
        let before = code[..start].chars().next_back();
        at = start + keyword.len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        // The module the path is written in: the file's, or an inline one in it.
        let mut here = file_module.to_vec();
        here.extend(
            inline
                .iter()
                .filter(|(open, close, _)| *open < start && start < *close)
                .map(|(_, _, name)| name.clone()),
        );
        let tree = use_tree(&code[start..]);
        at = start + tree.len().max(keyword.len());
        paths.extend(
            expand(tree)
                .into_iter()
                .filter_map(|path| absolute(&here, &path)),
        );
    }
    paths
}

/// The first of `crate::`, `super::` and `self::` in `code`: where, and which.
fn next_path(code: &str) -> Option<(usize, &'static str)> {
    ["crate::", "super::", "self::"]
        .into_iter()
        .filter_map(|keyword| code.find(keyword).map(|at| (at, keyword)))
        .min()
}

/// `path` as written in module `here`, from the crate root; `None` for a
/// `super` above the root.
fn absolute(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut rest = path;
    let mut module = match rest.first().map(String::as_str) {
        Some("crate") => {
            rest = &rest[1..];
            Vec::new()
        }
        Some("self") => {
            rest = &rest[1..];
            here.to_vec()
        }
        _ => here.to_vec(),
    };
    while rest.first().is_some_and(|part| part == "super") {
        module.pop()?;
        rest = &rest[1..];
    }
    module.extend(rest.iter().filter(|part| *part != "self").cloned());
    Some(module)
}

/// The inline modules of `code` (`mod name { … }`): where each opens and
/// closes, and its name.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..].find("mod ") {
        let start = at + offset;
        at = start + 4;
        if code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &code[at..];
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest.trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let close = code[open..]
            .char_indices()
            .find(|(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(code.len(), |(i, _)| open + i);
        found.push((open, close, name));
    }
    found
}

/// The `use` tree or path at the start of `text`: up to the brace that
/// closes its group, or the first character no path has.
fn use_tree(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return &text[..=i];
                }
            }
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                return &text[..i];
            }
            _ => {}
        }
    }
    text
}

/// The module graph of a crate whose files are `files` under `src`.
pub(crate) fn graph(src: &Path, files: &[(PathBuf, String)]) -> Graph {
    let modules: BTreeSet<Module> = files.iter().map(|(file, _)| module_of(src, file)).collect();
    let root = files
        .iter()
        .find(|(file, _)| module_of(src, file).is_empty())
        .map(|(_, code)| blank(code))
        .unwrap_or_default();
    let exports = root_exports(&root);
    let resolve = |path: &[String]| -> Option<Module> {
        if let Some(module) = path.first().and_then(|first| exports.get(first)) {
            if !modules.contains(&path[..1]) {
                return Some(module.clone());
            }
        }
        (1..=path.len())
            .map(|len| path[..len].to_vec())
            .rfind(|prefix| modules.contains(prefix))
    };
    let mut graph = Graph::new();
    for (file, code) in files {
        let from = module_of(src, file);
        if from.is_empty() {
            continue; // the root only declares and re-exports
        }
        for path in crate_paths(&blank(code), &from) {
            let Some(to) = resolve(&path) else { continue };
            if to.starts_with(&from) || from.starts_with(&to) {
                continue;
            }
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    graph
}

/// The circles of `graph`, each as a path that ends where it starts.
pub(crate) fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let mut circles = Vec::new();
    let mut seen = BTreeSet::new();
    for start in graph.keys() {
        if let Some(circle) = circle_through(graph, start) {
            let key: BTreeSet<_> = circle.iter().cloned().collect();
            if seen.insert(key) {
                circles.push(circle.iter().map(|m| m.join("::")).collect());
            }
        }
    }
    circles
}

/// The shortest circle from `start` back to it, if any (breadth first).
fn circle_through(graph: &Graph, start: &Module) -> Option<Vec<Module>> {
    let mut came_from: BTreeMap<Module, Module> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(at) = queue.pop_front() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == start {
                let mut circle = vec![at.clone()];
                let mut back = &at;
                while let Some(prev) = came_from.get(back) {
                    circle.push(prev.clone());
                    back = prev;
                }
                circle.reverse();
                circle.push(start.clone());
                return Some(circle);
            }
            if next != start && !came_from.contains_key(next) {
                came_from.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

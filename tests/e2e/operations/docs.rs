//! The documentation's relative links resolve: every `[text](target)` and
//! `![alt](target)` in README.md, docs/, proto-schemas/ and deploy/ names a
//! file of the repository, and a `#fragment` names a heading of its page.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown pages a reader is sent to.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "proto-schemas", "deploy", "examples"] {
        collect(&root.join(dir), &mut pages);
    }
    pages.sort();
    pages
}

fn collect(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "node_modules") {
                continue;
            }
            collect(&path, into);
        } else if path.extension().is_some_and(|e| e == "md") {
            into.push(path);
        }
    }
}

/// The inline links of `text`, outside code fences and code spans.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut prose = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(part);
            }
            prose.push(' ');
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as
/// hyphens; a repeated heading gets `-1`, `-2`, ….
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let title = heading.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while !seen.insert(unique.clone()) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
    }
    seen
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// Every broken relative link, as `page: target (why)`.
fn broken_links() -> Vec<String> {
    let root = root();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a readable page");
        let shown = page
            .strip_prefix(&root)
            .unwrap_or(&page)
            .display()
            .to_string();
        for link in links(&text) {
            if link.is_empty() || is_external(&link) {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page's folder").join(path)
            };
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{shown}: {link} (no such file)"));
                continue;
            };
            if !target.starts_with(&root) {
                broken.push(format!("{shown}: {link} (outside the repository)"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if target.extension().is_some_and(|e| e == "md") {
                let text = std::fs::read_to_string(&target).expect("a readable page");
                if !anchors(&text).contains(fragment) {
                    broken.push(format!("{shown}: {link} (no heading #{fragment})"));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let pages = pages();
    assert!(
        pages.len() > 15,
        "expected README.md and the docs/ pages, found {pages:?}"
    );
    let broken = broken_links();
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn the_link_check_finds_missing_files_and_headings() {
    let text = "see [a](docs/nowhere.md), [b](#no-such-heading), `[c](ignored.md)`\n\
                ```\n[d](also-ignored.md)\n```\n## Real heading: `with` code\n";
    assert_eq!(
        links(text),
        ["docs/nowhere.md", "#no-such-heading"],
        "code spans and fences are not links"
    );
    let anchors = anchors(text);
    assert!(anchors.contains("real-heading-with-code"), "{anchors:?}");
    assert!(!anchors.contains("no-such-heading"));
}

#[test]
fn the_readme_stays_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: move reference material to docs/ and link it from the README's index"
    );
}

//! The CLI's table of commands against its modules: every command in
//! `cli.rs` is dispatched to a `run` (or another function) of the module
//! that holds its arguments, and that module is a file of its own.

use std::path::Path;

/// One command of the table: its variant, the module its arguments come
/// from (when they are the CLI's own) and the type.
struct Listed {
    variant: String,
    module: Option<String>,
    args: String,
}

/// The variants of `enum Command` in `cli`, with their argument types.
fn listed(cli: &str) -> Vec<Listed> {
    let Some(start) = cli.find("pub enum Command {") else {
        return Vec::new();
    };
    let body = &cli[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("//") && !line.starts_with('#'))
        .filter_map(|line| {
            let (variant, rest) = line.split_once('(')?;
            let ty = rest.trim_end_matches("),").trim_end_matches(')');
            let ty = ty.trim_start_matches("Box<").trim_end_matches('>');
            let (module, args) = match ty.rsplit_once("::") {
                Some((path, args)) if !path.contains("::") => (Some(path.to_owned()), args),
                Some((_, args)) => (None, args),
                None => (None, ty),
            };
            Some(Listed {
                variant: variant.to_owned(),
                module,
                args: args.to_owned(),
            })
        })
        .collect()
}

/// What `Self::<variant>(…) =>` dispatches to in `cli`: (module, function).
fn dispatched(cli: &str, variant: &str) -> Option<(String, String)> {
    let arm = format!("Self::{variant}(");
    let line = cli
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with(&arm) && line.contains("=>"))?;
    let call = line.split_once("=>")?.1.trim().trim_start_matches("Ok(");
    let (path, _) = call.split_once('(')?;
    let (module, function) = path.split_once("::")?;
    Some((module.to_owned(), function.to_owned()))
}

/// The mismatches between the table `cli` and the modules `sources_of`
/// finds by name (a name may stand in more than one folder).
pub(crate) fn mismatches(cli: &str, sources_of: &dyn Fn(&str) -> Vec<String>) -> Vec<String> {
    let commands = listed(cli);
    if commands.is_empty() {
        return vec!["no command listed in `pub enum Command`".to_owned()];
    }
    let mut found = Vec::new();
    for command in commands {
        let Some((module, function)) = dispatched(cli, &command.variant) else {
            found.push(format!(
                "{} is not dispatched in Command::run",
                command.variant
            ));
            continue;
        };
        if let Some(own) = &command.module {
            if *own != module {
                found.push(format!(
                    "{}'s arguments are in {own}, but it runs {module}::{function}",
                    command.variant
                ));
            }
        }
        let runs = format!("fn {function}(");
        let sources = sources_of(&module);
        let Some(source) = sources.iter().find(|source| source.contains(&runs)) else {
            found.push(format!(
                "{}: no module {module} with fn {function}",
                command.variant
            ));
            continue;
        };
        let defined = [
            format!("struct {} ", command.args),
            format!("enum {} ", command.args),
        ];
        if command.module.is_some() && !defined.iter().any(|d| source.contains(d.as_str())) {
            found.push(format!(
                "{}: {module} does not define {}",
                command.variant, command.args
            ));
        }
    }
    found
}

/// The sources of the CLI modules named `module`: `<module>.rs` or
/// `<module>/mod.rs` anywhere under `src`.
pub(crate) fn module_sources(src: &Path, module: &str) -> Vec<String> {
    super::rust_files(src)
        .into_iter()
        .filter(|file| {
            let name = file.file_stem().and_then(|s| s.to_str());
            let parent = file
                .parent()
                .and_then(|p| p.file_name())
                .and_then(|s| s.to_str());
            name == Some(module) || (name == Some("mod") && parent == Some(module))
        })
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .collect()
}

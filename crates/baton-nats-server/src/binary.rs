//! Finding the `nats-server` binary and checking its version.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind};

/// The oldest `nats-server` Baton supports, as `(major, minor, patch)`.
pub const MIN_VERSION: (u32, u32, u32) = (2, 10, 0);

/// The fix we suggest whenever the binary is missing or unusable.
const FIX: &str = "run `./just setup` or install nats-server >= 2.10";

/// Finds the `nats-server` executable.
///
/// Looks at `$NATS_SERVER_BIN` first (if set and non-empty it must point at
/// an executable: a wrong value is an error, not a silent fallback), then
/// `<workspace>/.tools/bin/nats-server` (where `./just` installs the pinned
/// version), then each directory of `PATH`.
///
/// # Errors
///
/// [`ErrorKind::NotFound`], with a message naming where it looked and the fix.
pub fn nats_server_binary() -> Result<PathBuf, Error> {
    find_binary(
        env::var_os("NATS_SERVER_BIN"),
        workspace_tools_bin(),
        env::var_os("PATH"),
    )
}

/// Runs `bin --version` and parses the output (`nats-server: v2.10.22`).
///
/// # Errors
///
/// [`ErrorKind::Io`] if the binary cannot be run, [`ErrorKind::NotFound`] if
/// its output does not look like a nats-server version.
pub fn nats_server_version(bin: &Path) -> Result<(u32, u32, u32), Error> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|e| Error::io(format_args!("running `{} --version`", bin.display()), e))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    parse_version(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "`{} --version` printed {:?}, which is not a nats-server version: \
                 point NATS_SERVER_BIN at nats-server, or {FIX}",
                bin.display(),
                text.trim()
            ),
        )
    })
}

/// The binary to run, found and version-checked once per process so that
/// parallel tests do not each run `--version`.
pub(crate) fn checked_binary() -> Result<PathBuf, Error> {
    static CHECKED: OnceLock<Result<PathBuf, Error>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let bin = nats_server_binary()?;
            let version = nats_server_version(&bin)?;
            check_version(&bin, version)?;
            Ok(bin)
        })
        .clone()
}

/// `<workspace>/.tools/bin`, if the workspace this crate was built in still exists.
fn workspace_tools_bin() -> Option<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .ok()?;
    Some(workspace.join(".tools").join("bin"))
}

/// The lookup behind [`nats_server_binary`], with its inputs passed in so
/// tests can exercise it without touching the process environment.
fn find_binary(
    env_bin: Option<OsString>,
    tools_bin: Option<PathBuf>,
    path: Option<OsString>,
) -> Result<PathBuf, Error> {
    if let Some(bin) = env_bin.filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        if is_executable(&bin) {
            return Ok(bin);
        }
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "nats-server not found: $NATS_SERVER_BIN is `{}`, which is not an executable \
                 file: correct or unset NATS_SERVER_BIN, or {FIX}",
                bin.display()
            ),
        ));
    }
    let name = format!("nats-server{}", env::consts::EXE_SUFFIX);
    let tools_candidate = tools_bin.as_ref().map(|dir| dir.join(&name));
    let path_candidates = path
        .iter()
        .flat_map(env::split_paths)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(&name));
    if let Some(found) = tools_candidate
        .into_iter()
        .chain(path_candidates)
        .find(|c| is_executable(c))
    {
        return Ok(found);
    }
    let tools = tools_bin.map_or_else(
        || "<workspace>/.tools/bin".to_owned(),
        |dir| dir.display().to_string(),
    );
    Err(Error::new(
        ErrorKind::NotFound,
        format!("nats-server not found (looked in $NATS_SERVER_BIN, {tools}, PATH): {FIX}"),
    ))
}

fn check_version(bin: &Path, version: (u32, u32, u32)) -> Result<(), Error> {
    if version >= MIN_VERSION {
        return Ok(());
    }
    let (major, minor, patch) = version;
    Err(Error::new(
        ErrorKind::TooOld,
        format!(
            "nats-server at {} is v{major}.{minor}.{patch}, but Baton needs >= 2.10: \
             run `./just setup` (installs the pinned version into .tools/) or upgrade \
             nats-server, or point NATS_SERVER_BIN at a newer one",
            bin.display()
        ),
    ))
}

/// Parses the first `vMAJOR.MINOR.PATCH` token; pre-release suffixes such as
/// `-RC.1` are ignored.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    text.split_whitespace().find_map(|token| {
        let mut parts = token.strip_prefix('v')?.splitn(3, '.');
        let mut next = || -> Option<u32> {
            let part = parts.next()?;
            let end = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            part[..end].parse().ok()
        };
        Some((next()?, next()?, next()?))
    })
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_release_and_prerelease_versions() {
        assert_eq!(parse_version("nats-server: v2.10.22\n"), Some((2, 10, 22)));
        assert_eq!(parse_version("nats-server: v2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("nats-server: v2.11.0-RC.1"), Some((2, 11, 0)));
        assert_eq!(parse_version("nats-server: version unknown"), None);
        assert_eq!(parse_version("v2.10"), None);
    }

    #[test]
    fn old_versions_are_rejected_with_the_fix() {
        let bin = Path::new("/opt/nats-server");
        assert!(check_version(bin, (2, 10, 0)).is_ok());
        assert!(check_version(bin, (3, 0, 0)).is_ok());
        let err = check_version(bin, (2, 9, 25)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooOld);
        let msg = err.to_string();
        assert!(msg.contains("v2.9.25"), "{msg}");
        assert!(msg.contains("/opt/nats-server"), "{msg}");
        assert!(msg.contains("./just setup"), "{msg}");
    }

    #[test]
    fn bogus_env_path_is_not_found_with_the_fix() {
        let tools = tempfile::tempdir().unwrap();
        let err = find_binary(
            Some("/nonexistent/nats-server".into()),
            Some(tools.path().to_owned()),
            env::var_os("PATH"),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/nats-server"), "{msg}");
        assert!(msg.contains("./just setup"), "{msg}");
    }

    #[test]
    fn nothing_found_names_every_place_and_the_fix() {
        let empty = tempfile::tempdir().unwrap();
        let err = find_binary(
            None,
            Some(empty.path().join("tools")),
            Some(empty.path().as_os_str().to_owned()),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        let msg = err.to_string();
        assert!(msg.contains("$NATS_SERVER_BIN"), "{msg}");
        assert!(msg.contains("PATH"), "{msg}");
        assert!(
            msg.contains(&empty.path().join("tools").display().to_string()),
            "{msg}"
        );
        assert!(msg.contains("install nats-server >= 2.10"), "{msg}");
    }

    #[cfg(unix)]
    #[test]
    fn lookup_order_is_env_then_tools_then_path() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let make = |dir: &str| {
            let dir = root.path().join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            let bin = dir.join("nats-server");
            std::fs::write(&bin, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            bin
        };
        let from_env = make("env");
        let from_tools = make("tools");
        let from_path = make("path");
        // A non-executable file earlier on PATH is skipped.
        let plain = root.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join("nats-server"), "").unwrap();
        let path = env::join_paths([plain, root.path().join("path")]).unwrap();
        let tools = Some(root.path().join("tools"));

        let found = find_binary(
            Some(from_env.clone().into()),
            tools.clone(),
            Some(path.clone()),
        );
        assert_eq!(found.unwrap(), from_env);
        let found = find_binary(Some("".into()), tools, Some(path.clone()));
        assert_eq!(found.unwrap(), from_tools);
        let found = find_binary(None, Some(root.path().join("missing")), Some(path));
        assert_eq!(found.unwrap(), from_path);
    }
}

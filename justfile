# Baton tasks. Run through the shim, which installs the pinned tools first:
#   ./just            list recipes
#   ./just test       build everything and run all tests
#   ./just demo       run the local demo

set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments

# Tests and `baton dev` find nats-server through this (an explicit
# NATS_SERVER_BIN from the caller wins; empty means "look in .tools/bin, then PATH").
export NATS_SERVER_BIN := env("NATS_SERVER_BIN", if path_exists(justfile_directory() / ".tools/bin/nats-server") == "true" { justfile_directory() / ".tools/bin/nats-server" } else { "" })

# List the recipes
default:
    @"{{ just_executable() }}" --list --unsorted

# Install the test tools too, and show the versions (./just installs the demo's pinned tools before any recipe runs)
setup:
    @scripts/test-setup
    @nats-server --version
    @just --version
    @python3 --version
    @echo "NATS_SERVER_BIN=${NATS_SERVER_BIN}"

# Build every crate
build:
    cargo build --workspace

# Start a local nats-server and run the demo
demo:
    cargo run -q -p baton-cli --bin baton -- dev

# Install what the tests need (once), build, run the doc examples, then all tests with cargo-nextest (extra arguments go to nextest)
test *ARGS:
    scripts/test-setup
    PYTHONPATH=sdk/python python3 -m pytest -q -p no:cacheprovider sdk/python/tests
    python3 -m mypy --strict --cache-dir .tools/mypy-cache sdk/python/baton sdk/python/tests
    cargo nextest --version >/dev/null 2>&1 || cargo install cargo-nextest --locked
    cargo build --workspace
    cargo test --doc --workspace --quiet
    cargo nextest run --workspace --no-fail-fast "$@"

# Check that processes of the previous release (or of COMMIT) keep working beside this one: builds it into .tools/previous, then runs the e2e tests that need it
compat COMMIT="75070c6":
    scripts/test-setup
    scripts/previous-release "{{ COMMIT }}"
    cargo build -p baton-cli
    BATON_PREVIOUS_BIN="$PWD/.tools/previous/baton" cargo nextest run -p baton --test e2e --run-ignored only previous_release

# Run the benchmark (arguments go to `baton bench`)
bench *ARGS:
    cargo run --release -p baton-cli --bin baton -- bench {{ ARGS }}

# Benchmark registry lookups (arguments go to `baton bench-registry`)
bench-registry *ARGS:
    cargo run --release -p baton-cli --bin baton -- bench-registry {{ ARGS }}

# Validate deploy/: hadolint, Kubernetes and KEDA schemas, the Compose schema (installs the validators into .tools/ci and .ci/validate; needs npm)
validate-deploy:
    .ci/validate-deploy

# Check formatting and clippy warnings, as CI does
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

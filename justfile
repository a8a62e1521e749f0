# BoltMQ tasks. Run through ./dev, which bootstraps .venv with uv and just.
set shell := ["bash", "-euo", "pipefail", "-c"]

py := ".venv/bin/python"

# List the recipes.
default:
    @just --list

# Install the project and its test/lint extras into .venv (skipped when pyproject is unchanged).
sync:
    #!/usr/bin/env bash
    set -euo pipefail
    stamp=.venv/.boltmq-sync
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "sync: installing boltmq and its extras into .venv" >&2
        .venv/bin/uv pip install -q --python {{py}} -e ".[test,lint,build]"
        echo "$want" > "$stamp"
    fi

# Start the embedded cluster (registry + broker in one process, data under ~/boltmq); first
# rebuilds the compiled codecs if protocol/_speedups.pyx changed since the install built them.
up *ARGS: sync
    @{{py}} -m tools.build_ext --soft
    .venv/bin/boltmq cluster {{ARGS}}

# Run the whole test suite (installs chromium and tmux for the browser and screen tests first when missing;
# builds the optional compiled codecs, and on a failed build says so and tests the pure code).
test *ARGS: sync
    @bash tests/ensure_packages.sh
    @{{py}} -m tools.build_ext --soft
    {{py}} -m pytest {{ARGS}}

# Build the optional compiled codecs (protocol/_speedups.pyx) in place: ./dev build-ext [--status|--clean].
build-ext *ARGS: sync
    {{py}} -m tools.build_ext {{ARGS}}

# Lint (ruff) and type-check (mypy) the packages.
lint: sync
    .venv/bin/ruff check protocol supervisors storage actors client monitor pipeline boltmq tests bench tools
    .venv/bin/mypy
    .venv/bin/lint-imports

# Run the benchmarks and print their figures.
bench *ARGS: sync
    {{py}} -m bench {{ARGS}}

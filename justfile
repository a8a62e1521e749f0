# BoltMQ tasks. Run through ./dev, which bootstraps .venv with uv and just.
set shell := ["bash", "-euo", "pipefail", "-c"]

py := ".venv/bin/python"

# List the recipes.
default:
    @just --list

# One stamp per extra set holds the hash of pyproject.toml, so an unchanged set is skipped and
# a set not installed yet (up, then test) is installed.
# Install the project into .venv, alone or with the extras named: ./dev sync test,lint,build.
sync EXTRAS="":
    #!/usr/bin/env bash
    set -euo pipefail
    extras="{{EXTRAS}}"
    stamp=.venv/.boltmq-sync${extras:+-${extras//,/-}}
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "sync: installing boltmq${extras:+ with its extras $extras} into .venv" >&2
        .venv/bin/uv pip install -q --python {{py}} -e ".${extras:+[$extras]}"
        echo "$want" > "$stamp"
    fi

# Installs the project alone: the build hook compiles the codecs in an isolated build
# environment, and reinstalling the project rebuilds them when protocol/_speedups.pyx changed.
# Start the embedded cluster (registry + broker in one process, data under ~/boltmq).
up *ARGS: sync
    #!/usr/bin/env bash
    set -euo pipefail
    if {{py}} -m tools.build_ext --status | grep -q ': stale$'; then
        echo "up: rebuilding the compiled codecs" >&2
        .venv/bin/uv pip install -q --python {{py}} --reinstall-package boltmq -e . \
            || echo "up: the rebuild failed, the pure-Python codecs run" >&2
    fi
    exec .venv/bin/boltmq cluster {{ARGS}}

# With the test, lint and build extras; as root, installs chromium and tmux for the browser and
# screen tests first when missing; builds the optional compiled codecs, and on a failed build
# says so and tests the pure code.
# Run the whole test suite (or the tests named: ./dev test tests/docs).
test *ARGS: (sync "test,lint,build")
    @bash tests/ensure_packages.sh
    @{{py}} -m tools.build_ext --soft
    {{py}} -m pytest {{ARGS}}

# Build the optional compiled codecs (protocol/_speedups.pyx) in place: ./dev build-ext [--status|--clean].
build-ext *ARGS: (sync "build")
    {{py}} -m tools.build_ext {{ARGS}}

# The same extras as test (mypy reads the pipeline's pyspark), so CI's test-then-lint
# installs once.
# Lint (ruff), type-check (mypy) and check the layers (import-linter).
lint: (sync "test,lint,build")
    .venv/bin/ruff check protocol supervisors storage actors client monitor pipeline proxy boltmq tests bench tools
    .venv/bin/mypy
    .venv/bin/lint-imports

# With the pipeline, build and bench extras (Spark, Cython, the comparison's peer clients).
# Run the benchmarks and print their figures.
bench *ARGS: (sync "pipeline,build,bench")
    {{py}} -m bench {{ARGS}}

"""Installs what the comparison needs and lacks, a line per step: the peers' Debian packages
(apt-get) and their Python clients (the project's ``bench`` extra, with uv)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.peers.procs import _stat_fields

ROOT = Path(__file__).resolve().parents[2]
#: System -> the Debian packages its server needs.
DEBIAN = {
    "nats": ["nats-server"],
    "rabbitmq": ["rabbitmq-server"],
    "redis": ["redis-server"],
}
#: System -> the Python modules of its client (from the ``bench`` extra).
MODULES = {
    "nats": ["nats"],
    "rabbitmq": ["aio_pika"],
    "redis": ["redis", "hiredis"],
}
#: Programs an install may start as services (where the machine lets it): stopped again.
SERVICE_PROGRAMS = {"nats-server", "redis-server", "beam.smp", "epmd", "erl_child_setup"}

Say = Callable[[str], None]


def _say(line: str) -> None:
    print(f"install: {line}", file=sys.stderr, flush=True)


def debian_installed(package: str) -> bool:
    """True when dpkg has ``package`` installed."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True,
            timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.strip().endswith("installed") and "not-installed" not in out


def _candidate(package: str) -> str | None:
    out = subprocess.run(
        ["apt-cache", "policy", package], capture_output=True, text=True, timeout=60
    ).stdout
    for line in out.splitlines():
        if line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            return None if value in ("", "(none)") else value
    return None


def _service_pids() -> dict[int, str]:
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                name = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if name in SERVICE_PROGRAMS and _stat_fields(int(entry)):
                found[int(entry)] = name
    return found


def install_debian(packages: list[str], say: Say = _say) -> str | None:
    """apt-get install the packages not installed yet; None when all are there, else why not.
    Services the install started are stopped again (by pid) and said so."""
    missing = [package for package in packages if not debian_installed(package)]
    if not missing:
        return None
    if shutil.which("apt-get") is None:
        return f"{' '.join(missing)} not installed and no apt-get on this machine"
    if os.geteuid() != 0:
        return f"{' '.join(missing)} not installed; run as root to install, or apt-get install them"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if any(_candidate(package) is None for package in missing):
        say("apt-get update")
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
    unknown = [package for package in missing if _candidate(package) is None]
    if unknown:
        return f"this Debian offers no package {', '.join(unknown)} (apt-cache policy)"
    before = _service_pids()
    say(f"apt-get install -y {' '.join(missing)}")
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", *missing], env=env, capture_output=True, text=True,
        timeout=1200,
    )  # fmt: skip
    started = {pid: name for pid, name in _service_pids().items() if pid not in before}
    for pid, name in started.items():
        say(f"stopping {name} (pid {pid}), started as a service by the install")
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"apt-get install {' '.join(missing)} failed: {last[0]}"
    return None


def modules_missing(modules: list[str]) -> list[str]:
    """The modules that cannot be imported here."""
    return [module for module in modules if importlib.util.find_spec(module) is None]


def install_bench_extra(say: Say = _say) -> str | None:
    """Install the ``bench`` extra into this environment; None when done, else why not."""
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        command = [str(uv), "pip", "install", "-q", "--python", sys.executable, "-e",
                   f"{ROOT}[bench]"]  # fmt: skip
    else:
        command = [sys.executable, "-m", "pip", "install", "-q", "-e", f"{ROOT}[bench]"]
    tool = Path(command[0]).name
    say(f"installing the bench extra (nats-py, aio-pika, redis[hiredis]) with {tool}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"installing the bench extra failed: {last[0]}"
    importlib.invalidate_caches()
    return None


def ensure(system: str, say: Say = _say) -> str | None:
    """Make ``system``'s server and client available; None when ready, else why not."""
    problem = install_debian(DEBIAN.get(system, []), say)
    if problem:
        return problem
    if modules_missing(MODULES.get(system, [])):
        problem = install_bench_extra(say)
        if problem:
            return problem
        still = modules_missing(MODULES.get(system, []))
        if still:
            return f"Python modules {', '.join(still)} still missing after the install"
    return None

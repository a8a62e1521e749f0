"""The package build's hook: every install gets the compiled codecs where it can.

hatchling runs `SpeedupsBuildHook` for each target. For the wheel (``pip install .``,
``python -m build``, and the install of an sdist, which builds a wheel) it compiles
``protocol/_speedups.pyx`` into a build directory and puts the extension and its stamp into the
wheel, which becomes a platform wheel. For the editable wheel (``pip install -e .``, ``uv pip
install -e .``, hence ``./dev sync``) it compiles in place beside the .pyx, as
``./dev build-ext`` does, because an editable install imports the package from the source tree.

Where that fails (no C compiler, Cython missing or failing) the install still succeeds: the
hook warns with the reason and builds a pure wheel, whose codecs run their pure-Python code;
``boltmq --version`` then says ``codecs: pure (...)``.

The same hook generates the gRPC proxy's protobuf modules (``proxy/_pb``, from ``proxy/protos``,
with grpcio-tools, a build requirement only) into the wheel, or in place for an editable
install. Those are required, so a failure there fails the build.

The build runs in an isolated environment holding only the build requirements, so the compile
step is loaded from ``tools/compile_speedups.py`` by its path (importing nothing of the package).
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SpeedupsBuildHook(BuildHookInterface):
    """Compiles the optional codec extension into the wheel, or in place for editable installs."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile for a wheel target; on failure warn and leave the wheel pure."""
        self._work: Path | None = None
        self._protos: Path | None = None
        if self.target_name != "wheel":
            return  # the sdist ships the .pyx and this hook; its install compiles
        self._generate_protos(version == "editable", build_data)
        compiler = _load_compiler(Path(self.root))
        source = Path(self.root, "protocol", "_speedups.pyx")
        editable = version == "editable"
        if editable:
            target = source.with_name(compiler.extension_name())
        else:
            self._work = Path(tempfile.mkdtemp(prefix="boltmq-wheel-ext-"))
            target = self._work / compiler.extension_name()
        try:
            if not (editable and _fresh(compiler, source, target)):
                compiler.compile_extension(source, target)
        except (RuntimeError, OSError) as exc:
            self.app.display_warning(
                f"boltmq: the compiled codecs were not built, the pure-Python ones run: {exc}"
            )
            return
        if editable:
            return  # the editable install's path entry is the source tree, where it now is
        stamp = compiler.stamp_path(target)
        build_data["force_include"][str(target)] = f"protocol/{target.name}"
        build_data["force_include"][str(stamp)] = f"protocol/{stamp.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _generate_protos(self, editable: bool, build_data: dict[str, Any]) -> None:
        protos = _load_tool(Path(self.root), "compile_protos")
        root = Path(self.root)
        if editable:
            if not protos.is_fresh(root):
                protos.generate(root)
            return
        self._protos = Path(tempfile.mkdtemp(prefix="boltmq-wheel-pb-"))
        out = self._protos / "_pb"
        protos.generate(root, out)
        for path in out.rglob("*"):
            if path.is_file():
                build_data["force_include"][str(path)] = f"proxy/_pb/{path.relative_to(out)}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the build directory once the wheel holds the extension."""
        for work in (self._work, self._protos):
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)


def _load_compiler(root: Path) -> ModuleType:
    return _load_tool(root, "compile_speedups")


def _load_tool(root: Path, name: str) -> ModuleType:
    path = root / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_boltmq_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fresh(compiler: ModuleType, source: Path, target: Path) -> bool:
    # A re-install of an unchanged tree keeps the extension ./dev build-ext or a sync made.
    try:
        built = compiler.stamp_path(target).read_text().strip()
    except OSError:
        return False
    return bool(target.exists() and built == compiler.source_digest(source))

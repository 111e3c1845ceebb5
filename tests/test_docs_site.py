"""The documentation site's API reference names every public module (without building it: the
build, ``mkdocs build --strict``, runs in .ci/run, and needs the ``docs`` extra).

A public module is one under src/privtd whose name has no leading underscore and which defines
``__all__``. Each of its exports must be rendered: by a ``::: module`` directive in
docs/api/*.md for the module itself or for one that re-exports the name (``privtd.Answers``
comes from ``privtd.answers``). A submodule in an ``__all__`` (``privtd.service`` exports
``db``) needs its own directive, since its parent's does not render it. Read from the source,
so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def _exports(path: Path) -> list[str] | None:
    """The module's ``__all__`` (a literal list of strings), or None without one."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                return [str(v) for v in ast.literal_eval(node.value)]
    return None


def public_modules() -> dict[str, list[str]]:
    """Every public module with an ``__all__``: dotted name -> its exports."""
    found = {}
    for path in sorted((SRC / "privtd").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts) or "migrations" in parts:
            continue
        exports = _exports(path)
        if exports is not None:
            found[".".join(parts)] = exports
    return found


def _is_module(dotted: str) -> bool:
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_public_name_is_on_an_api_page() -> None:
    documented = {
        m
        for page in (ROOT / "docs" / "api").glob("*.md")
        for m in DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    }
    modules = public_modules()
    assert {"privtd", "privtd.inference", "privtd.mechanisms"} <= set(modules)
    # Rendered: the exports of a documented module (re-exports included, as the parent shows).
    shown = {n for m in documented & set(modules) for n in modules[m]}
    missing = []
    for name, exports in modules.items():
        for n in exports:
            sub = f"{name}.{n}"
            if _is_module(sub):  # a submodule: its parent's directive does not render it
                if sub not in documented:
                    missing.append(sub)
            elif name not in documented and n not in shown:
                missing.append(sub)
    assert not missing, f"Add a '::: MODULE' line to a docs/api/*.md page for: {missing}"
    # And no directive names a module that is gone (the build would fail on it later).
    assert all(_is_module(m) for m in documented)

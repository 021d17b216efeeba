"""The README's map of the code, "in reading order": it names every module, and each one imports
only from modules named above it (or in the same item)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "minibass"


def reading_order() -> list[set[Path]]:
    """The README's numbered items, each as the set of files and folders it names."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The code, in reading order", 1)[1].split("\n## ", 1)[0]
    items = []
    for line in re.findall(r"^\d+\. (.*)$", section, flags=re.M):
        named, folder, listed = set(), None, set()
        for name in re.findall(r"`([^`]+)`", line):
            path = ROOT / name
            if name.startswith(("minibass/", "tutorial/")) and path.exists():
                named.add(path.resolve())
                folder = path if path.is_dir() else folder
            elif name.endswith(".py") and folder is not None and (folder / name).exists():
                named.add((folder / name).resolve())
                listed.add(folder.resolve())
        items.append(named - listed)  # a folder whose files the item lists stands for those files only
    return items


def item_of(module: Path, items: list[set[Path]]) -> int | None:
    """The first item that names the module (a file or a folder), a folder holding it, or a file in it."""
    for i, named in enumerate(items):
        if any(module == path or path in module.parents or module in path.parents for path in named):
            return i
    return None


def relative_imports(module: Path) -> set[Path]:
    """The files (and folders, for packages) of minibass that ``module`` imports with ``from .x import`` (at any
    level), ``from minibass.x import`` or ``from minibass import x``."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "minibass"):
            base = module.parent
            for _ in range(node.level - 1):
                base = base.parent
            if not node.level:  # from minibass.x import ..., from minibass import x
                base = ROOT
            target = base.joinpath(*(node.module.split(".") if node.module else []))
            candidates = [target.with_suffix(".py"), target / "__init__.py"]  # the module, or the package, named
            for alias in node.names:  # and the modules imported from a package: from minibass import zoo
                candidates += [target / f"{alias.name}.py", target / alias.name / "__init__.py"]
            # a package's __init__ stands for its folder: `from .attention import BACKENDS` uses minibass/attention/
            found |= {(c.parent if c.name == "__init__.py" else c).resolve() for c in candidates if c.exists()}
    return found


def test_the_readme_names_every_module_in_an_order_where_each_builds_on_those_above():
    items = reading_order()
    assert len(items) >= 10, items
    modules = [m.resolve() for m in sorted(PACKAGE.rglob("*.py")) if m.name not in ("__init__.py", "__main__.py")
               and "__pycache__" not in m.parts]
    missing = [str(m.relative_to(ROOT)) for m in modules if item_of(m, items) is None]
    assert not missing, f"the README's reading order leaves out {missing}"
    late = []
    for module in modules:
        for used in relative_imports(module):
            if used == PACKAGE or item_of(used, items) is None:  # `from minibass import x` names x, not the package
                continue
            if item_of(used, items) > item_of(module, items):
                late.append(f"{module.relative_to(ROOT)} imports {used.relative_to(ROOT)}, named below it")
    assert not late, "\n".join(late)

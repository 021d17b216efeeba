"""The wheel works outside the repository: it holds the demo pair and its prompts, installs into a fresh
virtual environment in a temporary folder, and runs the demo and the README's example from there."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import minibass
from minibass.course import ROOT


def left_by_tools(folder: str, names: list[str]) -> list[str]:
    """What copying the checkout skips: bytecode anywhere; at the top, hidden folders (.git, .venv, caches),
    build outputs and any virtual environment, whatever its name."""
    if Path(folder) != ROOT:
        return [n for n in names if n == "__pycache__"]
    return [n for n in names if n.startswith(".") or n in ("__pycache__", "build", "dist", "site")
            or n.endswith(".egg-info") or (ROOT / n / "pyvenv.cfg").exists()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Built from a copy of the checkout: setuptools writes build/ and *.egg-info where it builds, and
    under `make test` two workers may each build one at the same time."""
    source = tmp_path_factory.mktemp("source") / "minibass"
    shutil.copytree(ROOT, source, ignore=left_by_tools)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    (path,) = out.glob("minibass-*.whl")
    return path


def test_the_wheel_holds_the_package_the_demo_pair_and_its_prompts(wheel):
    assert wheel.name.startswith(f"minibass-{minibass.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for part in ("target", "draft"):
        for file in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
            assert f"minibass/zoo/demo/{part}/{file}" in names
    assert "minibass/zoo/demo/prompts.json" in names
    assert "minibass/course/checks.py" in names and "minibass/oracle/sampler.py" in names
    assert not any(n.startswith(("tests/", "tutorial/", "docs/")) for n in names)
    print(f"wheel: {wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB")


def test_the_wheel_runs_outside_the_checkout(wheel, tmp_path):
    """A fresh venv outside the checkout; the dependencies are this environment's (a .pth line, not an
    install: no download), minibass itself only from the wheel."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)], check=True,
                   capture_output=True)
    work = tmp_path / "elsewhere"
    work.mkdir()

    def run(*args: str) -> str:
        done = subprocess.run([str(python), *args], cwd=work, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    where = run("-c", "import minibass; print(minibass.__file__)").strip()
    assert where.startswith(str(env_dir)) and not where.startswith(str(ROOT)), where
    assert run("-m", "minibass", "--version").strip() == f"minibass {minibass.__version__}"
    out = run("-m", "minibass", "demo", "--batch-size", "2", "--max-new-tokens", "6", "--repeats", "1",
              "--draft-lengths", "2")
    assert "greedy check: speculative output == regular output" in out, out[-2000:]
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"## In ten lines\n\n```python\n(.*?)```", readme, re.S).group(1)
    out = run("-c", example)
    assert out.count("\n") >= 2, out

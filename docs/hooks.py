"""mkdocs hook: the benchmark plots live in bench_results/ (beside their JSON); copy them into the site's
sources before the build so that docs/benchmarks.md can show them."""

import shutil
from pathlib import Path


def on_pre_build(config, **kwargs):
    root = Path(config["config_file_path"]).parent
    target = Path(config["docs_dir"]) / "bench"
    target.mkdir(exist_ok=True)
    for png in (root / "bench_results").glob("*.png"):
        shutil.copy2(png, target / png.name)

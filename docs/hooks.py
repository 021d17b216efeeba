"""mkdocs hooks: the benchmark plots live in bench_results/ (beside their JSON), and the pages link them
there (``../bench_results/x.png``), so that they show in the Markdown files themselves, on a forge or
in an editor. For the site, the plots are copied into its sources and the links pointed at the copies."""

import shutil
from pathlib import Path

PLOTS = "](../bench_results/"


def on_pre_build(config, **kwargs):
    root = Path(config["config_file_path"]).parent
    target = Path(config["docs_dir"]) / "bench"
    target.mkdir(exist_ok=True)
    for png in (root / "bench_results").glob("*.png"):
        shutil.copy2(png, target / png.name)


def on_page_markdown(markdown, page, **kwargs):
    return markdown.replace(PLOTS, "](bench/")

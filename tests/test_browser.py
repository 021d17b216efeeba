"""What a learner and a reader see, checked in a real browser (headless Chromium through Playwright).

1. JupyterLab on the loopback address with a token: a course chapter (03, with its solutions) is
   opened, every cell is run through the UI, no cell shows an error, the chapter's plot is visible
   and its check prints Passed; a screenshot is saved.
2. The documentation site (``mkdocs build --strict``): the home page, a course page with its plot,
   the API page of ``speculative_generate`` render, and the search box finds ``rejection_sample``.
   Before that, every link between the site's pages, the sidebars' included, must lead to a page
   and a heading that exist (read from the built HTML: checked where Chromium is missing too).

The browser is the system's Chromium (Debian: ``apt-get install chromium``), never a download.
Screenshots go to ``build/screenshots/``. Skipped, with what to install, where a part is missing.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from minibass.course import ROOT
from minibass.course import build as course_build

SHOTS = ROOT / "build" / "screenshots"
CANDIDATES = [os.environ.get("MINIBASS_CHROMIUM", ""), "/usr/lib/chromium/chromium", "/usr/bin/chromium",
              shutil.which("chromium") or "", shutil.which("chromium-browser") or ""]


def chromium() -> str:
    found = next((c for c in CANDIDATES if c and Path(c).is_file()), None)
    if found is None:
        pytest.skip("no system Chromium: install it with `apt-get install chromium` (Debian) or set MINIBASS_CHROMIUM")
    return found


def need(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError:
        pytest.skip(f"{module} is missing: pip install -e '.[{extra}]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def browser_page():
    need("playwright", "docs")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            yield page
        finally:
            browser.close()


def wait_for(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2)
            return
        time.sleep(0.5)
    raise TimeoutError(f"nothing answered at {url} within {seconds} s")


def wait_for_kernel(url: str, seconds: float) -> None:
    """Until the notebook's session has a kernel that reports idle (JupyterLab's REST API)."""
    import json

    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(OSError, ValueError):
            sessions = json.load(urllib.request.urlopen(url, timeout=2))
            if any((s.get("kernel") or {}).get("execution_state") == "idle" for s in sessions):
                time.sleep(1)
                return
        time.sleep(0.5)
    raise TimeoutError(f"no idle kernel at {url} within {seconds} s")


def test_a_chapter_runs_in_jupyterlab_in_a_browser(tmp_path):
    need("jupyterlab", "tutorial")
    with browser_page() as page:
        folder = tmp_path / "notebooks"
        course_build.build(folder, solutions=True)
        port, token = free_port(), secrets.token_hex(16)
        env = {**os.environ, "MINIBASS_COURSE_FAST": "1"}
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}", "--allow-root",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", 60)
            page.goto(f"http://127.0.0.1:{port}/lab/tree/03_exact_sampling.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            wait_for_kernel(f"http://127.0.0.1:{port}/api/sessions?token={token}", 60)
            n_code = page.locator(".jp-CodeCell").count()

            def prompts() -> list[str]:
                return [p.strip() for p in page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]

            def done() -> bool:
                return len(prompts()) == n_code and all(p not in ("[ ]:", "[*]:", "") for p in prompts())

            deadline = time.time() + 120
            for _ in range(3):  # the menu bar: Run > Run All Cells (again if the kernel was not listening yet)
                page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
                page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
                started = time.time()
                while time.time() - started < 10 and all(p == "[ ]:" for p in prompts()):
                    time.sleep(0.5)
                if not all(p == "[ ]:" for p in prompts()):
                    break
            while not done() and time.time() < deadline:
                time.sleep(1)
            SHOTS.mkdir(parents=True, exist_ok=True)
            if not done():
                page.screenshot(path=str(SHOTS / "jupyterlab-chapter-03-failed.png"))
            assert done(), page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
            outputs = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
            assert "Traceback" not in outputs and "Error" not in outputs, outputs[-2000:]
            assert "Passed:" in outputs and "Failed:" not in outputs
            plot = page.locator(".jp-OutputArea-output img").first
            plot.scroll_into_view_if_needed()
            assert plot.is_visible() and plot.bounding_box()["width"] > 200
            SHOTS.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(Exception):  # JupyterLab's "news?" toast, if it shows, covers the output
                page.get_by_role("button", name="No", exact=True).click(timeout=2_000)
            page.screenshot(path=str(SHOTS / "jupyterlab-chapter-03.png"), full_page=False)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a busy machine can keep it stopping its kernel longer;
                server.kill()  # the kernel then exits on its own, as it does when its parent dies
                server.wait(timeout=30)


@functools.lru_cache(maxsize=1)
def built_site() -> Path:
    """The course chapters executed (reused when up to date) and the site built with --strict."""
    site = ROOT / "build" / "site"
    env = {**os.environ, "MINIBASS_COURSE_FAST": "1", "MPLBACKEND": "Agg", "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run([sys.executable, "-m", "minibass.course", "execute"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return site


@contextlib.contextmanager
def serve(folder: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_docs_site_renders_and_searches():
    need("mkdocs", "docs")
    need("material", "docs")
    site = built_site()
    broken = broken_links(site)  # before the browser, which may be missing: this part needs none
    assert not broken, "\n".join(broken)
    with browser_page() as page:
        SHOTS.mkdir(parents=True, exist_ok=True)
        with serve(site) as url:
            page.goto(f"{url}/")
            assert "minibass" in page.title()
            assert page.locator("nav").first.is_visible()
            page.screenshot(path=str(SHOTS / "docs-home.png"))

            page.goto(f"{url}/course/03_exact_sampling/")
            page.wait_for_load_state("networkidle")
            plot = page.locator("img[src^='data:image/png']").first
            plot.scroll_into_view_if_needed()
            assert plot.is_visible() and plot.bounding_box()["width"] > 200
            page.screenshot(path=str(SHOTS / "docs-course-03.png"))

            page.goto(f"{url}/api/")
            heading = page.locator("[id='minibass.speculative.speculative_generate']")
            assert heading.count() == 1 and "speculative_generate" in heading.inner_text()

            page.goto(f"{url}/")
            search = page.locator("input.md-search__input")
            search.click()
            page.wait_for_function("document.querySelector('input.md-search__input').placeholder !== "
                                   "'Initializing search'", timeout=30_000)  # the search index is loaded
            search.press_sequentially("rejection_sample", delay=20)  # typed, as a reader would
            page.wait_for_selector(".md-search-result__item", timeout=30_000)
            results = " ".join(page.locator(".md-search-result__item").all_inner_texts())
            assert "rejection_sample" in results


class _Links(HTMLParser):
    """The ids of one built page, and its local links and images."""

    def __init__(self):
        super().__init__()
        self.ids, self.hrefs = set(), set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        href = attrs.get("href") if tag == "a" else attrs.get("src") if tag == "img" else None
        if href and not urllib.parse.urlsplit(href).scheme and not href.startswith(("//", "mailto:")):
            self.hrefs.add(href)



def broken_links(site: Path) -> list[str]:
    """Each link of the built site (sidebars included) that leads to no page, or to no heading of its page,
    and each image that is not there."""
    site = site.resolve()
    pages = {}
    for html in site.rglob("*.html"):
        parser = _Links()
        parser.feed(html.read_text(encoding="utf-8"))
        pages[html.resolve()] = parser
    broken = []
    for html, parser in pages.items():
        for href in sorted(parser.hrefs):
            parts = urllib.parse.urlsplit(href)
            path = urllib.parse.unquote(parts.path)
            # the 404 page links from the site's root (it is served at any address)
            target = (site / path.lstrip("/") if path.startswith("/") else html.parent / path).resolve() if path else html
            if target.is_dir():
                target = target / "index.html"
            where = f"{html.relative_to(site)}: {href}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target in pages and urllib.parse.unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{where} (no such heading)")
    assert len(pages) > 20, f"only {len(pages)} pages built"
    return broken

"""The built website: no broken links, and pages load in a real browser without console errors.

These run after `make book` (the test command builds first). Without a build
they skip and say so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"

pytestmark = pytest.mark.skipif(
    not (HTML / "index.html").exists(), reason="no built website: run `make book` first"
)


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _pages() -> list[Path]:
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts)


def test_every_local_link_and_anchor_resolves():
    parsed = {page: _parse(page) for page in _pages()}
    broken = []
    for page, links in parsed.items():
        for link in links.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)} -> {link}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if parts.fragment not in ids:
                    broken.append(f"{page.relative_to(HTML)} -> {link} (no such anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken[:20])


def test_lesson_pages_exist_for_every_notebook():
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        assert (HTML / "lessons" / f"{notebook.stem}.html").exists(), notebook.name


def test_colab_launch_link_points_at_the_repository():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = urlsplit(config["repository"]["url"]).path.strip("/")
    page = (HTML / "lessons" / "03-bidirectional-self-attention.html").read_text()
    expected = (
        f"https://colab.research.google.com/github/{repo}/blob/"
        f"{config['repository']['branch']}/lessons/03-bidirectional-self-attention.ipynb"
    )
    assert expected in page


def test_mathjax_is_served_locally():
    assert (HTML / "mathjax" / "tex-chtml.js").exists()
    page = (HTML / "lessons" / "03-bidirectional-self-attention.html").read_text()
    assert re.search(r'src="[^"]*mathjax/tex-chtml\.js[^"]*"', page)


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(BROWSER is None, reason="Chromium is not installed")
@pytest.mark.parametrize(
    "page", ["index.html", "lessons/03-bidirectional-self-attention.html", "figure-key.html"]
)
def test_page_loads_in_a_headless_browser_without_console_errors(page):
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [
                BROWSER,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--allow-file-access-from-files",
                "--virtual-time-budget=8000",
                "--dump-dom",
                (HTML / page).as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": profile},
        )
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    errors = [line for line in console if re.search(r"error|uncaught|failed", line, re.I)]
    assert not errors, "console errors:\n" + "\n".join(errors[:10])
    assert "<article" in run.stdout  # the page rendered its content
    if "lessons/" in page:
        assert "mjx-container" in run.stdout, "MathJax did not typeset the page"

"""The built website: links, offline assets, figures, outline, search, and a real browser.

These run after `make book` (the test command builds first). Without a build
they skip and say so. The browser tests drive the system's Chromium (Debian's
`chromium`, or the executable in `$CHROMIUM`) with Playwright; where either is
missing they skip with a warning in the test summary, and under CI (`CI=true`)
they fail instead.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import threading
import warnings
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"

pytestmark = pytest.mark.skipif(
    not (HTML / "index.html").exists(), reason="no built website: run `make book` first"
)


class _Page(HTMLParser):
    """Links, ids, images and external assets of one built page."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.assets: list[str] = []  # what the page loads: scripts, style sheets, fonts, images
        self.images: list[dict] = []  # attributes of each <img> inside <main>
        self._main = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])
        if tag in ("script", "img", "iframe", "source", "video", "audio") and attrs.get("src"):
            self.assets.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            rel = (attrs.get("rel") or "").lower()
            if any(r in rel for r in ("stylesheet", "preload", "modulepreload", "icon", "font")):
                self.assets.append(attrs["href"])
        if tag == "main":
            self._main += 1
        if self._main:
            if tag == "img":
                self.images.append(attrs)

    def handle_endtag(self, tag):
        if tag == "main" and self._main:
            self._main -= 1


@functools.lru_cache(maxsize=None)
def _parse(page: Path) -> _Page:
    parser = _Page()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _pages() -> list[Path]:
    return sorted(p for p in HTML.rglob("*.html") if not {"_static", "mathjax"} & set(p.parts))


def _content_pages() -> list[Path]:
    """Pages written by the authors (not Sphinx's search and index pages)."""
    return [p for p in _pages() if p.name not in {"search.html", "genindex.html"}]


def _is_external(url: str) -> bool:
    return bool(urlsplit(url).scheme in ("http", "https") or url.startswith("//"))


def test_every_local_link_and_anchor_resolves():
    broken = []
    for page in _pages():
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)} -> {link}")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in _parse(target).ids:
                    broken.append(f"{page.relative_to(HTML)} -> {link} (no such anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken[:20])


def test_lesson_pages_exist_for_every_notebook():
    for notebook in sorted((ROOT / "lessons").glob("*.ipynb")):
        assert (HTML / "lessons" / f"{notebook.stem}.html").exists(), notebook.name


def test_appendices_are_built_and_linked_from_the_index():
    index = (HTML / "index.html").read_text(encoding="utf-8")
    for name in ("a-encoder-family", "b-encoder-vs-decoder", "c-acronyms"):
        assert (HTML / "appendices" / f"{name}.html").exists(), name
        assert f'href="appendices/{name}.html"' in index, f"index.md does not link {name}"


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
    # the npm package's output fonts, which MathJax loads at run time
    assert list((HTML / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    page = (HTML / "lessons" / "03-bidirectional-self-attention.html").read_text()
    assert re.search(r'src="[^"]*mathjax/tex-chtml\.js[^"]*"', page)


def test_no_page_loads_a_script_font_or_style_sheet_from_elsewhere():
    external = [
        f"{page.relative_to(HTML)}: {asset}"
        for page in _pages()
        for asset in _parse(page).assets
        if _is_external(asset)
    ]
    for css in HTML.rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        for url in re.findall(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""", text):
            if _is_external(url):
                external.append(f"{css.relative_to(HTML)}: {url}")
    assert not external, "the site must work offline; external assets:\n" + "\n".join(external)


def _useless_alt(alt: str | None) -> bool:
    alt = (alt or "").strip()
    return not alt or "_images/" in alt or bool(re.search(r"\.(png|jpe?g|svg|gif)$", alt, re.I))


def test_every_image_has_alt_text():
    missing = [
        f"{page.relative_to(HTML)}: {image.get('src')}"
        for page in _content_pages()
        for image in _parse(page).images
        if _useless_alt(image.get("alt"))
    ]
    assert not missing, (
        "images without alt text (a lesson figure gets its caption as alt text: put a markdown "
        "cell starting with '**Figure N.**' right after the cell that draws it):\n"
        + "\n".join(missing)
    )


def test_every_lesson_figure_has_a_caption():
    from bs4 import BeautifulSoup

    def outside_cells(tag):
        return tag.name == "p" and tag.find_parent(class_="cell") is None

    uncaptioned = []
    for page in sorted((HTML / "lessons").glob("*.html")):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for number, image in enumerate(soup.select("article .cell_output img"), start=1):
            caption = image.find_next(outside_cells)
            if caption is None or "figure-caption" not in (caption.get("class") or []):
                uncaptioned.append(f"{page.name}: image {number} ({image.get('src')})")
    assert not uncaptioned, "figures without a '**Figure N.**' caption:\n" + "\n".join(uncaptioned)


def test_headings_form_an_outline():
    from bs4 import BeautifulSoup

    bad = []
    for page in _pages():
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        main = soup.find("main") or soup
        levels = [
            int(h.name[1])
            for h in main.find_all(re.compile(r"^h[1-6]$"))
            if h.find_parent(class_="onlyprint") is None  # the print-only copy of the title
        ]
        if levels.count(1) != 1 or levels[:1] != [1]:
            bad.append(f"{page.relative_to(HTML)}: {levels.count(1)} H1s, headings {levels[:3]}")
            continue
        for previous, level in zip(levels, levels[1:]):
            if level > previous + 1:
                bad.append(f"{page.relative_to(HTML)}: H{previous} followed by H{level}")
                break
    assert not bad, "pages whose headings skip a level or lack a single H1:\n" + "\n".join(bad)


def _search_index() -> dict:
    text = (HTML / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1 : text.rindex(")")])


def test_search_index_holds_every_page_and_lesson_words():
    index = _search_index()
    docnames = index["docnames"]
    for page in _content_pages():
        assert str(page.relative_to(HTML).with_suffix("")) in docnames, page.name
    lesson_2 = docnames.index("lessons/02-tokenization-and-the-encoder-input")
    found = []
    for kind in ("terms", "titleterms"):  # "WordPiece", stemmed as Sphinx's search stems it
        docs = index[kind].get("wordpiec", [])
        found += docs if isinstance(docs, list) else [docs]
    assert lesson_2 in found


# --- the real browser ---------------------------------------------------------------------------

CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)


def _browser_unavailable() -> str | None:
    if CHROMIUM is None or not os.access(CHROMIUM, os.X_OK):
        return f"Chromium is not installed (Debian: apt-get install chromium); tried {CHROMIUM!r}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -r requirements-dev.txt)"
    return None


@pytest.fixture(scope="module")
def browser():
    why = _browser_unavailable()
    if why:
        message = f"THE WEBSITE WAS NOT CHECKED IN A BROWSER: {why}."
        if os.environ.get("CI") == "true":
            pytest.fail(message + " CI requires the browser check.")
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    """The built website served from a local HTTP server: its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


# Runs in the page: raw TeX left outside code and rendered math, images that did not load,
# every link's resolved URL, and the solutions' visibility.
_INSPECT = """() => {
  const skip = (node) => node.parentElement && node.parentElement.closest(
      'pre, code, script, style, mjx-container, .highlight, textarea');
  const walker = document.createTreeWalker(
      document.querySelector('article') || document.body, NodeFilter.SHOW_TEXT);
  const rawTex = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!skip(node) && /\\\\\\(|\\\\\\)|\\\\\\[|\\\\\\]|\\$\\$/.test(node.textContent)) {
      rawTex.push(node.textContent.trim().slice(0, 80));
    }
  }
  const unrendered = [...document.querySelectorAll('article .math')]
      .filter((el) => !el.querySelector('mjx-container') && !el.closest('mjx-container'))
      .map((el) => el.textContent.trim().slice(0, 80));
  const images = [...document.images]
      .filter((img) => !(img.complete && img.naturalWidth > 0))
      .map((img) => img.getAttribute('src'));
  const links = [...document.querySelectorAll('a[href]')].map((a) => a.href);
  const visible = (el) => !!el && el.getClientRects().length > 0
      && getComputedStyle(el).visibility !== 'hidden';
  const solutions = [...document.querySelectorAll('.solution')].map((s) =>
      [...s.children].filter((c) => !c.matches('.admonition-title, button')).some(visible));
  return {rawTex, unrendered, images, links, solutions,
          math: document.querySelectorAll('mjx-container').length};
}"""


def _check_page(page, site: str, relative: str) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url} {r.failure}"))
    page.on(
        "response",
        lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"),
    )

    def local_only(route):
        if route.request.url.startswith(site) or route.request.url.startswith("data:"):
            route.continue_()
        else:
            problems.append(f"request to another host: {route.request.url}")
            route.abort()

    page.route("**/*", local_only)
    response = page.goto(site + relative, wait_until="load")
    if response is None or response.status != 200:
        problems.append(f"status {response and response.status}")
    if page.locator(".math").count():
        page.wait_for_function(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000
        )
        page.evaluate("() => MathJax.startup.promise.then(() => true)")  # the first typeset
    found = page.evaluate(_INSPECT)
    problems += [f"raw TeX: {t!r}" for t in found["rawTex"][:5]]
    problems += [f"math not rendered: {t!r}" for t in found["unrendered"][:5]]
    problems += [f"image did not load: {src}" for src in found["images"]]
    for url in found["links"]:
        parts = urlsplit(url)
        if not url.startswith(site):
            continue
        path = HTML / unquote(parts.path[len(urlsplit(site).path) :])
        target = path / "index.html" if path.is_dir() else path
        if not target.exists():
            problems.append(f"broken link: {url}")
        elif parts.fragment and target.suffix == ".html":
            if unquote(parts.fragment) not in _parse(target).ids:
                problems.append(f"no such anchor: {url}")
    if any(found["solutions"]):
        problems.append("a solution is visible before it is toggled")
    if found["solutions"]:
        page.locator(".solution .toggle-button").first.click()
        page.wait_for_timeout(100)
        if not page.evaluate(_INSPECT)["solutions"][0]:
            problems.append("the first solution stays hidden after its toggle is clicked")
    return problems


@pytest.mark.parametrize(
    "relative", [str(p.relative_to(HTML)) for p in _pages()] if HTML.exists() else []
)
def test_page_in_a_real_browser(browser, site, relative):
    """Status 200, no console errors, no failed or external requests, math rendered,
    images loaded, links and anchors resolve, solutions hidden until toggled."""
    context = browser.new_context()
    try:
        problems = _check_page(context.new_page(), site, relative)
    finally:
        context.close()
    assert not problems, f"{relative}:\n" + "\n".join(problems)


def test_search_in_the_browser_finds_a_lesson(browser, site):
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(site + "search.html?q=WordPiece", wait_until="load")
        page.wait_for_selector("ul.search li a", timeout=30_000)
        hits = page.eval_on_selector_all("ul.search li a", "links => links.map(a => a.href)")
    finally:
        context.close()
    assert any("lessons/02-tokenization-and-the-encoder-input.html" in h for h in hits), hits


# Runs in the page: how wide the document is, and every block of the article (code, output,
# table, figure, display equation) whose content is wider than its box (cut off or scrolling).
_WIDTHS = """() => {
  const article = document.querySelector('article') || document.body;
  const wide = [...article.querySelectorAll('pre, table, img, mjx-container[display="true"]')]
      .filter((el) => el.getClientRects().length && el.scrollWidth > el.clientWidth + 1)
      .map((el) => `${el.tagName.toLowerCase()} ${el.scrollWidth} px in ${el.clientWidth} px: `
                   + (el.textContent || el.getAttribute('src') || '').trim().slice(0, 60));
  return {document: document.documentElement.scrollWidth, viewport: window.innerWidth, wide};
}"""

DESKTOP, PHONE = 1300, 390


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_every_page_fits_the_screen(browser, site, width):
    """No page is wider than the screen, at book width or on a phone; at book width no code,
    output, table, figure or display equation is wider than its column either (on a phone
    such a block may scroll inside its own box)."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    problems = []
    try:
        page = context.new_page()
        for path in _pages():
            relative = str(path.relative_to(HTML))
            page.goto(site + relative, wait_until="load")
            if page.locator(".math").count():
                page.wait_for_function("() => window.MathJax && MathJax.startup "
                                       "&& MathJax.startup.promise", timeout=30_000)
                page.evaluate("() => MathJax.startup.promise.then(() => true)")
            found = page.evaluate(_WIDTHS)
            if found["document"] > found["viewport"]:
                problems.append(f"{relative}: the page is {found['document']} px wide on a "
                                f"{found['viewport']} px screen")
            if width == DESKTOP:
                problems += [f"{relative}: {w}" for w in found["wide"]]
    finally:
        context.close()
    assert not problems, "\n".join(problems)


# --- reader first: each lesson page's height, and its reading time ------------------------------

BUDGET = yaml.safe_load((ROOT / "lessons" / "budget.yml").read_text(encoding="utf-8"))
LESSON_NOTEBOOKS = sorted((ROOT / "lessons").glob("[0-9][0-9]-*.ipynb"))
SCREEN = {"width": 1300, "height": 900}


@pytest.fixture(scope="module")
def lesson_screens(browser, site) -> dict[str, float]:
    """Each lesson page's height in screens of 1,300 x 900, as it opens (solutions and folded
    code closed), once its math is typeset."""
    context = browser.new_context(viewport=SCREEN)
    found = {}
    try:
        page = context.new_page()
        for notebook in LESSON_NOTEBOOKS:
            page.goto(f"{site}lessons/{notebook.stem}.html", wait_until="load")
            if page.locator(".math").count():
                page.wait_for_function("() => window.MathJax && MathJax.startup "
                                       "&& MathJax.startup.promise", timeout=30_000)
                page.evaluate("() => MathJax.startup.promise.then(() => true)")
            height = page.evaluate("() => document.documentElement.scrollHeight")
            found[notebook.stem] = height / SCREEN["height"]
    finally:
        context.close()
    return found


@pytest.mark.parametrize("notebook", LESSON_NOTEBOOKS, ids=[p.name[:2] for p in LESSON_NOTEBOOKS])
def test_lesson_page_is_at_most_the_screen_budget(lesson_screens, notebook):
    screens = lesson_screens[notebook.stem]
    limit = BUDGET["screens"]
    if int(notebook.name[:2]) in BUDGET["pending"]:
        if screens > limit:
            pytest.xfail(f"Lesson {notebook.name[:2]} is pending: {screens:.1f} screens")
        return
    assert screens <= limit, (
        f"{notebook.stem}.html is {screens:.1f} screens tall at "
        f"{SCREEN['width']} x {SCREEN['height']}, over the budget of {limit} "
        "(lessons/budget.yml): cut prose, shorten printed outputs, fold plotting code.")


def test_reading_times_are_computed_from_the_notebooks():
    """The index and the instructors' page show each lesson's minutes as the build computed
    them from the notebook (prose at 200 words a minute plus the stored execution time)."""
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    from reading_time import reading_minutes

    expected = [f"{reading_minutes(nb)} min" for nb in LESSON_NOTEBOOKS]
    for page in ("index.html", "instructors.html"):
        text = (HTML / page).read_text(encoding="utf-8")
        shown = re.findall(r'<span class="reading-time">([^<]*)</span>', text)
        assert shown == expected, f"{page} shows {shown}, the notebooks give {expected}"


# --- the attention explorer on Lesson 3's page ---------------------------------------------------

LESSON_3 = "lessons/03-bidirectional-self-attention.html"
CATAPHORA = "although it was tired, the dog chased the ball"  # Lesson 3: "it" before "dog"


def _explorer_source(page: Path) -> str:
    """The explorer's HTML exactly as the built page carries it (before its script runs)."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r'<div class="encoderlab-explorer" id="([^"]+)".*?'
                      r'encoderlabExplorer\(document\.getElementById\("\1"\)\);</script>\s*</div>',
                      text, re.S)
    assert found, f"{page.name}: no attention explorer in the page"
    return found.group(0)


def test_lesson_3_explorer_shows_the_librarys_weights(browser, site, minilm):
    """On the built page: Lesson 3's head (layer 6, head 12), the query "it", the weight on
    "dog" is the library's to the rounding; under the decoder mask every key right of "it"
    reads 0; no console errors, no request elsewhere; the view weighs at most 300 kB."""
    import numpy as np
    import torch

    from encoderlab import masks

    source = _explorer_source(HTML / LESSON_3)
    size = len(source.encode("utf-8"))
    assert size <= 300_000, f"the explorer weighs {size} bytes"

    tokenizer, model = minilm
    enc = tokenizer([CATAPHORA], return_tensors="pt")
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    n, it, dog = len(tokens), tokens.index("it"), tokens.index("dog")
    with torch.no_grad():
        full = torch.stack(model(**enc, output_attentions=True).attentions)[:, 0]
        causal = torch.stack(model(**enc, mask=masks.causal(n),
                                   output_attentions=True).attentions)[:, 0]  # (L, h, n, n)
    layer, head = 5, 11  # 0-based: the lesson's strongest "it" -> "dog" head
    assert int(full[:, :, it, dog].flatten().argmax()) == layer * full.shape[1] + head

    context = browser.new_context()
    problems: list[str] = []
    try:
        tab = context.new_page()
        tab.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        tab.on("pageerror", lambda e: problems.append(f"script error: {e}"))
        tab.route("**/*", lambda route: route.continue_()
                  if route.request.url.startswith((site, "data:"))
                  else (problems.append(f"request: {route.request.url}"), route.abort()))
        tab.goto(site + LESSON_3, wait_until="load")
        view = tab.locator(".encoderlab-explorer")
        assert view.count() == 1
        view.locator(".ex-sentence").select_option(index=0)  # index=: labels may repeat
        view.locator('.ex-mask input[value="encoder"]').check()
        view.locator(".ex-layer").select_option(index=layer)
        view.locator(".ex-head").select_option(index=head)
        query = view.locator(f'.ex-queries .ex-tok[data-i="{it}"]')
        assert query.inner_text().strip() == "it"
        query.hover()

        def shown() -> np.ndarray:
            return np.array([float(view.locator(f'.ex-keys .ex-tok[data-i="{j}"] .ex-w')
                                   .inner_text()) for j in range(n)])

        expected = full[layer, head, it].double().numpy()
        weights = shown()
        assert abs(weights[dog] - expected[dog]) <= 0.0005 + 1e-6, (weights[dog], expected[dog])
        assert np.abs(weights - expected).max() <= 0.0005 + 1e-6
        view.locator(f'.ex-keys .ex-tok[data-i="{dog}"]').hover()
        assert view.locator(".ex-readout").inner_text() == f"it \u2192 dog: {expected[dog]:.3f}"

        view.locator('.ex-mask input[value="decoder"]').check()
        query.hover()
        weights = shown()
        assert (weights[it + 1:] == 0).all(), weights
        expected = causal[layer, head, it].double().numpy()
        assert np.abs(weights - expected).max() <= 0.0005 + 1e-6
    finally:
        context.close()
    assert not problems, "\n".join(problems)

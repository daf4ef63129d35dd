"""The attention explorer: its JSON is the library's attention, under both masks; its HTML is
self-contained and light; in headless Chromium, from file:// with the network off, it shows
the library's weights for the head and token chosen (Lessons 1, 3, 4)."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings

import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex

from encoderlab import masks
from encoderlab.course import explorer
from encoderlab.course.explorer import attention_explorer
from encoderlab.course.plotting.style import COLORS, SHADES

SENTENCES = [
    "The dog chased the cat because it was hungry.",
    "I sat on the bank of the river.",
    "The bank raised its rates.",
]


@pytest.fixture(scope="module")
def view(minilm):
    tokenizer, model = minilm
    return attention_explorer(tokenizer, model, SENTENCES)


@pytest.fixture(scope="module")
def library(minilm):
    """The library's own attention, (mask -> (b, L, h, n, n) float64), run here, not by the view."""
    tokenizer, model = minilm
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    n = batch["input_ids"].shape[1]
    out = {}
    with torch.no_grad():
        for name, mask in (("encoder", masks.bidirectional(n)), ("decoder", masks.causal(n))):
            run = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                        output_attentions=True, mask=mask)
            out[name] = torch.stack(run.attentions, dim=1).double().numpy()
    return out


def _weights(view, name) -> np.ndarray:
    """The view's JSON weights as floats, (b, L, h, n, n)."""
    d = view.data
    w = np.asarray(d["weights"][name], dtype=float) / d["scale"]
    return w.reshape(len(d["sentences"]), d["layers"], d["heads"], d["n"], d["n"])


# --- the data -----------------------------------------------------------------------------------


def test_the_html_carries_exactly_the_data(view):
    found = re.search(r'<script type="application/json" class="ex-data">(.*?)</script>',
                      view.html, re.S)
    assert found and json.loads(found.group(1)) == view.data
    assert view._repr_html_() == view.html


@pytest.mark.parametrize("name", ["encoder", "decoder"])
def test_the_json_weights_are_the_librarys_to_the_rounding(view, library, name):
    d = view.data
    assert d["decimals"] == 3 and d["scale"] == 1000
    assert (d["layers"], d["heads"]) == library[name].shape[1:3] == (6, 12)
    error = np.abs(_weights(view, name) - library[name]).max()
    assert error <= 0.5 / d["scale"] + 1e-9, error
    assert d["tokens"][0][7] == "it" and d["tokens"][0][2] == "dog"


def test_the_decoder_is_a_new_run_not_a_zeroed_encoder(view, library):
    """Layer 1 sees the same embeddings under both masks, so its causal rows are the encoder's
    rows cut at j <= i and renormalised; deeper layers read other inputs, and differ from that."""
    dec, n = _weights(view, "decoder"), view.data["n"]
    zeroed = library["encoder"] * np.tril(np.ones((n, n)))
    zeroed = zeroed / zeroed.sum(-1, keepdims=True)
    assert np.abs(dec[:, 0] - zeroed[:, 0]).max() <= 0.0005 + 1e-6
    assert np.abs(dec[:, -1] - zeroed[:, -1]).max() > 0.05


def test_under_the_decoder_every_weight_right_of_the_query_is_exactly_zero(view):
    raw = np.asarray(view.data["weights"]["decoder"])
    n = view.data["n"]
    right = np.triu(np.ones((n, n), dtype=bool), k=1).reshape(-1)
    assert (raw[..., right] == 0).all()
    assert (np.asarray(view.data["weights"]["encoder"])[..., right] > 0).any()


@pytest.mark.parametrize("name", ["encoder", "decoder"])
def test_pad_keys_receive_exactly_zero(view, name):
    d = view.data
    w = np.asarray(d["weights"][name]).reshape(len(SENTENCES), 6, 12, d["n"], d["n"])
    assert d["lengths"] == [12, 11, 8] and d["tokens"][2][8:] == ["[PAD]"] * 4
    for s, length in enumerate(d["lengths"]):
        assert (w[s, ..., length:] == 0).all()
        assert (w[s, ..., :length].sum(-1) > 0).all()  # every row still reads real tokens


# --- the page -----------------------------------------------------------------------------------


def test_the_html_loads_nothing_from_another_host(view):
    html = view.html
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"<link\b|<img\b|<iframe\b|@import|url\(\s*['\"]?(https?:)?//", html,
                         re.I)
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?(https?:)?//", html, re.I)
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls  # the SVG namespace: a name, not a load


def test_three_sentences_weigh_under_300_kB(view, minilm):
    size = len(view.html.encode())
    assert 50_000 < size < 300_000, size
    # the largest view allowed: MAX_CELLS = sentences x n^2 (here 4 sentences of 12 tokens)
    tokenizer, model = minilm
    big = attention_explorer(tokenizer, model, [
        "The dog chased the cat because it was hungry.",
        "The cat chased the dog because it was tired.",
        "I sat on the bank of the river.",
        "She went to the bank to deposit money.",
    ])
    assert len(big.data["sentences"]) * big.data["n"] ** 2 == explorer.MAX_CELLS
    assert len(big.html.encode()) < 300_000, len(big.html.encode())
    print(f"view sizes: 3 sentences {size} bytes, 4 sentences of 12 tokens "
          f"{len(big.html.encode())} bytes")


def test_colours_come_from_the_figure_key(view):
    from encoderlab.course.plotting.style import ATTENTION_CMAP

    allowed = {c.lower() for c in list(COLORS.values()) + list(SHADES.values()) if c[0] == "#"}
    allowed |= {to_hex(ATTENTION_CMAP(x)) for x in np.linspace(0, 1, 9)}
    used = {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}\b", view.html)}
    assert used and used <= allowed, used - allowed
    assert COLORS["encoder"] in view.html and COLORS["decoder"] in view.html


def test_several_views_on_one_page_do_not_share_ids(minilm):
    tokenizer, model = minilm
    a = attention_explorer(tokenizer, model, SENTENCES[:1])
    b = attention_explorer(tokenizer, model, SENTENCES[:1])
    assert a.id != b.id
    for v in (a, b):
        ids = re.findall(r'\bid="([^"]+)"', v.html)
        assert ids == [v.id], ids  # one id in the HTML; the script derives the rest from it
        assert f'getElementById("{v.id}")' in v.html


# --- errors -------------------------------------------------------------------------------------


LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"


@pytest.mark.parametrize("sentences, words", [
    ([], "got an empty list"),
    ("The dog ran.", "expects a list of sentences (str), got str"),
    (["a.", "b.", "c.", "d.", "e."], "at most 4 sentences (to keep the page light), got 5"),
    (["The dog ran.", 3], "sentence 1 is 3 (int)"),
    (["The dog ran.", "  "], "sentence 1 is '  ' (str)"),
    ([LONG + " fifteen"], "at most 16 tokens with [CLS] and [SEP] (to keep the page light); "
                          "sentence 0 has 17"),
    (["The dog ran home.", LONG[:-9]] * 2, "4 sentences padded to n=15 give 900"),
])
def test_bad_sentences_say_what_was_expected_and_given(minilm, sentences, words):
    tokenizer, model = minilm
    with pytest.raises(ValueError, match=re.escape(words)):
        attention_explorer(tokenizer, model, sentences)


def test_the_limits_themselves_are_allowed(minilm):
    tokenizer, model = minilm
    assert attention_explorer(tokenizer, model, [LONG]).data["n"] == 16  # MAX_TOKENS
    assert attention_explorer(tokenizer, model, ["The dog ran home.", LONG]).data["n"] == 16


def test_start_opens_on_a_layer_head_and_query(minilm):
    """Layer and head counted from 1, as the choosers name them; the query from 0."""
    tokenizer, model = minilm
    assert attention_explorer(tokenizer, model, SENTENCES[:1]).data["start"] == [0, 0, 1]
    v = attention_explorer(tokenizer, model, SENTENCES[:1], start=(6, 12, 7))
    assert v.data["start"] == [5, 11, 7]
    for bad, words in [((7, 1, 1), "start layer"), ((1, 13, 1), "start head"),
                       ((1, 1, 12), "start token_index"), ((1, 1), "start=(layer, head")]:
        with pytest.raises(ValueError, match=re.escape(words)):
            attention_explorer(tokenizer, model, SENTENCES[:1], start=bad)


def test_bad_decimals(minilm):
    tokenizer, model = minilm
    with pytest.raises(ValueError, match="decimals"):
        attention_explorer(tokenizer, model, SENTENCES, decimals=5)


# --- in the browser -----------------------------------------------------------------------------

CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)


@pytest.fixture(scope="module")
def page(view, tmp_path_factory):
    """The view alone in a page, opened from file:// in headless Chromium with every network
    request refused; skipped (with a warning) without Chromium or Playwright, as test_site.py."""
    why = None
    if CHROMIUM is None or not os.access(CHROMIUM, os.X_OK):
        why = f"Chromium is not installed (Debian: apt-get install chromium); tried {CHROMIUM!r}"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            why = "Playwright is not installed (pip install -r requirements-dev.txt)"
    if why:
        message = f"THE EXPLORER WAS NOT CHECKED IN A BROWSER: {why}."
        if os.environ.get("CI") == "true":
            pytest.fail(message + " CI requires the browser check.")
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    path = tmp_path_factory.mktemp("explorer") / "view.html"
    path.write_text(f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
                    f"<title>explorer</title></head><body>{view.html}</body></html>")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = chromium.new_context(offline=True)
        refused, errors = [], []
        context.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith("file:")
                      else (refused.append(route.request.url), route.abort()))
        tab = context.new_page()
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(path.as_uri())
        yield tab, errors, refused
        chromium.close()


def _shown(tab, j) -> float:
    return float(tab.locator(f'.ex-keys .ex-tok[data-i="{j}"] .ex-w').inner_text())


def test_pointing_at_it_shows_the_librarys_weight_for_dog(page, library):
    tab, errors, refused = page
    layer, head, it, dog = 2, 4, 7, 2  # 0-based: layer 3, head 5
    tab.select_option(".ex-sentence", index=0)
    tab.check('.ex-mask input[value="encoder"]')
    tab.select_option(".ex-layer", index=layer)
    tab.select_option(".ex-head", index=head)
    tab.locator(f'.ex-queries .ex-tok[data-i="{it}"]').hover()
    expected = library["encoder"][0, layer, head, it]
    shown = np.array([_shown(tab, j) for j in range(12)])
    assert abs(shown[dog] - expected[dog]) <= 0.0005 + 1e-9, (shown[dog], expected[dog])
    assert np.abs(shown - expected).max() <= 0.0005 + 1e-9
    tab.locator(f'.ex-keys .ex-tok[data-i="{dog}"]').hover()  # the number under the pointer
    assert tab.locator(".ex-readout").inner_text() == f"it \u2192 dog: {expected[dog]:.3f}"
    assert not errors and not refused, (errors, refused)


def test_under_the_decoder_mask_nothing_right_of_the_token_is_read(page, library):
    tab, errors, refused = page
    layer, head, it = 5, 0, 7
    tab.select_option(".ex-sentence", index=0)
    tab.select_option(".ex-layer", index=layer)
    tab.select_option(".ex-head", index=head)
    tab.check('.ex-mask input[value="decoder"]')
    tab.locator('.ex-queries .ex-tok[data-i="0"]').focus()  # then the keyboard, down to "it"
    for _ in range(it):
        tab.keyboard.press("ArrowDown")
    assert tab.evaluate("document.activeElement.dataset.i") == str(it)
    shown = np.array([_shown(tab, j) for j in range(12)])
    assert (shown[it + 1:] == 0).all(), shown
    assert np.abs(shown - library["decoder"][0, layer, head, it]).max() <= 0.0005 + 1e-9
    assert (shown[:it + 1] > 0).any()
    label = tab.locator('.ex-keys .ex-tok[data-i="9"]').get_attribute("aria-label")
    assert label == "key hungry, weight from it 0.000, masked"
    hidden = tab.eval_on_selector_all(".ex-keys .ex-tok", "b => b.map(x => "
                                      "x.classList.contains('ex-hidden'))")
    assert hidden == [False] * (it + 1) + [True] * (12 - it - 1)  # masked, struck through
    assert not errors and not refused, (errors, refused)


def test_the_padding_switch_shows_pad_keys_at_zero(page):
    tab, errors, refused = page
    tab.select_option(".ex-sentence", index=2)
    tab.check('.ex-mask input[value="encoder"]')
    tab.uncheck(".ex-pad")
    assert tab.locator(".ex-keys .ex-tok").count() == 8
    tab.check(".ex-pad")
    assert tab.locator(".ex-keys .ex-tok").count() == 12
    tab.locator('.ex-queries .ex-tok[data-i="2"]').focus()
    assert [_shown(tab, j) for j in range(8, 12)] == [0.0] * 4
    fills = tab.eval_on_selector_all('.ex-matrix rect[data-j="9"]',
                                     "cells => cells.map(c => c.getAttribute('fill'))")
    assert len(fills) == 12 and all(f.endswith("-hatch)") for f in fills)
    assert not errors and not refused, (errors, refused)


def test_the_view_opens_on_start_and_colours_on_one_fixed_scale(page, minilm, tmp_path):
    """Layer 6, head 12, query "it" chosen on load; a cell's colour is its weight on the one
    0-1 scale of the colour bar, the same in every head (not each head's own maximum)."""
    tokenizer, model = minilm
    v = attention_explorer(tokenizer, model, SENTENCES[:1], start=(6, 12, 7))
    path = tmp_path / "start.html"
    path.write_text(f"<!doctype html><html><body>{v.html}</body></html>")
    tab = page[0].context.new_page()  # the fixture's offline context
    tab.goto(path.as_uri())
    assert tab.input_value(".ex-layer") == "5" and tab.input_value(".ex-head") == "11"
    assert tab.locator(".ex-queries .ex-tok.ex-on").get_attribute("data-i") == "7"
    assert tab.locator(".ex-readout").inner_text().startswith("Query it (i = 7)")
    full = tab.locator('.ex-matrix rect[data-i="0"][data-j="0"]').get_attribute("fill")
    tab.close()
    w = v.data["weights"]["encoder"][0][5][11][0] / v.data["scale"]  # [CLS] -> [CLS]
    from encoderlab.course.plotting.style import ATTENTION_CMAP
    expected = np.array(ATTENTION_CMAP(w)[:3]) * 255
    got = np.array([float(c) for c in re.findall(r"\d+", full)])
    assert np.abs(got - expected).max() <= 8, (got, expected)  # 9 stops, interpolated


def test_the_head_grid_chooses_layer_and_head(page):
    tab, errors, refused = page
    tab.locator(".ex-all summary").click()
    tab.locator('.ex-thumb[aria-label="layer 2, head 3"]').click()
    assert tab.input_value(".ex-layer") == "1" and tab.input_value(".ex-head") == "2"
    tab.keyboard.press("ArrowRight")  # arrow keys move through the grid
    assert tab.input_value(".ex-head") == "3"
    assert tab.evaluate("document.activeElement.getAttribute('aria-label')") == "layer 2, head 4"
    assert not errors and not refused, (errors, refused)

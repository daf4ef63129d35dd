"""An attention explorer that works offline: every head of the real MiniLM, one mask at a time
(Lessons 1, 3 and 4).

:func:`attention_explorer` runs the model on a padded batch of a few sentences twice, under the
encoder's bidirectional mask and under the decoder's causal mask (the second is a new run with
that mask, not the first run's matrices with a triangle zeroed), and returns an
:class:`AttentionExplorer`. In Jupyter or Colab it displays itself; ``.html`` is one
self-contained piece of HTML (inline CSS and JavaScript, the weights as compact JSON, nothing
loaded from another host) for a web page; ``.data`` is the dict that the HTML carries.

In the JSON, ``weights[mask][s][l][h]`` is head h of layer l for sentence s as a flat list of
n x n integers, row by row (query i, key j at ``i * n + j``): the weight times
``10 ** decimals``, rounded. Colours come from the figure key (``plotting.style``).
"""

from __future__ import annotations

import hashlib
import itertools
import json

import numpy as np
import torch
from matplotlib.colors import to_hex

from encoderlab import masks
from encoderlab.course.plotting.style import ATTENTION_CMAP, COLORS, FONT_SIZES, SHADES, shown_px
from encoderlab.validate import check_int

__all__ = ["MAX_SENTENCES", "MAX_TOKENS", "AttentionExplorer", "attention_explorer"]

MAX_SENTENCES = 4  # a view's page weight grows with sentences x n^2: keep it light (< 300 kB)
MAX_TOKENS = 16  # per sentence, with [CLS] and [SEP]
MAX_CELLS = 576  # sentences x n^2 weights per head (4 sentences of 12 tokens): about 260 kB
_views = itertools.count(1)  # a view's number on the page: several views never share an id


def _check_sentences(sentences) -> list[str]:
    if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)):
        raise ValueError(
            "attention_explorer expects a list of sentences (str), "
            f"got {type(sentences).__name__}. Pass e.g. ['The dog ran.', 'It slept.']."
        )
    if not sentences:
        raise ValueError("attention_explorer expects 1 to "
                         f"{MAX_SENTENCES} sentences, got an empty list.")
    if len(sentences) > MAX_SENTENCES:
        raise ValueError(
            f"attention_explorer expects at most {MAX_SENTENCES} sentences (to keep the page "
            f"light), got {len(sentences)}. Make several views instead."
        )
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str) or not sentence.strip():
            raise ValueError(
                f"attention_explorer expects every sentence to be a non-empty str; sentence {i} "
                f"is {sentence!r} ({type(sentence).__name__})."
            )
    return list(sentences)


def _style() -> dict:
    """The figure key's colours and sizes that the view uses."""
    return {
        "cmap": [to_hex(ATTENTION_CMAP(x)) for x in np.linspace(0.0, 1.0, 9)],
        "encoder": COLORS["encoder"],
        "decoder": COLORS["decoder"],
        "padding": COLORS["padding"],
        "highlight": COLORS["highlight"],
        "masked": COLORS["masked"],
        "padding_text": SHADES["padding_text"],
        "ink": SHADES["ink"],
        "hatch": SHADES["hatch"],
    }


def attention_explorer(tokenizer, model, sentences, *, decimals: int = 3,
                       start: tuple[int, int, int] | None = None) -> AttentionExplorer:
    """An interactive view of every layer's and head's attention on ``sentences`` (Lessons 1, 3,
    4), under the encoder's mask and under the decoder's, each from its own run of ``model``.

    ``sentences``: 1 to ``MAX_SENTENCES`` strings, each at most ``MAX_TOKENS`` tokens with
    [CLS] and [SEP]; they are padded to the longest, and [PAD] keys are masked in both runs.
    ``decimals``: the weights' rounding (1 to 3). At most ``MAX_CELLS`` = sentences x n^2.
    ``start``: ``(layer, head, i)`` the view opens on, in the first sentence: layer and head
    counted from 1, as the choosers name them, the query token i from 0, as the lessons count.
    """
    sentences = _check_sentences(sentences)
    decimals = check_int(decimals, "decimals", at_least=1, at_most=3,
                         what="the number of decimals kept")
    lengths = [len(tokenizer.tokenize(s)) + 2 for s in sentences]  # + [CLS], [SEP]
    too_long = [(i, n) for i, n in enumerate(lengths) if n > MAX_TOKENS]
    if too_long:
        i, n = too_long[0]
        raise ValueError(
            f"attention_explorer expects sentences of at most {MAX_TOKENS} tokens with [CLS] "
            f"and [SEP] (to keep the page light); sentence {i} has {n}. Shorten it."
        )
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    b, n = batch["input_ids"].shape
    if b * n * n > MAX_CELLS:
        raise ValueError(
            f"attention_explorer keeps a view under 300 kB: sentences x n^2 at most {MAX_CELLS} "
            f"(e.g. 4 sentences of 12 tokens, 2 of 16); {b} sentences padded to n={n} give "
            f"{b * n * n}. Use fewer or shorter sentences, or several views."
        )
    if start is None:
        start = (1, 1, 1)
    if not isinstance(start, (tuple, list)) or len(start) != 3:
        raise ValueError(f"attention_explorer expects start=(layer, head, token_index), got "
                         f"{start!r}.")
    scale = 10 ** decimals
    weights = {}
    was_training = model.training
    model.eval()  # no dropout on the weights shown
    try:
        with torch.no_grad():
            for name, mask in (("encoder", masks.bidirectional(n)), ("decoder", masks.causal(n))):
                out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"],
                            attention_mask=batch["attention_mask"], output_attentions=True,
                            mask=mask)  # the padding mask is combined with `mask` inside
                a = torch.stack(out.attentions, dim=1).double().numpy()  # (b, L, h, n, n)
                weights[name] = np.rint(a * scale).astype(int).reshape(*a.shape[:3], n * n)
    finally:
        model.train(was_training)
    layers, heads = weights["encoder"].shape[1:3]
    length = int(batch["attention_mask"][0].sum())
    start = [check_int(start[0], "start layer", at_least=1, at_most=layers) - 1,
             check_int(start[1], "start head", at_least=1, at_most=heads) - 1,
             check_int(start[2], "start token_index", at_least=0, at_most=length - 1)]
    data = {
        "sentences": sentences,
        "tokens": [tokenizer.convert_ids_to_tokens(row) for row in batch["input_ids"].tolist()],
        "lengths": batch["attention_mask"].sum(dim=1).tolist(),
        "n": n,
        "layers": int(weights["encoder"].shape[1]),
        "heads": int(weights["encoder"].shape[2]),
        "decimals": decimals,
        "start": start,
        "scale": scale,
        "weights": {name: w.tolist() for name, w in weights.items()},
        "style": _style(),
    }
    return AttentionExplorer(data)


class AttentionExplorer:
    """The view: ``.html`` (self-contained), ``.data`` (what it shows); Jupyter displays it."""

    def __init__(self, data: dict):
        self.data = data
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        self.id = f"encoderlab-explorer-{digest}-{next(_views)}"
        self._json = text.replace("<", "\\u003c")  # no "</script>" can end the data early

    @property
    def html(self) -> str:
        style = self.data["style"]
        css = (_CSS.replace("ROOT", f"#{self.id}")
               .replace("FONT_PX", f"{shown_px(FONT_SIZES['text']):.1f}px")
               .replace("SMALL_PX", f"{shown_px(FONT_SIZES['small']):.1f}px"))
        for key in ("encoder", "decoder", "padding", "padding_text", "highlight", "masked",
                    "ink", "hatch"):
            css = css.replace(f"COLOR_{key.upper()};", f"{style[key]};")
        return (
            f'<div class="encoderlab-explorer" id="{self.id}" role="group" '
            f'aria-label="Attention explorer: {len(self.data["sentences"])} sentences, '
            f'{self.data["layers"]} layers of {self.data["heads"]} heads">\n'
            f"<style>{css}</style>\n"
            f'<script type="application/json" class="ex-data">{self._json}</script>\n'
            f"{_BODY}\n"
            f"<script>{_JS}\n"
            f'encoderlabExplorer(document.getElementById("{self.id}"));</script>\n'
            "</div>"
        )

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        d = self.data
        return (f"AttentionExplorer({len(d['sentences'])} sentences, n={d['n']}, "
                f"{d['layers']} layers x {d['heads']} heads, {len(self.html) / 1000:.0f} kB)")


_BODY = """<div class="ex-controls">
<label>Sentence <select class="ex-sentence"></select></label>
<label>Layer <select class="ex-layer"></select></label>
<label>Head <select class="ex-head"></select></label>
<span class="ex-mask" role="radiogroup" aria-label="Mask">
<label><input type="radio" value="encoder" checked> encoder (bidirectional)</label>
<label><input type="radio" value="decoder"> decoder (causal)</label></span>
<label><input type="checkbox" class="ex-pad"> show [PAD]</label>
</div>
<div class="ex-key">Line thickness = weight; line colour = mask (<b class="ex-enc">encoder</b>,
<b class="ex-dec">decoder</b>); <span class="ex-hatchkey"></span> hatched = masked
(exactly 0, struck through); <span class="ex-padkey">[PAD]</span> = padding.
Weight 0<span class="ex-bar" role="img" aria-label="colour scale from 0 to 1"></span>1
(the same scale in every head and mask)</div>
<output class="ex-readout" aria-live="polite">Point at a token or a cell.</output>
<div class="ex-views">
<div class="ex-tokens"><div class="ex-col ex-queries" aria-label="Queries"></div>
<svg class="ex-lines" aria-hidden="true"></svg>
<div class="ex-col ex-keys" aria-label="Keys"></div></div>
<div class="ex-matrix-box"><svg class="ex-matrix" tabindex="0" role="img"></svg></div>
</div>
<details class="ex-all"><summary>All heads (pick one)</summary>
<div class="ex-grid" role="grid"></div></details>"""

_CSS = """ROOT{--ex-masked:COLOR_MASKED;font-size:FONT_PX;line-height:1.3;color:COLOR_INK;
background:white;color-scheme:light;padding:.5em;border-radius:4px;margin:.5em 0;
max-width:100%;box-sizing:border-box}
ROOT .ex-controls{display:flex;flex-wrap:wrap;gap:.3em 1em;align-items:center}
ROOT select,ROOT input{font:inherit;color:inherit;background:transparent}
ROOT select option{color:initial}
ROOT .ex-readout{display:block;min-height:1.4em;margin:.4em 0;font-variant-numeric:tabular-nums}
ROOT .ex-views{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
ROOT .ex-tokens{display:flex;align-items:flex-start}
ROOT .ex-col{display:flex;flex-direction:column}
ROOT .ex-tok{height:20px;line-height:18px;padding:0 4px;border:1px solid transparent;
border-radius:3px;background:transparent;color:inherit;font:inherit;cursor:pointer;
white-space:nowrap;text-align:right;box-sizing:border-box}
ROOT .ex-keys .ex-tok{text-align:left}
ROOT .ex-key{font-size:SMALL_PX;margin:.3em 0}
ROOT .ex-enc{color:COLOR_ENCODER;} ROOT .ex-dec{color:COLOR_DECODER;}
ROOT .ex-padkey{color:COLOR_PADDING_TEXT;}
ROOT .ex-hatchkey{display:inline-block;width:1em;height:1em;vertical-align:middle;
border:1px solid COLOR_HATCH;}
ROOT .ex-bar{display:inline-block;width:8em;height:.8em;vertical-align:middle;margin:0 .3em;
border:1px solid COLOR_INK;}
ROOT .ex-colhead{height:20px;line-height:20px;font-size:SMALL_PX;white-space:nowrap;
padding:0 4px}
ROOT .ex-lines{margin-top:20px}
ROOT .ex-tok .ex-w{font-size:SMALL_PX;opacity:.8;margin-left:.4em}
ROOT .ex-tok.ex-on{border:2px solid COLOR_HIGHLIGHT;font-weight:bold}
ROOT .ex-tok.ex-pad{color:COLOR_PADDING_TEXT;}
ROOT .ex-tok.ex-hidden{text-decoration:line-through;opacity:.6}
ROOT .ex-tok:focus-visible,ROOT svg:focus-visible,ROOT .ex-thumb:focus-visible{
outline:2px solid COLOR_INK;outline-offset:1px}
ROOT .ex-matrix text{fill:currentColor;font-size:SMALL_PX}
ROOT .ex-matrix text.ex-pad{fill:COLOR_PADDING_TEXT;}
ROOT .ex-grid{display:grid;gap:3px;margin-top:.4em;align-items:center;justify-content:start}
ROOT .ex-all,ROOT .ex-matrix-box{max-width:100%;overflow-x:auto}
ROOT .ex-thumb{padding:1px;border:2px solid transparent;background:transparent;cursor:pointer}
ROOT .ex-thumb[aria-selected=true]{border-color:COLOR_HIGHLIGHT;}
ROOT .ex-thumb canvas{display:block;width:32px;height:32px;image-rendering:pixelated;
outline:1px solid COLOR_HATCH;}
ROOT .ex-grid span{font-size:SMALL_PX;text-align:center;padding-right:.3em}
ROOT .ex-hatch-bg{fill:var(--ex-masked)}
ROOT .ex-hatch-line{stroke:COLOR_HATCH;stroke-width:1}"""

_JS = r"""function encoderlabExplorer(root) {
  if (!root || root.dataset.ready) return;  // a script that runs twice draws once
  root.dataset.ready = "1";
  const D = JSON.parse(root.querySelector(".ex-data").textContent);
  const S = D.style, NS = "http://www.w3.org/2000/svg", ROW = 20, CELL = 18, LABEL = 92;
  const $ = (sel) => root.querySelector(sel);
  const ARROWS = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
  const st = {s: 0, l: D.start[0], h: D.start[1], mask: "encoder", pad: false, q: D.start[2],
    k: null};
  const el = (tag, attrs, parent, ns) => {
    const e = ns ? document.createElementNS(NS, tag) : document.createElement(tag);
    for (const [a, v] of Object.entries(attrs || {})) e.setAttribute(a, v);
    if (parent) parent.appendChild(e);
    return e;
  };
  const fmt = (v) => v.toFixed(D.decimals);
  const hex = (c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
  const stops = S.cmap.map(hex);
  function colour(v) {  // the figure key's attention colormap, v in [0, 1]
    const x = Math.min(1, Math.max(0, v)) * (stops.length - 1), i = Math.min(stops.length - 2,
      Math.floor(x)), t = x - i;
    return "rgb(" + stops[i].map((c, k) => Math.round(c + t * (stops[i + 1][k] - c))) + ")";
  }
  const n = D.n;
  const len = () => D.lengths[st.s];
  const shown = () => (st.pad ? n : len());  // tokens on screen: [PAD]s only when asked
  const flat = (mask, s, l, h) => D.weights[mask][s][l][h];
  const w = (i, j) => flat(st.mask, st.s, st.l, st.h)[i * n + j] / D.scale;
  const masked = (i, j) => j >= len() || (st.mask === "decoder" && j > i);
  const tok = (i) => D.tokens[st.s][i];
  $(".ex-bar").style.background = "linear-gradient(to right," + S.cmap.join(",") + ")";
  $(".ex-hatchkey").style.background = "repeating-linear-gradient(45deg," + S.hatch + " 0 1px,"
    + S.masked + " 1px 4px)";
  const mkey = () => (st.mask === "decoder" ? S.decoder : S.encoder);

  // --- controls ---
  const sentence = $(".ex-sentence"), layer = $(".ex-layer"), head = $(".ex-head");
  D.sentences.forEach((t, i) => {
    el("option", {value: i}, sentence).textContent = (i + 1) + ". " + t;
  });
  for (let l = 0; l < D.layers; l++) el("option", {value: l}, layer).textContent = l + 1;
  for (let h = 0; h < D.heads; h++) el("option", {value: h}, head).textContent = h + 1;
  sentence.onchange = () => { st.s = +sentence.value; st.q = st.k = null; draw(true); };
  layer.onchange = () => { st.l = +layer.value; draw(false); };
  head.onchange = () => { st.h = +head.value; draw(false); };
  const radios = root.querySelectorAll(".ex-mask input");
  radios.forEach((r) => {
    r.name = root.id + "-mask";
    r.onchange = () => { st.mask = r.value; draw(false); };
  });
  $(".ex-pad").onchange = (e) => { st.pad = e.target.checked; draw(true); };
  const readout = $(".ex-readout");

  function say(i, j) {
    if (i === null) { readout.textContent = "Point at a token or a cell."; return; }
    if (j === null) {
      readout.textContent = "Query " + tok(i) + " (i = " + i + "): its row of weights, layer "
        + (st.l + 1) + ", head " + (st.h + 1) + ", " + st.mask + " mask."
        + (i >= len() ? " A [PAD] row: computed, then discarded." : "");
      return;
    }
    readout.textContent = tok(i) + " \u2192 " + tok(j) + ": " + fmt(w(i, j))
      + (masked(i, j) ? " (masked, M = \u2212\u221e: exactly 0)" : "");
  }

  // --- tokens in two columns, joined by lines ---
  const queries = $(".ex-queries"), keys = $(".ex-keys"), lines = $(".ex-lines");
  function tokens() {
    queries.textContent = keys.textContent = "";
    el("div", {"class": "ex-colhead", "aria-hidden": "true"}, queries).textContent =
      "query i (reads)";
    el("div", {"class": "ex-colhead", "aria-hidden": "true"}, keys).textContent =
      "key j (is read)";
    for (let i = 0; i < shown(); i++) {
      for (const side of ["q", "k"]) {
        const b = el("button", {type: "button", "class": "ex-tok" + (i >= len() ? " ex-pad" : ""),
          "data-i": i}, side === "q" ? queries : keys);
        b.textContent = tok(i);
        if (side === "k") el("span", {"class": "ex-w"}, b);
        const go = () => (side === "q" ? pick(i, null) : pick(st.q === null ? 0 : st.q, i));
        b.onmouseenter = go; b.onfocus = go;
        b.onclick = go;
        b.onkeydown = (e) => {
          const d = {ArrowDown: 1, ArrowUp: -1}[e.key];
          if (d === undefined) return;
          e.preventDefault();
          const col = side === "q" ? queries : keys, next = col.querySelector(
            '.ex-tok[data-i="' + (i + d) + '"]');
          if (next) next.focus();
        };
      }
    }
    lines.setAttribute("width", 120);
    lines.setAttribute("height", shown() * ROW);
  }
  function rowView() {
    const qi = st.q;
    lines.textContent = "";
    queries.querySelectorAll(".ex-tok").forEach((b, i) => {
      b.classList.toggle("ex-on", i === qi);
      b.setAttribute("aria-label", "query " + tok(i) + ", i = " + i);
      b.tabIndex = i === (qi === null ? 0 : qi) ? 0 : -1;  // one tab stop per column
    });
    keys.querySelectorAll(".ex-tok").forEach((b, j) => {
      b.classList.toggle("ex-on", j === st.k);
      b.classList.toggle("ex-hidden", qi !== null && masked(qi, j));
      b.tabIndex = j === (st.k === null ? 0 : st.k) ? 0 : -1;
      const span = b.querySelector(".ex-w");
      span.textContent = qi === null ? "" : fmt(w(qi, j));
      b.setAttribute("aria-label", "key " + tok(j) + (qi === null ? "" : ", weight from "
        + tok(qi) + " " + fmt(w(qi, j)) + (masked(qi, j) ? ", masked" : "")));
    });
    const rows = qi === null ? [...Array(shown()).keys()] : [qi];
    for (const i of rows) {
      for (let j = 0; j < shown(); j++) {
        const v = w(i, j);
        if (v <= 0) continue;
        el("line", {x1: 0, x2: 120, y1: i * ROW + ROW / 2, y2: j * ROW + ROW / 2,
          stroke: mkey(), "stroke-width": (qi === null ? 3 : 6) * v,
          "stroke-opacity": qi === null ? 0.5 : 0.9}, lines, true);
      }
    }
  }

  // --- the n x n matrix ---
  const matrix = $(".ex-matrix");
  function matrixView() {
    const m = shown(), size = LABEL + m * CELL;
    matrix.textContent = "";
    matrix.setAttribute("width", size); matrix.setAttribute("height", size);
    matrix.setAttribute("aria-label", "Attention matrix, rows are queries, columns are keys, "
      + m + " by " + m + "; arrow keys move between cells");
    const defs = el("defs", {}, matrix, true);
    const p = el("pattern", {id: root.id + "-hatch", width: 6, height: 6,
      patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)"}, defs, true);
    el("rect", {width: 6, height: 6, "class": "ex-hatch-bg"}, p, true);
    el("line", {x1: 0, y1: 0, x2: 0, y2: 6, "class": "ex-hatch-line"}, p, true);
    el("text", {x: LABEL, y: 11}, matrix, true).textContent = "key j (is read) \u2192";
    el("text", {x: 2, y: LABEL - 18}, matrix, true).textContent = "query i";
    el("text", {x: 2, y: LABEL - 5}, matrix, true).textContent = "(reads) \u2193";
    for (let i = 0; i < m; i++) {
      const y = LABEL + i * CELL;
      const pad = i >= len() ? "ex-pad" : "";
      el("text", {x: LABEL - 4, y: y + CELL * 0.7, "text-anchor": "end", "class": pad}, matrix,
        true).textContent = tok(i);
      const x = LABEL + i * CELL + CELL * 0.7;
      el("text", {"class": pad, transform: "translate(" + x + "," + (LABEL - 4) + ") rotate(-90)"},
        matrix, true).textContent = tok(i);
      for (let j = 0; j < m; j++) {
        const r = el("rect", {x: LABEL + j * CELL, y: y, width: CELL, height: CELL,
          fill: masked(i, j) ? "url(#" + root.id + "-hatch)" : colour(w(i, j)),
          "data-i": i, "data-j": j}, matrix, true);
        r.onmouseenter = () => pick(i, j);
      }
    }
    el("rect", {"class": "ex-cursor", fill: "none", stroke: S.highlight, "stroke-width": 2,
      width: CELL, height: CELL, visibility: "hidden"}, matrix, true);
    el("rect", {"class": "ex-rowmark", fill: "none", stroke: S.highlight, "stroke-width": 2,
      width: m * CELL, height: CELL, x: LABEL, visibility: "hidden"}, matrix, true);
  }
  function marks() {
    const cur = matrix.querySelector(".ex-cursor"), rm = matrix.querySelector(".ex-rowmark");
    rm.setAttribute("visibility", st.q === null ? "hidden" : "visible");
    if (st.q !== null) rm.setAttribute("y", LABEL + st.q * CELL);
    cur.setAttribute("visibility", st.k === null ? "hidden" : "visible");
    if (st.k !== null) {
      cur.setAttribute("x", LABEL + st.k * CELL);
      cur.setAttribute("y", LABEL + st.q * CELL);
    }
  }
  matrix.onkeydown = (e) => {
    const d = ARROWS[e.key];
    if (!d) return;
    e.preventDefault();
    const m = shown(), i = Math.min(m - 1, Math.max(0, (st.q || 0) + d[0]));
    pick(i, Math.min(m - 1, Math.max(0, (st.k === null ? 0 : st.k) + d[1])));
  };
  matrix.onfocus = () => { if (st.k === null) pick(st.q || 0, 0); };

  // --- every head at once ---
  const grid = $(".ex-grid");
  grid.style.gridTemplateColumns = "auto repeat(" + D.heads + ", 38px)";
  grid.setAttribute("aria-label", "All heads: layers are rows, heads are columns");
  const thumbs = [];
  el("span", {}, grid).textContent = "head";
  for (let h = 0; h < D.heads; h++) el("span", {}, grid).textContent = h + 1;
  for (let l = 0; l < D.layers; l++) {
    el("span", {}, grid).textContent = "L" + (l + 1);
    for (let h = 0; h < D.heads; h++) {
      const b = el("button", {type: "button", "class": "ex-thumb", role: "gridcell",
        "aria-label": "layer " + (l + 1) + ", head " + (h + 1), tabindex: -1}, grid);
      const c = el("canvas", {}, b);
      b.onclick = () => { st.l = l; st.h = h; draw(false); b.focus(); };
      b.onkeydown = (e) => {
        const d = ARROWS[e.key];
        if (!d) return;
        e.preventDefault();
        const t = thumbs[Math.min(D.layers - 1, Math.max(0, l + d[0]))]
          [Math.min(D.heads - 1, Math.max(0, h + d[1]))];
        t.b.click();
      };
      (thumbs[l] = thumbs[l] || [])[h] = {b, c, l, h};
    }
  }
  function thumbView() {
    const m = shown(), grey = getComputedStyle(root).getPropertyValue("--ex-masked").trim();
    for (const row of thumbs) for (const t of row) {
      t.c.width = t.c.height = m;
      const g = t.c.getContext("2d"), a = flat(st.mask, st.s, t.l, t.h);
      for (let i = 0; i < m; i++) for (let j = 0; j < m; j++) {
        g.fillStyle = masked(i, j) ? grey || S.masked : colour(a[i * n + j] / D.scale);
        g.fillRect(j, i, 1, 1);
      }
      const on = t.l === st.l && t.h === st.h;
      t.b.setAttribute("aria-selected", on);
      t.b.tabIndex = on ? 0 : -1;
    }
  }

  function pick(i, j) {
    st.q = i; st.k = j;
    rowView(); marks(); say(i, j);
  }
  function draw(rebuild) {
    if (st.q !== null && st.q >= shown()) st.q = st.k = null;
    if (st.k !== null && st.k >= shown()) st.k = null;
    layer.value = st.l; head.value = st.h;
    if (rebuild) tokens();
    matrixView(); rowView(); marks(); thumbView(); say(st.q, st.k);
  }
  draw(true);
}"""

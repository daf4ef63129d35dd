"""The offline corpus, its compact vocabulary, shuffled batches and the artefact command (L5-8)."""

import gzip
import hashlib
import sys
import types

import pytest
import torch

from encoderlab import data as data_module
from encoderlab import training
from encoderlab.course import train as train_module
from encoderlab.data import (
    CompactVocab,
    _prose_paragraphs,
    python_docs_corpus,
    python_docs_sentences,
    python_docs_sources,
    shuffled_batches,
    without_shared_spans,
    word_spans,
)
from encoderlab.lessons import l07_tasks as tasks
from encoderlab.lessons import l08_contrastive as contrastive
from encoderlab.lessons import l08_retrieval as retrieval

# What the lessons' trained artefacts were made from (CPython 3.11's documentation): the same
# on every Python version, because the text is read from the frozen files.
CORPUS_FINGERPRINT = "5b1d8b4bc7e3ec6a"  # all 3,489 sentences, before the split
DOCUMENTS_FINGERPRINT = "90fae6ea03397a17"  # Lesson 8's 76 topic documents


@pytest.fixture(scope="module")
def corpus():
    return python_docs_corpus()


@pytest.fixture(scope="module")
def vocab(corpus, minilm):
    tokenizer, _ = minilm
    return CompactVocab(tokenizer, corpus.train)


# --- the corpus ----------------------------------------------------------------------------------


def test_corpus_is_deterministic_english_prose(corpus):
    again = python_docs_corpus()
    assert again.train == corpus.train and again.fingerprint == corpus.fingerprint
    assert len(corpus.train) > 2000 and len(corpus.held_out) > 200
    assert not set(corpus.train) & set(corpus.held_out)  # held out means never trained on
    for sentence in corpus.train + corpus.held_out:
        assert 6 <= len(sentence.split()) <= 40
        assert sentence[0].isupper() and sentence[-1] in ".!?"
        assert ">>>" not in sentence and "::=" not in sentence and "*" not in sentence


def test_held_out_is_every_tenth_sentence_that_shares_no_8_words_with_training():
    sentences = python_docs_sentences()
    corpus = python_docs_corpus(held_out_every=10)
    tenth = sentences[9::10]
    assert corpus.train == [s for i, s in enumerate(sentences) if i % 10 != 9]  # never changed
    assert corpus.held_out == [s for s in tenth if s in set(corpus.held_out)]  # order kept
    assert corpus.dropped == len(tenth) - len(corpus.held_out) > 0
    assert len(corpus.train) + len(corpus.held_out) + corpus.dropped == len(sentences)
    assert (len(corpus.train), len(corpus.held_out), corpus.dropped) == (3141, 313, 35)
    assert "35 dropped" in repr(corpus)


# --- frozen data: the same text on every Python version -----------------------------------------


def test_frozen_files_match_their_recorded_fingerprints():
    for name, fingerprint in data_module.FROZEN.items():
        path = data_module.CORPORA / f"{name}.json.gz"
        raw = gzip.decompress(path.read_bytes())
        assert hashlib.sha256(raw).hexdigest()[:16] == fingerprint, name
        assert data_module.read_frozen(name)  # read back without complaint


def test_frozen_text_is_what_the_artefacts_were_trained_on():
    corpus = python_docs_corpus()
    assert corpus.fingerprint == CORPUS_FINGERPRINT
    assert len(python_docs_sentences()) == 3489
    assert retrieval.topic_documents().fingerprint == DOCUMENTS_FINGERPRINT
    assert [len(s) for s in tasks.topic_sentences().values()] == [1017, 387, 473, 576]
    assert len(contrastive.docstring_pairs()) == 678
    sources = python_docs_sources()
    assert len(sources) == 3489 and sources.count("language reference") == 1017
    assert set(sources) <= {"language reference", *data_module.DOC_MODULES}


def test_loaders_never_read_the_running_pythons_documentation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a loader called a builder")

    for name in ("module_docstrings", "sentences_of", "_prose_paragraphs", "_docstrings_of"):
        monkeypatch.setattr(data_module, name, refuse)
    for name in list(data_module._BUILDERS):
        monkeypatch.setitem(data_module._BUILDERS, name, refuse)
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)  # importing it now fails
    assert python_docs_corpus().fingerprint == CORPUS_FINGERPRINT
    assert retrieval.topic_documents().fingerprint == DOCUMENTS_FINGERPRINT
    assert len(contrastive.docstring_pairs()) == 678
    assert tasks.topic_task().test_texts


def test_a_changed_or_missing_frozen_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(data_module, "CORPORA", tmp_path)
    with pytest.raises(ValueError, match="is missing.*python -m encoderlab data --build"):
        data_module.read_frozen("topic-sentences")
    (tmp_path / "topic-sentences.json.gz").write_bytes(gzip.compress(b"{}"))
    with pytest.raises(ValueError, match="has fingerprint .* expected"):
        data_module.read_frozen("topic-sentences")
    with pytest.raises(ValueError, match="no frozen corpus called 'nope'"):
        data_module.read_frozen("nope")


def test_build_refuses_any_python_but_3_11(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data_module, "BUILD_PYTHON", (2, 7))
    with pytest.raises(ValueError, match="built from CPython 2.7's documentation"):
        data_module.build_frozen(tmp_path)
    with pytest.raises(SystemExit):
        data_module.main(["--build", "--out", str(tmp_path)])
    assert "Run the command with a 3.11 interpreter" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_check_command_reads_every_file(capsys):
    assert data_module.main([]) == 0
    assert capsys.readouterr().out.count(" ok") == len(data_module.FROZEN)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the builders need Python 3.11")
def test_build_on_3_11_reproduces_the_frozen_files_byte_for_byte(tmp_path):
    built = data_module.build_frozen(tmp_path)
    assert built == data_module.FROZEN
    for name in built:
        fresh = gzip.decompress((tmp_path / f"{name}.json.gz").read_bytes())
        frozen = gzip.decompress((data_module.CORPORA / f"{name}.json.gz").read_bytes())
        assert fresh == frozen, name


# --- held-out splits share no 8-word span with training -----------------------------------------


def test_word_spans_and_without_shared_spans():
    assert word_spans("One two, THREE four.", n=3) == {("one", "two", "three"),
                                                       ("two", "three", "four")}
    assert word_spans("too short", n=3) == set()
    train = ["the quick brown fox jumps over the lazy dog today"]
    held = ["Yesterday the quick brown fox jumps over the lazy dog.",  # 8 shared words
            "The quick brown fox jumps over a lazy dog.",  # 5 at most
            ("a pair whose second text", "THE quick brown fox jumps over the lazy cat")]
    assert without_shared_spans(held, train) == [held[1]]
    assert without_shared_spans(held, train, n=5) == []
    assert train == ["the quick brown fox jumps over the lazy dog today"]  # untouched
    with pytest.raises(ValueError, match="lists of texts"):
        without_shared_spans("one string", train)
    with pytest.raises(ValueError, match="strings or tuples of strings"):
        without_shared_spans([3], train)
    with pytest.raises(ValueError, match="n must be a positive int"):
        word_spans("a b", n=0)


def _shared(held_texts, train_texts, n=8):
    seen = set().union(*(word_spans(t, n) for t in train_texts))
    return [t for t in held_texts if word_spans(t, n) & seen]


def test_no_held_out_split_shares_8_words_with_its_training_set(minilm):
    corpus = python_docs_corpus()
    assert _shared(corpus.held_out, corpus.train) == []
    task = tasks.topic_task()
    assert _shared(task.test_texts, task.train_texts) == []
    assert [int((task.test_labels == k).sum()) for k in range(4)] == [50, 50, 50, 50]
    assert not set(task.test_texts) & set(task.train_texts)
    pairs = contrastive.docstring_pairs()
    every = contrastive.CONTRASTIVE["held_out_every"]
    train = [p for i, p in enumerate(pairs) if i % every != every - 1]
    held = without_shared_spans(pairs[every - 1::every], train)
    assert len(held) == 51 and _shared([t for p in held for t in p],
                                       [t for p in train for t in p]) == []
    # the library's own split applies the rule (on the first 100 pairs: a short frozen pass)
    tokenizer, model = minilm
    some = pairs[: 10 * every]
    data = contrastive.contrastive_data(tokenizer, model, pairs=some, held_out_every=every)
    some_train = [t for i, p in enumerate(some) if i % every != every - 1 for t in p]
    assert data.train_pairs == len(some) - 10
    assert _shared([t for p in data.held_out for t in p], some_train) == []
    assert len(data.held_out) < 10  # some of these ten held-out pairs were dropped


def test_code_and_headings_are_not_prose():
    text = (
        "The if statement\n****************\n\n"
        "It selects exactly one of the suites by evaluating the\nexpressions one by one.\n\n"
        "   if_stmt ::= 'if' expression ':' suite\n\n"
        "* A list item that goes on\n  over two lines.\n\n"
        ">>> print('hi')\nhi"
    )
    assert _prose_paragraphs(text) == [
        "It selects exactly one of the suites by evaluating the expressions one by one.",
        "A list item that goes on over two lines.",
    ]


@pytest.mark.parametrize("bad", [1, 0, True, "10"])
def test_corpus_rejects_a_bad_split(bad):
    with pytest.raises(ValueError, match="held_out_every must be an int >= 2"):
        python_docs_corpus(held_out_every=bad)


# --- the compact vocabulary ------------------------------------------------------------------


def test_compact_vocab_keeps_frequent_pieces_and_round_trips(vocab, corpus, minilm):
    tokenizer, _ = minilm
    assert vocab.tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0, 1, 2, 3, 4,
    )
    assert 1000 < vocab.size < 30522 and len(vocab) == vocab.size
    ids, mask = vocab.encode(corpus.held_out[:4])
    assert ids.shape == mask.shape and (ids[:, 0] == vocab.cls_id).all()
    for row, m, text in zip(ids, mask, corpus.held_out[:4]):
        n = int(m.sum())
        assert row[n - 1] == vocab.sep_id and (row[n:] == vocab.pad_id).all()
        pieces = tokenizer.tokenize(text)
        decoded = vocab.decode(row[1 : n - 1])
        assert len(decoded) == len(pieces)
        # every piece survives unless it is rare, in which case it became [UNK]
        for d, p in zip(decoded, pieces):
            assert d == p or (d == "[UNK]" and p not in vocab.index)


def test_compact_vocab_cuts_long_sentences(vocab, corpus):
    ids, mask = vocab.encode(corpus.train[:50], max_length=8)
    assert ids.shape[1] <= 8 and mask.sum(1).max() <= 8
    assert (ids[mask.sum(1) == 8, 7] == vocab.sep_id).all()  # [SEP] still closes a cut sentence


def test_compact_vocab_errors(vocab, minilm):
    tokenizer, _ = minilm
    with pytest.raises(ValueError, match="list of strings"):
        vocab.encode("one sentence")
    with pytest.raises(ValueError, match="max_length must be an int >= 3"):
        vocab.encode(["a b c"], max_length=2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([0, vocab.size])
    with pytest.raises(ValueError, match="min_count must be a positive int"):
        CompactVocab(tokenizer, ["a b"], min_count=0)
    with pytest.raises(ValueError, match="non-empty list"):
        CompactVocab(tokenizer, [])


# --- shuffled batches ------------------------------------------------------------------------


def test_shuffled_batches_cover_every_row_once_per_epoch_and_repeat_from_the_seed():
    x = torch.arange(10)
    y = torch.arange(10) * 2
    stream = shuffled_batches(x, y, batch_size=5, seed=3)
    first, second = next(stream), next(stream)
    assert sorted(torch.cat([first[0], second[0]]).tolist()) == list(range(10))
    assert torch.equal(first[1], first[0] * 2)  # rows stay aligned across tensors
    again = shuffled_batches(x, y, batch_size=5, seed=3)
    assert torch.equal(next(again)[0], first[0])
    third = next(stream)[0]
    assert not torch.equal(third, first[0]) or not torch.equal(next(stream)[0], second[0])


def test_shuffled_batches_errors():
    with pytest.raises(ValueError, match="same number of rows"):
        next(shuffled_batches(torch.zeros(3), torch.zeros(4), batch_size=2))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        next(shuffled_batches(torch.zeros(3), batch_size=0))


# --- the artefact command ----------------------------------------------------------------------


@pytest.fixture
def fake_recipes(monkeypatch):
    """A recipe module of our own, so the command can be tested without real training."""
    module = types.ModuleType("encoderlab_fake_recipes")

    def tiny(steps=None, progress=True):
        """A 2x2 matrix of the number of steps."""
        steps = steps or 7
        return {"w": torch.full((2, 2), float(steps))}, {"steps": steps}

    def huge(steps=None, progress=True):
        """Too big to commit."""
        return {"w": torch.zeros(2 * 1024 * 1024)}, {}

    module.RECIPES = {"x-tiny": tiny, "x-huge": huge}
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(train_module, "recipes", lambda: dict(module.RECIPES))
    return module


def test_command_lists_trains_and_loads(fake_recipes, tmp_path, monkeypatch, capsys):
    assert train_module.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "x-tiny" in listed and "A 2x2 matrix" in listed
    out = tmp_path / "x.safetensors"
    assert train_module.main(["x-tiny", "--steps", "3", "--out", str(out), "--quiet"]) == 0
    monkeypatch.setattr(training, "ARTEFACTS", tmp_path)
    out.rename(tmp_path / "x-tiny.safetensors")
    tensors, metadata = training.load_artefact("x-tiny")
    assert torch.equal(tensors["w"], torch.full((2, 2), 3.0))
    assert metadata["command"] == "python -m encoderlab train x-tiny --steps 3"
    assert metadata["steps"] == "3" and metadata["name"] == "x-tiny" and "torch" in metadata


def test_command_errors(fake_recipes, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        train_module.main(["nope"])
    assert "unknown artefact 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_module.main(["x-tiny", "--steps", "0"])
    assert "--steps must be a positive int" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_module.main(["x-huge", "--out", str(tmp_path / "h.safetensors")])
    assert "must stay under 5 MB" in capsys.readouterr().err
    monkeypatch.setattr(training, "ARTEFACTS", tmp_path)
    with pytest.raises(ValueError, match="no artefact named 'x-tiny'.*python -m encoderlab train"):
        training.load_artefact("x-tiny")


def test_every_committed_artefact_is_small_loads_and_names_its_command():
    known = train_module.recipes()
    for path in sorted(training.ARTEFACTS.glob("*.safetensors")):
        assert path.stat().st_size < training.MAX_ARTEFACT_BYTES, path.name
        tensors, metadata = training.load_artefact(path.stem)
        assert tensors, path.name
        assert metadata["name"] == path.stem and path.stem in known, path.name
        assert metadata["command"].startswith(f"python -m encoderlab train {path.stem}")


def test_trim_padding_drops_all_padding_columns_only():
    from encoderlab.data import trim_padding

    ids = torch.tensor([[2, 7, 3, 0, 0], [2, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    t_ids, t_mask = trim_padding(ids, mask)
    assert t_ids.tolist() == [[2, 7, 3], [2, 3, 0]] and t_mask.shape == (2, 3)
    hidden, _ = trim_padding(torch.randn(2, 5, 4), mask)  # token vectors (b, n, d) too
    assert hidden.shape == (2, 3, 4)
    with pytest.raises(ValueError, match="must share"):
        trim_padding(ids, mask[:, :3])

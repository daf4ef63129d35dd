"""Unpadding and sequence packing with document masks (Lesson 9, §5).

A batch padded to its longest sequence spends attention (and every other layer) on
``[PAD]`` positions. Packing removes them: whole sequences are laid end to end in rows of
capacity ``n``, each position carries the number of the document it belongs to, and the
document mask (:func:`encoderlab.masks.document`) keeps every token inside its own
sequence. The outputs per sequence are the same as running each sequence alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from encoderlab import masks
from encoderlab.attention import scaled_dot_product_attention
from encoderlab.tiled import tiled_attention
from encoderlab.validate import check_int, check_positive_int

__all__ = [
    "Packing",
    "pack_lengths",
    "padding_fraction",
    "padded_batch_fraction",
    "padded_batch_entries",
    "docstring_lengths",
    "position_ids",
    "pack_sequences",
    "unpack",
    "packed_attention",
    "docstring_sentences",
    "pack_token_ids",
    "encode_packed",
]


@dataclass
class Packing:
    """Where each sequence went: ``rows[r]`` lists the sequence indices packed into row r.

    ``doc_ids`` is (n_rows, n): the index of the sequence at each position, -1 for the
    padding left at the end of a row; ``starts[i]`` is (row, offset) of sequence i.
    """

    capacity: int
    lengths: list[int]
    rows: list[list[int]]
    doc_ids: torch.Tensor  # (n_rows, capacity), long
    starts: list[tuple[int, int]]

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def padding_fraction(self) -> float:
        """Fraction of the (n_rows, capacity) positions that hold no token."""
        return padding_fraction(self.lengths, self.n_rows * self.capacity)

    @property
    def dense_entries(self) -> int:
        """Score entries per head that a dense kernel computes: every row's capacity^2."""
        return self.n_rows * self.capacity**2

    @property
    def own_entries(self) -> int:
        """Score entries per head of each sequence's own square, sum of n_i^2: what a
        variable-length ("varlen") kernel computes, and what attention on each sequence alone
        computes (Lesson 9, §5)."""
        return sum(n * n for n in self.lengths)


def _check_lengths(lengths, capacity) -> list[int]:
    check_positive_int(capacity, "capacity", what="tokens per row")
    lengths = [int(n) for n in lengths]
    if not lengths:
        raise ValueError("pack_lengths() needs at least one sequence length, got none.")
    bad = [n for n in lengths if not 1 <= n <= capacity]
    if bad:
        raise ValueError(
            f"every length must be in [1, capacity={capacity}], got {bad[:5]}. Truncate or "
            "split sequences longer than a row before packing them."
        )
    return lengths


def pack_lengths(lengths, capacity: int) -> Packing:
    """Pack sequences of the given lengths into rows of ``capacity`` tokens (Lesson 9, §5).

    First-fit decreasing: take the sequences longest first and put each into the first row
    with room left, opening a new row when none has. A sequence is never split.
    """
    lengths = _check_lengths(lengths, capacity)
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    doc_ids = torch.full((len(rows), capacity), -1, dtype=torch.long)  # (n_rows, capacity)
    starts: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    for r, members in enumerate(rows):
        offset = 0
        for i in members:
            doc_ids[r, offset : offset + lengths[i]] = i
            starts[i] = (r, offset)
            offset += lengths[i]
    return Packing(capacity, lengths, rows, doc_ids, starts)


def padding_fraction(lengths, total_positions: int) -> float:
    """1 - (real tokens / positions): the share of the work spent on padding."""
    real = sum(int(n) for n in lengths)
    if total_positions < real or total_positions < 1:
        raise ValueError(
            f"total_positions must be at least the number of tokens ({real}), "
            f"got {total_positions}."
        )
    return 1 - real / total_positions


def padded_batch_fraction(lengths, batch_size: int) -> float:
    """Padding fraction when the sequences, in the given order, go into batches of
    ``batch_size`` rows, each padded to its own longest sequence (the usual padded batch)."""
    lengths = [int(n) for n in lengths]
    check_positive_int(batch_size, "batch_size")
    total = 0
    for s in range(0, len(lengths), batch_size):
        chunk = lengths[s : s + batch_size]
        total += len(chunk) * max(chunk)
    return padding_fraction(lengths, total)


def padded_batch_entries(lengths, batch_size: int) -> int:
    """Score entries per head that dense attention computes on padded batches (Lesson 9, §5).

    The sequences, in the given order, go into batches of ``batch_size`` rows, each padded to
    its own longest sequence n_max: every row of the batch then holds an n_max x n_max score
    matrix, padding included. Pass ``sorted(lengths)`` for length-sorted batches.
    """
    lengths = [int(n) for n in lengths]
    check_positive_int(batch_size, "batch_size")
    if not lengths:
        raise ValueError("padded_batch_entries() needs at least one sequence length, got none.")
    return sum(len(lengths[s : s + batch_size]) * max(lengths[s : s + batch_size]) ** 2
               for s in range(0, len(lengths), batch_size))


def docstring_lengths(tokenizer, max_length: int = 512) -> list[int]:
    """Token lengths of real paragraphs: the standard-library docstrings of the course's frozen
    corpus, in corpus order (Lesson 9, §5).

    Each docstring's prose sentences (``corpora/docstring-pairs.json.gz``, the text Lesson 8
    draws its pairs from) are joined with spaces and tokenized with ``tokenizer`` (with
    [CLS] and [SEP]), truncated to ``max_length`` tokens as a model with that many positions
    would truncate them.
    """
    from encoderlab.data import (
        read_frozen,  # the frozen corpus: the same text on every Python version
    )

    check_int(max_length, "max_length", at_least=2, what="[CLS] and [SEP]")
    docstrings = read_frozen("docstring-pairs")["docstrings"]
    return [len(tokenizer.encode(" ".join(sentences), truncation=True, max_length=max_length))
            for sentences in docstrings]


def position_ids(packing: Packing) -> torch.Tensor:
    """(n_rows, capacity) position of every packed token, counted from the start of its own
    sequence (Lesson 9, §5): 0, 1, ..., n_i - 1 for sequence i; 0 at the end-of-row padding.

    A model with learned absolute positions needs these, not the positions in the row
    (0 .. capacity - 1), to give a packed sequence the output it has alone.
    """
    ids = torch.zeros(packing.n_rows, packing.capacity, dtype=torch.long)  # (n_rows, capacity)
    for (r, o), n in zip(packing.starts, packing.lengths, strict=True):
        ids[r, o : o + n] = torch.arange(n)
    return ids


def pack_sequences(sequences: list[torch.Tensor], packing: Packing) -> torch.Tensor:
    """Lay the (n_i, d) tensors into (n_rows, capacity, d) as ``packing`` says; zeros elsewhere."""
    if len(sequences) != len(packing.lengths):
        raise ValueError(
            f"got {len(sequences)} sequences for a packing of {len(packing.lengths)} lengths."
        )
    first = sequences[0]
    out = first.new_zeros(packing.n_rows, packing.capacity, *first.shape[1:])  # (R, n, ...)
    for i, x in enumerate(sequences):
        if x.shape[0] != packing.lengths[i]:
            raise ValueError(
                f"sequence {i} has {x.shape[0]} positions, the packing expects "
                f"{packing.lengths[i]}."
            )
        r, o = packing.starts[i]
        out[r, o : o + x.shape[0]] = x
    return out


def unpack(packed: torch.Tensor, packing: Packing) -> list[torch.Tensor]:
    """The inverse of :func:`pack_sequences`: one (n_i, ...) tensor per sequence."""
    return [
        packed[r, o : o + n] for (r, o), n in zip(packing.starts, packing.lengths, strict=True)
    ]


def packed_attention(
    q: torch.Tensor,  # (R, h, capacity, d_k): packed queries
    k: torch.Tensor,  # (R, h, capacity, d_k)
    v: torch.Tensor,  # (R, h, capacity, d_v)
    packing: Packing,
    tiled: bool = False,
    block_size: int = 128,
) -> list[torch.Tensor]:
    """Self-attention over a packed batch with the document mask (Lesson 9, §5).

    Returns one (h, n_i, d_v) output per sequence, in the original order. The end-of-row
    padding (doc id -1) forms its own "document", so real tokens never see it. With
    ``tiled=True`` the tiled loop skips the tiles the document mask hides.
    """
    mask = masks.document(packing.doc_ids)  # (R, 1, n, n)
    if tiled:
        out = tiled_attention(q, k, v, mask=mask, block_size=block_size)  # (R, h, n, d_v)
    else:
        out, _ = scaled_dot_product_attention(q, k, v, mask)  # (R, h, n, d_v)
    out = out.transpose(1, 2)  # (R, n, h, d_v): positions first, to unpack
    return [x.transpose(0, 1) for x in unpack(out, packing)]  # each (h, n_i, d_v)


def docstring_sentences(tokenizer, count: int, seed: int = 0) -> list[list[int]]:
    """Token ids ([CLS] ... [SEP]) of ``count`` sentences drawn at random (seeded) from the
    docstrings of the course's frozen corpus (Lesson 9, §5): real sentences, with the length
    mix of real text, mostly short with a long tail."""
    from encoderlab.data import read_frozen

    check_positive_int(count, "count", what="sentences")
    sentences = [s for doc in read_frozen("docstring-pairs")["docstrings"] for s in doc]
    if count > len(sentences):
        raise ValueError(f"the corpus holds {len(sentences)} sentences, asked for {count}.")
    g = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(len(sentences), generator=g)[:count].tolist()
    return [tokenizer.encode(sentences[i], truncation=True, max_length=512) for i in chosen]


def pack_token_ids(token_ids: list[list[int]], capacity: int,
                   pad_id: int = 0) -> tuple[Packing, torch.Tensor]:
    """Pack tokenized sequences into rows of ``capacity`` (Lesson 9, §5): the
    :class:`Packing` and the (n_rows, capacity) input ids, ``pad_id`` after each row's end."""
    plan = pack_lengths([len(ids) for ids in token_ids], capacity)
    input_ids = torch.full((plan.n_rows, capacity), pad_id, dtype=torch.long)
    for ids, (r, o) in zip(token_ids, plan.starts, strict=True):
        input_ids[r, o : o + len(ids)] = torch.tensor(ids)
    return plan, input_ids


def encode_packed(model, input_ids: torch.Tensor, plan: Packing,
                  restart_positions: bool = True,
                  document_mask: bool = True) -> list[torch.Tensor]:
    """Run an :class:`~encoderlab.encoder.EncoderModel` on packed rows (Lesson 9, §4).

    The same layers as ``model(input_ids)``, with two changes a packed batch needs: the
    position ids restart at every sequence (:func:`position_ids`; ``restart_positions=False``
    counts them from the row's start, the bug this function lets a lesson show) and every
    block gets the document mask of ``plan`` instead of a padding mask (``document_mask=False``
    gives no mask at all: every position of a row, padding included, sees every other, the
    second bug). Returns the last hidden state of each sequence, (n_i, d), in the original order.
    """
    emb = model.embeddings
    if restart_positions:
        pos = position_ids(plan)  # (R, n): 0 .. n_i - 1 inside each sequence
    else:
        pos = torch.arange(plan.capacity).expand(plan.n_rows, -1)  # (R, n): the row's count
    h = emb.token(input_ids) + emb.segment(torch.zeros_like(input_ids)) + emb.position(pos)
    h = emb.dropout(emb.norm(h))  # (R, n, d): H^(0)
    mask = masks.document(plan.doc_ids) if document_mask else None  # (R, 1, n, n): blocks
    for block in model.blocks:
        h, _ = block(h, mask, need_weights=False)  # (R, n, d)
    if model.final_norm is not None:
        h = model.final_norm(h)
    return unpack(h, plan)  # one (n_i, d) per sequence


def padded_batches(sequences: list[torch.Tensor], batch_size: int,
                   order=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Padded batches of per-sequence tensors (Lesson 9, §4): ``(x, mask)`` per batch.

    ``sequences`` are (h, n_i, d) tensors (random queries, keys and values); they go, in
    ``order`` (default: as given), into batches of ``batch_size``, each padded with zeros to
    its longest: ``x`` is (b, h, n_pad, d), ``mask`` the padding mask of ``masks.padding``,
    (b, 1, 1, n_pad), True for real tokens.
    """
    check_positive_int(batch_size, "batch_size")
    if not sequences or any(s.dim() != 3 for s in sequences):
        raise ValueError("sequences must be a non-empty list of (h, n_i, d) tensors, got "
                         f"{[tuple(s.shape) for s in sequences]}.")
    order = list(range(len(sequences)) if order is None else order)
    batches = []
    for s in range(0, len(order), batch_size):
        chunk = [sequences[i] for i in order[s:s + batch_size]]
        h, _, d = chunk[0].shape
        n_pad = max(x.shape[1] for x in chunk)
        x = torch.zeros(len(chunk), h, n_pad, d)  # (b, h, n_pad, d)
        keep = torch.zeros(len(chunk), n_pad, dtype=torch.bool)  # True = real token
        for r, seq in enumerate(chunk):
            x[r, :, :seq.shape[1]], keep[r, :seq.shape[1]] = seq, True
        batches.append((x, masks.padding(keep)))
    return batches


def padded_token_batches(token_ids: list[list[int]], batch_size: int,
                         pad_id: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Token-id lists in batches of ``batch_size``, padded to their longest (Lesson 9, §4):
    ``(input_ids, attention_mask)`` per batch, both (b, n_pad), the mask 1 for real tokens,
    what a tokenizer returns with ``padding=True``."""
    check_positive_int(batch_size, "batch_size")
    if not token_ids or not all(token_ids):
        raise ValueError("token_ids must be a non-empty list of non-empty id lists.")
    out = []
    for s in range(0, len(token_ids), batch_size):
        chunk = token_ids[s:s + batch_size]
        x = torch.full((len(chunk), max(map(len, chunk))), pad_id, dtype=torch.long)
        keep = torch.zeros_like(x)  # (b, n_pad): 1 = real token
        for r, ids in enumerate(chunk):
            x[r, :len(ids)], keep[r, :len(ids)] = torch.tensor(ids), 1
        out.append((x, keep))
    return out

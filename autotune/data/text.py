"""The instruction text: normalisation and the word-level vocabulary a dataset stores itself.

Nothing can be downloaded, so the vocabulary is built from the dataset's own task strings:
``data make`` saves it as ``meta/tokenizer.json``; a dataset without that file (one lerobot
wrote) gets the same vocabulary built from its tasks when it is read. Word ids start at ``FIRST_WORD_ID``; the ids
below it are left to a model's special tokens, ``UNK_ID`` (a word not in the vocabulary) the
last of them. A workload maps these ids into its own vocabulary (GR00T N1.6:
``autotune.workloads.gr00t_common.text``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from autotune.data.files import present, read_json
from autotune.errors import DataError

TOKENIZER_TYPE = "word_level"
FIRST_WORD_ID = 5
"""Room for a model's own markers below the words (GR00T N1.6's pad and three image tokens)."""
UNK_ID = FIRST_WORD_ID - 1
_PUNCT = re.compile(r"[^\w\s]")
_V = TypeVar("_V", bound="WordVocabulary")


def normalize_text(text: str) -> list[str]:
    """Lower-case, strip punctuation and split on white space (as upstream prepares instructions)."""
    return _PUNCT.sub("", text.lower()).split()


class WordVocabulary:
    """Maps each known word to one id >= ``FIRST_WORD_ID``; unknown words to ``UNK_ID``."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = dict(vocab)

    @classmethod
    def build(cls: type[_V], texts: Iterable[str]) -> _V:
        words = sorted({w for t in texts for w in normalize_text(t)})
        return cls({w: FIRST_WORD_ID + i for i, w in enumerate(words)})

    def word_ids(self, text: str) -> list[int]:
        """The vocabulary's id of each word of ``text`` (``UNK_ID`` for an unknown one)."""
        return [self.vocab.get(w, UNK_ID) for w in normalize_text(text)]

    def to_json(self) -> dict:
        return {
            "type": TOKENIZER_TYPE,
            "normalizer": "lowercase, strip punctuation, split on spaces",
            "unk_id": UNK_ID,
            "vocab": self.vocab,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def for_dataset(cls: type[_V], path: Path, tasks: Iterable[str]) -> _V:
        """``path`` (a dataset's ``meta/tokenizer.json``) where it exists, else built from ``tasks``."""
        return cls.load(path) if present(path) else cls.build(tasks)

    @classmethod
    def load(cls: type[_V], path: Path) -> _V:
        data = read_json(path)
        if (
            not isinstance(data, dict)
            or data.get("type") != TOKENIZER_TYPE
            or not isinstance(data.get("vocab"), dict)
        ):
            raise DataError(
                f"{path}: not a {TOKENIZER_TYPE} tokenizer (needs 'type' and a 'vocab' object)"
            )
        bad = [w for w, i in data["vocab"].items() if not isinstance(i, int) or i < FIRST_WORD_ID]
        if bad:
            raise DataError(f"{path}: ids of {bad[:3]} are not integers >= {FIRST_WORD_ID}")
        return cls(data["vocab"])

"""The instruction text: normalisation and the word-level tokenizer the dataset stores itself.

Nothing can be downloaded, so ``data make`` builds the vocabulary from the dataset's own task
strings and saves it as ``meta/tokenizer.json``. Ids start after the special tokens shared with
the model (``NUM_SPECIAL_TOKENS``); a vocabulary larger than the model's is folded into range.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from autotune.errors import DataError
from autotune.workloads.gr00t_n16.presets import NUM_SPECIAL_TOKENS, UNK_ID

TOKENIZER_TYPE = "word_level"
_PUNCT = re.compile(r"[^\w\s]")


def normalize_text(text: str) -> list[str]:
    """Lower-case, strip punctuation and split on white space (as upstream prepares instructions)."""
    return _PUNCT.sub("", text.lower()).split()


class WordTokenizer:
    """Maps each known word to one id >= ``NUM_SPECIAL_TOKENS``; unknown words to ``UNK_ID``."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = dict(vocab)

    @classmethod
    def build(cls, texts: Iterable[str]) -> WordTokenizer:
        words = sorted({w for t in texts for w in normalize_text(t)})
        return cls({w: NUM_SPECIAL_TOKENS + i for i, w in enumerate(words)})

    def encode(self, text: str, vocab_size: int) -> list[int]:
        """Token ids of ``text``, each in ``[NUM_SPECIAL_TOKENS, vocab_size)`` or ``UNK_ID``."""
        room = vocab_size - NUM_SPECIAL_TOKENS
        ids = [self.vocab.get(w, UNK_ID) for w in normalize_text(text)]
        return [
            i if i < NUM_SPECIAL_TOKENS else NUM_SPECIAL_TOKENS + (i - NUM_SPECIAL_TOKENS) % room
            for i in ids
        ]

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
    def load(cls, path: Path) -> WordTokenizer:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataError(f"{path}: missing") from None
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: not a readable JSON file ({exc})") from None
        if (
            not isinstance(data, dict)
            or data.get("type") != TOKENIZER_TYPE
            or not isinstance(data.get("vocab"), dict)
        ):
            raise DataError(
                f"{path}: not a {TOKENIZER_TYPE} tokenizer (needs 'type' and a 'vocab' object)"
            )
        bad = [
            w for w, i in data["vocab"].items() if not isinstance(i, int) or i < NUM_SPECIAL_TOKENS
        ]
        if bad:
            raise DataError(f"{path}: ids of {bad[:3]} are not integers >= {NUM_SPECIAL_TOKENS}")
        return cls(data["vocab"])

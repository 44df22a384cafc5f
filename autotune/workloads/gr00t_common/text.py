"""GR00T N1.6's tokenisation of an instruction: the dataset's word vocabulary (``meta/tokenizer.json``,
read by ``autotune.data.text``) mapped into the model's ids, after its special tokens."""

from __future__ import annotations

from autotune.data.text import FIRST_WORD_ID, WordVocabulary
from autotune.workloads.gr00t_common.shape import NUM_SPECIAL_TOKENS, UNK_ID


class WordTokenizer(WordVocabulary):
    """The dataset's vocabulary, encoding into ``[NUM_SPECIAL_TOKENS, vocab_size)`` or ``UNK_ID``."""

    def encode(self, text: str, vocab_size: int) -> list[int]:
        """Token ids of ``text``; a vocabulary larger than the model's is folded into range."""
        room = vocab_size - NUM_SPECIAL_TOKENS
        return [
            UNK_ID if i < FIRST_WORD_ID else NUM_SPECIAL_TOKENS + (i - FIRST_WORD_ID) % room
            for i in self.word_ids(text)
        ]

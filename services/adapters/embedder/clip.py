"""Clip a text before the tokenizer sees it, without changing the word pieces the encoder keeps.

A tokenizer with truncation still normalises and splits the whole text first and truncates
afterwards: a 1M-character document cost ~25 MB of tokenizer state for the 256 pieces kept, and
a batch of them left the process gigabytes larger for good (issue 16, finding 10). The encoder only
ever looks at the first `max_tokens` pieces, so each text is cut to a prefix that surely holds
them before it is tokenized.

"Surely" is checked, not guessed: the prefix ends at a word boundary (a non-space character
followed by whitespace), and it is kept only if its own tokenization holds at least `max_tokens`
pieces and whitespace separates the last of them from the cut. Tokenizers split on whitespace
before they cut words into pieces (WordPiece, Metaspace and byte-level BPE pre-tokenizers all
do), so the pieces before that whitespace are the pieces the whole text would give. Otherwise the
budget doubles, up to a hard limit past which the text is cut regardless: only a text with no
word break in tens of thousands of characters, or with fewer than `max_tokens` pieces in them
(whitespace or control-character padding), gets there, and it is garbage for retrieval anyway.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Characters per word piece the first cut allows: English averages ~4.5 per piece, so 16 covers
# the max_tokens pieces of nearly every text at the first try.
CHARS_PER_TOKEN = 16
# The budget doubles at most up to max_tokens * this many characters.
HARD_CHARS_PER_TOKEN = 256
_WORD_END = re.compile(r"\S(?=\s)")
_SPACE = re.compile(r"\s")


class Clipper:
    """Cuts texts for one tokenizer (a `tokenizers.Tokenizer`; a private copy is kept, without
    truncation or padding, so that its settings never depend on its owner's)."""

    def __init__(self, tokenizer, max_tokens: int, chars_per_token: int = CHARS_PER_TOKEN,
                 hard_chars_per_token: int = HARD_CHARS_PER_TOKEN):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.max_tokens = max_tokens
        self.budget = max(64, max_tokens * chars_per_token)
        self.hard_limit = max(self.budget, max_tokens * hard_chars_per_token)

    def clip_all(self, texts: Sequence[str]) -> list[str]:
        return [self.clip(t) for t in texts]

    def clip(self, text: str) -> str:
        """`text`, or a prefix of it that gives the encoder the same word pieces."""
        if len(text) <= self.budget:
            return text  # every query, and most documents: nothing to do
        budget = self.budget
        while budget < len(text):
            if budget >= self.hard_limit:
                return text[:_cut(text, self.hard_limit)]
            cut = _cut(text, budget)
            if self._holds_the_pieces(text, cut):
                return text[:cut]
            budget *= 2
        return text if len(text) <= self.hard_limit else text[:_cut(text, self.hard_limit)]

    def _holds_the_pieces(self, text: str, cut: int) -> bool:
        encoding = self._tokenizer.encode(text[:cut], add_special_tokens=False)
        if len(encoding.ids) < self.max_tokens:
            return False
        last_end = encoding.offsets[self.max_tokens - 1][1]
        return _SPACE.search(text, last_end, cut) is not None


def _cut(text: str, limit: int) -> int:
    """The end of the last word that ends at or before `limit` (a non-space character followed by
    whitespace), or `limit` when there is none."""
    last = limit
    for match in _WORD_END.finditer(text, 0, limit + 1):
        last = match.end()
    return min(last, limit)

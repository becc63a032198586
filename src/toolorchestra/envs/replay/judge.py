"""Judging free-text final answers of the replay worlds.

Three judges, from strict to lenient:
- `option_letter`: the option letter (A-E) a multiple-choice answer commits to, or None;
- `normalized_match`: FRAMES-style short answers compared with the gold answer after normalization;
- `LLMJudge`: a grader model over any Backend, for live use (the recorded FRAMES grades came from one).

Inheriting a recorded grade (the answer *is* a model's recorded response) is decided by the world,
not here; these functions only see text.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolorchestra.backends.base import Backend

# Model-specific end markers left in some recorded responses, e.g. <｜end▁of▁sentence｜>, <|im_end|>.
_SPECIAL_TOKEN = re.compile(r"<[|｜][^<>]{0,40}[|｜]>")
_LEADING_LETTER = re.compile(r"^\W{0,3}([A-E])(?:[\s.):\]]|$)")
_STATED_LETTER = re.compile(r"\b(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-E])\b", re.IGNORECASE)
_LONE_LETTER = re.compile(r"(?<![\w'])\(?([A-E])\)?(?![\w'])")
_ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*[:：]\s*(.+)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def strip_special_tokens(text: str) -> str:
    return _SPECIAL_TOKEN.sub("", text).strip()


def option_letter(text: str, options: str = "ABCDE") -> str | None:
    """The option letter an answer commits to: a leading letter ("B", "(B) ...", "B)"), a stated one
    ("the answer is B"), or the only standalone option letter in a short text; None for a short
    hedge naming several letters ("A or B") and for text naming none."""
    text = strip_special_tokens(text)
    lone = {letter for letter in _LONE_LETTER.findall(text) if letter in options} if len(text) <= 40 else set()
    if len(lone) > 1:
        return None  # a short hedge such as "A or B" commits to nothing
    for pattern in (_LEADING_LETTER, _STATED_LETTER):
        match = pattern.search(text)
        if match and match.group(1).upper() in options:
            return match.group(1).upper()
    return lone.pop() if lone else None


def final_answer_text(text: str) -> str:
    """The part of a response that states the answer: after the last "Answer:" if there is one."""
    text = strip_special_tokens(text)
    matches = _ANSWER_LINE.findall(text)
    return matches[-1].strip() if matches else text


def normalize(text: str) -> str:
    """Lower case, accents folded, punctuation, articles and extra spaces removed."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    folded = folded.replace("-", " ")
    folded = "".join(char for char in folded if char not in string.punctuation or char in ".,")
    folded = re.sub(r"(?<!\d)[.,]|[.,](?!\d)", " ", folded)  # keep 3.5 and 1,000; drop sentence marks
    return " ".join(_ARTICLES.sub(" ", folded).split())


_NUMBER_WORDS = {
    word: index
    for index, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}


def _first_number(text: str) -> float | None:
    words = text.split()
    if words and words[0] in _NUMBER_WORDS:  # "Seven." states 7
        return float(_NUMBER_WORDS[words[0]])
    match = _NUMBER.search(text)
    if not match:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def normalized_match(answer: str, gold: str) -> bool:
    """Whether a short free-text answer states the gold answer.

    True when, after `normalize`, the answer equals the gold, or contains the whole gold phrase, or the
    gold is contained in the answer's stated-answer line; for a gold that is mostly a number
    ("87", "37th", "10 years"), when the first numbers agree.
    """
    stated = normalize(final_answer_text(answer))
    target = normalize(gold)
    if not stated or not target:
        return False
    if stated == target or _contains_phrase(stated, target):
        return True
    # A bare answer inside a wordy gold ("Mesut Ozil" for "This was Mesut Ozil."), if it is most of it.
    if _contains_phrase(target, stated) and 2 * len(_content_words(stated)) > len(_content_words(target)):
        return True
    gold_number = _first_number(target)
    if gold_number is not None and len(target.split()) <= 3:
        return _first_number(stated) == gold_number
    return False


_FUNCTION_WORDS = frozenset("this that was is were are it its he she they of in on at to and or by for with as".split())


def _content_words(text: str) -> list[str]:
    return [word for word in text.split() if word not in _FUNCTION_WORDS]


def _contains_phrase(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


GRADER_PROMPT = """Grade a predicted answer against the gold answer of a question.
Reply with one letter: A if the prediction states the gold answer (wording may differ),
B if it states a different answer, C if it does not attempt an answer.

Question: {question}
Gold answer: {gold}
Predicted answer: {answer}

Grade:"""


@dataclass
class LLMJudge:
    """A grader model (any Backend) that returns A (correct), B (incorrect) or C (not attempted)."""

    backend: Backend
    max_tokens: int = 4

    async def grade(self, question: str, gold: str, answer: str) -> str:
        prompt = GRADER_PROMPT.format(question=question, gold=gold, answer=answer)
        completion = await self.backend.complete(
            [{"role": "user", "content": prompt}], None, max_tokens=self.max_tokens, temperature=0.0
        )
        match = re.search(r"[ABC]", completion.text.upper())
        # An unreadable grade counts as incorrect: a judge failure must never pass an answer.
        return match.group(0) if match else "B"

"""Row adapters: a raw hub row -> (native id, question, answer), with the answer normalised to one
string; an adapter returns None for a row without a question or an answer."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from replication.tasks.math_prompts import DAPO_PREFIX, DAPO_SUFFIX

RowAdapter = Callable[[Mapping[str, Any], int, random.Random], "tuple[str, str, str] | None"]


def answer_to_str(value: Any) -> str:
    """Hub answers come as str, int, float (AMC23: 27.0) or lists (OlympiadBench): one string."""
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):  # a null cell read by pandas
        return ""
    if hasattr(value, "tolist"):  # numpy arrays / scalars from parquet
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return ", ".join(answer_to_str(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def strip_dapo_wrapper(content: str) -> str:
    """The bare problem inside DAPO's instruction wrapper (unchanged if not wrapped)."""
    text = content.strip()
    if text.startswith(DAPO_PREFIX.strip()) and text.endswith(DAPO_SUFFIX.strip()):
        text = text[len(DAPO_PREFIX.strip()):len(text) - len(DAPO_SUFFIX.strip())]
    return text.strip()


def _first_message_content(prompt: Any) -> str:
    """verl parquet ``prompt`` column: a list of {role, content} (a numpy array via pandas)."""
    if isinstance(prompt, str):
        return prompt
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], Mapping):
        return str(prompt[0].get("content", ""))
    return str(prompt)


def _first(row: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    return None


def _nested(row: Mapping[str, Any], key: str, sub: str) -> Any:
    value = row.get(key)
    return value.get(sub) if isinstance(value, Mapping) else None


def generic_row(id_keys: Sequence[str], question_keys: Sequence[str],
                answer_keys: Sequence[str]) -> RowAdapter:
    """Adapter for flat datasets; a verl-style row (prompt list + reward_model) also works."""

    def adapt(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
        question = _first(row, question_keys)
        answer = _first(row, answer_keys)
        if question is None and "prompt" in row:  # verl/DAPO layout
            question = strip_dapo_wrapper(_first_message_content(row["prompt"]))
        if answer is None:
            answer = _nested(row, "reward_model", "ground_truth")
        if question is None or answer is None:
            return None
        native = _first(row, id_keys)
        if native is None:
            native = _nested(row, "extra_info", "index")
        return (str(index) if native is None else str(native), str(question).strip(),
                answer_to_str(answer))

    return adapt


def dapo_row(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
    """BytedTsinghua-SIA/DAPO-Math-17k (and open-r1's copy, whose ``prompt`` is a string and whose
    ``solution`` holds the ground truth)."""
    question = strip_dapo_wrapper(_first_message_content(row.get("prompt", "")))
    answer = _nested(row, "reward_model", "ground_truth")
    if answer is None:
        answer = row.get("solution")
    if not question or answer is None:
        return None
    native = _nested(row, "extra_info", "index")
    return (str(index) if native is None else str(native), question, answer_to_str(answer))


def gpqa_row(row: Mapping[str, Any], index: int, rng: random.Random) -> tuple[str, str, str] | None:
    """Idavidrein/gpqa (gpqa_diamond): four options shuffled with a seeded RNG (GDRO's builder
    shuffled unseeded); the answer is the letter of the correct option."""
    correct = row.get("Correct Answer")
    wrong = [row.get(f"Incorrect Answer {i}") for i in (1, 2, 3)]
    if row.get("Question") is None or correct is None or any(w is None for w in wrong):
        return None
    options = [str(w).strip() for w in wrong]
    rng.shuffle(options)
    gold = rng.randrange(4)
    options.insert(gold, str(correct).strip())
    body = "\n".join(f"{'ABCD'[i]}: {opt}" for i, opt in enumerate(options))
    native = row.get("Record ID") or index
    return str(native), f"{str(row['Question']).strip()}\n\n{body}", "ABCD"[gold]

"""Procedural arithmetic levels from reasoning-gym, turned into compact ``Prompt`` records.

A *level* is one reasoning-gym dataset at one fixed difficulty (digits per operand, number of
terms), e.g. ``chain_sum-d2t2`` = "a ± b with two-digit operands". Fixing min = max for both
knobs keeps each level's difficulty homogeneous, so a pool's difficulty mix is set by how many
prompts each level contributes (``pools.TaskMixSpec``).

Two reasoning-gym facts shape this file (measured, see docs/papers/measurements.md):
- item ``i`` of a dataset with seed ``s`` is drawn from ``random.Random(s + i)``: two datasets
  whose seeds differ by less than their size share operands, shifted. So every (level, split)
  gets a seed hashed from its name (``split_seed``), ~2**62 apart instead of +1 apart.
- ``basic_arithmetic`` without parentheses evaluates left to right; only ``chain_sum`` (±) and
  ``products`` (×) are used.

The model is shown the expression without spaces plus "=" ("42-25="); the scorer only reads
``entry["answer"]``, so the compact text changes nothing in how answers are checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable

import reasoning_gym

SUPPORTED_DATASETS = ("chain_sum", "products")


@dataclasses.dataclass(frozen=True)
class Level:
    """One difficulty level of one reasoning-gym dataset."""

    alias: str
    """Short benchmark-style name ("add2"); held-out sets are called f"{alias}-heldout"."""
    dataset: str
    """reasoning-gym dataset name: "chain_sum" (a ± b ± ...) or "products" (a × b × ...)."""
    digits: int
    """Digits of every operand (1 means 0..9, d > 1 means 10**(d-1)..10**d - 1)."""
    terms: int
    """Number of operands."""

    def __post_init__(self) -> None:
        if self.dataset not in SUPPORTED_DATASETS:
            raise ValueError(f"level {self.alias!r}: dataset {self.dataset!r} not in {SUPPORTED_DATASETS}")
        if not (1 <= self.digits <= 6 and 2 <= self.terms <= 6):
            raise ValueError(f"level {self.alias!r}: digits must be in 1..6 and terms in 2..6")

    @property
    def key(self) -> str:
        """Stable level key used in prompt ids: "chain_sum-d2t2"."""
        return f"{self.dataset}-d{self.digits}t{self.terms}"

    @property
    def rg_config(self) -> dict:
        return dict(min_digits=self.digits, max_digits=self.digits, min_terms=self.terms, max_terms=self.terms)

    @property
    def space_size(self) -> int:
        """Number of distinct expressions this level can produce (used to stop dedup early)."""
        values = 10 if self.digits == 1 else 9 * 10 ** (self.digits - 1)
        operators = 2 ** (self.terms - 1) if self.dataset == "chain_sum" else 1
        return values**self.terms * operators


LEVELS: dict[str, Level] = {
    lv.alias: lv
    for lv in (
        Level("add1", "chain_sum", 1, 2),  # 200 problems: cannot have a disjoint held-out set
        Level("add2", "chain_sum", 2, 2),  # 16,200 problems
        Level("add3", "chain_sum", 3, 2),
        Level("add1t3", "chain_sum", 1, 3),  # a±b±c, 1 digit: 4,000 problems
        Level("add2t3", "chain_sum", 2, 3),  # a±b±c, 2 digits
        Level("mul1", "products", 1, 2),  # 100 problems: cannot have a disjoint held-out set
        Level("mul1t3", "products", 1, 3),  # a×b×c, 1 digit: 1,000 problems
        Level("mul2", "products", 2, 2),  # 8,100 problems
    )
}
"""Built-in levels by alias. Configs name levels by alias; add more here."""


def get_level(alias: str) -> Level:
    if alias not in LEVELS:
        raise ValueError(f"unknown task level {alias!r}; known: {sorted(LEVELS)}")
    return LEVELS[alias]


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One verifiable problem."""

    id: str
    """Stable id, unique in a pool: "chain_sum-d2t2-000123" (train) or "...-heldout-000123"."""
    text: str
    """What the tiny model is shown: compact expression plus "=" ("42-25=")."""
    answer: str
    """Reference answer as reasoning-gym gives it ("17", "-30")."""
    source: str
    """reasoning-gym dataset name; selects the scorer."""
    level: str
    """Level alias ("add2"), for per-level metrics."""
    question: str
    """reasoning-gym's natural-language question (what a chat model is shown)."""


def split_seed(base_seed: int, level: Level, split: str) -> int:
    """A seed for (base seed, level, split) far from every other one (see module docstring)."""
    digest = hashlib.sha256(f"{base_seed}/{level.key}/{split}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2  # < 2**62: room for any index range


def compact(expression: str) -> str:
    return expression.replace(" ", "") + "="


def signed_terms(text: str) -> list[str]:
    """The operands of a compact expression with their signs: "5-0+3=" → ["+5", "-0", "+3"];
    products: "4*1*7=" → ["4", "1", "7"]."""
    expr = text.rstrip("=")
    if "*" in expr:
        return expr.split("*")
    out, cur = [], ""
    for ch in expr if expr[:1] in "+-" else "+" + expr:
        if ch in "+-" and cur:
            out.append(cur)
            cur = ""
        cur += ch
    out.append(cur)
    return out


def twin_key(text: str) -> tuple[str, ...]:
    """Canonical form of an arithmetic problem up to the order of its terms: the sorted multiset
    of signed terms (5-0+3 and 3+5-0 are twins: the same sum, reordered; issue 20.7)."""
    return tuple(sorted(signed_terms(text)))


def twins(text: str) -> set[str]:
    """Every compact expression that is a twin of ``text`` (itself included): each order of its
    signed terms that a level can print, i.e. with a "+" term first for sums."""
    import itertools

    terms = signed_terms(text)
    if "*" in text:
        return {"*".join(p) + "=" for p in itertools.permutations(terms)}
    return {p[0][1:] + "".join(p[1:]) + "=" for p in itertools.permutations(terms) if p[0][0] == "+"}


def generate_level(
    level: Level,
    seed: int,
    size: int,
    split: str,
    exclude: Iterable[str] = (),
    max_draws: int | None = None,
) -> list[Prompt]:
    """Up to ``size`` prompts of ``level`` with distinct expressions, none in ``exclude`` (pass
    the ``twins`` of what must be excluded to exclude it up to the order of its terms).

    Deterministic in (level, seed, size, exclude). Fewer than ``size`` come back only when the
    level's problem space (minus ``exclude``) is smaller than ``size``.
    """
    exclude = set(exclude)
    # ``exclude`` is expected to hold texts of this level only (other levels cannot collide anyway).
    wanted = max(0, min(size, level.space_size - len(exclude)))
    draws = max_draws if max_draws is not None else 50 * size + 2_000
    ds = reasoning_gym.create_dataset(level.dataset, seed=seed, size=max(draws, 1), **level.rg_config)
    prompts: list[Prompt] = []
    seen: set[str] = set()
    tag = "" if split == "train" else f"{split}-"
    for i in range(draws):
        if len(prompts) >= wanted:
            break
        entry = ds[i]
        text = compact(entry["metadata"]["expression"])
        if text in seen or text in exclude:
            continue
        seen.add(text)
        prompts.append(
            Prompt(
                id=f"{level.key}-{tag}{len(prompts):06d}",
                text=text,
                answer=str(entry["answer"]),
                source=level.dataset,
                level=level.alias,
                question=entry["question"],
            )
        )
    return prompts

"""The allocator interface and its registry (``make_allocator`` lives in the package).

An allocator decides how many rollouts each prompt of a step gets (``plan``) and learns from
what the rollouts returned (``observe``). It never sees model tensors: only prompt ids, counts,
per-rollout rewards and, optionally, per-prompt losses. Allocators are stateful, seeded and
serialisable (``state_dict`` / ``load_state_dict``) so a killed run resumes to the same numbers.

Conventions shared by every allocator
- ``prompt_ids``: a sequence of hashable ids (int or str), unique within one call.
- ``budget``: the total number of rollouts of the step; ``plan`` returns int64 counts with
  ``counts.sum() == budget`` and ``lower <= counts <= upper`` — exactly, never approximately.
- ``rewards`` in ``observe``: a flat array of length ``counts.sum()`` laid out as
  ``np.repeat(prompt_ids, counts)``; a rollout is a success when its reward is > 0 (so both
  0/1 and ±1 rewards work).
- ``plan_details()`` returns per-prompt arrays of the last plan (e.g. ``predicted_p``, ``bin``)
  for the per-prompt log.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from replication.registry import Registry

ALLOCATORS: Registry[type["Allocator"]] = Registry("allocator")
"""Every allocator class by name; the package ``replication.allocation`` registers the built-ins."""

PROMPT_WEIGHTS: Registry[type] = Registry("prompt weighting")
"""Per-prompt advantage weighting name → class with a ``Config`` dataclass, built as
``cls(config=...)`` (config ``rl.prompt_weights``; the CLI's ``--prompt-weights`` choices)."""


def register_allocator(name: str) -> Callable[[type["Allocator"]], type["Allocator"]]:
    """Class decorator: make an allocator constructible by name (``make_allocator(name)``)."""

    def deco(cls: type["Allocator"]) -> type["Allocator"]:
        ALLOCATORS.register(name, cls)
        cls.name = name
        return cls

    return deco


@dataclasses.dataclass(frozen=True)
class PromptPool:
    """The training prompt pool as allocators see it: stable ids and the prompt texts.

    Allocators that predict per-prompt quantities over the whole pool (VIP's GP) need it;
    the others ignore it. ``embeddings`` may be given precomputed (rows aligned with ``ids``).
    """

    ids: tuple
    texts: tuple
    embeddings: np.ndarray | None = None

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise ValueError(f"pool has {len(self.ids)} ids but {len(self.texts)} texts")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("pool ids must be unique")
        if self.embeddings is not None and len(self.embeddings) != len(self.ids):
            raise ValueError("pool embeddings must have one row per id")

    def index_of(self) -> dict:
        return {pid: i for i, pid in enumerate(self.ids)}


# ----------------------------------------------------------------------------- validation


def check_prompt_ids(prompt_ids: Sequence[Hashable]) -> list[Hashable]:
    ids = list(prompt_ids)
    if len(ids) == 0:
        raise ValueError("empty batch: prompt_ids has no entries")
    if len(set(ids)) != len(ids):
        seen: set = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate prompt id {dup!r} in one batch; ids must be unique per step")
    return ids


def as_int(name: str, value: Any) -> int:
    """``value`` as an int when it is a whole number (3, 3.0, np.int64(3)); else ValueError."""
    try:
        ok = not isinstance(value, bool) and np.isfinite(value) and int(value) == value
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def check_feasible(n: int, budget: float, lower: float, upper: float, tol: float = 0.0) -> None:
    """The one budget-feasibility check: ``n`` prompts with counts in [lower, upper] can sum to
    ``budget`` (within ``tol`` for real-valued allocations)."""
    if upper < lower:
        raise ValueError(f"upper ({upper}) is below lower ({lower})")
    if budget < n * lower - tol or budget > n * upper + tol:
        raise ValueError(
            f"infeasible budget {budget}: {n} prompts need between {n}*{lower}={n * lower} and "
            f"{n}*{upper}={n * upper} rollouts"
        )


def check_budget(n_prompts: int, budget: int, lower: int, upper: int) -> int:
    budget = as_int("budget", budget)
    if lower < 1:
        raise ValueError(f"lower bound must be >= 1, got {lower}")
    check_feasible(n_prompts, budget, lower, upper)
    return budget


def check_finite(name: str, values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} contains a non-finite value ({arr[bad]}) at index {bad}")
    return arr


def check_observation(
    prompt_ids: Sequence[Hashable], counts: Sequence[int], rewards: Sequence[float]
) -> tuple[list[Hashable], np.ndarray, np.ndarray]:
    ids = check_prompt_ids(prompt_ids)
    c = np.asarray(counts)
    if c.shape != (len(ids),):
        raise ValueError(f"counts has shape {c.shape}, expected ({len(ids)},) (one per prompt)")
    if not np.issubdtype(c.dtype, np.integer):
        if not np.all(np.equal(np.mod(c, 1), 0)):
            raise ValueError("counts must be integers")
        c = c.astype(np.int64)
    if np.any(c < 0):
        raise ValueError(f"negative count {int(c.min())} in counts")
    r = check_finite("rewards", np.asarray(rewards, dtype=np.float64).reshape(-1))
    if r.shape[0] != int(c.sum()):
        raise ValueError(
            f"rewards has {r.shape[0]} entries but counts sum to {int(c.sum())}; rewards must be "
            "flat and laid out as np.repeat(prompt_ids, counts)"
        )
    return ids, c.astype(np.int64), r


def successes_per_prompt(counts: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """Number of successful rollouts (reward > 0) of each prompt, from the flat reward layout."""
    if len(counts) == 0:
        return np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(owner, weights=(rewards > 0).astype(np.float64), minlength=len(counts)).astype(
        np.int64
    )


# ----------------------------------------------------------------------------- interface


class Allocator(ABC):
    """Base class. Subclasses set ``Config`` (a dataclass, one docstring per field) and
    implement ``_plan`` and, if they learn, ``_observe`` and the state hooks."""

    name: ClassVar[str] = "base"
    classifier: Any = None
    """The allocator's GDRO difficulty classifier (``DifficultyClassifier``) when it keeps one,
    updated by its own ``observe``; None otherwise. The trainer reads bins from it."""

    @dataclasses.dataclass
    class Config:
        lower: int = 1
        """Smallest rollout count a prompt may get (L)."""
        upper: int = 64
        """Largest rollout count a prompt may get (U)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        config: Any = None,
        pool: "PromptPool | None" = None,
        **options: Any,
    ) -> None:
        if config is None:
            names = {f.name for f in dataclasses.fields(self.Config)}
            unknown = sorted(set(options) - names)
            if unknown:
                raise ValueError(
                    f"unknown option(s) {unknown} for allocator {self.name!r}; allowed: {sorted(names)}"
                )
            config = self.Config(**options)
        elif options:
            raise ValueError("pass either config= or keyword options, not both")
        self.config = config
        self.pool = pool
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self._last_details: dict[str, np.ndarray] = {}
        self.validate_config()

    # -- hooks
    def validate_config(self) -> None:
        lo, hi = int(self.config.lower), int(self.config.upper)
        if lo < 1:
            raise ValueError(f"{self.name}: lower must be >= 1, got {lo}")
        if hi < lo:
            raise ValueError(f"{self.name}: upper ({hi}) must be >= lower ({lo})")

    @abstractmethod
    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray: ...

    def _observe(
        self,
        prompt_ids: list[Hashable],
        counts: np.ndarray,
        rewards: np.ndarray,
        prompt_losses: np.ndarray | None,
    ) -> None:
        """Default: stateless allocators ignore observations."""

    def _state(self) -> dict[str, Any]:
        return {}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        pass

    # -- public API
    def plan(self, prompt_ids: Sequence[Hashable], budget: int) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids)
        budget = check_budget(len(ids), budget, self.config.lower, self.config.upper)
        counts = np.asarray(self._plan(ids, budget), dtype=np.int64)
        # Never a silent wrong allocation: these are invariants, not hopes.
        if counts.shape != (len(ids),) or int(counts.sum()) != budget:
            raise AssertionError(f"{self.name}: plan broke the exact-budget invariant")
        if counts.min() < self.config.lower or counts.max() > self.config.upper:
            raise AssertionError(f"{self.name}: plan broke the bounds invariant")
        return counts

    def observe(
        self,
        prompt_ids: Sequence[Hashable],
        counts: Sequence[int],
        rewards: Sequence[float],
        prompt_losses: Sequence[float] | None = None,
    ) -> None:
        ids, c, r = check_observation(prompt_ids, counts, rewards)
        losses = None
        if prompt_losses is not None:
            losses = check_finite("prompt_losses", np.asarray(prompt_losses, dtype=np.float64))
            if losses.shape != (len(ids),):
                raise ValueError(f"prompt_losses has shape {losses.shape}, expected ({len(ids)},)")
        self._observe(ids, c, r, losses)

    def plan_details(self) -> dict[str, np.ndarray]:
        """Per-prompt arrays describing the last plan (for logs); may be empty."""
        return dict(self._last_details)

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": dataclasses.asdict(self.config),
            "rng": self.rng.bit_generator.state,
            "state": self._state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state is for allocator {state.get('name')!r}, not {self.name!r}")
        self.rng.bit_generator.state = state["rng"]
        self._load_state(state["state"])

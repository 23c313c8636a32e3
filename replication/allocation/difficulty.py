"""Online difficulty classifier of GDRO (gdro.md, "Online difficulty classifier").

After every step each prompt that was rolled out gets an indicator c(x) = 1 if ANY of its
rollouts at that step was correct. The prompt's difficulty estimate is the mean of c over its
last H visits, and the estimate is cut into B bins by the edges 1/B, 2/B, ..., (B-1)/B
(paper: B = 10, edges 0.1 ... 0.9). Bin 0 holds the LOWEST pass rates.

Naming caveat: the paper's prose calls the high-index bins "hard" although they hold prompts
with high any-correct rates; it means the learnable frontier, not low pass rates. Nothing here
assumes which bins an adversary will favour — the bin index is simply the pass-rate rank.

Everything is keyed by prompt id. The official code applied the previous step's labels by batch
position to a reshuffled batch (gdro.md, code caveats); a classifier keyed by id cannot do that.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from replication.allocation.base import successes_per_prompt

UNSEEN_POLICIES = ("prior_bin", "zero_score")


@dataclasses.dataclass
class DifficultyConfig:
    n_bins: int = 10
    """B, number of difficulty bins; edges are k/B for k = 1..B-1 (paper: 10 bins, edges 0.1..0.9)."""
    window: int | None = None
    """H, visits per prompt in the moving mean; None = cumulative mean over all visits. The paper
    gives no H; the official code uses 50 or 100, which with ~18 visits per prompt over a paper
    run (1000 steps x 256 prompts / 14.1k prompts) is effectively cumulative — hence the default."""
    hysteresis: float = 0.0
    """δ: a prompt leaves its bin only after its estimate crosses the bin boundary by δ.
    Paper: none (0). Official code: 0.03."""
    unseen: str = "prior_bin"
    """Bin of a prompt with no history. 'prior_bin' (paper: the mean over the available history
    is undefined without history, so a prior bin is used) or 'zero_score' (official code: an
    unseen prompt scores 0, i.e. lands in bin 0)."""
    prior_bin: int | None = None
    """Bin for unseen prompts under 'prior_bin'; None = B // 2 (the bin holding 0.5, the
    uninformed prior's mean). The paper does not say."""

    def validate(self) -> None:
        if isinstance(self.n_bins, bool) or int(self.n_bins) != self.n_bins or self.n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {self.n_bins!r}")
        if self.window is not None and (int(self.window) != self.window or self.window < 1):
            raise ValueError(f"window must be an integer >= 1 or None, got {self.window!r}")
        if not 0.0 <= float(self.hysteresis) < 1.0:
            raise ValueError(f"hysteresis must be in [0, 1), got {self.hysteresis!r}")
        if self.unseen not in UNSEEN_POLICIES:
            raise ValueError(f"unseen must be one of {UNSEEN_POLICIES}, got {self.unseen!r}")
        if self.prior_bin is not None and not 0 <= int(self.prior_bin) < int(self.n_bins):
            raise ValueError(f"prior_bin must be in [0, n_bins-1={int(self.n_bins) - 1}], got {self.prior_bin!r}")


def any_correct(counts: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """c(x) per prompt from the flat reward layout np.repeat(ids, counts); success = reward > 0."""
    return successes_per_prompt(np.asarray(counts, dtype=np.int64), np.asarray(rewards)) > 0


class DifficultyClassifier:
    """Per-prompt moving any-correct rate and its (sticky, optionally hysteretic) bin."""

    def __init__(self, config: DifficultyConfig | None = None, **options: Any) -> None:
        if config is None:
            config = DifficultyConfig(**options)
        elif options:
            raise ValueError("pass either config= or keyword options, not both")
        config.validate()
        self.config = config
        b = int(config.n_bins)
        self.n_bins = b
        self.edges = np.arange(1, b) / b
        # Cumulative mode keeps [hits, visits]; windowed mode keeps the last H indicators.
        self._hist: dict[Hashable, Any] = {}
        self._bin: dict[Hashable, int] = {}

    # ----------------------------------------------------------------- queries
    @property
    def unseen_bin(self) -> int:
        if self.config.unseen == "zero_score":
            return 0
        pb = self.config.prior_bin
        return self.n_bins // 2 if pb is None else int(pb)

    def bin_of_score(self, score: float) -> int:
        """Raw bin of an estimate (no hysteresis); a score on an edge belongs to the upper bin."""
        # Rounding keeps k/m estimates that equal an edge (e.g. 3/10) on the documented side.
        return int(np.searchsorted(self.edges, round(float(score), 12), side="right"))

    def score(self, prompt_id: Hashable) -> float:
        """Moving any-correct rate; NaN for a prompt never observed."""
        h = self._hist.get(prompt_id)
        if h is None:
            return float("nan")
        if self.config.window is None:
            return h[0] / h[1]
        return sum(h) / len(h)

    def scores(self, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        return np.array([self.score(i) for i in prompt_ids], dtype=np.float64)

    def bins(self, prompt_ids: Sequence[Hashable]) -> np.ndarray:
        """Current bin of each id (int64); unseen ids get ``unseen_bin``."""
        unseen = self.unseen_bin
        return np.array([self._bin.get(i, unseen) for i in prompt_ids], dtype=np.int64)

    def __contains__(self, prompt_id: Hashable) -> bool:
        return prompt_id in self._hist

    def __len__(self) -> int:
        return len(self._hist)

    # ----------------------------------------------------------------- learning
    def update(self, prompt_ids: Sequence[Hashable], any_correct: Sequence[bool]) -> None:
        """Record one step's c(x) for each id (ids unique within the call)."""
        ids = list(prompt_ids)
        c = np.asarray(any_correct).reshape(-1)
        if c.shape[0] != len(ids):
            raise ValueError(f"any_correct has {c.shape[0]} entries for {len(ids)} prompt ids")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate prompt id in one update; ids must be unique per step")
        for pid, hit in zip(ids, c.astype(bool).tolist()):
            self._record(pid, int(hit))
            self._bin[pid] = self._next_bin(pid, self.score(pid))

    def _record(self, pid: Hashable, hit: int) -> None:
        h = self._hist.get(pid)
        if self.config.window is None:
            if h is None:
                h = self._hist[pid] = [0, 0]
            h[0] += hit
            h[1] += 1
        else:
            if h is None:
                h = self._hist[pid] = deque(maxlen=int(self.config.window))
            h.append(hit)

    def _next_bin(self, pid: Hashable, score: float) -> int:
        raw = self.bin_of_score(score)
        old = self._bin.get(pid)
        delta = float(self.config.hysteresis)
        # The first labelled visit takes the raw bin under both unseen policies: the unseen bin is
        # a placeholder, not evidence the estimate must overcome.
        if old is None or delta == 0.0 or raw == old:
            return raw
        # Moving up, only boundaries e with score >= e + δ count as crossed; the landing bin is
        # the one above the highest such boundary (= raw bin of score − δ). Symmetric downwards.
        if raw > old:
            return max(old, self.bin_of_score(score - delta))
        return min(old, self.bin_of_score(score + delta))

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        # Lists of (id, ...) pairs, not dicts: ids may be ints and JSON would stringify keys.
        return {
            "config": dataclasses.asdict(self.config),
            "history": [(pid, list(h)) for pid, h in self._hist.items()],
            "bin": [(pid, b) for pid, b in self._bin.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if dict(state["config"]) != dataclasses.asdict(self.config):
            raise ValueError("classifier state was saved under a different DifficultyConfig")
        self._hist = {}
        for pid, h in state["history"]:
            pid = _hashable(pid)
            self._hist[pid] = list(h) if self.config.window is None else deque(h, maxlen=int(self.config.window))
        self._bin = {_hashable(pid): int(b) for pid, b in state["bin"]}


def _hashable(pid: Any) -> Hashable:
    # A JSON round trip turns tuple ids into lists.
    return tuple(pid) if isinstance(pid, list) else pid


def classifier_config_from(config: Any) -> DifficultyConfig:
    """The DifficultyConfig fields of an allocator config that inherits from DifficultyConfig."""
    return DifficultyConfig(**{f.name: getattr(config, f.name) for f in dataclasses.fields(DifficultyConfig)})

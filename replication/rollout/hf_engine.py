"""Rollouts with any transformers causal LM: own KV-cached sampling loop, variable counts.

    engine = HFRolloutEngine(model, tokenizer)
    batch = engine.generate(ids, texts, answers, counts, SamplingConfig(max_new_tokens=8),
                            generator=torch.Generator().manual_seed(0))

Layout of the returned ``RolloutBatch`` (N = counts.sum() rows, P prompt columns, T completion
columns): prompts left-padded to P, completions right-padded to T; ``attention_mask`` is 1 on
real prompt tokens and on completion tokens up to and including EOS; ``completion_mask`` is the
completion part of it; ``old_logprobs`` holds log softmax(z / T)[token] on completion tokens
(see ``sampling`` for why the untruncated distribution), 0 elsewhere. Position ids follow
transformers' ``generate`` for left padding, ``cumsum(attention_mask) - 1``; ``rl.logprobs``
recomputes with the same positions, which the tests check token by token.

Why an own loop rather than ``model.generate``: per-row log-probs come for free, seeding is one
``torch.Generator`` (uniforms drawn on its device, so results do not depend on global RNG
state), and the loop is ~40 lines a reader can check. Rows are processed in chunks of at most
``max_rows_per_chunk`` to bound the KV cache; a finished row keeps being fed a pad token with
attention 0 (cheaper than compacting the cache on CPU at these sizes).
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import torch

from replication.rollout.base import RolloutBatch, SamplingConfig, validate_counts
from replication.rollout.sampling import draw, truncate_logits, validate_sampling


class HFRolloutEngine:
    """``RolloutEngine`` over a transformers ``*ForCausalLM`` that shares the trainer's weights."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        max_rows_per_chunk: int = 1024,
        add_special_tokens: bool = True,
        eos_token_ids: Iterable[int] | None = None,
        seed: int = 0,
        default_max_new_tokens: int = 16,
    ) -> None:
        """
        Args:
            max_rows_per_chunk: rows decoded together (bounds KV-cache memory).
            add_special_tokens: passed to the tokenizer (True: the tiny tokenizer adds <bos>;
                False for texts already rendered by a chat template).
            eos_token_ids: ids that end a completion; default = tokenizer EOS plus the model's
                generation_config EOS ids (Qwen chat models end on <|im_end|> or <|endoftext|>).
            seed: seed of the engine's own generator, used when ``generate`` gets none.
            default_max_new_tokens: read by the evaluator when its config sets no length.
        """
        if max_rows_per_chunk < 1:
            raise ValueError("max_rows_per_chunk must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.max_rows_per_chunk = int(max_rows_per_chunk)
        self.add_special_tokens = add_special_tokens
        self.default_max_new_tokens = default_max_new_tokens
        self.eos_token_ids = sorted(set(eos_token_ids) if eos_token_ids is not None else _default_eos(model, tokenizer))
        if not self.eos_token_ids:
            raise ValueError("no EOS token id: pass eos_token_ids")
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        self._generator = torch.Generator().manual_seed(seed)
        self._cache_kw = _cache_keyword(model)
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    def sync_weights(self, model: torch.nn.Module) -> None:
        """The engine holds a reference to the trainer's model: just (re)point to it."""
        self.model = model
        self._cache_kw = _cache_keyword(model)
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self,
        prompt_ids: Sequence[Hashable],
        prompts: Sequence[str],
        answers: Sequence[str],
        counts: np.ndarray,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        seeds: np.ndarray | None = None,
        logprobs: bool = True,
    ) -> RolloutBatch:
        """``seeds`` (optional, one per prompt): sample j of prompt q draws its uniforms from its
        own generator seeded ``seeds[q] + j`` (vLLM's per-request convention), so a group's
        samples do not depend on the other prompts of the call — what multi-process training
        needs (train/distributed.py). Without it every draw comes from ``generator``.
        ``logprobs``: read by engines with a separate log-prob pass; here the log-probs come with
        each draw's softmax at no extra pass, so False changes nothing (the same samples)."""
        if not (len(prompt_ids) == len(prompts) == len(answers)):
            raise ValueError(f"{len(prompt_ids)} ids, {len(prompts)} prompts, {len(answers)} answers")
        counts = validate_counts(counts, len(prompt_ids))
        validate_sampling(sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens)
        gen = generator if generator is not None else self._generator
        prompt_tok, prompt_mask = self._encode_prompts(prompts)
        rows = np.repeat(np.arange(len(prompts)), counts)  # row r belongs to prompt rows[r]
        uniforms = None if seeds is None else row_uniforms(seeds, counts, sampling.max_new_tokens)

        was_training = self.model.training
        self.model.eval()
        try:
            chunks = []
            # no_grad, not inference_mode: the batch's tensors must be usable in the loss's autograd.
            with torch.no_grad():
                for lo in range(0, len(rows), self.max_rows_per_chunk):
                    uniq, inverse = np.unique(rows[lo : lo + self.max_rows_per_chunk], return_inverse=True)
                    sel = torch.as_tensor(uniq, device=self.device)
                    inv = torch.as_tensor(inverse.reshape(-1), device=self.device)
                    u = None if uniforms is None else uniforms[lo : lo + self.max_rows_per_chunk]
                    chunks.append(self._sample(prompt_tok[sel], prompt_mask[sel], inv, sampling, gen, u))
        finally:
            self.model.train(was_training)

        width = max(c[0].shape[1] for c in chunks)
        tokens = torch.cat([_pad_right(c[0], width, self.pad_token_id) for c in chunks])
        done_mask = torch.cat([_pad_right(c[1], width, 0) for c in chunks])
        logps = torch.cat([_pad_right(c[2], width, 0.0) for c in chunks])
        row_prompt_tok = prompt_tok[torch.as_tensor(rows, device=prompt_tok.device)]
        row_prompt_mask = prompt_mask[torch.as_tensor(rows, device=prompt_mask.device)]
        return RolloutBatch.build(
            prompt_ids,
            answers,
            counts,
            input_ids=torch.cat([row_prompt_tok, tokens], dim=1),
            attention_mask=torch.cat([row_prompt_mask, done_mask], dim=1),
            completion_mask=torch.cat([torch.zeros_like(row_prompt_mask), done_mask], dim=1),
            old_logprobs=torch.cat([torch.zeros(row_prompt_mask.shape, dtype=logps.dtype, device=logps.device), logps], dim=1),
            completions=self._decode(tokens, done_mask),
        )

    # ------------------------------------------------------------------ internals
    def _encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each unique prompt once, left-padded to the longest: [Q, P] ids and mask."""
        encoded = self.tokenizer(list(prompts), add_special_tokens=self.add_special_tokens)["input_ids"]
        if any(len(e) == 0 for e in encoded):
            raise ValueError("a prompt encodes to zero tokens")
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, width - len(e) :] = torch.as_tensor(e)
            mask[i, width - len(e) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _sample(
        self, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor, s: SamplingConfig, gen: torch.Generator,
        uniforms: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode one chunk: ([n, t] tokens, [n, t] completion mask, [n, t] old log-probs).

        ``ids``/``mask`` are the chunk's distinct prompts; row r continues prompt ``rows[r]``.
        Each prompt is prefilled once and its KV cache copied to its rows (the prefill is about
        half the compute of short rollouts at n = 8 rows per prompt).
        """
        n = rows.shape[0]
        eos = torch.as_tensor(self.eos_token_ids, device=ids.device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        # Only the last position's logits are needed (matters for 150k-token vocabularies).
        keep = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
        cache = _returned_cache(out)
        cache.batch_select_indices(rows)
        logits = out.logits[:, -1, :][rows]
        mask, step_pos = mask[rows], positions[rows, -1:]
        finished = torch.zeros(n, dtype=torch.bool, device=ids.device)
        out_tok, out_mask, out_lp = [], [], []
        for step in range(s.max_new_tokens):
            if step:
                out = self.model(
                    input_ids=tok[:, None], attention_mask=mask, position_ids=step_pos, use_cache=True,
                    **{self._cache_kw: cache},
                )
                cache, logits = _returned_cache(out), out.logits[:, -1, :]
            scaled = logits.float() / s.temperature
            logp_full = torch.log_softmax(scaled, dim=-1)
            probs = torch.softmax(truncate_logits(scaled, s.top_p, s.top_k), dim=-1)
            tok = draw(probs, gen, None if uniforms is None else uniforms[:, step : step + 1])
            alive = ~finished
            lp = logp_full.gather(-1, tok[:, None]).squeeze(-1)
            tok = torch.where(alive, tok, torch.full_like(tok, self.pad_token_id))
            out_tok.append(tok)
            out_mask.append(alive.long())
            out_lp.append(torch.where(alive, lp, torch.zeros_like(lp)))
            finished = finished | torch.isin(tok, eos)  # the EOS token itself stays in the mask
            if bool(finished.all()):
                break
            mask = torch.cat([mask, alive.long()[:, None]], dim=1)
            step_pos = step_pos + 1
        return torch.stack(out_tok, 1), torch.stack(out_mask, 1), torch.stack(out_lp, 1)

    def _decode(self, tokens: torch.Tensor, mask: torch.Tensor) -> list[str]:
        eos = set(self.eos_token_ids)
        texts = []
        for row, m in zip(tokens.tolist(), mask.tolist()):
            kept = [t for t, keep in zip(row, m) if keep and t not in eos]
            texts.append(self.tokenizer.decode(kept, skip_special_tokens=True))
        return texts


def row_uniforms(seeds: np.ndarray, counts: np.ndarray, steps: int) -> torch.Tensor:
    """[N, steps] float64 uniforms; row j of prompt q from a generator seeded seeds[q] + j."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if len(seeds) != len(counts):
        raise ValueError(f"{len(seeds)} seeds for {len(counts)} prompts")
    out = torch.empty(int(np.sum(counts)), steps, dtype=torch.float64)
    r, g = 0, torch.Generator()
    for base, c in zip(seeds.tolist(), np.asarray(counts).tolist()):
        for j in range(int(c)):
            out[r] = torch.rand(steps, generator=g.manual_seed(base + j), dtype=torch.float64)
            r += 1
    return out


def _default_eos(model: torch.nn.Module, tokenizer) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    return ids


def _cache_keyword(model: torch.nn.Module) -> str:
    # transformers >= 5.2x names the KV-cache argument ``cache``; earlier versions ``past_key_values``.
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _returned_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _pad_right(x: torch.Tensor, width: int, value) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=1)


def build_from_config(cfg, model: torch.nn.Module, tokenizer, add_special_tokens: bool,
                      placement) -> HFRolloutEngine:
    """The registry's builder (replication/engines.py): the engine shares the rank's model, so
    the placement needs nothing here."""
    return HFRolloutEngine(model, tokenizer, add_special_tokens=add_special_tokens, seed=cfg.seed,
                           default_max_new_tokens=cfg.rollout.sampling.max_new_tokens)

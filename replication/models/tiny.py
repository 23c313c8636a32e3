"""A tiny causal LM of a standard HF architecture, built from a config (no download).

Llama (or Qwen2) from config with 2 layers, hidden 128, 4 heads, MLP 384 and tied embeddings is
~0.43M parameters on the 22-symbol character vocabulary: ~4-5k short rollouts/s on 2 CPU threads.
A 4 x 192 model (1.8M) was 3-4x slower and worse after equal wall-clock
(docs/papers/measurements.md).
Because it is a stock architecture, everything downstream (save/load, KV cache, the rollout
engine, the RL loss) is the code path a Qwen2.5-Math checkpoint takes at paper scale.
"""

from __future__ import annotations

import dataclasses

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

_ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}


@dataclasses.dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the embedded tiny policy."""

    arch: str = "llama"
    """HF architecture: "llama" (LlamaForCausalLM) or "qwen2" (Qwen2ForCausalLM)."""
    layers: int = 2
    """Decoder layers."""
    hidden: int = 128
    """Residual width."""
    heads: int = 4
    """Attention heads (key/value heads = heads: plain multi-head attention)."""
    mlp: int = 384
    """SwiGLU inner width."""
    max_positions: int = 64
    """Longest prompt + completion in tokens (RoPE needs no learned table; this is metadata)."""
    tie_embeddings: bool = True
    """Share input and output embeddings (halves the vocabulary parameters)."""
    init_seed: int = 0
    """Seed of the weight initialisation."""

    def __post_init__(self) -> None:
        if self.arch not in _ARCHS:
            raise ValueError(f"model.arch = {self.arch!r}: choose one of {sorted(_ARCHS)}")
        if self.hidden % self.heads:
            raise ValueError(f"model.hidden = {self.hidden} must be divisible by model.heads = {self.heads}")
        for name in ("layers", "hidden", "heads", "mlp", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1")


def build_tiny_model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A freshly initialised tiny causal LM whose special-token ids match ``tokenizer``."""
    config_cls, model_cls = _ARCHS[cfg.arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden,
        intermediate_size=cfg.mlp,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # The RNG fork keeps initialisation from disturbing (or depending on) the caller's global seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = model_cls(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (tied tensors counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())

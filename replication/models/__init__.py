"""Policies: the embedded tiny model and its character tokenizer; loading any HF folder.

``load_policy(folder)`` is the one entry point for every model (tiny, SFT checkpoint,
Qwen2.5-Math); ``PromptFormatter`` says how a task prompt becomes that model's input text.
"""

from replication.models.formatting import ChatFormatter, PromptFormatter, RawFormatter, format_prompts, make_formatter
from replication.models.loading import load_policy, resolve_dtype, save_policy
from replication.models.tiny import TinyModelConfig, build_tiny_model, count_parameters
from replication.models.tokenizer import ALPHABET, build_char_tokenizer

__all__ = [
    "ALPHABET",
    "ChatFormatter",
    "PromptFormatter",
    "RawFormatter",
    "TinyModelConfig",
    "build_char_tokenizer",
    "build_tiny_model",
    "count_parameters",
    "format_prompts",
    "load_policy",
    "make_formatter",
    "resolve_dtype",
    "save_policy",
]

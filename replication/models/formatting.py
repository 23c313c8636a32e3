"""How a task prompt becomes model input text: raw for the tiny model, a chat template otherwise.

The rollout engine only sees strings; the formatter is where a model family's conventions live.
``add_special_tokens`` tells the engine whether the tokenizer should add its own special tokens
(the tiny tokenizer prepends ``<bos>``; a chat template already contains everything it needs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from replication.registry import Registry

FORMATTERS: Registry[type] = Registry("prompt formatter")
"""Name → formatter class (``task.options.formatter``); a class with a ``tokenizer`` field is
built with the model's tokenizer."""


class PromptFormatter(Protocol):
    add_special_tokens: bool
    """Passed to the tokenizer when the formatted text is encoded."""

    def __call__(self, prompt: Any) -> str:
        """Model input text for a ``tasks.Prompt`` (or a plain string)."""
        ...


@FORMATTERS.register("raw")
@dataclasses.dataclass(frozen=True)
class RawFormatter:
    """The compact task text as is ("42-25="): what the tiny model is trained on."""

    add_special_tokens: bool = True

    def __call__(self, prompt: Any) -> str:
        return prompt if isinstance(prompt, str) else prompt.text


@FORMATTERS.register("chat")
@dataclasses.dataclass(frozen=True)
class ChatFormatter:
    """The natural-language question in the tokenizer's chat template, generation prompt open."""

    tokenizer: Any
    system: str | None = None
    """Optional system message (e.g. Qwen2.5-Math's "put your final answer within \\boxed{}")."""
    add_special_tokens: bool = False

    def __call__(self, prompt: Any) -> str:
        question = prompt if isinstance(prompt, str) else prompt.question
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": question}
        ]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def make_formatter(name: str, tokenizer: Any = None, **options: Any) -> PromptFormatter:
    """A registered formatter: ``"raw"`` or ``"chat"`` (needs the tokenizer)."""
    cls = FORMATTERS.get(name)
    if "tokenizer" in {f.name for f in dataclasses.fields(cls)}:
        if tokenizer is None:
            raise ValueError(f"the {name} formatter needs the model's tokenizer")
        return cls(tokenizer, **options)
    return cls(**options)


def format_prompts(formatter: PromptFormatter, prompts: Sequence[Any]) -> list[str]:
    return [formatter(p) for p in prompts]

"""A character-level tokenizer for the arithmetic alphabet, as a standard HF tokenizer folder.

Built with the ``tokenizers`` library (one WordLevel entry per character, a regex pre-tokenizer
that isolates every character, a Fuse decoder so decoding does not insert spaces) and wrapped in
``PreTrainedTokenizerFast``: ``save_pretrained`` writes tokenizer.json + tokenizer_config.json
and ``AutoTokenizer.from_pretrained(folder)`` loads it back without any code from this repo —
the same call that loads Qwen2.5-Math's tokenizer at paper scale.

Encoding prepends ``<bos>`` (a post-processor), so a prompt's first real token always has
a fixed left context; the model ends an answer with ``<eos>``; ``<pad>`` is never attended.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
"""Ids 0..3, in this order (pad = 0 keeps padded embedding rows harmless to inspect)."""
ALPHABET = "0123456789+-*=() ."
"""Every character the procedural tasks use, plus a few spares (parentheses, space, point) so
later task variants do not need a new vocabulary."""


def char_vocab(alphabet: str = ALPHABET) -> dict[str, int]:
    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters")
    return {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *alphabet])}


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A fast HF tokenizer: one id per character, ``<bos>`` prepended, unknown chars -> ``<unk>``."""
    vocab = char_vocab(alphabet)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # [\s\S] (any character, newline included) makes every character its own pre-token.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",  # generation pads on the left; engines pad themselves anyway
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    return tok

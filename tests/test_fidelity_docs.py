"""Every option named in the fidelity pages exists and accepts the value given (issue 9.4).

Convention (docs/fidelity.md): an option is written `option: KEY=VALUE`, VALUE in YAML.
- ``allocator[NAME].options.FIELD=VALUE``: the registered allocator NAME built with FIELD=VALUE;
- ``rl.prompt_weights_options.FIELD=VALUE``: PromptGDRO(FIELD=VALUE);
- ``rl.modulation_options.FIELD=VALUE``: DynaMOConfig(FIELD=VALUE);
- any other dotted key: a TrainConfig key, loaded over the default profile (validated).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "docs" / "fidelity.md", *sorted((ROOT / "docs" / "fidelity").glob("*.md"))]
OPTION = re.compile(r"`option: ([A-Za-z0-9_.\[\]-]+)=([^`]+)`")
ALLOC = re.compile(r"^allocator\[([a-z0-9-]+)\]\.options\.([a-z_]+)$")


def _options() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        for key, value in OPTION.findall(page.read_text()):
            found.append((page.name, key, value))
    return found


def test_pages_name_options_in_the_parseable_form():
    names = {p for p, _, _ in _options()}
    assert {"dynamo_allocation.md", "gdro.md", "rl.md", "vip.md"} <= names
    assert len(_options()) >= 30


@pytest.mark.parametrize("page,key,value", _options())
def test_every_named_option_is_a_real_key_with_a_valid_value(page, key, value):
    v = yaml.safe_load(value)
    m = ALLOC.match(key)
    if m:
        from replication.allocation import PromptPool, available_allocators, make_allocator

        name, field = m.groups()
        assert name in available_allocators(), f"{page}: unknown allocator {name!r}"
        extra = {}
        if name.startswith("vip"):
            extra["pool"] = PromptPool(ids=("a", "b", "c"), texts=("1+1", "2+2", "3*3"),
                                       embeddings=np.eye(3, 4, dtype=np.float32))
        make_allocator(name, **{field: v}, **extra)  # unknown field or bad value raises
        return
    if key.startswith("rl.prompt_weights_options."):
        from replication.allocation.prompt_gdro import PromptGDRO

        PromptGDRO(**{key.rsplit(".", 1)[1]: v})
        return
    if key.startswith("rl.modulation_options."):
        from replication.rl.modulation import DynaMOConfig

        DynaMOConfig(**{key.rsplit(".", 1)[1]: v})
        return
    from replication.config import load_profile

    cfg = load_profile("default", {key: v})
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    assert obj == v, f"{page}: {key} did not take the value {value!r}"

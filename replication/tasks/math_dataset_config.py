"""What a hub math dataset is (``MathDatasetSpec``: where it lives, how its rows map to the schema)
and how one load is asked for (``MathDatasetConfig``: template, local path, hub overrides)."""

from __future__ import annotations

import dataclasses

from replication.tasks.math_rows import RowAdapter


@dataclasses.dataclass(frozen=True)
class MathDatasetSpec:
    """Where a dataset lives on the hub and how its rows map to the schema."""

    name: str
    hub_id: str
    config: str | None
    split: str
    adapter: RowAdapter
    dedupe: bool = False
    """Keep the first row of each distinct question (VIP deduplicated DAPO-Math-17k this way)."""
    default_template: str = "boxed"
    note: str = ""


@dataclasses.dataclass(frozen=True)
class MathDatasetConfig:
    """Which dataset, which prompt template, and where to read it from."""

    name: str
    """Registry name: dapo17k, dapo17k_en, math500, aime24, aime24_dapo, aime25, amc23, minerva,
    olympiadbench, gpqa_diamond."""
    template: str | None = None
    """Prompt template (``TEMPLATES``); None = the dataset's default (VIP: vip_4shot; GDRO: boxed;
    DynaMO: dapo for training)."""
    path: str | None = None
    """Local file or folder that replaces the hub download (the offline override)."""
    hub_id: str | None = None
    """Another hub id with the same columns (e.g. a mirror)."""
    hub_config: str | None = None
    """Hub config name override (DAPO-Math-17k-Processed: en / cn / all)."""
    split: str | None = None
    """Split override (default: the spec's split)."""
    revision: str | None = None
    """Hub revision (commit sha) to pin."""
    limit: int | None = None
    """Keep only the first ``limit`` problems (after dedupe)."""
    seed: int = 0
    """Seed of the GPQA option shuffle."""
    probe_timeout_s: float = 3.0
    """Seconds to wait for the hub endpoint before declaring the machine offline."""

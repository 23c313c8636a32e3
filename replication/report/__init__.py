"""Reporting: run loading, seed statistics, tables, paper data, plots, the allocation lab.

Data flows one way: exported runs (orchestration.grid.run_grid) → runs.py frames → stats/tables/plots/
diagnostics → conclusions. Heavy modules (lab, predictor_study: allocators, GP) are imported
from their own files, not here, so ``import replication.report`` stays light.
"""

from replication.report.paper_tables import (
    format_paper_vs_ours,
    load_paper_table,
    overhead_vs_paper,
    paper_changes,
    paper_vs_ours,
)
from replication.report.runs import list_runs, load_config, load_eval, load_prompts, load_steps
from replication.report.stats import Comparison, MeanCI, compare, describe, format_mean_ci, mean_ci
from replication.report.tables import arm_summary, arm_table, compare_to_baseline, to_markdown, write_tables

__all__ = [
    "Comparison",
    "MeanCI",
    "arm_summary",
    "arm_table",
    "compare",
    "compare_to_baseline",
    "describe",
    "format_mean_ci",
    "format_paper_vs_ours",
    "list_runs",
    "load_config",
    "load_eval",
    "load_paper_table",
    "load_prompts",
    "load_steps",
    "mean_ci",
    "overhead_vs_paper",
    "paper_changes",
    "paper_vs_ours",
    "to_markdown",
    "write_tables",
]

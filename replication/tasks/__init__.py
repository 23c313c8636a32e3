"""Prompt pools with verifiable answers.

Embedded default: procedural arithmetic from reasoning-gym (``procedural``), split into a train
pool and held-out sets (``pools``), scored 0/1 by the package's own scorer (``verify``).
"""

from replication.tasks.pools import DEFAULT_TRAIN_SIZES, LevelInfo, TaskMixSpec, TaskPool, TaskSuite, build_tasks
from replication.tasks.procedural import LEVELS, Level, Prompt, generate_level, get_level
from replication.tasks.verify import is_correct, score, score_batch

__all__ = [
    "DEFAULT_TRAIN_SIZES",
    "LEVELS",
    "Level",
    "LevelInfo",
    "Prompt",
    "TaskMixSpec",
    "TaskPool",
    "TaskSuite",
    "build_tasks",
    "generate_level",
    "get_level",
    "is_correct",
    "score",
    "score_batch",
]

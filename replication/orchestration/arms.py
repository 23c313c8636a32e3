"""The arms and seeds a paper section names: moved to ``replication.arms`` (report/ reads them
without reaching the orchestration package); re-exported here for the grid and the notebooks."""

from replication.arms import *  # noqa: F401,F403
from replication.arms import GRADVAR_DRAWS, QUICK_PROFILE, Arm, _slug, check_seeds, gradvar_settings, select_arms  # noqa: F401

"""Training orchestration: the grid of (arm × seed) runs and the content-addressed run cache.

``grid`` reads a paper's section of params.yaml (arms, seeds, steps), trains what is missing
(each run is the real CLI in a subprocess) and hands the exported runs to ``replication.report``,
which only reads results. ``run_cache`` keys, trains, caches and exports single runs.
"""

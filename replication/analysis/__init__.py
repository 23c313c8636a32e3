"""Measurements on the real model that the training runs do not log (issue 10).

- ``gradient_variance``: the policy-gradient vector's variance under each allocator at the same
  rollout budget, at checkpoints of a uniform run (``python -m replication grad-variance``); its
  parts (settings, gradient, draws, statistics, replay, checkpoints, cache) are the sibling
  modules it re-exports.
"""

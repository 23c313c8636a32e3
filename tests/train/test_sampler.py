import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.train.sampler import EpochSampler


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), size=st.integers(1, 40), steps=st.integers(1, 12), seed=st.integers(0, 5))
def test_batches_unique_deterministic_and_resumable(n, size, steps, seed):
    size = min(size, n)
    a, b = EpochSampler(n, seed), EpochSampler(n, seed)
    seen = []
    for i in range(steps):
        batch = a.next_batch(size)
        assert len(set(batch.tolist())) == size  # prompt ids unique within a step
        assert np.array_equal(batch, b.next_batch(size))
        seen.append(batch)
        if i == steps // 2:
            c = EpochSampler(n, seed)
            c.load_state_dict(a.state_dict())
            b = c
    # Every prompt is visited within the first ceil(n/size)+1 batches (epoch coverage).
    first = np.concatenate(seen[: -(-n // size)]) if len(seen) >= -(-n // size) else None
    if first is not None:
        assert len(set(first.tolist())) >= min(n, len(first)) - size

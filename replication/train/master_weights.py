"""AdamW with float32 master weights for low-precision parameters (``optim.master_weights``).

    optimizer = MasterWeightAdamW(model.parameters(), lr=1e-6, weight_decay=0.1)

Why: a bfloat16 weight has 8 bits of mantissa, so an update smaller than about 2^-9 of the
weight rounds away. At the papers' learning rate (1e-6) AdamW's step is about lr per weight:
for a weight of magnitude 0.02 that is 1/20000 of it, far below bf16's spacing, and plain AdamW
over bf16 parameters leaves almost every weight where it was (tests/train/test_master_weights.py
measures it). The papers train with verl, whose FSDP workers keep the parameters and optimizer
state in float32 and cast to bf16 only for the forward and backward passes (mixed precision).
This optimizer does the same for the parameters it steps:

- each bfloat16/float16 parameter's optimizer state holds a float32 copy of it (``master``) and
  float32 moments (``exp_avg``, ``exp_avg_sq``); the copy is taken from the parameter on its first
  step;
- a step lets ``torch.optim.AdamW`` step the float32 parameters as usual (they are untouched by
  this module: a float32 policy steps bit for bit as before), then steps the copies with the
  gradient cast to float32, by a scratch AdamW whose groups carry this optimizer's
  hyperparameters (the scheduler's current lr included) and whose per-copy state is this
  optimizer's per-parameter state, and rounds each copy into its parameter. Under FSDP the
  parameter, its gradient and its copy are DTensor shards with the same placement, and the
  rounding is a DTensor copy into FSDP's own shard (the parameter's storage is never swapped:
  a DTensor keeps its local tensor and spec outside ``.data``);
- the state dict holds the copies, so a checkpoint resumes exactly; ``load_state_dict`` keeps the
  float32 state float32 (torch's own load casts every floating state tensor to its parameter's
  dtype, which would round the copies to bf16).

The training state is then 16 bytes per bf16 parameter (bf16 weight and gradient, float32 copy
and two moments: 2 + 2 + 4 + 4 + 4), the figure the memory rule counts (launch/memory.py).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)
"""Parameter dtypes stepped through a float32 copy."""

MASTER = "master"
"""The state key of a parameter's float32 copy."""

_ADAMW_ARGS = frozenset(inspect.signature(torch.optim.AdamW.__init__).parameters) - {"self", "params"}
"""The hyperparameters ``torch.optim.AdamW`` accepts (a group also carries e.g. ``initial_lr``)."""


def _low(p: torch.Tensor) -> bool:
    return p.dtype in LOW_PRECISION


class MasterWeightAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose bf16/fp16 parameters are stepped through float32 copies (module
    docstring); float32 parameters are stepped exactly as by ``torch.optim.AdamW``."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # The float32 parameters: torch's step, with the low-precision gradients hidden from it.
        hidden = [p for g in self.param_groups for p in g["params"] if p.grad is not None and _low(p)]
        grads = [p.grad for p in hidden]
        for p in hidden:
            p.grad = None
        try:
            super().step()
        finally:
            for p, grad in zip(hidden, grads):
                p.grad = grad
        # The low-precision parameters: their float32 copies, group by group.
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None and _low(p)]
            if params:
                self._step_copies(group, params)
        return loss

    def _step_copies(self, group: dict, params: list[torch.Tensor]) -> None:
        copies, states = [], []
        for p in params:
            state = self.state[p]
            copy = state.get(MASTER)
            if copy is None:
                copy = p.detach().to(torch.float32)
            copy.grad = p.grad.detach().to(torch.float32)
            copies.append(copy)
            states.append({k: v for k, v in state.items() if k != MASTER})
        scratch = torch.optim.AdamW(copies, **{k: v for k, v in group.items() if k in _ADAMW_ARGS})
        for copy, state in zip(copies, states):
            scratch.state[copy] = state
        scratch.step()
        for p, copy in zip(params, copies):
            self.state[p].update(scratch.state[copy])
            self.state[p][MASTER] = copy
            copy.grad = None
            p.copy_(copy)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        saved = state_dict["state"]
        for saved_group, group in zip(state_dict["param_groups"], self.param_groups):
            for key, p in zip(saved_group["params"], group["params"]):
                if not _low(p) or key not in saved:
                    continue
                for name, value in saved[key].items():
                    if name != "step" and torch.is_tensor(value) and value.is_floating_point():
                        self.state[p][name] = value.to(device=p.device, dtype=torch.float32, copy=True)

"""``model.dtype_without_bf16``: the dtype a CPU profile trains in where the CPU has no bf16
vector instructions.

    cfg = resolve_cpu_dtype(cfg)   # in load_profile, before validation and before any key

torch computes bfloat16 matrix products with native instructions only where the CPU has them
(x86: AVX512-BF16 or AMX-BF16; Arm: the BF16 extension). Elsewhere (an AVX2 machine) it converts
to float32 and back around every kernel: the rehearsals' bf16 update passes, 0.59 of float32's
time on an AVX512-BF16 CPU, took several times float32's on an AVX2 one (docs/rehearsal.md,
"The dtype"; ``benchmarks/bench_cpu_dtype.py`` measures a machine). A profile that trains in
bfloat16 on the CPU for fidelity (the rehearsals: the paper's dtype) can name a dtype for such
CPUs; the configuration then holds the dtype the run really trains in, so the run's key, its
``config.json`` and every reader see that dtype, never a wish. The machine that resolves the
profile is the machine that trains it (the local launcher; under SLURM the job resolves it again
on its node, and a run whose node differs from the planning machine's fails its key check at
export rather than pass under the wrong dtype).
"""

from __future__ import annotations

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of native bf16 arithmetic (x86 ``flags``, Arm ``Features``)."""


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU lists a native bf16 instruction set (False where /proc/cpuinfo is absent)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return bool(BF16_FLAGS & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return False


def resolve_cpu_dtype(cfg, has_bf16: bool | None = None):
    """``cfg`` with ``model.dtype`` replaced by ``model.dtype_without_bf16`` when it is set, the
    policy trains in bfloat16 on the CPU, and the CPU has no native bf16 (``has_bf16`` None: this
    machine's, ``cpu_has_bf16``). In place; returns cfg."""
    m = cfg.model
    if m.dtype_without_bf16 and m.dtype == "bfloat16" and m.device == "cpu":
        if not (cpu_has_bf16() if has_bf16 is None else has_bf16):
            m.dtype = m.dtype_without_bf16
    return cfg

"""What one training pass over the FSDP-sharded policy costs on CPU, against the same pass replicated
(docs/rehearsal.md, "Micro-batches"): why the rehearsal profiles run 4 rows a pass.

Under FSDP2 every forward pass all-gathers each decoder layer's weights, the backward pass gathers
them again and reduce-scatters the gradient: over gloo on a CPU that is a fixed cost per pass,
paid once per micro-batch (``rl.micro_batch_rows`` rows). A replicated policy's pass runs no
collective (DDP all-reduces once per mini-batch, under ``no_sync`` before). This times, in 2
processes of one thread each (a rehearsal's ranks), one forward and backward pass over ``rows``
rows of ``--tokens`` tokens (the loss a mean of the last positions' log-probabilities), for each
``--rows`` value, sharded (``train/fsdp.py shard_policy``) and replicated; rank 0 prints the
median over ``--repeats`` after one warm-up, per pass and per row.

    python benchmarks/bench_fsdp_pass.py --json benchmarks/records/fsdp-pass/2026-12-07-avx2.json

The policy is SmolLM2-135M-Instruct (``.cache/smollm2-135m-instruct``, the rehearsals' policy;
``--model`` another HF folder) in ``--dtype`` (default: the rehearsals' dtype on this CPU, bfloat16
where it has native bf16 instructions, else float32: ``config/cpu_dtype.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".cache" / "smollm2-135m-instruct"
LAYOUTS = ("replicated", "fsdp")


def _time_passes(model, tokens: int, rows_list: list[int], repeats: int, vocab: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    out = {}
    for rows in rows_list:
        ids = torch.randint(0, vocab, (rows, tokens), generator=g)

        def one_pass() -> None:
            model.zero_grad(set_to_none=True)
            logits = model(input_ids=ids).logits[:, -min(32, tokens):].float()
            torch.log_softmax(logits, -1).mean().backward()

        one_pass()  # warm-up: first-call allocations (and FSDP's lazy init)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            one_pass()
            times.append(time.perf_counter() - t0)
        out[str(rows)] = {"seconds": times, "median": statistics.median(times)}
    return out


def _rank(args: argparse.Namespace) -> None:
    """One of the 2 ranks (under torchrun): both layouts, rank 0 writes the record."""
    import torch
    from transformers import AutoModelForCausalLM

    from replication.train.distributed import World
    from replication.train.fsdp import shard_policy

    torch.set_num_threads(1)
    world = World.from_env(sharding="fsdp")
    dtype = getattr(torch, args.dtype)
    timings = {}
    for layout in LAYOUTS:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
        if layout == "fsdp":
            shard_policy(model, world)
        world.barrier()  # both ranks time their passes at once
        timings[layout] = _time_passes(model, args.tokens, args.rows, args.repeats, model.config.vocab_size)
        del model
    if world.is_main:
        from bench_cpu_dtype import cpu_info  # noqa: E402 (the benchmarks folder is on sys.path)

        model = Path(args.model).resolve()
        # a folder of this repository by its relative path (a record names no machine's paths)
        label = model.relative_to(ROOT).as_posix() if model.is_relative_to(ROOT) else str(args.model)
        record = {"args": {"model": label, "dtype": args.dtype, "tokens": args.tokens,
                           "rows": args.rows, "repeats": args.repeats, "processes": world.size},
                  "cpu": cpu_info(), "torch": torch.__version__, "timings": timings}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    world.close()


def table_lines(record: dict) -> list[str]:
    """The printed table of a record (docs/rehearsal.md quotes it; its test compares)."""
    a, cpu, t = record["args"], record["cpu"], record["timings"]
    lines = [f"CPU: {cpu['model']} (bf16 flags: {', '.join(cpu['bf16_flags']) or 'none'}); torch {record['torch']}, "
             f"{a['processes']} processes of 1 thread, {a['dtype']}, rows of {a['tokens']} tokens",
             f"{'rows':>4}{'replicated s':>14}{'fsdp s':>9}{'fsdp - replicated':>19}{'fsdp s/row':>12}"]
    for rows in a["rows"]:
        rep, sh = t["replicated"][str(rows)]["median"], t["fsdp"][str(rows)]["median"]
        lines.append(f"{rows:>4}{rep:>14.2f}{sh:>9.2f}{sh - rep:>19.2f}{sh / rows:>12.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=MODEL, help="HF folder of the policy")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"),
                    help="default: the rehearsals' dtype on this CPU (model.dtype_without_bf16)")
    ap.add_argument("--tokens", type=int, default=90, help="tokens of a row (GDRO's and DynaMO's prompts + 32)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4], help="rows per pass to time")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the record here")
    ap.add_argument("--out", help=argparse.SUPPRESS)  # a rank's record file (set by the launcher)
    args = ap.parse_args(argv)
    if "RANK" in os.environ:
        _rank(args)
        return 0
    if args.tokens < 1 or args.repeats < 1 or min(args.rows) < 1:
        ap.error("--tokens, --rows and --repeats must be >= 1")
    if not (args.model / "config.json").exists():
        ap.error(f"{args.model} is missing: python -m replication prepare-model --profile rehearsal-vip")
    if args.dtype is None:
        from replication.config.cpu_dtype import cpu_has_bf16

        args.dtype = "bfloat16" if cpu_has_bf16() else "float32"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               __file__, "--model", str(args.model), "--dtype", args.dtype, "--tokens", str(args.tokens),
               "--repeats", str(args.repeats), "--out", str(out), "--rows", *map(str, args.rows)]
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(cmd, env=env)
        if done.returncode != 0:
            return done.returncode
        record = json.loads(out.read_text())
    print("\n".join(table_lines(record)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

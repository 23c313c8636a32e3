"""The online RL loop. One step, top to bottom (README.md, opening section; docs/fidelity.md):

    prompt ids (Q) → allocator.plan(ids, C) → counts n_q (Σ = C)
    → rollouts (every per-row field repeated by the same counts) → verifier → rewards
    → group advantages (variable sizes) → × Prompt-GDRO weight → PPO-clip (+ DynaMO modulation)
    → allocator.observe(ids, counts, rewards, per-prompt losses) → logs and per-prompt records

Run it as ``python -m replication train --profile default --allocator vip --seed 0 --out runs/x``.
Same seed ⇒ same numbers; ``--resume`` continues a killed run to the numbers of an
uninterrupted one (everything stateful is in the checkpoint).

Under ``torchrun`` / ``accelerate launch`` every rank runs this same loop: each generates and
backpropagates its share of the step's prompt groups, the rest (plan, advantages, observe) is
computed identically on every rank from gathered data, and rank 0 writes the files
(train/distributed.py states the contract).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from replication.config import TrainConfig, to_dict
from replication.rl import group_advantages
from replication.store import write_atomic
from replication.train.checkpoint import save_checkpoint
from replication.train.components import Components, build_components
from replication.train.distributed import (
    RowShard,
    World,
    check_world,
    engine_group_size,
    generation_share,
    rollout_seeds,
    split_groups,
)
from replication.provenance import run_provenance
from replication.train.rank_faults import stop_on_collective_failure
from replication.train.run_folder import RunFolderError, check_finite, finish_run, prepare_run
from replication.train.phase_timer import PhaseTimer
from replication.train.run_log import RunLog
from replication.train.probe import run_probe  # issue 20.9: the upper-bound arm's probe
from replication.train.update import ppo_update


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    max_steps: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    out = Path(out_dir)
    steps = cfg.steps if max_steps is None else int(max_steps)
    if steps < 1:
        raise ValueError(f"--max-steps must be >= 1, got {steps}")
    # one process unless launched by torchrun/accelerate; model.sharding=fsdp (or accelerate's
    # FSDP config) shards the policy over the ranks, else it is replicated (DDP)
    world = World.from_env(cfg.model.device, cfg.model.sharding)
    if world.fsdp and cfg.model.sharding != "fsdp":  # chosen by accelerate's config: record it
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, sharding="fsdp"))
    # a stopped or dead rank ends the others' wait with one line naming the rank (rank_faults.py)
    with stop_on_collective_failure(world.rank, world.size, world.distributed):
        return _train(cfg, out, steps, world, resume=resume, overwrite=overwrite, progress=progress)


def _train(cfg: TrainConfig, out: Path, steps: int, world: World, *, resume: bool, overwrite: bool,
           progress: bool) -> dict:
    check_world(cfg, world)  # enough prompt groups per rank; engine groups divide the ranks
    # folder rules (run_folder.py): --resume needs a valid checkpoint, --overwrite to replace;
    # rank 0 alone locks and clears the folder (its refusal stops every rank), then every rank
    # reads the same checkpoint
    ckpt = world.on_main(lambda: prepare_run(out, to_dict(cfg), steps, resume=resume, overwrite=overwrite))
    if not world.is_main:
        ckpt = prepare_run(out, to_dict(cfg), steps, resume=resume, overwrite=overwrite, main=False)
    c = build_components(cfg, world)  # validates data, allocator and model before anything is written
    if world.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "config.json", json.dumps(to_dict(cfg), indent=1))  # whole or absent
    if ckpt is None:
        start, wall_before = 0, 0.0
        eval_before = c.evaluator(c.engine_view(), seed=cfg.seed)
        history = {"rollouts_total": 0}
    else:
        if ckpt["components"]["optimizer"] is None and ckpt["step"] < steps:
            raise RunFolderError(f"{out}: its checkpoint is a finished run's last (step {ckpt['step']}, no "
                                 f"optimizer state) and cannot be continued to {steps} steps; train a new run")
        c.load_state(ckpt["components"])
        start, wall_before = ckpt["step"], ckpt["wall_seconds"]
        eval_before, history = ckpt["eval_before"], ckpt["history"]
    log = RunLog(out, resume_step=start - 1 if ckpt is not None else None) if world.is_main else None

    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), initial=start, total=steps, disable=not (progress and world.is_main),
               desc=f"{cfg.allocator.name}/s{cfg.seed}", dynamic_ncols=True)
    for step in bar:
        row, prompt_rows = train_step(cfg, c, step, world)
        history["rollouts_total"] += row["rollouts"]
        if log is not None:
            log.log_step(row, prompt_rows)
        bar.set_postfix(reward=f"{row['reward']:.3f}", zero=f"{row['zero_variance_frac']:.2f}")
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == steps:
            # FSDP gathers the full state on every rank (a collective); rank 0 writes it. The last
            # checkpoint of a run trained to its profile's full length (it covers the final
            # evaluation) holds no optimizer state: nothing is left to train, and AdamW's two
            # moments are 2/3 of a float32 checkpoint. A run stopped early by --max-steps keeps
            # them, so that it can be continued.
            finished = step + 1 == steps >= cfg.steps
            state = c.state(optimizer=not finished) if (world.is_main or world.fsdp) else None
            if world.is_main:
                save_checkpoint(out, {
                    "step": step + 1,
                    "config": to_dict(cfg),
                    "components": state,
                    "eval_before": eval_before,
                    "history": history,
                    "wall_seconds": wall_before + time.perf_counter() - t0,
                })
    bar.close()
    if log is not None:
        log.close()

    eval_after = c.evaluator(c.engine_view(), seed=cfg.seed)
    metrics = {
        "profile": cfg.profile,
        "allocator": cfg.allocator.name,
        "estimator": cfg.rl.estimator,
        "modulation": cfg.rl.modulation,
        "prompt_weights": cfg.rl.prompt_weights,
        "seed": cfg.seed,
        "steps": steps,
        "budget_per_step": cfg.budget,
        "rollouts_total": history["rollouts_total"],
        "eval_before": eval_before,
        "eval_after": eval_after,
        "wall_seconds": wall_before + time.perf_counter() - t0,
        "provenance": run_provenance(cfg, world, c.engine, getattr(c, "model", None)),
    }
    c.save_model(out / "model")  # rank 0 writes (FSDP: every rank joins the gather)
    if world.is_main:  # metrics.json atomically, then the manifest: the run exists (run_folder.py)
        finish_run(out, metrics)
    world.barrier()  # the files exist when any rank returns; before the engine closes, since
    # vLLM's shutdown may tear down the process group it shares with the trainer (torchrun)
    close = getattr(c.engine, "close", None)
    if callable(close):
        close()  # vLLM: shut its EngineCore process down now, not at interpreter exit
    world.close()
    return metrics


def train_step(cfg: TrainConfig, c: Components, step: int, world: World = World()) -> tuple[dict, list[dict]]:
    timer = PhaseTimer()  # allocator = plan + observe (VIP's overhead figure)
    world.clock.take()  # comm_seconds: this step's explicit collectives only
    # 1. prompts and the allocation of the step's fixed budget C = Q·n̄
    epoch = c.sampler.epoch
    idx = c.sampler.next_batch(cfg.rollout.prompts_per_step)
    ids = [c.train.ids[i] for i in idx]
    # issue 20.9: an allocator told p (vip-probe) first gets extra rollouts outside the budget
    # and the loss; only their cost is logged (train/probe.py)
    probe = run_probe(cfg, c, step, idx, world) if getattr(c.allocator, "wants_probe", 0) else None
    with timer("allocator"):
        counts = c.allocator.plan(ids, cfg.budget)
    details = c.allocator.plan_details()

    # 2. rollouts: every per-row field repeated by the same counts (RolloutBatch.build). This
    #    rank generates its run of whole groups (all of them with one process); a group's
    #    samples are seeded by (seed, step, prompt id), whichever rank draws them.
    #    An engine shared by a group of ranks (vLLM TP > 1) gets the group's union and each
    #    rank keeps its own groups.
    s = cfg.rollout.sampling
    parts = split_groups(counts, world.size)
    mine, gen = parts[world.rank], generation_share(parts, world.rank, engine_group_size(cfg, world))
    my_idx, gen_idx = idx[mine], idx[gen]
    with timer("generate"):
        batch = c.engine.generate(
            ids[gen],
            [c.train.inputs[i] for i in gen_idx],
            [c.train.answers[i] for i in gen_idx],
            counts[gen],
            s,
            generator=c.generator,
            seeds=rollout_seeds(cfg.seed, "train", step, ids[gen]),
        )
        if gen != mine:
            batch = batch.select_groups(mine.start - gen.start, mine.stop - gen.start)
    # the vLLM engine may recompute old log-probs with the trainer's model inside generate()
    old_lp_seconds = float(getattr(c.engine, "timings", {}).get("old_logprob_seconds", 0.0))
    generate_seconds = timer["generate"] - old_lp_seconds
    batch.check_alignment()
    sources = [c.train.sources[i] for i in my_idx]
    my_correct = np.asarray(c.verifier.is_correct(batch.completions, batch.row_answers,
                                                  [sources[g] for g in batch.group_index]), dtype=bool)
    # the whole step's rows, in plan order, on every rank; the first collective after the
    # ranks' unequal generation: its time is mostly waiting for the slowest rank (wait_seconds)
    with timer("wait"):
        correct = world.concat(my_correct, [int(counts[p].sum()) for p in parts])
    world.clock.take()
    rewards = np.where(correct, cfg.rl.reward_positive, cfg.rl.reward_negative)

    # 3. advantages per group (variable sizes), then Prompt-GDRO weights per prompt
    group_index = np.repeat(np.arange(len(ids)), counts)
    adv = group_advantages(rewards, group_index, cfg.rl.estimator)
    prompt_w = np.ones(len(ids))
    bins = c.bins(ids)
    if c.prompt_weights is not None:  # Prompt-GDRO's own time, beside the allocator's
        with timer("prompt_weights"):
            prompt_w = c.prompt_weights.weights(ids, bins, counts)
        adv = adv * prompt_w[group_index]

    # 4. PPO-clip update over mini-batches (+ DynaMO token modulation), on this rank's rows;
    #    a colocated vLLM with sleep mode frees its GPU memory meanwhile
    rows = slice(int(counts[: mine.start].sum()), int(counts[: mine.stop].sum()))
    sleeps = bool(getattr(c.engine, "sleeps_during_update", False))
    with timer("update"):
        if sleeps:
            c.engine.sleep(1)
        upd = ppo_update(
            c.train_model, c.optimizer, c.scheduler, batch, adv[rows], c.ppo_cfg,
            temperature=s.temperature, mini_batches=cfg.rl.mini_batches, ppo_epochs=cfg.rl.ppo_epochs,
            grad_clip=cfg.optim.grad_clip, rng=c.update_rng, modulation=c.modulation_cfg,
            ref_model=c.ref_model, row_weights=prompt_w[group_index][rows],
            shard=RowShard(world, int(counts.sum()), rows.start, rows.stop),
            micro_batch_rows=cfg.rl.micro_batch_rows,
        )
        check_finite(step, c.model, upd.row_loss, upd.stats)  # NaN/inf: stop; last checkpoint kept
    with timer("sync"):
        if sleeps:
            c.engine.wake_up()
        c.engine.sync_weights(c.engine_view())  # FSDP + HF: the generation copy, refreshed
    comm_update = world.clock.take()
    update_seconds = timer["update"] - comm_update  # the update's explicit collectives count as comm

    # 5. feedback: per-prompt losses (mean over the prompt's rollouts) to allocator and weighter
    q = len(ids)
    row_loss = upd.row_loss if cfg.rl.prompt_loss_kl or upd.row_kl is None else upd.row_loss - upd.row_kl
    my_loss = np.bincount(batch.group_index, weights=row_loss, minlength=len(my_idx))
    phases = {"generate": generate_seconds, "old_logprob": old_lp_seconds, "update": update_seconds,
              "comm": comm_update, "sync": timer["sync"], "wait": timer["wait"],
              "cpu": timer.process_seconds()}
    # the per-prompt losses, and every rank's phase split riding along (rank-indexed lists in
    # rank 0's row; a rank's listed comm excludes this last gather, the row's includes it)
    n_ph = len(phases)
    mine_and_phases = np.concatenate([my_loss, list(phases.values())])
    gathered = world.gather_arrays(mine_and_phases, [p.stop - p.start + n_ph for p in parts])
    prompt_loss = np.concatenate([g[:-n_ph] for g in gathered]) / counts
    by_rank = [g[-n_ph:] for g in gathered]
    comm_seconds = comm_update + world.clock.take()
    succ = np.bincount(group_index, weights=correct.astype(float), minlength=q)
    with timer("allocator"):  # VIP's GP update lives in observe
        c.allocator.observe(ids, counts, rewards, prompt_losses=prompt_loss)
    if c.prompt_weights is not None:
        with timer("prompt_weights"):
            c.prompt_weights.observe(ids, bins, prompt_loss)
    c.observe_bins(ids, counts, correct)
    if c.sampler.epoch > epoch and hasattr(c.allocator, "end_epoch"):
        c.allocator.end_epoch()  # the sampler finished a pass over the pool (DynaMO's refresh)

    zero_var = (succ == 0) | (succ == counts)
    effective = float(counts[~zero_var].sum() / counts.sum())
    row = {
        "step": step,
        "rollouts": int(counts.sum()),
        "reward": float(rewards.mean()),
        "accuracy": float(correct.mean()),
        "prompt_accuracy": float((succ / counts).mean()),
        "zero_variance_frac": float(zero_var.mean()),
        "effective_rollout_frac": effective,
        "counts_hist": np.bincount(counts, minlength=cfg.rollout.upper + 1).tolist(),
        "allocator_seconds": timer["allocator"],
        "prompt_weights_seconds": timer["prompt_weights"],
        "generate_seconds": generate_seconds,
        "old_logprob_seconds": old_lp_seconds,
        "update_seconds": update_seconds,
        "sync_seconds": timer["sync"],
        "comm_seconds": comm_seconds,
        "wait_seconds": timer["wait"],
        **{f"rank_{k}_seconds": [float(r[i]) for r in by_rank] for i, k in enumerate(phases)},
        "step_seconds": timer.elapsed(),
        **({} if probe is None else probe.log_fields()),
        **{k: v for k, v in upd.stats.items()},
    }
    if c.prompt_weights is not None:
        row["weight_mass_per_bin"] = c.prompt_weights.bin_mass()
    pred = details.get("predicted_p")
    prompt_rows = [
        {
            "step": step,
            "prompt_id": pid,
            "n": int(counts[j]),
            "successes": int(succ[j]),
            "predicted_p": None if pred is None else float(pred[j]),
            "bin": None if bins is None else int(bins[j]),
            "weight": float(prompt_w[j]),
            "loss": float(prompt_loss[j]),
        }
        for j, pid in enumerate(ids)
    ]
    return row, prompt_rows

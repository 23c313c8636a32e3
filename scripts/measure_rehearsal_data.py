"""How often SmolLM2-135M-Instruct solves each rehearsal training problem under a rehearsal
profile's own template, chat formatting, dtype, sampling and reward (docs/rehearsal.md): the
measurement behind scripts/rehearsal_problems.py's easy and hard problems.

    python scripts/measure_rehearsal_data.py --profile rehearsal-dynamo [--samples 16] [--limit 12] [--max-new-tokens 64]

Prints one line per problem: successes / samples, and the problem's first characters.
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="rehearsal-dynamo")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=0, help="0: the profile's")
    ap.add_argument("--limit", type=int, default=0, help="first N problems of the pool (0: the profile's limit)")
    args = ap.parse_args()

    from replication.config import load_profile
    from replication.models import load_policy, make_formatter
    from replication.models.formatting import format_prompts
    from replication.tasks.data import build_data

    over = {"task.options.limit": args.limit} if args.limit else {}
    cfg = load_profile(args.profile, over)
    data = build_data(cfg)
    model, tok = load_policy(cfg.model.path, device="cpu", dtype=cfg.model.dtype)
    fmt = make_formatter(data.formatter_name, tokenizer=tok, **data.formatter_options)
    texts = format_prompts(fmt, data.train.inputs)
    s = cfg.rollout.sampling
    torch.manual_seed(0)
    total = 0
    for pid, text, answer, source in zip(data.train.ids, texts, data.train.answers, data.train.sources):
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=s.temperature, top_p=s.top_p,
                                 top_k=s.top_k or None, max_new_tokens=args.max_new_tokens or s.max_new_tokens,
                                 num_return_sequences=args.samples, pad_token_id=tok.eos_token_id)
        comps = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        ok = data.verifier.is_correct(comps, [answer] * len(comps), [source] * len(comps))
        total += int(sum(ok))
        print(f"{int(sum(ok)):3d}/{args.samples}  {pid}  {data.train.texts[data.train.ids.index(pid)][:60]!r}"
              f"  e.g. {comps[0][:70]!r}", flush=True)
    data.verifier.close()
    print(f"all: {total}/{args.samples * len(data.train.ids)}")


if __name__ == "__main__":
    main()

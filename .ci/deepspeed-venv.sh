# Sourced by .ci/run: DeepSpeed 0.19.8 (DS_BUILD_OPS=0) in a venv of its own, kept between runs,
# for the DeepSpeed integration tests (tests/integrations, marker `deepspeed`). Exports
# ANYACCEL_DEEPSPEED_PYTHON for them, and ANYACCEL_DEEPSPEED_EXTENSIONS_DIR, the lasting
# TORCH_EXTENSIONS_DIR of their DeepSpeed processes, so the ops DeepSpeed builds just in time
# on first use (CPU Adam, shared-memory all-reduce: about a minute each) are built once.
# The venv sees this interpreter's packages (torch 2.13.0 is not installed twice).
DS_CACHE="${ANYACCEL_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anyaccel-ci}"
DS_VENV="$DS_CACHE/deepspeed-0.19.8-venv"
if ! "$DS_VENV/bin/python" -c "
import importlib.metadata as m
assert m.version('deepspeed') == '0.19.8' and m.version('torch').split('+')[0] == '2.13.0'
" 2>/dev/null; then
    echo "== installing DeepSpeed 0.19.8 (DS_BUILD_OPS=0) into $DS_VENV"
    rm -rf "$DS_VENV"
    "$PYTHON" -m venv --system-site-packages "$DS_VENV"
    DS_BUILD_OPS=0 "$DS_VENV/bin/python" -m pip install -q "deepspeed==0.19.8" "torch==2.13.0" ninja
fi
export ANYACCEL_DEEPSPEED_PYTHON="$DS_VENV/bin/python"
export ANYACCEL_DEEPSPEED_EXTENSIONS_DIR="$DS_CACHE/torch_extensions"

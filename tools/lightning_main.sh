#!/usr/bin/env bash
# anyaccel's Lightning tests on a Lightning built from source (its main branch), beside the
# installed one: the build goes to a private --target folder put first on PYTHONPATH, so
# site-packages and torch stay as they are (docs/lightning.md, "Tested versions").
#
# Usage: tools/lightning_main.sh SOURCE [REV]
#   SOURCE  a Lightning git repository (a clone, or a bare mirror): REV (default HEAD) is built,
#           and its commit and date are printed; or a source tree (setup.py and src/lightning)
#   REV     a branch, tag or commit of SOURCE (git repositories only)
# Environment:
#   PYTHON            the interpreter (python3); it needs setuptools, torch and the dev extras
#   LIGHTNING_TARGET  where to install the build (kept); default: a temporary folder, removed
#   PYTEST_ARGS       extra pytest arguments (-x, -k ...)
# Builds `lightning` (PACKAGE_NAME=lightning) and `pytorch_lightning` with `lightning_fabric`
# inside (PACKAGE_NAME=pytorch), without dependencies, then runs tests/integrations/test_lightning.py
# and the Lightning jobs of tests/integrations/test_emulated_vendors_frameworks.py. Exits non-zero
# at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '5,10p' "$0" >&2
    exit 2
fi
SOURCE="$(cd "$1" && pwd)"
REV="${2:-HEAD}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/anyaccel-lightning-main.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
TARGET="${LIGHTNING_TARGET:-$WORK/target}"

# Only what the build reads: a mirror may lack the blobs of docs/ images.
BUILT_PATHS=(setup.py pyproject.toml requirements src .actions README.md)
if git -C "$SOURCE" rev-parse --git-dir >/dev/null 2>&1; then
    echo "== Lightning $(git -C "$SOURCE" log -1 --format='commit %H of %cI' "$REV")"
    mkdir "$WORK/tree"
    git -C "$SOURCE" archive --format=tar "$REV" -- "${BUILT_PATHS[@]}" | tar -x -C "$WORK/tree"
    TREE="$WORK/tree"
elif [ -f "$SOURCE/setup.py" ] && [ -d "$SOURCE/src/lightning" ]; then
    if [ $# -eq 2 ]; then
        echo "REV=$REV given, but $SOURCE is no git repository (a source tree is built as is)" >&2
        exit 2
    fi
    echo "== Lightning source tree $SOURCE (no git: say which commit it is when you report)"
    TREE="$SOURCE"
else
    echo "$SOURCE is neither a git repository nor a Lightning source tree (setup.py, src/lightning)" >&2
    exit 2
fi
if ! "$PYTHON" -c "import setuptools" 2>/dev/null; then
    echo "$PYTHON has no setuptools, which Lightning's setup.py needs: $PYTHON -m pip install setuptools" >&2
    exit 2
fi

# setup.py turns the tree into one package per PACKAGE_NAME (and rewrites src/ for the
# standalone one): each build gets its own copy.
for package in lightning pytorch; do
    mkdir "$WORK/build-$package"
    (cd "$TREE" && tar -c "${BUILT_PATHS[@]}" 2>/dev/null || true) | tar -x -C "$WORK/build-$package"
    echo "== building PACKAGE_NAME=$package into $TARGET"
    PACKAGE_NAME="$package" "$PYTHON" -m pip install -q --no-deps --no-build-isolation \
        --upgrade --target "$TARGET" "$WORK/build-$package"
done

export PYTHONPATH="$TARGET:$ROOT/src"
"$PYTHON" - "$TARGET" <<'EOF'
import importlib, sys, torch
target = sys.argv[1]
for name in ("lightning", "pytorch_lightning", "lightning_fabric"):
    module = importlib.import_module(name)
    if not module.__file__.startswith(target):
        sys.exit(f"{name} is imported from {module.__file__}, not from the build in {target}")
    print(f"== {name} {module.__version__} from {module.__file__}")
print(f"== torch {torch.__version__}")
EOF

# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
"$PYTHON" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} \
    tests/integrations/test_lightning.py \
    tests/integrations/test_emulated_vendors_frameworks.py -k lightning

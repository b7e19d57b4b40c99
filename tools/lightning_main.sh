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
#   PYTEST_ARGS       extra pytest arguments (-x, -v ...)
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
    sed -n '6,13p' "$0" >&2
    exit 2
fi
if [ ! -d "$1" ]; then
    echo "SOURCE=$1 is no directory: give a Lightning clone, bare mirror or source tree" >&2
    exit 2
fi
SOURCE="$(cd "$1" && pwd -P)"
REV="${2:-HEAD}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/anyaccel-lightning-main.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
TARGET="$(mkdir -p "${LIGHTNING_TARGET:-$WORK/target}" && cd "${LIGHTNING_TARGET:-$WORK/target}" && pwd -P)"

is_repository() {  # SOURCE is a repository's top (a clone's work tree, or a bare repository)
    local top
    if [ "$(git -C "$SOURCE" rev-parse --is-bare-repository 2>/dev/null)" = true ]; then
        top="$(git -C "$SOURCE" rev-parse --absolute-git-dir)"
    else
        top="$(git -C "$SOURCE" rev-parse --show-toplevel 2>/dev/null)" || return 1
    fi
    [ "$(cd "$top" && pwd -P)" = "$SOURCE" ]
}

# Only what the build reads: a mirror may lack the blobs of docs/ images (git may then name
# one as an "invalid object" while archiving the rest: harmless, it is not built).
BUILT_PATHS=(setup.py pyproject.toml requirements src .actions README.md)
if is_repository; then
    echo "== Lightning $(git -C "$SOURCE" log -1 --format='commit %H of %cI' "$REV")"
    mapfile -t present < <(git -C "$SOURCE" ls-tree --name-only "$REV" -- "${BUILT_PATHS[@]}")
    mkdir "$WORK/tree"
    if [ ${#present[@]} -gt 0 ]; then
        git -C "$SOURCE" archive --format=tar "$REV" -- "${present[@]}" | tar -x -C "$WORK/tree"
    fi
    TREE="$WORK/tree"
elif [ $# -eq 2 ]; then
    echo "REV=$REV given, but $SOURCE is no git repository (a source tree is built as it is)" >&2
    exit 2
else
    echo "== Lightning source tree $SOURCE (no git: say which commit it is when you report)"
    TREE="$SOURCE"
fi
if [ ! -f "$TREE/setup.py" ] || [ ! -d "$TREE/src/lightning" ]; then
    echo "$SOURCE${2:+ at $REV} is no Lightning source: it lacks setup.py or src/lightning" >&2
    exit 2
fi
if ! "$PYTHON" -c "import setuptools" 2>/dev/null; then
    echo "$PYTHON has no setuptools, which Lightning's setup.py needs: $PYTHON -m pip install setuptools" >&2
    exit 2
fi

# setup.py turns the tree into one package per PACKAGE_NAME (and rewrites src/ for the
# standalone one): each build gets its own copy.
present=()
for path in "${BUILT_PATHS[@]}"; do
    if [ -e "$TREE/$path" ]; then present+=("$path"); fi
done
for package in lightning pytorch; do
    mkdir "$WORK/build-$package"
    tar -c -C "$TREE" "${present[@]}" | tar -x -C "$WORK/build-$package"
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

#!/usr/bin/env bash
# Installs the peers of tests/bench/bench_peers.py, each into an environment of its own, under
# one directory (default: .bench-peers/ at the repository root, which git ignores):
#
#   DIR/agentv/       npm's `agentv` (tool_trajectory), driven from node
#   DIR/uipath/       a venv with PyPI's `uipath` (tool-call order / count / args / output)
#   DIR/letta-evals/  a venv with PyPI's `letta-evals` (tool graders)
#
# Usage: bash tests/bench/install_peers.sh [DIR] [agentv] [uipath] [letta-evals]
# With no peer named, all three; bench_peers.py --peers-dir DIR for another DIR. The versions the bench was written against are the defaults;
# AGENTV_VERSION, UIPATH_VERSION, LETTA_EVALS_VERSION override them ("latest" takes the newest).
# A peer that fails to install is reported and skipped; the bench then says "not installed".
set -u

root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$root/.bench-peers"
case "${1:-}" in
    ""|agentv|uipath|letta-evals) ;;           # no DIR given: the default
    *) dir="$1"; shift ;;
esac
peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=(agentv uipath letta-evals)

agentv_version="${AGENTV_VERSION:-4.42.4}"
uipath_version="${UIPATH_VERSION:-2.14.44}"
letta_version="${LETTA_EVALS_VERSION:-0.26.0}"
python="${PYTHON:-python3}"

pin() {  # pin NAME VERSION: the pip requirement
    if [ "$2" = latest ]; then echo "$1"; else echo "$1==$2"; fi
}

install_venv() {  # install_venv NAME REQUIREMENT
    local env="$dir/$1"
    echo "== $1: $2 into $env"
    rm -rf "$env"
    "$python" -m venv "$env" \
        && "$env/bin/pip" install -q --disable-pip-version-check "$2" \
        && "$env/bin/python" -c "import importlib.metadata as m; print('$1', m.version('$2'.split('==')[0]))"
}

install_agentv() {
    local env="$dir/agentv"
    local spec="agentv@$agentv_version"
    echo "== agentv: $spec into $env"
    if ! command -v npm >/dev/null; then
        echo "npm not found: agentv needs node and npm" >&2
        return 1
    fi
    rm -rf "$env"
    mkdir -p "$env" \
        && (cd "$env" && npm init -y >/dev/null \
            && npm install --no-audit --no-fund --loglevel=error "$spec") \
        && node -e "console.log('agentv', require('$env/node_modules/agentv/package.json').version)"
}

mkdir -p "$dir"
failed=()
for peer in "${peers[@]}"; do
    case "$peer" in
        agentv) install_agentv || failed+=(agentv) ;;
        uipath) install_venv uipath "$(pin uipath "$uipath_version")" || failed+=(uipath) ;;
        letta-evals) install_venv letta-evals "$(pin letta-evals "$letta_version")" \
                         || failed+=(letta-evals) ;;
        *) echo "unknown peer: $peer (agentv, uipath or letta-evals)" >&2; failed+=("$peer") ;;
    esac
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "not installed: ${failed[*]}" >&2
    exit 1
fi
echo "peers installed under $dir"

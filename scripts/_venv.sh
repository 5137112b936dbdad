# Shared set-up for scripts/test and scripts/demo (sourced from the repo root).
# Creates .venv if missing, installs the package and its dev extras at the
# pinned versions of constraints.txt, and puts .venv/bin first on PATH.
# pip's output goes to .venv/pip-install.log and is shown only if it fails.

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -m pip install -c constraints.txt -e ".[dev]" >.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "pip install failed (log: .venv/pip-install.log)" >&2
    exit 1
fi
export PATH="$PWD/.venv/bin:$PATH"

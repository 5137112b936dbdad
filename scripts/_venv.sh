# Shared set-up for scripts/test and scripts/demo (sourced from the repo root).
# RETAINING_SAVER_VERSIONS chooses the versions of the dependencies:
#   pinned (the default): .venv, at the versions pinned in constraints.txt;
#   newest: .venv-newest, at the newest versions pyproject.toml admits, upgraded
#   on every run so that it follows new releases.
# Creates the venv if missing, installs the package and its dev extras, and puts
# the venv's bin/ first on PATH. pip's output goes to <venv>/pip-install.log and
# is shown only if it fails.

case "${RETAINING_SAVER_VERSIONS:-pinned}" in
    pinned)
        _venv_dir=.venv
        _venv_pip_args=(-c constraints.txt)
        ;;
    newest)
        _venv_dir=.venv-newest
        _venv_pip_args=(--upgrade --upgrade-strategy eager)
        ;;
    *)
        echo "RETAINING_SAVER_VERSIONS must be pinned or newest, not '$RETAINING_SAVER_VERSIONS'" >&2
        exit 2
        ;;
esac

_venv_new=
if [[ ! -x $_venv_dir/bin/python ]]; then
    echo "setting up $_venv_dir (first run only): creating it with $(python3 --version)..." >&2
    python3 -m venv "$_venv_dir"
    _venv_new=1
fi
if [[ -n $_venv_new || $_venv_dir == .venv-newest ]]; then
    echo "installing retaining-saver and its dev extras into $_venv_dir" \
        "(about a minute; log: $_venv_dir/pip-install.log)..." >&2
fi
if ! "$_venv_dir/bin/python" -m pip install "${_venv_pip_args[@]}" -e ".[dev]" \
    >"$_venv_dir/pip-install.log" 2>&1; then
    cat "$_venv_dir/pip-install.log" >&2
    echo "pip install failed (log: $_venv_dir/pip-install.log)" >&2
    exit 1
fi
if [[ -n $_venv_new ]]; then
    echo "installed; $_venv_dir is ready." >&2
fi
export PATH="$PWD/$_venv_dir/bin:$PATH"

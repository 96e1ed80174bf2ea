# Sourced by scripts/check and scripts/test: defines `uv`, a uv this machine runs, needing nothing
# but a python3 (3.8 or later, any: a stock Debian 12 or Ubuntu 24.04 one, with no pip and PEP
# 668's "externally-managed-environment", will do). The first of:
#   1. `uv` on PATH;
#   2. `python3 -m uv`, where uv is installed into that python3;
#   3. the uv binary of the release scripts/uv-pins.txt names, fetched once from PyPI by
#      scripts/_uv_fetch.py (stdlib only, https only, SHA-256 checked against that file's pins)
#      into $XDG_CACHE_HOME/fsm-core/uv/ (by default ~/.cache/fsm-core/uv/; .cache/fsm-core/uv/
#      in the checkout when there is no HOME).
# Nothing is installed into python3 or anywhere outside that directory. Sourcing it again (a
# script that sources it, sourced by another that did) keeps the uv found the first time.

if [ "$(type -t uv)" = function ] && [ -n "${FSM_CORE_UV+set}" ]; then
    return 0
fi

# The cache directory's XDG rule, as fsm-core's proof cache reads it: a relative
# XDG_CACHE_HOME is ignored.
_fsm_core_uv_dir() {
    if [[ "${XDG_CACHE_HOME:-}" == /* ]]; then
        echo "$XDG_CACHE_HOME/fsm-core/uv"
    elif [ -n "${HOME:-}" ] && [ -d "$HOME" ] && [ -w "$HOME" ]; then
        echo "$HOME/.cache/fsm-core/uv"
    else
        echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/fsm-core/uv"
    fi
}

if type -P uv >/dev/null 2>&1; then
    FSM_CORE_UV=("$(type -P uv)")  # a file on PATH: a bare `uv` would call the function below
elif python3 -m uv --version >/dev/null 2>&1; then
    FSM_CORE_UV=(python3 -m uv)
else
    _fsm_core_uv="$(_fsm_core_uv_dir)/uv"
    if ! [ -x "$_fsm_core_uv" ]; then
        echo "uv: not on PATH nor in python3; fetching it from PyPI into ${_fsm_core_uv%/uv}/" >&2
        python3 "$(dirname "${BASH_SOURCE[0]}")/_uv_fetch.py" "${_fsm_core_uv%/uv}" >/dev/null
    fi
    FSM_CORE_UV=("$_fsm_core_uv")
fi
uv() { "${FSM_CORE_UV[@]}" "$@"; }

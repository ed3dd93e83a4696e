#!/usr/bin/env bash
# Build (or reuse) the virtual environment for requirements.lock, then export the run environment.
# Sourced by scripts/demo and scripts/test:  source scripts/setup.sh [--test] [--gpu]
# The venv is keyed on the lock file's sha256 and lives outside the checkout, so clones share it;
# one that is missing or was interrupted (no .complete marker) is built from nothing.
# --gpu: FAISS's GPU build (requirements-gpu.lock) instead of faiss-cpu, in a venv of its own keyed on
# both lock files (never the default: faiss-gpu needs a CUDA driver; bench/gpu_check.py checks the path).
set -euo pipefail
MEDBENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export MEDBENCH_ROOT
WANT_TEST=0
WANT_GPU=0
# Other arguments are ignored: a script that sources this file without arguments passes on its own.
for arg in "$@"; do
  case "$arg" in
    --test) WANT_TEST=1 ;;
    --gpu) WANT_GPU=1 ;;
  esac
done
PY="${MEDBENCH_PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "medbench needs Python 3.11 (found $("$PY" --version))" >&2; exit 1; }

LOCK_HASH="$(sha256sum "$MEDBENCH_ROOT/requirements.lock" | cut -c1-16)"
REQUIREMENTS=("-r" "$MEDBENCH_ROOT/requirements.lock")
if [ "$WANT_GPU" = 1 ]; then
  LOCK_HASH="$(cat "$MEDBENCH_ROOT/requirements.lock" "$MEDBENCH_ROOT/requirements-gpu.lock" | sha256sum | cut -c1-16)-gpu"
  GPU_BASE="$(mktemp)"
  grep -v '^faiss-cpu==' "$MEDBENCH_ROOT/requirements.lock" > "$GPU_BASE"
  REQUIREMENTS=("-r" "$GPU_BASE" "-r" "$MEDBENCH_ROOT/requirements-gpu.lock")
fi
VENV_ROOT="${MEDBENCH_VENV_ROOT:-$HOME/.cache/medbench/venvs}"
VENV="$VENV_ROOT/$LOCK_HASH"
# MEDBENCH_VENV: use an already built venv as it is, whatever the lock says (development only: trying a
# package before it is locked, several worktrees on one venv); CI and the README's commands never set it.
if [ -n "${MEDBENCH_VENV:-}" ]; then
  VENV="$MEDBENCH_VENV"
  [ -f "$VENV/.complete" ] || { echo "medbench: MEDBENCH_VENV=$VENV is not a complete medbench venv" >&2; exit 1; }
fi
if [ ! -f "$VENV/.complete" ]; then
  echo "medbench: building environment $VENV from requirements.lock (a few minutes on first use)" >&2
  rm -rf "$VENV"
  mkdir -p "$VENV_ROOT"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade "pip==26.3" >/dev/null 2>&1 || true
  log="$VENV_ROOT/$LOCK_HASH.install.log"
  "$VENV/bin/python" -m pip install --no-input "${REQUIREMENTS[@]}" >"$log" 2>&1 \
    || { grep -v "is ignored: it is neither" "$log" | tail -40 >&2; echo "medbench: install failed, see $log" >&2; exit 1; }
  # Installation-level, like the venv: the empty MLflow schema new stores are copied from
  # (built on first use otherwise).
  PYTHONPATH="$MEDBENCH_ROOT" "$VENV/bin/python" -c 'from runtime.mlflow_store import mlflow_schema; mlflow_schema()' >>"$log" 2>&1 \
    || { tail -20 "$log" >&2; echo "medbench: cannot build the MLflow schema, see $log" >&2; exit 1; }
  touch "$VENV/.complete"
fi
ln -sfn "$VENV" "$MEDBENCH_ROOT/.venv"
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$MEDBENCH_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# The console scripts of pyproject.toml ([project.scripts]: `medbench`), written into the venv as pip
# would write them, without installing the project: several checkouts share one venv, and each runs
# its own code (the one first on PYTHONPATH, set just above). Same bytes from every checkout, so
# rewriting one (atomically) is harmless.
"$VENV/bin/python" - "$MEDBENCH_ROOT/pyproject.toml" "$VENV/bin" <<'PY' \
  || { echo "medbench: cannot write the console scripts into $VENV/bin" >&2; exit 1; }
import os, sys, tomllib
pyproject, bindir = sys.argv[1:3]
for name, target in tomllib.load(open(pyproject, "rb"))["project"].get("scripts", {}).items():
    module, func = target.split(":")
    text = (
        f"#!{os.path.join(bindir, 'python')}\n"
        "# Written by scripts/setup.sh from [project.scripts]; runs the checkout first on PYTHONPATH.\n"
        "import sys\n"
        "try:\n"
        f"    from {module} import {func}\n"
        "except ModuleNotFoundError as exc:\n"
        f"    if exc.name != {module.split('.')[0]!r}:\n"
        "        raise\n"
        f"    sys.exit(f\"{name}: {{exc}}; source scripts/setup.sh of a medbench checkout first\")\n"
        f"sys.exit({func}())\n"
    )
    path = os.path.join(bindir, name)
    if os.path.exists(path) and open(path).read() == text:
        continue
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
PY

# Test-only system packages: headless Chromium for the UI test, PostgreSQL for the production profile,
# Redis as the celery broker of the distributed test.
if [ "$WANT_TEST" = 1 ]; then
  need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v git >/dev/null 2>&1 || need+=(git)
  command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need+=(redis-server)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "medbench: installing ${need[*]} from Debian" >&2
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
      echo "medbench: tests need ${need[*]}; install them (sudo apt-get install ${need[*]})" >&2
    fi
  fi
fi

# Offline by default: models come from local folders, installed packages or the local hub cache.
# MEDBENCH_ONLINE=1 (runtime/settings.py) lets hub models and datasets download: the HF_*_OFFLINE
# switches are then cleared, since huggingface_hub would refuse every request under them. MLflow's
# telemetry would start threads that try the network on first use of every process.
case "${MEDBENCH_ONLINE:-0}" in
  1|true|yes|on) unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_DATASETS_OFFLINE ;;
  *) export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 ;;
esac
export TOKENIZERS_PARALLELISM=false
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=1
export MEDBENCH_SHARED="${MEDBENCH_SHARED:-$(cd "$MEDBENCH_ROOT/.." && pwd)/shared}"
# DAGSTER_HOME is not set here: the `medbench` command uses <state>/dagster_home, the instance of the state it runs
# in (MEDBENCH_STATE, default .medbench), so that two states never share one run history (issue 44.7). Set it
# yourself to share an instance on purpose (the production profile does): it is created, with the project's
# dagster.yaml where it has none (yours is never overwritten).
if [ -n "${DAGSTER_HOME:-}" ]; then
  mkdir -p "$DAGSTER_HOME"
  [ -e "$DAGSTER_HOME/dagster.yaml" ] || cp "$MEDBENCH_ROOT/dagster.yaml" "$DAGSTER_HOME/dagster.yaml"
fi
export GIT_PYTHON_REFRESH=quiet

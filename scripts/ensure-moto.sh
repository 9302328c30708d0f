#!/usr/bin/env bash
# Prints the path of moto_server (moto 5.2.1, the AWS emulator of the contract and end-to-end tests:
# Auto Scaling, EC2 launch templates and instances, ECS container instances over the real wire protocols).
# moto is a Python package and cannot be built from this repository: it is looked up on PATH first, then in
# pyenv's Pythons (~/.pyenv/versions/*/bin; a shell started without ~/.bashrc has no pyenv shims on PATH).
# Missing: with CI set this fails (CI must never skip the tests that need it); otherwise it warns, prints
# nothing and the tests that need moto skip.
set -euo pipefail
MOTO_VERSION=5.2.1
hint="moto_server (moto ${MOTO_VERSION}) not found on PATH nor in ${PYENV_ROOT:-$HOME/.pyenv}/versions/*/bin: install it with
  pip install 'moto[server]==${MOTO_VERSION}'
into a Python 3 on PATH (or a pyenv version), or set PATCH_AGENT_MOTO to its path"
bin="${PATCH_AGENT_MOTO:-}"
if [ -z "$bin" ]; then bin=$(command -v moto_server 2>/dev/null || true); fi
if [ -z "$bin" ]; then
  bin=$(ls -1 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/moto_server 2>/dev/null | sort | tail -n 1 || true)
fi
ci=$(echo "${CI:-}" | tr '[:upper:]' '[:lower:]')
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  if [ -n "$ci" ] && [ "$ci" != "false" ] && [ "$ci" != "0" ]; then
    echo "ensure-moto: $hint" >&2
    echo "ensure-moto: CI is set, so the tests that need moto fail instead of skipping" >&2
    exit 1
  fi
  echo "ensure-moto: $hint; the tests that need moto will skip" >&2
  exit 0
fi
# A pyenv shim answers even when no pyenv version has moto; resolve it to the real script.
if [[ "$bin" == */shims/* ]] && command -v pyenv >/dev/null 2>&1; then
  bin=$(pyenv which moto_server 2>/dev/null || echo "$bin")
fi
py=$(head -n 1 "$bin" | sed -n 's/^#!//p' | awk '{print $1}')
if [ -n "$py" ] && [ -x "$py" ]; then
  have=$("$py" -c 'import moto; print(moto.__version__)' 2>/dev/null || echo unknown)
  if [ "$have" != "$MOTO_VERSION" ]; then
    echo "ensure-moto: $bin is moto $have; the tests are written against $MOTO_VERSION" >&2
  fi
fi
echo "$bin"

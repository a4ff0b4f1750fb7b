#!/usr/bin/env bash
# Wheels for the image: this project's (bookkeeper-python) and every dependency of its server
# extra, built or fetched here on the host, so `docker build` installs with --no-index (no package
# index, certificates or network needed inside the build).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
rm -rf deploy/wheels/*.whl
"$PYTHON" -m pip wheel -q -w deploy/wheels '.[server]'
ls deploy/wheels/*.whl | wc -l | xargs echo "wheels in deploy/wheels:"

#!/usr/bin/env bash
# Download the wheels named in benchmarks/gpu_wheels.txt for the target GPU machine (CPython 3.12, manylinux
# x86_64) into .whl/ at the repository root, without dependencies, then list each wheel's declared
# requirements so that missing ones can be added to the list. Run where pip reaches PyPI, then copy .whl/
# to the GPU machine along with the repository (benchmarks/gpu_check.sh installs it there).
#
#   bash benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mapfile -t specs < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' benchmarks/gpu_wheels.txt | grep -v '^$' || true)
if [ ${#specs[@]} -eq 0 ]; then
  echo "benchmarks/gpu_wheels.txt names no wheel: nothing to fetch (gpu_check.sh needs none today)"
  exit 0
fi
names=$(printf '%s\n' "${specs[@]}" | sed 's/[=<>!~].*//' | tr 'A-Z_' 'a-z-' | sort)
dupes=$(uniq -d <<<"$names")
[ -z "$dupes" ] || { echo "more than one version of: $dupes (pip on the device refuses two)"; exit 1; }
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .whl
platforms=()
for n in 28 27 17; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for spec in "${specs[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$spec"
done
for whl in .whl/*.whl; do
  echo "$(basename "$whl"):"
  unzip -p "$whl" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | sed 's/^/    /' || true
done
du -sh .whl

#!/usr/bin/env bash
# The package as a user gets it: build the wheel from this checkout, install it into a fresh venv,
# and run the main job (and validate, the sim's --help, audit) from a scratch "user project" outside
# the checkout that holds only copies of hypotheses/ and experiments/.
#
#   bash .ci/wheel.sh            # KEEP_WHEEL_TMP=1 keeps the scratch directory for inspection
#
# The wheel is built by `python -m build` (an sdist first, then the wheel from the sdist, in an
# isolated build environment), so nothing stale from an in-tree build/ gets in and the sdist must
# carry the data too. The installed run must not see the checkout: PYTHONPATH and PYTHONHOME are
# unset, user site-packages are off, the working directory is outside the repository, and
# framework.__file__ must lie in the fresh venv's site-packages. Any failure exits non-zero, naming
# the step. The scratch directory is removed at the end either way.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
PY=${PYTHON:-python3}
start=$(date +%s)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/framework-wheel.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
cleanup() {
  if [ "${KEEP_WHEEL_TMP:-0}" = 1 ]; then echo "wheel.sh: kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
fail() { echo "wheel.sh: FAILED: $*" >&2; exit 1; }
step() {  # step NAME COMMAND...: run it, time it, name it when it fails
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  echo "wheel.sh: == $name"
  "$@" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name (exit $rc)"
  echo "wheel.sh: -- $name: ok in $(( $(date +%s) - t0 )) s"
}
case "$TMP/" in "$REPO"/*) fail "the scratch directory $TMP is inside the checkout $REPO";; esac

# 1. build
BUILD_PY=$PY
if ! "$BUILD_PY" -m build --version >/dev/null 2>&1; then
  "$PY" -m venv "$TMP/build-venv"
  "$TMP/build-venv/bin/python" -m pip install -q build
  BUILD_PY=$TMP/build-venv/bin/python
fi
step "build the sdist and the wheel" "$BUILD_PY" -m build --outdir "$TMP/dist" "$REPO"
WHEEL=$(ls "$TMP"/dist/framework-*.whl)
[ "$(echo "$WHEEL" | wc -l)" -eq 1 ] || fail "expected one wheel in $TMP/dist, got: $WHEEL"
echo "wheel.sh: built $(basename "$WHEEL")"

# 2. the wheel carries every non-.py file of the package (the Hydra config, the flag table, profiles)
check_wheel() {
  "$PY" - "$WHEEL" "$REPO" <<'EOF'
import sys, zipfile
from pathlib import Path
wheel, repo = sys.argv[1], Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
data = sorted(n for n in names if n.startswith("framework/") and not n.endswith(".py"))
print(f"data files in the wheel ({len(data)}):", *data, sep="\n  ")
want = sorted(str(p.relative_to(repo)) for p in (repo / "framework").rglob("*")
              if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts)
missing = [w for w in want if w not in names]
if missing or "framework/conf/config.yaml" not in names:
    sys.exit(f"missing from the wheel: {missing or ['framework/conf/config.yaml']}")
EOF
}
step "check the wheel's data files" check_wheel

# 3. a user's own project outside the checkout, and a fresh venv with the wheel and its dependencies.
# Everything from here on runs in the project with the checkout off every path: with the checkout on
# PYTHONPATH, pip would even skip the install ("framework is already installed with the same version").
PROJ=$TMP/project
mkdir -p "$PROJ"
cp -R "$REPO/hypotheses" "$REPO/experiments" "$PROJ/"
cd "$PROJ"
VPY=$TMP/venv/bin/python
user() { env -u PYTHONPATH -u PYTHONHOME -u PYTHONSTARTUP -u VIRTUAL_ENV PYTHONNOUSERSITE=1 "$VPY" "$@"; }
step "create a fresh venv" env -u PYTHONPATH -u PYTHONHOME "$PY" -m venv "$TMP/venv"
step "install the wheel" user -m pip install -q --disable-pip-version-check "$WHEEL"

# 4. the installed package, run as a user runs it
where() {
  user - "$TMP/venv" <<'EOF'
import sys, sysconfig
from pathlib import Path
import framework
site = Path(sysconfig.get_paths()["purelib"]).resolve()
here = Path(framework.__file__).resolve()
print(f"framework {framework.__version__} from {here}")
if site not in here.parents or Path(sys.argv[1]).resolve() not in site.parents:
    sys.exit(f"framework is imported from {here}, not from the fresh venv's site-packages {site}")
EOF
}
step "framework is the installed wheel" where
step "python -m framework validate" user -m framework validate
step "python -m framework.sim --help" eval 'user -m framework.sim --help >/dev/null'
step "python -m framework run hypothesis=eagle3_allreduce" user -m framework run hypothesis=eagle3_allreduce
check_record() {
  user - <<'EOF'
import json, sys
from pathlib import Path
import framework
records = [json.loads(line) for line in Path("verdicts.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
verdicts = [r for r in records if r.get("kind") == "verdict" and r["hypothesis"]["name"] == "eagle3_allreduce"]
if not verdicts:
    sys.exit("verdicts.jsonl in the project has no verdict for eagle3_allreduce")
v = verdicts[-1]
run_dir = Path(v["run_dir"]).resolve()
if Path.cwd().resolve() not in run_dir.parents or not (run_dir / "verdict.json").is_file():
    sys.exit(f"the run directory {run_dir} is not in the project or has no verdict.json")
env = v["environment"]
if env["packages"].get("framework") != framework.__version__:
    sys.exit(f"the record names framework {env['packages'].get('framework')}, the installed one is {framework.__version__}")
print(f"verdict: {v['verdict']} ({', '.join(p['id'] + '=' + p['verdict'] for p in v['predictions'])}); "
      f"run dir {run_dir.relative_to(Path.cwd().resolve())}; environment.git {env['git']}")
EOF
}
step "verdicts.jsonl holds the verdict" check_record
step "python -m framework audit" user -m framework audit
echo "wheel.sh: the wheel built, installed in a fresh venv and ran the main job and audit from $PROJ" \
     "in $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# The heterophily comparison of issue 29 (benchmarks/results/heterophily.md), every
# model of harness.heterophily.MODELS on the heterophilous sets, the directed ones
# and the homophilous check, as parallel processes of one (dataset, model) each,
# then merged into one record and table (with the package's recommended model, the
# search over regcn's and regcn_polynormer's grids together, derived by the merge).
# From the repository root:
#
#     bash benchmarks/heterophily.sh        # OUT=<folder> JOBS=<processes at once>
#
# Each process writes OUT/<dataset>-<model>.json (examples.heterophily --json) and
# its log; the whole run ends after BUDGET seconds: a process still running then
# is stopped and its model left out of the merge, and one not started is skipped
# (each says so), so whatever finished is kept. OUT must be new or empty. DEVICE, EPOCHS, SPLITS and BUDGET shrink it for a
# dry run on a machine without a GPU.
set -u -o pipefail
OUT=${OUT:-heterophily-out}
DEVICE=${DEVICE:-cuda}
EPOCHS=${EPOCHS:-300}
SPLITS=${SPLITS:-10}
JOBS=${JOBS:-16}
BUDGET=${BUDGET:-480}
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
  echo "OUT=$OUT is not empty: give a new folder, so that no earlier result is merged" >&2
  exit 2
fi
mkdir -p "$OUT"
END=$(($(date +%s) + BUDGET))
export OUT DEVICE EPOCHS SPLITS END OMP_NUM_THREADS=1 TQDM_DISABLE=1 PYTHONUNBUFFERED=1

heterophilous="minesweeper actor squirrel_filtered chameleon_filtered"
models="polynormer regcn_polynormer gcnii fagcn regcn regcn_signed regcn_sep gat sage gcn dir_gcn dir_sage
        gprgnn appnp linkx mlp"
{
  for m in $models; do for d in $heterophilous; do echo "$d $m"; done; done
  for d in squirrel_filtered_directed chameleon_filtered_directed; do
    for m in regcn_dir dir_gcn dir_sage regcn gcn; do echo "$d $m"; done
  done
  for d in pubmed citeseer cora; do for m in regcn_polynormer regcn gcn; do echo "$d $m"; done; done
} | xargs -P "$JOBS" -L 1 bash -c 'left=$((END - $(date +%s)))
  (( left > 5 )) || { echo "$0 $1: skipped, the budget is spent"; exit 0; }
  timeout "$left" python3 -m examples.heterophily \
    --dataset "$0" --models "$1" --device "$DEVICE" --epochs "$EPOCHS" --splits "$SPLITS" \
    --json "$OUT/$0-$1.json" > "$OUT/$0-$1.log" 2>&1 || echo "$0 $1: exit $?"'

python3 -m examples.heterophily --merge "$OUT"/*-*.json --json "$OUT/heterophily.json" \
  | tee "$OUT/summary.txt"

#!/usr/bin/env bash
# Runs one fuzz target (or every target) for a while: ./fuzz/run.sh [TARGET|all] [SECONDS].
#
# New inputs go to fuzz/corpus-run/TARGET (scratch, not committed), seeded from the committed
# fuzz/corpus/TARGET; the parser targets also read the full kubelet fixtures (testdata/kubelet
# and ../shared/fixtures/kubelet when present) as extra seeds. Crashes land in
# fuzz/artifacts/TARGET. Builds without a sanitizer (`-s none`), which works on stable Rust;
# CARGO_BUILD_JOBS=1 keeps the build on one core of a shared machine.
set -euo pipefail
cd "$(dirname "$0")"

TARGETS=(resource_parse summary_parse gunzip selectors quantity accept requestheader yaml)
target=${1:-all}
seconds=${2:-600}

if [ "$target" = all ]; then
  for t in "${TARGETS[@]}"; do ./run.sh "$t" "$seconds"; done
  exit 0
fi

dict=""
fixtures=""
case "$target" in
  resource_parse) dict=prometheus; fixtures='metrics-resource-*.txt' ;;
  summary_parse) dict=summary; fixtures='stats-summary-*.json' ;;
  selectors | accept | requestheader) dict=$target ;;
  quantity | gunzip | yaml) ;;
  *) echo "unknown target $target (one of: ${TARGETS[*]}, all)" >&2; exit 2 ;;
esac

run_dir=corpus-run/$target
mkdir -p "$run_dir"
for f in corpus/"$target"/*; do
  [ -e "$run_dir/$(basename "$f")" ] || cp "$f" "$run_dir"/
done
dirs=("$run_dir")
if [ -n "$fixtures" ]; then
  seeds=$(mktemp -d)
  trap 'rm -rf "$seeds"' EXIT
  for d in ../testdata/kubelet ../../shared/fixtures/kubelet; do
    [ -d "$d" ] || continue
    for f in "$d"/$fixtures; do cp "$f" "$seeds/$(basename "$(dirname "$d")")-$(basename "$f")"; done
  done
  dirs+=("$seeds")
fi
args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
[ -n "$dict" ] && args+=(-dict=dict/$dict.dict)

cargo fuzz run "$target" -s none "${dirs[@]}" -- "${args[@]}"

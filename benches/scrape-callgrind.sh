#!/usr/bin/env bash
# Instructions per scrape of the release server, counted by callgrind: repeatable on a machine
# whose wall-clock CPU figures move by a fifth from one hour to the next.
#
# The scale harness runs the server under valgrind, counting only inside a node's scrape
# (`scraper::scrape::node::scrape`: the request, TLS, inflating, parsing, the store's ingest);
# the counters are zeroed when the harness's window starts (two steady periods later) and
# dumped when it ends, so the count covers exactly the window's scrapes, which the harness
# prints. Prints the instructions per scrape and the callgrind file, for
# `callgrind_annotate --inclusive=yes FILE`.
#
#   cargo build --release -p apiserver --bin metrics-server -p benches --bin scale
#   benches/scrape-callgrind.sh [NODES] [SERVER_BIN]      # 200 nodes, target/release/metrics-server
#   TOGGLE= benches/scrape-callgrind.sh ...                # count every instruction of the window, not only a scrape's
#
# Under valgrind the server runs ~50x slower: 200 nodes at 15 s take ~15 % of a core.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
nodes=${1:-200}
bin=$(realpath "${2:-$root/target/release/metrics-server}")
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

work=$(mktemp -d /tmp/scrape-callgrind-XXXXXX)
cat > "$work/server.sh" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.out.%p \\
  ${TOGGLE---toggle-collect='*scrape*node*scrape*'} "$bin" "\$@"
EOF
chmod +x "$work/server.sh"

log="$work/scale.log"
: > "$log"
"$root/target/release/scale" --nodes "$nodes" --duration 30s --warmup-periods 1 --lists 1 \
  --server-bin "$work/server.sh" > "$log" 2>&1 &
harness=$!
wait_for() {
  until grep -q "$1" "$log"; do
    if ! kill -0 "$harness" 2>/dev/null; then
      cat "$log" >&2
      exit 1
    fi
    sleep 0.2
  done
}
wait_for "steady:"
pid=$(pgrep -f "valgrind.*$work/callgrind.out" | head -1)
callgrind_control -z "$pid" >/dev/null 2>&1
wait_for "measured window"
callgrind_control -d "$pid" >/dev/null 2>&1
wait "$harness"

scrapes=$(sed -nE 's/.*scrapes: ([0-9]+) ok, ([0-9]+) failed.*/\1/p' "$log")
failed=$(sed -nE 's/.*scrapes: ([0-9]+) ok, ([0-9]+) failed.*/\2/p' "$log")
out="$work/callgrind.out.$pid.1"
total=$(sed -nE 's/^summary: ([0-9]+).*/\1/p' "$out")
if [ -z "$scrapes" ] || [ "$scrapes" -eq 0 ] || [ "$failed" -ne 0 ]; then
  echo "the window had $scrapes scrapes, $failed failed; see $log" >&2
  exit 1
fi
echo "scrapes in the window: $scrapes; instructions: $total; per scrape: $((total / scrapes))"
echo "profile: $out"

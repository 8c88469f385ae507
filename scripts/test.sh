#!/usr/bin/env bash
# The project's test command (README, .ci/run): formatting, vet, then every test, including the
# ones against a real ZooKeeper that zkstate/zktest starts per package through scripts/zookeeper.sh.
# Set ZKBRIDGE_REQUIRE_ZK=1 to fail instead of skipping when ZooKeeper is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
# -race: the shells (connections, actors, the ZooKeeper store) are concurrent by design.
# -parallel 4: the independent integration tests (t.Parallel) mostly wait on timers, so four at a
# time beat the default (GOMAXPROCS, 2 in CI). On 2 cores busy with other work (load 10-15),
# bridge took 381 s with none of them in parallel, 278 s two at a time and 186-241 s four at a
# time. A later -parallel in "$@" wins.
go test -race -count=1 -timeout 15m -parallel 4 "$@" ./...

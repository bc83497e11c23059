#!/usr/bin/env bash
# go vet and go test on the real kernel, against target/release/libperfbuf.so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
export CGO_CFLAGS="-I$top/include"
export CGO_LDFLAGS="-L$top/target/release -Wl,-rpath,$top/target/release"
export GOFLAGS="-mod=mod"
cd "$here"
go vet ./...
go build -o /dev/null ./examples/dump
go test -count=1 -v ./... 2>&1 | grep -v "^=== RUN"
# The lifetime of the C buffer under concurrent Close, with the race detector.
go test -count=1 -race -run 'TestCloseDuringControls|TestCloseUnblocksRead|TestPauseResume' ./ 2>&1 | grep -v "^=== RUN"

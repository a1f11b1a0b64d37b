module trainguard.dev/bench/loadgen

go 1.22

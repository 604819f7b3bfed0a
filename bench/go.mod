module github.com/dlock-dev/dlock/bench

go 1.25.0

require (
	github.com/bsm/redislock v0.9.4
	github.com/dlock-dev/dlock v0.1.0
	github.com/go-redsync/redsync/v4 v4.17.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace github.com/dlock-dev/dlock => ../

package doctor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/doctor"
)

// Check a Redis before relying on it for locks. The example's server runs
// without persistence, hence the warning.
func ExampleCheck() {
	rdb := redis.NewClient(&redis.Options{Addr: doctor.SharedAddr()}) // e.g. "localhost:6379"
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	report, err := doctor.Check(ctx, rdb, doctor.Options{})
	if err != nil {
		fmt.Println("doctor:", err) // errors.Is(err, doctor.ErrUnreachable) when Redis cannot be reached
		return
	}
	for _, c := range report.Checks {
		fmt.Println(c.Status, c.Name) // c.Detail says what was found and why it matters
	}
	fmt.Println("worst:", report.Status())
	// Output:
	// ok version
	// ok mode
	// ok scripting
	// ok pubsub
	// ok keys
	// ok eviction
	// warn persistence
	// ok replicas
	// worst: warn
}

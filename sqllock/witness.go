package sqllock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock"
)

// WitnessTable is the table in which Lockers record when each dlock Client
// last reached Redis (dlock.RedisWitness, for dlock.FallbackStrict). It is
// created on first use: client_key (a hash of the client id) and seen_us
// (the database clock, in microseconds). A database user without CREATE
// needs it made by hand (see the package documentation); the Locker then
// only reads and writes it.
const WitnessTable = "dlock_redis_seen"

var _ dlock.RedisWitness = (*Locker)(nil)

// SawRedis implements dlock.RedisWitness: it records that client reached
// Redis now, by the database's clock, in one statement on a pooled
// session, bounded by OpTimeout. Safe for concurrent use.
func (l *Locker) SawRedis(ctx context.Context, client string) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.opTimeout)
	defer cancel()
	if err := l.witnessTable(ctx); err != nil {
		return err
	}
	var q string
	switch l.d.(type) {
	case mysqlDialect:
		q = "INSERT INTO " + WitnessTable + " (client_key, seen_us) VALUES (?, " + mysqlNowMicros + ") ON DUPLICATE KEY UPDATE seen_us = " + mysqlNowMicros
	default:
		q = "INSERT INTO " + WitnessTable + " (client_key, seen_us) VALUES ($1, " + pgNowMicros + ") ON CONFLICT (client_key) DO UPDATE SET seen_us = EXCLUDED.seen_us"
	}
	_, err := l.db.ExecContext(ctx, q, witnessKey(client))
	return err
}

// OthersSawRedis implements dlock.RedisWitness: whether a client other than
// client recorded reaching Redis within the last d, by the database's
// clock; the question is bounded by OpTimeout. Safe for concurrent use.
func (l *Locker) OthersSawRedis(ctx context.Context, client string, d time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.opTimeout)
	defer cancel()
	if err := l.witnessTable(ctx); err != nil {
		return false, err
	}
	var q string
	switch l.d.(type) {
	case mysqlDialect:
		q = "SELECT COUNT(*) FROM " + WitnessTable + " WHERE client_key <> ? AND seen_us > " + mysqlNowMicros + " - ?"
	default:
		q = "SELECT COUNT(*) FROM " + WitnessTable + " WHERE client_key <> $1 AND seen_us > " + pgNowMicros + " - $2"
	}
	var n int64
	if err := l.db.QueryRowContext(ctx, q, witnessKey(client), d.Microseconds()).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

func (l *Locker) witnessTable(ctx context.Context) error {
	if l.witnessReady.Load() {
		return nil
	}
	var q string
	switch l.d.(type) {
	case mysqlDialect:
		q = "CREATE TABLE IF NOT EXISTS " + WitnessTable + " (client_key VARCHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY, seen_us BIGINT NOT NULL) ENGINE=InnoDB"
	default:
		q = "CREATE TABLE IF NOT EXISTS " + WitnessTable + " (client_key TEXT PRIMARY KEY, seen_us BIGINT NOT NULL)"
	}
	if err := createOrFind(ctx, l.db, l.cfg.opTimeout, q, "SELECT client_key, seen_us FROM "+WitnessTable+" WHERE 1 = 0"); err != nil {
		return fmt.Errorf("sqllock: witness table: %w", err)
	}
	l.witnessReady.Store(true)
	return nil
}

func witnessKey(client string) string {
	sum := sha256.Sum256([]byte(client))
	return hex.EncodeToString(sum[:16])
}

package lease

import (
	"context"
	"log/slog"
	"strings"

	"github.com/dlock-dev/dlock/doctor"
)

// firstContact runs the doctor's checks once, in the background, when the
// engine first acquires (Config.Report): an operator learns from the log,
// once per check, that this Redis cannot hold locks safely (an evicting
// policy, scripting or pub/sub denied, a version too old, ...). It changes
// nothing else: the acquisition goes on. The warnings go to
// Config.ReportLogger, slog.Default() unless the user chose a logger: a
// safety warning that nobody sees warns nobody.
func (e *Engine) firstContact() {
	if !e.Cfg.Report {
		return
	}
	e.reported.Do(func() {
		e.Detach(func(ctx context.Context) {
			rep, err := doctor.Check(ctx, e.rdb, doctor.Options{
				Namespace:      strings.TrimSuffix(e.Cfg.Space.Prefix(), ":"),
				ReplicaAck:     e.Cfg.Replicas,
				ReplicaTimeout: e.Cfg.ReplicaTimeout,
			})
			if err != nil {
				e.Cfg.Logger.Debug("dlock: the first-contact checks did not finish", "err", err)
				return
			}
			log := e.Cfg.ReportLogger
			if log == nil {
				log = slog.Default()
			}
			for _, f := range rep.Failed() {
				log.Warn("dlock: this Redis cannot hold locks safely", "check", f.Name, "detail", f.Detail)
			}
		})
	})
}

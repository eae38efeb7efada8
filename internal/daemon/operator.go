package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/units"
)

// The operator's commands on the event path (`bridge cursor show`, `bridge cursor restart`) and the units
// view (`bridge units rebuild`): the daemon connects to NATS as it does for itself; the event path
// (internal/publish) and the view (internal/units) do the rest.

// Cursor is where the event path stands, as `bridge cursor show` prints it.
type Cursor = publish.Cursor

// ShowCursor reads the resume cursor from the events stream's tail, as a new leader would, and the lease's
// holder. It changes nothing.
func ShowCursor(ctx context.Context, cfg *config.Config) (Cursor, error) {
	nc, streams, err := operatorConn(ctx, cfg)
	if err != nil {
		return Cursor{}, err
	}
	defer nc.Close()
	return publish.ShowCursor(ctx, nc, streams, cfg.PublishWindow)
}

// RequestRestart makes the next leader resume the upstream stream after the event id after, or from the
// beginning, through the lease (publish.RestartCursor); it is safe while bridges run.
func RequestRestart(ctx context.Context, cfg *config.Config, after string, beginning bool) (string, error) {
	if err := publish.CheckRestart(after, beginning); err != nil { // before connecting
		return "", err
	}
	nc, streams, err := operatorConn(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	return publish.RestartCursor(ctx, nc, streams, cfg.LeaseTTL, after, beginning)
}

// operatorConn connects to NATS for an operator's command, failing rather than waiting for a server.
func operatorConn(ctx context.Context, cfg *config.Config) (*nats.Conn, layout.Streams, error) {
	streams := layout.Streams{Prefix: cfg.SubjectPrefix}
	nc, _, err := connectNATS(cfg, natsName, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, streams, err
	}
	connected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(connected)
	if !nc.IsConnected() {
		select {
		case <-connected:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
		}
	}
	if !nc.IsConnected() {
		nc.Close()
		return nil, streams, fmt.Errorf("NATS %s: not reachable", cfg.NATSURL)
	}
	return nc, streams, nil
}

// Rebuilt is what `bridge units rebuild` did.
type Rebuilt = units.Rebuilt

// RebuildUnits makes the units view start again from the events stream's first event, emptying its bucket
// first with purge (units.Rebuild); it is safe while bridges run.
func RebuildUnits(ctx context.Context, cfg *config.Config, purge bool) (Rebuilt, error) {
	nc, streams, err := operatorConn(ctx, cfg)
	if err != nil {
		return Rebuilt{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Rebuilt{}, err
	}
	return units.Rebuild(ctx, js, streams, units.DefaultDurable, purge)
}

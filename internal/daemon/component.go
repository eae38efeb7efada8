package daemon

import (
	"context"
	"fmt"

	"github.com/oklog/run"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
)

// part is one entry of the bridge's list of parts (Daemon.parts): the name of its /readyz check and what
// answers it. Most parts are components (component.Component): the run group runs them, /readyz asks
// their Ready. The others are states the daemon checks without running anything (the streams, which Run
// provisions before the group starts).
type part struct {
	name string
	c    component.Component // nil for a check alone
	// check is the readiness of a part that is not a component.
	check func(ctx context.Context) error
	// what names the part in its Run error, when the component's errors do not name it themselves.
	what string
	// notReadiness keeps the part out of /readyz: its state shows in its own section of /status.
	notReadiness bool
}

// statusWriter is a part that contributes its section to /status.
type statusWriter interface {
	status(doc *statusDoc)
}

// ready returns the part's readiness check, for /readyz.
func (p part) ready() func(context.Context) error {
	if p.c == nil {
		return p.check
	}
	return func(context.Context) error { return p.c.Ready() }
}

// runParts runs the components among parts in one group (oklog/run) until ctx is done or one of them
// returns; then stopAll, which must cancel ctx, stops them all: cancelling its context is the one way to
// stop a component. It returns when every component returned, with each part's Run error in the order
// of parts (nil for a part that is not a component).
func (d *Daemon) runParts(ctx context.Context, stopAll context.CancelFunc, parts []part) []error {
	errs := make([]error, len(parts))
	var g run.Group
	for i, p := range parts {
		if p.c == nil {
			continue
		}
		g.Add(func() error {
			err := p.c.Run(ctx)
			if err != nil && p.what != "" {
				err = fmt.Errorf("%s: %w", p.what, err)
			}
			if err != nil {
				if ctx.Err() == nil {
					d.log.Error("a part failed; stopping", "part", p.name, "err", err)
				} else {
					d.log.Error("a part failed while stopping", "part", p.name, "err", err)
				}
			}
			errs[i] = err
			return err
		}, func(error) { stopAll() })
	}
	_ = g.Run() // errs has every part's error
	return errs
}

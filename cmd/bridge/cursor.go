package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
)

func cursorUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  bridge cursor show [-json]
        the point the next leader resumes the upstream stream after (read from the events stream's
        tail, as a leader does) and the lease's holder
  bridge cursor restart -after ID
  bridge cursor restart -from-beginning
        make the next leader resume the upstream stream after the event ID, or from its beginning:
        for a provider that lost its history, or to replay. It takes the lease (the leader steps
        down), stores markers on P.leader.> that fence out whatever it still has in flight and the
        directive, and releases the lease; whichever bridge leads next resumes there. Events still within the duplicate window are not
        stored twice; older ones are stored again.

Both use the BRIDGE_* configuration of 'bridge run' (NATS and the subject prefix).
`)
}

// cursorCommand is 'bridge cursor show|restart'.
func cursorCommand(ctx context.Context, args []string, stdout io.Writer) error {
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("bridge cursor "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print JSON")
	after := fs.String("after", "", "resume after this event id")
	beginning := fs.Bool("from-beginning", false, "resume from the upstream's beginning")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Errorf("cursor %s: %w", sub, err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("cursor %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	switch {
	case sub != "show" && sub != "restart":
		return usageError{fmt.Errorf("cursor: unknown subcommand %q (show or restart)", sub)}
	case sub == "restart" && (*after == "") == !*beginning:
		return usageError{errors.New("cursor restart: give exactly one of -after ID and -from-beginning")}
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch sub {
	case "show":
		c, err := daemon.ShowCursor(ctx, cfg)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(c)
		}
		fmt.Fprintf(stdout, "stream:       %s\n", c.Stream)
		if c.ResumeAfter == "" {
			fmt.Fprintf(stdout, "resume after: (the upstream's beginning)\n")
		} else {
			fmt.Fprintf(stdout, "resume after: %s\n", c.ResumeAfter)
		}
		if c.LastEvent != "" {
			fmt.Fprintf(stdout, "last event:   %s\n", c.LastEvent)
		}
		if c.Holder == nil {
			fmt.Fprintf(stdout, "leader:       none\n")
		} else {
			fmt.Fprintf(stdout, "leader:       %s (pid %d, instance %s, epoch %d)\n", c.Holder.Name, c.Holder.PID,
				c.Holder.Instance, c.Holder.Epoch)
		}
		return nil
	default: // restart
		msg, err := daemon.RequestRestart(ctx, cfg, *after, *beginning)
		if msg != "" {
			fmt.Fprintln(stdout, msg)
		}
		return err
	}
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
)

func unitsUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  bridge units rebuild [-purge] [-json]
        build the units view (the bucket PFX_UNITS, the latest event of every loading unit) again from
        the events stream's first event, while bridges run: the bridges with BRIDGE_UNITS_VIEW=true take
        the stream's events again from there, then go on with new ones, which wait behind the replay.
        Without -purge, readers keep every value meanwhile: a value only moves to a later event, so the
        replay fills in what is missing and changes nothing else. With -purge the bucket is emptied
        first: a unit has no value (units.get answers 404) until the replay reaches its latest event;
        use it to drop units whose events are no longer in the stream.

It uses the BRIDGE_* configuration of 'bridge run' (NATS and the subject prefix).
`)
}

// unitsCommand is 'bridge units rebuild'.
func unitsCommand(ctx context.Context, args []string, stdout io.Writer) error {
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("bridge units "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	purge := fs.Bool("purge", false, "empty the bucket first")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Errorf("units %s: %w", sub, err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("units %s: unexpected argument %q", sub, fs.Arg(0))}
	}
	if sub != "rebuild" {
		return usageError{fmt.Errorf("units: unknown subcommand %q (rebuild)", sub)}
	}
	cfg, err := config.FromEnv()
	if err != nil {
		return usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := daemon.RebuildUnits(ctx, cfg, *purge)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if *purge {
		fmt.Fprintf(stdout, "bucket %s emptied (%d values)\n", r.Bucket, r.Purged)
	}
	fmt.Fprintf(stdout, "units view rebuilding from %s sequence %d (newest now %d)\n", r.Stream, r.From, r.Last)
	return nil
}

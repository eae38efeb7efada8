// Command gate-events is an example of a downstream service built on package tracking: it reads the
// gate events (GATE_IN, GATE_OUT) a tracking-bridge publishes to JetStream and prints one line for each.
//
//	go run ./examples/gate-events -server nats://127.0.0.1:4222
//	go run ./examples/gate-events -durable gate-monitor -from-start
//	go run ./examples/gate-events -unit MSKU1234565 -from-start
//
// With -durable the consumer keeps its place while the program is not running, and several copies with
// the same name share the events. With -unit it follows one container (or several, comma-separated):
// JetStream delivers only that unit's gate events, by their subjects. Ctrl-C stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/tracking"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run reads gate events until ctx is done and returns the exit code: 0 after ctx is done, 2 for a usage
// error, 1 for any other failure.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gate-events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", nats.DefaultURL, "NATS server URL")
	prefix := fs.String("prefix", tracking.DefaultPrefix, "the bridge's subject prefix (BRIDGE_SUBJECT_PREFIX)")
	durable := fs.String("durable", "", "name of a durable JetStream consumer; empty for an ephemeral one")
	fromStart := fs.Bool("from-start", false, "a new consumer starts at the first stored event, not at the next one")
	units := fs.String("unit", "", "only the gate events of these loading units, comma-separated numbers as written (MSKU 123456-5 or MSKU1234565)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	nc, err := nats.Connect(*server, nats.Name("gate-events example"))
	if err != nil {
		fmt.Fprintf(stderr, "gate-events: %v\n", err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "gate-events: %v\n", err)
		return 1
	}
	deliver := jetstream.DeliverNewPolicy
	if *fromStart {
		deliver = jetstream.DeliverAllPolicy
	}
	cfg := tracking.EventConsumerConfig{
		Prefix:   *prefix,
		Types:    []string{"GATE_IN", "GATE_OUT"},
		Consumer: jetstream.ConsumerConfig{Durable: *durable, DeliverPolicy: deliver},
		Malformed: func(e *tracking.MalformedEventError) {
			fmt.Fprintf(stderr, "gate-events: skipped: %v\n", e)
		},
	}
	if *units != "" {
		cfg.Units = strings.Split(*units, ",")
	}
	if err := watch(ctx, js, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "gate-events: %v\n", err)
		return 1
	}
	return 0
}

// watch prints every gate event until ctx is done.
func watch(ctx context.Context, js jetstream.JetStream, cfg tracking.EventConsumerConfig, out io.Writer) error {
	events, err := tracking.NewEventConsumer(ctx, js, cfg)
	if err != nil {
		return err
	}
	filters := tracking.Subjects{Prefix: cfg.Prefix}.EventFilters(cfg.Types, cfg.Units)
	fmt.Fprintf(out, "waiting for %s on %s\n", strings.Join(cfg.Types, " and "), strings.Join(filters, " "))
	return events.Consume(ctx, func(_ context.Context, ev *tracking.Event) error {
		fmt.Fprintln(out, line(ev))
		return nil // acknowledged: this consumer will not see it again
	})
}

// line describes a gate event: when, which gate event, which unit, which truck, where.
func line(ev *tracking.Event) string {
	d := ev.Data
	parts := []string{d.Timestamp.UTC().Format(time.RFC3339), fmt.Sprintf("%-8s", ev.Type), ev.ID}
	if o := d.Observation; o != nil {
		if u := o.ObservedLoadingUnit; u != nil && u.LoadingUnit != nil && u.LoadingUnit.Number != nil {
			parts = append(parts, "unit "+*u.LoadingUnit.Number)
		}
		if m := o.ObservedMeansOfTransport; m != nil && m.Truck != nil && m.Truck.LicensePlate != nil {
			parts = append(parts, "truck "+*m.Truck.LicensePlate)
		}
		if l := o.Location; l != nil {
			parts = append(parts, "at "+l.Designation)
		}
	}
	return strings.Join(parts, "  ")
}

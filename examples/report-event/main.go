// Command report-event is an example of a producer built on package tracking: it reports one tracking
// event, read from a JSON file or built from flags, for a tracking-bridge to send upstream.
//
//	go run ./examples/report-event -file examples/report.json -key scanner7-000042
//	go run ./examples/report-event -order TO03804118 -position 10 -type GATE_OUT -plate "HH-EX 4711"
//	go run ./examples/report-event -file examples/report.json -sync
//
// By default the report goes through JetStream (P.reports) and the program ends once it is stored: the
// bridge sends it upstream, retrying while the upstream fails, or dead-letters it with its reason. With
// -sync it goes through the request-reply API instead (P.api.tracking.report), and the program ends
// when the upstream has answered. Either way the key (Nats-Msg-Id, Idempotency-Key upstream) makes a
// repeat harmless: run it again with the same -key after a failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/tracking"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the program's flags.
type options struct {
	server, prefix, file, key            string
	order, position, typ, at, plate, who string
	sync                                 bool
	timeout                              time.Duration
}

// run reports the event and returns the exit code: 0 when it is stored (or, with -sync, accepted
// upstream), 2 for a usage error, 1 for any other failure.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report-event", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.server, "server", nats.DefaultURL, "NATS server URL")
	fs.StringVar(&o.prefix, "prefix", tracking.DefaultPrefix, "the bridge's subject prefix (BRIDGE_SUBJECT_PREFIX)")
	fs.StringVar(&o.file, "file", "", "a TrackingEventReport as JSON, sent as it is; - reads standard input")
	fs.StringVar(&o.key, "key", "", "the report's idempotency key (Nats-Msg-Id); empty generates one")
	fs.StringVar(&o.order, "order", "", "without -file: the order id")
	fs.StringVar(&o.position, "position", "", "without -file: the position id")
	fs.StringVar(&o.typ, "type", "GATE_IN", "without -file: the event type")
	fs.StringVar(&o.at, "time", "", "without -file: the event time, RFC 3339; empty is now")
	fs.StringVar(&o.plate, "plate", "", "without -file: the truck's licence plate, if any")
	fs.StringVar(&o.who, "reporter", "report-event example", "without -file: the reporter's name")
	fs.BoolVar(&o.sync, "sync", false, "report through the request-reply API and wait for the upstream's answer")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the acknowledgement or the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.file == "" && (o.order == "" || o.position == "") {
		fmt.Fprintln(stderr, "report-event: give -file, or -order and -position")
		return 2
	}
	if err := report(ctx, o, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "report-event: %v\n", err)
		return 1
	}
	return 0
}

// report sends the report o describes.
func report(ctx context.Context, o options, stdin io.Reader, stdout io.Writer) error {
	var body []byte
	var err error
	switch o.file {
	case "":
		body, err = fromFlags(o)
	case "-":
		body, err = io.ReadAll(stdin)
	default:
		body, err = os.ReadFile(o.file)
	}
	if err != nil {
		return err
	}
	nc, err := nats.Connect(o.server, nats.Name("report-event example"))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if o.sync {
		var r tracking.TrackingEventReport
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("%s: not a TrackingEventReport: %w", o.file, err)
		}
		if err := tracking.NewClient(nc, o.prefix).ReportEvent(ctx, r, o.key); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "accepted upstream")
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rc, err := tracking.NewReporter(js, o.prefix).ReportJSON(ctx, body, o.key)
	if err != nil {
		return err
	}
	if rc.Duplicate {
		fmt.Fprintf(stdout, "already stored: %s #%d (Nats-Msg-Id %s); not stored again\n", rc.Stream, rc.Sequence, rc.MsgID)
	} else {
		fmt.Fprintf(stdout, "stored: %s #%d (Nats-Msg-Id %s); the bridge sends it upstream\n", rc.Stream, rc.Sequence, rc.MsgID)
	}
	return nil
}

// fromFlags builds the report from the flags.
func fromFlags(o options) ([]byte, error) {
	at := time.Now().UTC().Truncate(time.Second)
	if o.at != "" {
		t, err := time.Parse(time.RFC3339, o.at)
		if err != nil {
			return nil, fmt.Errorf("-time: %w", err)
		}
		at = t
	}
	r := tracking.TrackingEventReport{
		Order:    &tracking.IncomingTrackingOrder{OrderId: o.order, PositionId: o.position},
		Event:    tracking.TrackingEvent{Timestamp: at, Type: o.typ},
		Reporter: &tracking.Operator{Name: &o.who},
	}
	if o.plate != "" {
		r.Event.Observation = &tracking.Observation{ObservedMeansOfTransport: &tracking.MeansOfTransportObservation{
			ModeOfTransport: new(tracking.ModeOfTransportTRUCK), Truck: &tracking.Truck{LicensePlate: &o.plate}}}
	}
	return json.Marshal(r)
}

package lease_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/lease"
)

// A bridge competes for the lease and starts or stops its upstream reader as leadership comes and goes.
// It runs until SIGTERM, then stops leading and releases the lease so that a standby takes over at once.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	l, err := lease.New(js, lease.Config{
		Bucket:   "TRACKING_LEASES",
		TTL:      10 * time.Second,
		Replicas: 3,
		OnChange: func(leading bool) {
			if leading {
				log.Print("start reading the upstream stream")
			} else {
				log.Print("stop reading and publishing; return once nothing more can be published")
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

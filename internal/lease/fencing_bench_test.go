package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// BenchmarkFencing compares, for docs/replicas.md, the ways a leader can publish events: plain asynchronous
// publishes (the publisher before the fence, unfenced), one publish at a time with an expected last
// sequence on a leader epoch subject, and atomic batches whose first message carries that check, with
// several batches in flight.
// It speaks the atomic batch protocol with raw headers (Nats-Batch-Id, -Sequence, -Commit), as
// orbit.go/jetstreamext does, to need no new module. Run: go test -run '^$' -bench Fencing -benchtime 20000x.
func BenchmarkFencing(b *testing.B) {
	for _, backend := range []string{"server", "R3"} {
		b.Run(backend, func(b *testing.B) {
			var nc *nats.Conn
			replicas := 1
			if backend == "server" {
				nc = testutil.StartNATS(b, nil).Connect()
			} else {
				nc = testutil.StartCluster(b).Connect()
				replicas = 3
			}
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			stream := 0
			const fenceSubjects = 4
			newStream := func(b *testing.B) (epoch uint64, prefix string) {
				b.Helper()
				stream++
				prefix = fmt.Sprintf("s%d", stream)
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{
					Name: fmt.Sprintf("EV%d", stream), Subjects: []string{prefix + ".>"}, Replicas: replicas,
					AllowAtomicPublish: true, Duplicates: time.Minute,
				})
				if err != nil {
					b.Fatal(err)
				}
				// One fence subject per batch that may be in flight; the new leader writes its epoch to each.
				for k := range fenceSubjects {
					ack, err := js.Publish(ctx, fmt.Sprintf("%s.leader.%d", prefix, k), []byte("epoch"))
					if err != nil {
						b.Fatal(err)
					}
					epoch = ack.Sequence - uint64(k)
				}
				return epoch, prefix
			}
			data := make([]byte, 400)

			b.Run("async-unfenced", func(b *testing.B) {
				_, prefix := newStream(b)
				b.ResetTimer()
				for i := range b.N {
					m := &nats.Msg{Subject: prefix + ".events.X", Data: data, Header: nats.Header{}}
					m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
					if _, err := js.PublishMsgAsync(m); err != nil {
						b.Fatal(err)
					}
				}
				<-js.PublishAsyncComplete()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})

			b.Run("per-message-check-sync", func(b *testing.B) {
				epoch, prefix := newStream(b)
				b.ResetTimer()
				for i := range b.N {
					m := &nats.Msg{Subject: prefix + ".events.X", Data: data, Header: nats.Header{}}
					m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
					_, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(epoch, prefix+".leader.0"))
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})

			b.Run("per-message-check-async", func(b *testing.B) {
				epoch, prefix := newStream(b)
				var refused int
				b.ResetTimer()
				futures := make([]jetstream.PubAckFuture, 0, b.N)
				for i := range b.N {
					m := &nats.Msg{Subject: prefix + ".events.X", Data: data, Header: nats.Header{}}
					m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
					f, err := js.PublishMsgAsync(m, jetstream.WithExpectLastSequenceForSubject(epoch, prefix+".leader.0"))
					if err != nil {
						b.Fatal(err)
					}
					futures = append(futures, f)
				}
				<-js.PublishAsyncComplete()
				for _, f := range futures {
					select {
					case <-f.Err():
						refused++
					default:
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				b.ReportMetric(float64(refused)/float64(b.N), "refused/msg")
			})

			for _, size := range []int{100, 1000} {
				for _, c := range []struct{ inflight, subjects int }{{1, 1}, {1, 4}, {4, 1}, {4, 4}} {
					b.Run(fmt.Sprintf("batch-%d-inflight-%d-subjects-%d", size, c.inflight, c.subjects), func(b *testing.B) {
						epoch, prefix := newStream(b)
						fencedBatches(b, nc, prefix, epoch, data, size, c.inflight, c.subjects)
					})
				}
			}
		})
	}
}

// fencedBatches publishes b.N messages as atomic batches of size, each one's first message checking the
// last sequence of a leader subject (batch i the subject i mod subjects, whose epoch message has the
// sequence epoch+i mod subjects), with up to inflight batches awaiting their commit's answer.
func fencedBatches(b *testing.B, nc *nats.Conn, prefix string, epoch uint64, data []byte, size, inflight, subjects int) {
	slots := make(chan struct{}, inflight)
	// A fence subject takes a new batch only once the last one checking it was answered.
	free := make([]chan struct{}, subjects)
	for k := range free {
		free[k] = make(chan struct{}, 1)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refused, failed int
	var refusedIDs []int
	var firstErr error
	b.ResetTimer()
	for start, batch := 0, 0; start < b.N; start, batch = start+size, batch+1 {
		n := min(size, b.N-start)
		id := fmt.Sprintf("%s-%d", prefix, batch)
		slots <- struct{}{}
		free[batch%subjects] <- struct{}{}
		k := batch % subjects
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			b.Fatal(err)
		}
		for j := range n {
			m := &nats.Msg{Subject: prefix + ".events.X", Data: data, Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(start+j))
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(j+1))
			if j == 0 {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(epoch, 10))
				m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, prefix+".leader.0")
			}
			if j == n-1 {
				m.Header.Set("Nats-Batch-Commit", "1")
				m.Reply = inbox
			}
			if err := nc.PublishMsg(m); err != nil {
				b.Fatal(err)
			}
		}
		wg.Add(1)
		batch := batch
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer func() { <-free[k] }()
			defer func() { _ = sub.Unsubscribe() }()
			resp, err := sub.NextMsg(30 * time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				firstErr = errors.Join(firstErr, err)
				return
			}
			var ack struct {
				Error *struct {
					Code        int    `json:"err_code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if jerr := json.Unmarshal(resp.Data, &ack); jerr != nil || ack.Error != nil {
				refused++
				refusedIDs = append(refusedIDs, batch)
				if firstErr == nil {
					firstErr = fmt.Errorf("%s", resp.Data)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(refused), "refused-batches")
	if failed > 0 || refused > 0 {
		b.Logf("%d batches refused (%v), %d unanswered; first error: %v", refused, refusedIDs[:min(len(refusedIDs), 12)], failed, firstErr)
	}
}

// Package lease elects one leader among the bridges that share a subject prefix: the holder of a key in a
// JetStream key-value bucket with a per-key TTL (docs/replicas.md#the-lease). The leader
// renews the key well inside the TTL and stops leading, by its own monotonic clock, before the key can have
// expired; a clean stop deletes the key so that a standby takes over at once; standbys watch the key and
// create it when it is deleted or expires. A key holding anything but a bridge's lease (another client's
// write, which has no TTL and would never expire) does not end a term: the leader writes its lease back over
// it at once; for the standbys it counts as the lease it replaced never renewed, so they take it over one TTL
// after they last saw that lease, however many foreign writes follow.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Defaults of Config.
const (
	DefaultKey = "events"
	DefaultTTL = 10 * time.Second
)

// Config configures a Lease. Zero values take the defaults named on each field.
type Config struct {
	// Bucket is the key-value bucket, PFX_LEASES by default (docs/subjects.md#streams); required. It is created
	// when missing.
	Bucket string
	// Key is the lease's key in the bucket; DefaultKey when empty.
	Key string
	// TTL is how long the key lives without a renewal; DefaultTTL when zero. The server counts per-message
	// TTLs in whole seconds and refuses less than one, so it must be a whole number of seconds, at least 1s.
	TTL time.Duration
	// Replicas of the bucket when Run creates it; 1 when zero. An existing bucket is left as it is.
	Replicas int
	// RenewInterval is the time from one renewal request to the next; TTL/4 when zero.
	RenewInterval time.Duration
	// Margin is how long before the key can expire the leader stops leading when it could not renew, time
	// for the daemon to stop publishing; TTL/5 when zero. RenewInterval must be shorter than TTL - Margin.
	Margin time.Duration
	// RetryInterval is how often a standby tries to take the key even when its watch saw no change, a
	// backstop for watch updates lost across reconnections; TTL/2 when zero.
	RetryInterval time.Duration
	// Name identifies this process in the key (a pod or host name); the host name when empty.
	Name string
	// OnChange, when set, is called from Run's goroutine with true when this process becomes leader and
	// false when it must stop leading. Calls alternate and start with true. OnChange(true) should return
	// quickly, since renewals wait for it; OnChange(false) may block until reading and publishing have
	// stopped, since a clean stop releases the key only after it returns.
	OnChange func(leading bool)
	// OnForeignWrite, when set, is called from Run's goroutine for each value another client than a bridge
	// wrote into the key (for a metric).
	OnForeignWrite func()
	// Logger receives one line per change of leadership; slog.Default() when nil.
	Logger *slog.Logger
}

// Holder identifies the holder of the lease, as stored in the key.
type Holder struct {
	// Name is the holder's pod or host name.
	Name string `json:"name"`
	// PID is the holder's process id.
	PID int `json:"pid"`
	// Instance is random per Lease, so that two processes with the same name and pid (two containers) and a
	// process that restarted are told apart.
	Instance string `json:"instance"`
	// Epoch is the key's revision when the holder acquired it: it grows with every change of leader and
	// stays the same across renewals, so it can fence a stale leader's writes.
	Epoch uint64 `json:"epoch,omitempty"`
	// Revision is the key's latest known revision; it grows with every renewal.
	Revision uint64 `json:"-"`
}

// Lease competes for the key, holds it while it can and reports leadership; see the package comment.
// Its methods are safe for concurrent use; Run runs at most once.
type Lease struct {
	js     jetstream.JetStream
	cfg    Config
	log    *slog.Logger
	self   Holder
	value  []byte // the key's value while this Lease leads (self, with the epoch once known)
	resign chan resignation
	// foreignLog holds the log lines of foreign writes to one a minute.
	foreignLog *logging.Limiter

	mu         sync.Mutex
	leading    bool
	validUntil time.Time          // this process may lead until then, by its monotonic clock
	renewedAt  time.Time          // when the last successful acquisition or renewal was sent
	holder     Holder             // the latest known holder; zero when nobody holds the key
	sawHolder  bool               // a holder was known at least once
	kv         jetstream.KeyValue // the bucket, once Run opened it
}

// New checks the configuration and returns a Lease for Run; it contacts nothing.
func New(js jetstream.JetStream, cfg Config) (*Lease, error) {
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: bucket is required", ErrConfig)
	}
	if cfg.Key == "" {
		cfg.Key = DefaultKey
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.TTL / 4
	}
	if cfg.Margin == 0 {
		cfg.Margin = cfg.TTL / 5
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = cfg.TTL / 2
	}
	var errs []error
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%w: TTL %v is not a whole number of seconds of at least 1s", ErrConfig, cfg.TTL))
	}
	if cfg.Margin <= 0 || cfg.RenewInterval <= 0 || cfg.RetryInterval <= 0 {
		errs = append(errs, fmt.Errorf("%w: margin, renew and retry intervals must be positive", ErrConfig))
	}
	if cfg.RenewInterval >= cfg.TTL-cfg.Margin {
		errs = append(errs, fmt.Errorf("%w: renew interval %v is not shorter than TTL %v - margin %v",
			ErrConfig, cfg.RenewInterval, cfg.TTL, cfg.Margin))
	}
	if cfg.Replicas < 1 || cfg.Replicas > 5 {
		errs = append(errs, fmt.Errorf("%w: replicas %d not in 1..5", ErrConfig, cfg.Replicas))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	l := &Lease{
		js:     js,
		cfg:    cfg,
		log:    cfg.Logger.With("component", "lease", "bucket", cfg.Bucket, "key", cfg.Key),
		self:   Holder{Name: cfg.Name, PID: os.Getpid(), Instance: hex.EncodeToString(b[:])},
		resign: make(chan resignation, 1),

		foreignLog: logging.NewLimiter(time.Minute, nil),
	}
	return l, nil
}

// Leading reports whether this process leads now: it holds the key and its last successful renewal was sent
// less than TTL - Margin ago by its monotonic clock. It turns false at that moment even before Run has
// noticed, so a publisher may check it before every write.
func (l *Lease) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading && time.Now().Before(l.validUntil)
}

// Resign asks Run to stop leading and release the key, for a leader that learnt it must not lead on: its
// writes were fenced out (another process took over behind its back), or its work fails. It applies only
// to the term of the given epoch (a request that comes late, after another term began, is dropped), and
// Run then acquires nothing for sitOut, so that a failing process leaves the lease to the others for a
// while. It returns at once.
func (l *Lease) Resign(epoch uint64, reason string, sitOut time.Duration) {
	select {
	case l.resign <- resignation{epoch: epoch, reason: reason, sitOut: sitOut}:
	default: // one is pending already
	}
}

// resignation is a Resign request.
type resignation struct {
	epoch  uint64
	reason string
	sitOut time.Duration
}

// Confirm reads the key and reports whether this process still holds it, whatever the watch has
// delivered so far: for a leader that just did something another may have raced (stored its fence
// markers), before it relies on it. A value no bridge wrote, found while this process leads, counts as
// held: no bridge can have taken the key over while this process's lease was valid, and Run writes the
// lease back over such a value at once.
func (l *Lease) Confirm(ctx context.Context) (bool, error) {
	l.mu.Lock()
	kv := l.kv
	l.mu.Unlock()
	if kv == nil { // Run has not opened the bucket yet
		return false, nil
	}
	// The bucket's handle Run opened: a read is one direct get, which the stream answers itself, not
	// the JetStream API (whose request queue any JetStream client of the server can keep busy).
	e, err := kv.Get(ctx, l.cfg.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lease bucket %s: %w", l.cfg.Bucket, err)
	}
	h, ok := holderOf(e)
	return (ok && h.Instance == l.self.Instance || isForeign(e)) && l.Leading(), nil
}

// Holder returns the latest known holder of the lease, this process or another, for /status; ok is false
// when the key is free or not known yet.
func (l *Lease) Holder() (h Holder, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holder, l.holder.Instance != ""
}

// SawHolder reports whether a holder of the lease, this process or another, was known at least once:
// from then on a standby knows where it stands, even while the key changes hands.
func (l *Lease) SawHolder() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sawHolder
}

// Self is this process's identity as it writes it into the key (its Epoch and Revision are zero).
func (l *Lease) Self() Holder { return l.self }

// Run competes for the lease until ctx ends, then stops leading and releases the key if it holds it. It
// returns nil when ctx ends, and an error only when the bucket cannot serve as a lease (ErrNoKeyTTL); NATS
// failures are retried.
func (l *Lease) Run(ctx context.Context) error {
	kv, err := l.bucket(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l.mu.Lock()
	l.kv = kv
	l.mu.Unlock()
	r := &runner{Lease: l, kv: kv}
	return r.run(ctx)
}

// bucket opens the lease bucket, creating it when missing, and retries while NATS does not answer.
func (l *Lease) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	for {
		kv, err := l.openBucket(ctx)
		if err == nil || errors.Is(err, ErrNoKeyTTL) {
			return kv, err
		}
		l.log.Warn("lease bucket not available", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (l *Lease) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.TTL)
	defer cancel()
	kv, err := l.js.KeyValue(rctx, l.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// The markers live as long as a lease: long enough for every watcher to see them.
		kv, err = l.js.CreateKeyValue(rctx, jetstream.KeyValueConfig{
			Bucket:         l.cfg.Bucket,
			Description:    "tracking-bridge leader lease",
			History:        1,
			Replicas:       l.cfg.Replicas,
			Storage:        jetstream.FileStorage,
			LimitMarkerTTL: l.cfg.TTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another replica created it meanwhile
			kv, err = l.js.KeyValue(rctx, l.cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", l.cfg.Bucket, err)
	}
	st, err := kv.Status(rctx)
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", l.cfg.Bucket, err)
	}
	if st.LimitMarkerTTL() == 0 {
		return nil, fmt.Errorf("%w: bucket %s", ErrNoKeyTTL, l.cfg.Bucket)
	}
	return kv, nil
}

// Read returns the holder of the lease key in bucket as stored, for an operator's look; ok is false when
// the key is free (absent, deleted or expired).
func Read(ctx context.Context, js jetstream.JetStream, bucket, key string) (h Holder, ok bool, err error) {
	if key == "" {
		key = DefaultKey
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return Holder{}, false, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	h, ok = holderOf(e)
	return h, ok, nil
}

// Seize makes the operator named name the lease's holder for ttl (whole seconds), whoever holds it: a
// conditional write over the holder's revision, or a creation when the key is free. A leader sees it
// taken and stops leading; no bridge can acquire it until Release or the TTL. It returns the previous
// holder (ok false when there was none) and the operator's revision, for Release. It is how an operator's
// command does what must not happen behind a leader's back (`bridge cursor restart`).
func Seize(ctx context.Context, js jetstream.JetStream, bucket, name string, ttl time.Duration) (prev Holder, ok bool, rev uint64, err error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return Holder{}, false, 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	value := valueFor(Holder{Name: name, PID: os.Getpid(), Instance: "operator-" + hex.EncodeToString(b[:])})
	for attempt := 0; attempt < 5; attempt++ { // a renewal between the read and the write: read again
		e, gerr := kv.Get(ctx, DefaultKey)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			rev, err = kv.Create(ctx, DefaultKey, value, jetstream.KeyTTL(ttl))
		case gerr != nil:
			return Holder{}, false, 0, fmt.Errorf("lease bucket %s: %w", bucket, gerr)
		default:
			prev, ok = holderOf(e)
			rev, err = writeOver(ctx, js, bucket, value, e.Revision(), ttl)
		}
		if err == nil {
			return prev, ok, rev, nil
		}
		if !isWrongRevision(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			break
		}
	}
	return Holder{}, false, 0, fmt.Errorf("lease bucket %s: seizing the lease: %w", bucket, err)
}

// Confirm proves that an operator's hold (Seize's revision rev) never lapsed: it writes the key's value
// again, for ttl, on condition that the key is still at rev, and returns the new revision (for Release).
// No bridge can have begun leading since Seize when it succeeds; when the key moved on (the hold ran out,
// and a bridge may hold it since) it changes nothing and returns an error wrapping ErrNotHeld.
func Confirm(ctx context.Context, js jetstream.JetStream, bucket string, rev uint64, ttl time.Duration) (uint64, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, DefaultKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, fmt.Errorf("lease bucket %s: %w", bucket, ErrNotHeld)
	case err != nil:
		return 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	case e.Revision() != rev:
		return 0, fmt.Errorf("lease bucket %s: %w", bucket, ErrNotHeld)
	}
	// The read may come from a replica behind the others; the conditional write decides.
	next, err := writeOver(ctx, js, bucket, e.Value(), rev, ttl)
	if isWrongRevision(err) {
		err = fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	if err != nil {
		return 0, fmt.Errorf("lease bucket %s: confirming the hold: %w", bucket, err)
	}
	return next, nil
}

// writeOver writes value to the lease key for ttl on condition that the key is at revision rev, and
// returns the new revision. kv.Update would drop the key's TTL: a hold whose command died would then
// never end.
func writeOver(ctx context.Context, js jetstream.JetStream, bucket string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + bucket + "." + DefaultKey, Data: value},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Release deletes the lease key on condition that it is still at revision rev (Seize's), so that the
// bridges compete for it at once. When the key moved on (the hold ran out, and a bridge may hold it
// since), it leaves the key alone and returns an error wrapping ErrNotHeld.
func Release(ctx context.Context, js jetstream.JetStream, bucket string, rev uint64) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		err = kv.Delete(ctx, DefaultKey, jetstream.LastRevision(rev))
		if isWrongRevision(err) {
			err = fmt.Errorf("%w: %w", ErrNotHeld, err)
		}
	}
	if err != nil {
		return fmt.Errorf("lease bucket %s: releasing the lease: %w", bucket, err)
	}
	return nil
}

// valueFor encodes h as the key's value.
func valueFor(h Holder) []byte {
	b, _ := json.Marshal(h)
	return b
}

// isForeign reports whether an entry of the key is a value no bridge wrote: not a lease, not a deletion.
func isForeign(e jetstream.KeyValueEntry) bool {
	_, ok := holderOf(e)
	return !ok && e.Operation() == jetstream.KeyValuePut
}

// holderOf decodes an entry of the key; ok is false for a deletion, an expiry or a foreign value.
func holderOf(e jetstream.KeyValueEntry) (h Holder, ok bool) {
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &h) != nil || h.Instance == "" {
		return Holder{}, false
	}
	if h.Epoch == 0 { // the acquisition itself carries no epoch: its revision is the epoch
		h.Epoch = e.Revision()
	}
	h.Revision = e.Revision()
	return h, true
}

// isWrongRevision reports whether err is the server refusing a write because the key's last revision is not
// the one expected: the key changed hands, or a check on it is still in flight (10164 on replicated streams).
func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// subject is the key's subject in the bucket's stream, the one kv.Put writes to.
func (l *Lease) subject() string { return "$KV." + l.cfg.Bucket + "." + l.cfg.Key }

// natsMsg builds a renewal of the key with value.
func (l *Lease) natsMsg(value []byte) *nats.Msg {
	return &nats.Msg{Subject: l.subject(), Data: value, Header: nats.Header{}}
}

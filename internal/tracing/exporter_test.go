package tracing

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracking-bridge/tracking-bridge/config"
	tu "github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func testExporter(t *testing.T, cfg config.Tracing) *exporter {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	x, err := newExporter(cfg, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Shutdown(context.Background()) })
	return x
}

// spanCount is the number of spans in an export request.
func spanCount(req *coltrace.ExportTraceServiceRequest) int {
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	return n
}

// TestExporterRequest: a request carries the configured headers, protobuf's content type, the bridge's
// user agent and, with gzip, a compressed body that decodes to every span.
func TestExporterRequest(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(t *testing.T) {
			var got http.Header
			var req *coltrace.ExportTraceServiceRequest
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				var body io.Reader = r.Body
				if r.Header.Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(r.Body)
					if err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					body = zr
				}
				b, _ := io.ReadAll(body)
				req = decode(t, b)
			}))
			defer srv.Close()
			x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces", Gzip: gz,
				Headers: []config.TracingHeader{{Name: "api-key", Value: "k1"}, {Name: "X-Team", Value: "yard"}}})
			spans := eventSpans(600)
			for range 2 { // the second reuses the buffers
				if err := x.ExportSpans(context.Background(), spans); err != nil {
					t.Fatal(err)
				}
				if n := spanCount(req); n != 600 {
					t.Fatalf("%d spans received, want 600", n)
				}
			}
			for k, v := range map[string]string{"Api-Key": "k1", "X-Team": "yard", "Content-Type": "application/x-protobuf",
				"User-Agent": "tracking-bridge/v-test"} {
				if got.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, got.Get(k), v)
				}
			}
			if (got.Get("Content-Encoding") == "gzip") != gz {
				t.Errorf("Content-Encoding %q with gzip %v", got.Get("Content-Encoding"), gz)
			}
		})
	}
}

// TestExporterRetries: 429, 502, 503 and 504 are tried again, after the collector's Retry-After when it
// gives one; any other refusal is not; a collector that does not answer is tried until the export
// timeout, and the error shows no part of the URL.
func TestExporterRetries(t *testing.T) {
	spans := eventSpans(3)
	t.Run("unavailable, then accepted", func(t *testing.T) {
		var calls atomic.Int32
		var gap atomic.Int64
		var last time.Time
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			switch calls.Add(1) {
			case 1:
				last = time.Now()
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
			case 2:
				gap.Store(int64(time.Since(last)))
				w.WriteHeader(http.StatusTooManyRequests)
			}
		}))
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces"})
		if err := x.ExportSpans(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
		if g := time.Duration(gap.Load()); g < time.Second {
			t.Errorf("tried again after %v, before the collector's Retry-After of 1s", g)
		}
	})
	t.Run("refused", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			http.Error(w, "unknown field 17\x1b[2J in Span: upgrade the collector", http.StatusBadRequest)
		}))
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces"})
		err := x.ExportSpans(context.Background(), spans)
		if err == nil || !strings.Contains(err.Error(), "400") || calls.Load() != 1 {
			t.Errorf("err %v after %d requests, want a 400 after one", err, calls.Load())
		}
		// The collector's reason is in the error, printable.
		if err == nil || !strings.Contains(err.Error(), "upgrade the collector") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("err %q: want the collector's reason without its control characters", err)
		}
	})
	t.Run("redirected", func(t *testing.T) {
		var elsewhere atomic.Int32
		other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
		defer other.Close()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/v1/traces", http.StatusTemporaryRedirect)
		}))
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces",
			Headers: []config.TracingHeader{{Name: "api-key", Value: "k1"}}})
		err := x.ExportSpans(context.Background(), spans)
		if err == nil || !strings.Contains(err.Error(), "307") || elsewhere.Load() != 0 {
			t.Errorf("err %v, %d requests elsewhere; want a 307 and none", err, elsewhere.Load())
		}
		if err == nil || !strings.Contains(err.Error(), other.URL+"/v1/traces") {
			t.Errorf("err %v does not say where the redirect pointed", err)
		}
	})
	t.Run("refused in protobuf", func(t *testing.T) {
		status := protowire.AppendTag(nil, 1, protowire.VarintType) // google.rpc.Status: code, message
		status = protowire.AppendVarint(status, 3)
		status = protowire.AppendTag(status, 2, protowire.BytesType)
		status = protowire.AppendString(status, "span too large")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(status)
		}))
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces"})
		if err := x.ExportSpans(context.Background(), spans); err == nil || !strings.Contains(err.Error(), `"span too large"`) {
			t.Errorf("err %v", err)
		}
	})
	t.Run("switching protocols", func(t *testing.T) {
		// A 101 hands the connection over: nothing ends a read of it but closing it when the export's time is up.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		release := make(chan struct{})
		defer close(release)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					req, err := http.ReadRequest(bufio.NewReader(c))
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"))
					<-release // and silent
				}()
			}
		}()
		x := testExporter(t, config.Tracing{TracesURL: "http://" + ln.Addr().String() + "/v1/traces", Timeout: time.Second})
		done := make(chan error, 1)
		go func() { done <- x.ExportSpans(context.Background(), spans) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "101") {
				t.Errorf("err %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an export with a timeout of 1s still running after 30s")
		}
	})
	t.Run("https to a plain HTTP port", func(t *testing.T) {
		var conns atomic.Int32
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: strings.Replace(srv.URL, "http://", "https://", 1) + "/v1/traces"})
		err := x.ExportSpans(context.Background(), spans)
		if !errors.Is(err, http.ErrSchemeMismatch) || conns.Load() != 1 {
			t.Errorf("err %v after %d connections, want the scheme mismatch after one", err, conns.Load())
		}
	})
	t.Run("no collector", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		x := testExporter(t, config.Tracing{TracesURL: "http://" + addr + "/v1/traces?key=s3cret", Timeout: 1500 * time.Millisecond})
		start := time.Now()
		err = x.ExportSpans(context.Background(), spans)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("err %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("export took %v with a timeout of 1.5s", d)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces", Timeout: time.Second})
		err := x.ExportSpans(context.Background(), spans)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the timeout", err)
		}
	})
}

// TestExporterShutdown: an export after Shutdown fails at once.
func TestExporterShutdown(t *testing.T) {
	x := testExporter(t, config.Tracing{TracesURL: "http://127.0.0.1:1/v1/traces"})
	if err := x.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := x.ExportSpans(context.Background(), eventSpans(1)); !errors.Is(err, errShutdown) {
		t.Errorf("err %v", err)
	}
}

// TestExporterTLS: an https:// collector is verified against OTEL_EXPORTER_OTLP_CERTIFICATE's
// authorities, and one that asks for a client certificate gets the configured one.
func TestExporterTLS(t *testing.T) {
	dir := t.TempDir()
	clientCert, clientKey := tu.WriteKeyPair(t, dir, "client", x509.Certificate{Subject: pkix.Name{CommonName: "bridge"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(clientCert)
	pool.AppendCertsFromPEM(pem)
	var handshakes atomic.Int32
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { handshakes.Add(1); return nil, nil }}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, certPEM(srv.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/v1/traces"
	spans := eventSpans(1)

	x := testExporter(t, config.Tracing{TracesURL: url, CAFile: ca, CertFile: clientCert, KeyFile: clientKey})
	if err := x.ExportSpans(context.Background(), spans); err != nil {
		t.Errorf("with the collector's authority and a client certificate: %v", err)
	}
	x = testExporter(t, config.Tracing{TracesURL: url, CAFile: ca, Timeout: time.Second})
	if err := x.ExportSpans(context.Background(), spans); err == nil {
		t.Error("accepted without a client certificate")
	}
	// A certificate that cannot be verified fails every attempt the same way: one is enough.
	before := handshakes.Load()
	x = testExporter(t, config.Tracing{TracesURL: url, CertFile: clientCert, KeyFile: clientKey, Timeout: 5 * time.Second})
	if err := x.ExportSpans(context.Background(), spans); err == nil {
		t.Error("a collector verified against the system's authorities")
	}
	if n := handshakes.Load() - before; n != 1 {
		t.Errorf("%d handshakes with a collector whose certificate cannot be verified, want 1", n)
	}
	if _, err := newExporter(config.Tracing{TracesURL: url, CAFile: clientKey}, ""); err == nil {
		t.Error("a key file taken for certificate authorities")
	}
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestEncoderInvalidUTF8: a string that is not UTF-8 is sent with U+FFFD in its place, so that the batch
// it is in still reaches the collector (which would refuse the whole request otherwise).
func TestEncoderInvalidUTF8(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	spans := tracetest.SpanStubs{{Name: "bad\xffname", SpanContext: sc,
		Attributes: []attribute.KeyValue{attribute.String("k\xfe", "v\xff")},
		Status:     sdktrace.Status{Code: 1, Description: "\xc3"}}}.Snapshots()
	var e encoder
	req := decode(t, e.request(spans))
	s := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if s.Name != "bad\uFFFDname" || s.Attributes[0].Key != "k\uFFFD" || s.Attributes[0].Value.GetStringValue() != "v\uFFFD" ||
		s.Status.Message != "\uFFFD" {
		t.Errorf("span %v", s)
	}
}

// TestExporterPartialSuccess: a collector that kept some spans of a request and rejected others answers
// 200 with a partial_success: the export fails without another attempt, and only the rejected spans
// count as failed.
func TestExporterPartialSuccess(t *testing.T) {
	answer := protowire.AppendTag(nil, 1, protowire.BytesType) // ExportTraceServiceResponse.partial_success
	var ps []byte
	ps = protowire.AppendTag(ps, 1, protowire.VarintType)
	ps = protowire.AppendVarint(ps, 2)
	ps = protowire.AppendTag(ps, 2, protowire.BytesType)
	ps = protowire.AppendString(ps, "2 spans too large")
	answer = protowire.AppendBytes(answer, ps)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces"})
	failed, exported := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "e"})
	counted := &countingExporter{SpanExporter: x, queued: &queued{}, failed: failed, exported: exported}
	err := counted.ExportSpans(context.Background(), eventSpans(5))
	var p *PartialSuccess
	if !errors.As(err, &p) || p.Rejected != 2 || p.Message != "2 spans too large" || calls.Load() != 1 {
		t.Fatalf("err %v after %d requests", err, calls.Load())
	}
	if f, e := promtest.ToFloat64(failed), promtest.ToFloat64(exported); f != 2 || e != 3 {
		t.Errorf("failed %v, exported %v; want 2 and 3", f, e)
	}
}

// TestExporterHeaders: a configured User-Agent replaces the bridge's; a configured Content-Type or
// Content-Encoding does not change what the body is said to be.
func TestExporterHeaders(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces", Headers: []config.TracingHeader{
		{Name: "user-agent", Value: "mine"}, {Name: "content-type", Value: "text/plain"}, {Name: "Content-Encoding", Value: "gzip"}}})
	if err := x.ExportSpans(context.Background(), eventSpans(1)); err != nil {
		t.Fatal(err)
	}
	if got.Get("User-Agent") != "mine" || got.Get("Content-Type") != "application/x-protobuf" || got.Get("Content-Encoding") != "" {
		t.Errorf("headers %v", got)
	}
}

// TestExporterKeepsNoHugeBuffer: a batch with a huge attribute value leaves no buffer of its size behind.
func TestExporterKeepsNoHugeBuffer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces", Gzip: true})
	stub := tracetest.SpanStubFromReadOnlySpan(eventSpans(1)[0])
	stub.Attributes = append(stub.Attributes, attribute.String("big", strings.Repeat("y", 16<<20)))
	if err := x.ExportSpans(context.Background(), tracetest.SpanStubs{stub}.Snapshots()); err != nil {
		t.Fatal(err)
	}
	if err := x.ExportSpans(context.Background(), eventSpans(10)); err != nil {
		t.Fatal(err)
	}
	if c := cap(x.enc.buf) + x.zbuf.Cap(); c > maxKept {
		t.Errorf("%d MiB kept after a small batch", c>>20)
	}
}

package tracing

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/tracking-bridge/tracking-bridge/config"
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
			http.Error(w, "bad", http.StatusBadRequest)
		}))
		defer srv.Close()
		x := testExporter(t, config.Tracing{TracesURL: srv.URL + "/v1/traces"})
		err := x.ExportSpans(context.Background(), spans)
		if err == nil || !strings.Contains(err.Error(), "400") || calls.Load() != 1 {
			t.Errorf("err %v after %d requests, want a 400 after one", err, calls.Load())
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
	clientCert, clientKey := writeKeyPair(t, dir)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(clientCert)
	pool.AppendCertsFromPEM(pem)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
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
	x = testExporter(t, config.Tracing{TracesURL: url, CertFile: clientCert, KeyFile: clientKey, Timeout: time.Second})
	if err := x.ExportSpans(context.Background(), spans); err == nil {
		t.Error("a collector verified against the system's authorities")
	}
	if _, err := newExporter(config.Tracing{TracesURL: url, CAFile: clientKey}, ""); err == nil {
		t.Error("a key file taken for certificate authorities")
	}
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writeKeyPair writes a self-signed client certificate and its key to dir and returns their paths.
func writeKeyPair(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bridge"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(certFile, certPEM(der), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
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

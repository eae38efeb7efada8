// Package config is the bridge's configuration, read from BRIDGE_* environment variables.
//
// The variables are the fields of Config; their names, defaults and meanings are in the struct tags, which
// github.com/kelseyhightower/envconfig reads (FromEnv calls envconfig.Process with Prefix), and in the
// table Usage prints (bridge -h) and docs/configuration.md holds. The names of the first eleven are
// fixed: deployments rely on them. The rules, which FromEnv keeps around envconfig.Process:
//
//   - A variable set to the empty string counts as unset: the default applies, and a required variable
//     is reported as missing. (Process would keep the empty value, or fail to parse it.)
//   - Every Secret field X can instead be given as X_FILE, naming a file whose content, less trailing CR
//     and LF characters, is the value. Setting both X and X_FILE is an error.
//   - Integers are decimal: "010" is ten. (Process reads it as octal, and accepts 0x10 and 1_000.)
//   - A variable is read under its BRIDGE_ name only. (Process falls back to the name without the
//     prefix, USERNAME for BRIDGE_USERNAME.)
//   - A BRIDGE_* variable the bridge does not read is an error, named in it (a misspelt name is never
//     silently ignored), except the variables Kubernetes gives a pod for a Service whose name starts
//     with bridge- (BRIDGE_X_SERVICE_HOST, BRIDGE_X_PORT=tcp://..., ...).
//   - No error ever contains a secret's value, nor the value of an unknown variable.
//
// FromEnv reports every problem at once (errors.Join), one per line, each naming its variable: the
// unknown variables, then every value that does not parse or _FILE that cannot be read, then every
// problem Validate finds. envconfig.Process stops at the first value it cannot parse; FromEnv then
// decodes the other variables itself, with the same decoders, so the later ones are reported too. What
// is not reported together: Validate's checks about a variable that did not parse (its range, and its
// relation to others, such as a minimum above a maximum) run only once it parses.
//
// A program that runs the bridge in-process (the demo, the benchmark, tests) builds a Config in Go, from
// Default, and calls Validate. The package reads the environment and the file system only; it dials
// nothing, and it never changes the environment.
package config

import (
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Prefix starts every variable's name, followed by "_".
const Prefix = "BRIDGE"

// MinRefreshMargin is the smallest BRIDGE_REFRESH_MARGIN Validate accepts.
const MinRefreshMargin = 30 * time.Second

// MinLoginRetry is the smallest BRIDGE_LOGIN_RETRY Validate accepts: logging in again faster with
// credentials the provider rejected risks locking the account.
const MinLoginRetry = time.Minute

// Upper bounds of counts that size what the bridge allocates at start-up (the publish window's ring, two
// report workers per report in flight, the API service's slots): beyond them a typing error would exhaust
// memory.
const (
	MaxPublishWindow     = 65536
	MaxReportConcurrency = 4096
	MaxAPIConcurrency    = 4096
)

// MinHTTPMaxConns and MaxHTTPMaxConns bound BRIDGE_HTTP_MAX_CONNS: below the minimum a scrape and the two
// probes arriving together would close each other's connections; above the maximum the connections' buffers
// alone could take a pod's memory.
const (
	MinHTTPMaxConns = 4
	MaxHTTPMaxConns = 4096
)

// MaxAPIBodyBytes is the largest BRIDGE_API_MAX_BODY_BYTES, the largest max_payload a NATS server accepts.
const MaxAPIBodyBytes = 64 << 20

// APIEndpointNames are the operations BRIDGE_API_ENDPOINTS may name, the subjects' tails after P.api.
// (docs/api.md#endpoints), in its order: layout.APIOperations, which the API service serves.
var APIEndpointNames = layout.APIOperations()

// AllEndpoints is the BRIDGE_API_ENDPOINTS value that serves every endpoint, its default.
const AllEndpoints = "all"

// maxSecretFileBytes bounds a _FILE secret, so that a mistaken path (a log, a device) fails clearly.
const maxSecretFileBytes = 64 << 10

// Config is the bridge's configuration. The variable of a field is Prefix + "_" + its envconfig tag, as
// envconfig.Process names it; its default, required and desc tags feed FromEnv (through Process), Validate
// and Usage. A Config built by hand should start from
// Default and be checked with Validate.
type Config struct {
	// Upstream API (docs/upstream.md).
	UpstreamURL  string `envconfig:"UPSTREAM_URL" required:"true" desc:"base URL of the upstream API, including the version segment"`
	TokenURL     string `envconfig:"TOKEN_URL" required:"true" desc:"OAuth 2.0 token and refresh URL"`
	ClientID     string `envconfig:"CLIENT_ID" required:"true" desc:"the API's fixed OAuth client id"`
	Username     string `envconfig:"USERNAME" required:"true" desc:"account user name"`
	Password     Secret `envconfig:"PASSWORD" required:"true" desc:"account password"`
	StreamPath   string `envconfig:"STREAM_PATH" default:"/tracking/events/stream" desc:"path of the event stream (operation streamTrackingEvents), relative to the upstream URL"`
	ReportPath   string `envconfig:"REPORT_PATH" default:"/tracking/events" desc:"path for reporting events (operation reportTrackingEvent), relative to the upstream URL"`
	InsecureHTTP bool   `envconfig:"INSECURE_HTTP" default:"false" desc:"allow http:// upstream and token URLs (local development, the simulator); otherwise only https://"`

	// NATS and the HTTP endpoint.
	NATSURL       string `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222" desc:"comma-separated NATS server URLs (nats, tls, ws, wss)"`
	SubjectPrefix string `envconfig:"SUBJECT_PREFIX" default:"tracking" desc:"prefix P of every subject (P.events.<TYPE>.<UNIT>, P.reports, P.dlq.*) and stream name"`
	HTTPAddr      string `envconfig:"HTTP_ADDR" default:":8080" desc:"listen address for /metrics, /healthz, /readyz and /status"`
	HTTPMaxConns  int    `envconfig:"HTTP_MAX_CONNS" default:"64" desc:"most connections open at once on BRIDGE_HTTP_ADDR (4 to 4096); a new connection beyond them is let in and an older one closed (one part way through a request first), so probes and scrapes still get in during a flood"`

	// Logging. Any case is accepted; FromEnv lower-cases both.
	LogFormat string `envconfig:"LOG_FORMAT" default:"json" desc:"log format: json or text"`
	LogLevel  string `envconfig:"LOG_LEVEL" default:"info" desc:"log level: debug, info, warn or error"`

	// Event stream.
	StreamIdleTimeout   time.Duration `envconfig:"STREAM_IDLE_TIMEOUT" default:"60s" desc:"reconnect to the event stream when no byte arrived for this long"`
	StreamMaxEventBytes int           `envconfig:"STREAM_MAX_EVENT_BYTES" default:"1048576" desc:"largest event accepted from the stream, in bytes; a larger one, or one of more than 1000 lines, goes to the dead-letter subject"`
	ReconnectMin        time.Duration `envconfig:"RECONNECT_MIN" default:"1s" desc:"first delay of the stream's exponential reconnect backoff"`
	ReconnectMax        time.Duration `envconfig:"RECONNECT_MAX" default:"60s" desc:"longest delay of the stream's reconnect backoff"`
	UnavailableRetry    time.Duration `envconfig:"UNAVAILABLE_RETRY" default:"5m" desc:"retry pace while the stream answers 403 or 404 (not available to the account)"`
	StreamRetryHintMax  time.Duration `envconfig:"STREAM_RETRY_HINT_MAX" default:"2m" desc:"longest reconnection delay the stream's retry: hint may set; a longer hint is cut to it (and logged)"`

	// Upstream HTTP and login.
	LoginRetry     time.Duration `envconfig:"LOGIN_RETRY" default:"1m" desc:"minimum interval between password logins after the credentials were rejected (at least 1m)"`
	RefreshMargin  time.Duration `envconfig:"REFRESH_MARGIN" default:"30s" desc:"refresh the access token this long before it expires: at least 30s, and at most half the token's lifetime (a longer margin is cut to that)"`
	HTTPTimeout    time.Duration `envconfig:"HTTP_TIMEOUT" default:"30s" desc:"timeout of one upstream request other than the event stream"`
	UpstreamCAFile string        `envconfig:"UPSTREAM_CA_FILE" desc:"PEM file of CA certificates trusted for the upstream and token URLs; empty means the system roots"`

	// Publishing events to JetStream.
	PublishWindow   int           `envconfig:"PUBLISH_WINDOW" default:"1024" desc:"most asynchronous JetStream publishes in flight (at most 65536)"`
	PublishTimeout  time.Duration `envconfig:"PUBLISH_TIMEOUT" default:"10s" desc:"time to wait for a JetStream publish acknowledgement, and for a write to NATS before the connection counts as lost"`
	DuplicateWindow time.Duration `envconfig:"DUPLICATE_WINDOW" default:"10m" desc:"JetStream duplicate window of the events and dead-letter streams, when the bridge creates them"`
	CreateStreams   bool          `envconfig:"CREATE_STREAMS" default:"true" desc:"create the JetStream streams at start-up when they are missing"`
	CESource        string        `envconfig:"CE_SOURCE" desc:"CloudEvents source attribute of published events; empty means the event stream URL without query or credentials"`
	StreamReplicas  int           `envconfig:"STREAM_REPLICAS" default:"1" desc:"replicas of the streams and of the lease bucket PFX_LEASES when the bridge creates them (1 to 5; 3 on a 3-node cluster)"`

	// Limits of the streams the bridge creates (docs/subjects.md#streams); an existing stream keeps its own.
	// Each stream's largest message follows from BRIDGE_STREAM_MAX_EVENT_BYTES and BRIDGE_REPORT_MAX_BYTES.
	EventsStreamMaxBytes  ByteSize      `envconfig:"EVENTS_STREAM_MAX_BYTES" default:"4GiB" desc:"total size of the events stream PFX_EVENTS when the bridge creates it; beyond it the oldest events are discarded (the leader keeps its fence markers ahead of them)"`
	EventsStreamMaxAge    time.Duration `envconfig:"EVENTS_STREAM_MAX_AGE" default:"0s" desc:"age after which events are discarded from PFX_EVENTS when the bridge creates it; 0 means none: the newest event, which holds the resume cursor, is then never discarded"`
	ReportsStreamMaxBytes ByteSize      `envconfig:"REPORTS_STREAM_MAX_BYTES" default:"1GiB" desc:"total size of the reports work queue PFX_REPORTS when the bridge creates it; when full, JetStream refuses new reports to their producers"`
	ReportsStreamMaxAge   time.Duration `envconfig:"REPORTS_STREAM_MAX_AGE" default:"0s" desc:"age after which JetStream removes a report not yet sent from PFX_REPORTS, without a dead letter, when the bridge creates it; 0 means none; otherwise BRIDGE_REPORT_MAX_AGE must be set and shorter"`
	DLQStreamMaxBytes     ByteSize      `envconfig:"DLQ_STREAM_MAX_BYTES" default:"1GiB" desc:"total size of the dead-letter stream PFX_DLQ when the bridge creates it; beyond it the oldest dead letters are discarded"`
	DLQStreamMaxAge       time.Duration `envconfig:"DLQ_STREAM_MAX_AGE" default:"720h" desc:"age after which dead letters are discarded from PFX_DLQ when the bridge creates it; 0 means none"`

	// Replicas: one bridge at a time, the holder of the lease, reads the upstream stream
	// (docs/delivery.md#replicas-one-leader-fenced).
	LeaseTTL time.Duration `envconfig:"LEASE_TTL" default:"10s" desc:"a leader that could not renew its lease stops reading and publishing before this has passed; a standby takes over after it (whole seconds; 15s or more on a NATS cluster)"`

	// Consuming reports from JetStream.
	ReportConcurrency int           `envconfig:"REPORT_CONCURRENCY" default:"16" desc:"most reports sent upstream at the same time (at most 4096)"`
	ReportMaxBytes    int           `envconfig:"REPORT_MAX_BYTES" default:"262144" desc:"largest report accepted, in bytes; a larger one goes to the dead-letter subject"`
	ReportMaxAge      time.Duration `envconfig:"REPORT_MAX_AGE" default:"0s" desc:"dead-letter a report still failing transiently after this long; 0 means retry forever"`
	ReportBackoffMin  time.Duration `envconfig:"REPORT_BACKOFF_MIN" default:"1s" desc:"first redelivery delay of a report after a transient failure"`
	ReportBackoffMax  time.Duration `envconfig:"REPORT_BACKOFF_MAX" default:"5m" desc:"longest redelivery delay of a report"`
	ReportDurable     string        `envconfig:"REPORT_DURABLE" default:"tracking-bridge-reports" desc:"name of the durable JetStream consumer of reports"`

	// The partner API on NATS (docs/api.md).
	APIEnabled     bool          `envconfig:"API_ENABLED" default:"true" desc:"serve the upstream's API to NATS clients as the micro service tracking-bridge on P.api.*"`
	APIConcurrency int           `envconfig:"API_CONCURRENCY" default:"32" desc:"most API requests this replica sends upstream at the same time (at most 4096), and besides them as many reads from NATS of units.get, and as many again of units.events (each endpoint its own, so units.events never makes units.get busy); a request beyond them is answered 503 at once"`
	APITimeout     time.Duration `envconfig:"API_TIMEOUT" default:"30s" desc:"longest an API request may take upstream, token and 401 repeat included, or reading NATS for units.get and units.events; a caller's Bridge-Timeout header can shorten it"`
	// Who may call what: the endpoints served and the reply subjects answered (docs/api.md#who-may-call-it).
	APIEndpoints     string `envconfig:"API_ENDPOINTS" default:"all" desc:"the API endpoints served: all, or a comma-separated list of locations.search, orders.list, orders.create, orders.get, orders.update, orders.delete, tracking.query, tracking.report, units.get, units.events; the others are not subscribed (their callers get no responders)"`
	APIReplyPrefixes string `envconfig:"API_REPLY_PREFIXES" default:"_INBOX." desc:"comma-separated subject prefixes (whole tokens) of the reply subjects the API answers: the callers' inbox prefixes; the replies NATS writes for callers in other accounts that import the service (_R_.) are answered besides them, always; a request with any other reply subject, or none, gets no answer and no upstream call, and is counted in bridge_api_requests_refused_total"`
	APIMaxBodyBytes  int    `envconfig:"API_MAX_BODY_BYTES" default:"262144" desc:"largest API request body, in bytes (at most 67108864); a larger one is answered 400 before it is parsed, without calling the upstream (locations.search, orders.list, orders.get, orders.delete, tracking.query, units.get and units.events, whose requests are a few short members, allow at most 16384)"`

	// The units view: the latest event per loading unit (docs/subjects.md#units-the-latest-event-per-loading-unit).
	UnitsView bool `envconfig:"UNITS_VIEW" default:"true" desc:"build the units view, the key-value bucket PFX_UNITS with the latest event of every loading unit, from the events stream (every bridge with it on shares the work; the bucket is created with the streams' replicas when BRIDGE_CREATE_STREAMS allows)"`

	// Lifecycle.
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"30s" desc:"time from SIGINT or SIGTERM (or a fatal error) to exit, for in-flight reports and publishes and the NATS drain"`

	// NATS authentication (at most one method) and TLS.
	NATSCredsFile    string `envconfig:"NATS_CREDS_FILE" desc:"NATS credentials file (JWT and NKey seed)"`
	NATSNKeySeedFile string `envconfig:"NATS_NKEY_SEED_FILE" desc:"NATS NKey seed file"`
	NATSUser         string `envconfig:"NATS_USER" desc:"NATS user name, with BRIDGE_NATS_PASSWORD"`
	NATSPassword     Secret `envconfig:"NATS_PASSWORD" desc:"NATS password, with BRIDGE_NATS_USER"`
	NATSToken        Secret `envconfig:"NATS_TOKEN" desc:"NATS authentication token"`
	NATSCAFile       string `envconfig:"NATS_CA_FILE" desc:"PEM file of CA certificates trusted for NATS; empty means the system roots"`
	NATSCertFile     string `envconfig:"NATS_CERT_FILE" desc:"client certificate (PEM) for NATS TLS, with BRIDGE_NATS_KEY_FILE"`
	NATSKeyFile      string `envconfig:"NATS_KEY_FILE" desc:"client private key (PEM) for NATS TLS, with BRIDGE_NATS_CERT_FILE"`
	NATSInboxPrefix  string `envconfig:"NATS_INBOX_PREFIX" default:"_INBOX_bridge" desc:"prefix of the bridge's own reply subjects (JetStream acknowledgements, fetches, the lease), whole tokens apart from every BRIDGE_API_REPLY_PREFIXES entry and from _R_. (refused at start-up otherwise); allow the bridge to subscribe only there"`
}

// field describes one variable of Config, read from the field's tags as envconfig reads them: the name
// (Prefix + "_" + the envconfig tag), the default and required tags, and the desc tag (envconfig's usage
// tag) that Usage prints. FromEnv, Validate, Usage and LogValue walk these; a test checks that
// envconfig names the same variables in the same order.
type field struct {
	index    int          // in Config
	key      string       // the variable, e.g. BRIDGE_UPSTREAM_URL
	def      string       // default tag
	desc     string       // desc tag
	typ      reflect.Type // the field's
	required bool
	secret   bool
}

var (
	secretType   = reflect.TypeFor[Secret]()
	durationType = reflect.TypeFor[time.Duration]()
	bytesType    = reflect.TypeFor[ByteSize]()
	fields       = configFields()
)

// configFields reads Config's tags and checks that envconfig and FromEnv read them alike: every field has an
// upper-case envconfig tag (so its variable is Prefix_TAG), a desc tag, and one of the types decode knows. A
// malformed tag is a programming error, so it panics (at init).
func configFields() []field {
	t := reflect.TypeFor[Config]()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		name := sf.Tag.Get("envconfig")
		if name == "" || name != strings.ToUpper(name) || sf.Tag.Get("desc") == "" {
			panic("config: field " + sf.Name + " needs an upper-case envconfig tag and a desc tag")
		}
		if r := sf.Tag.Get("required"); r != "" && r != "true" {
			panic("config: field " + sf.Name + ": the required tag is \"true\" or absent")
		}
		switch sf.Type.Kind() {
		case reflect.String, reflect.Bool, reflect.Int:
		case reflect.Int64:
			if sf.Type != durationType && sf.Type != bytesType {
				panic("config: field " + sf.Name + " has an unsupported type " + sf.Type.String())
			}
		default:
			panic("config: field " + sf.Name + " has an unsupported type " + sf.Type.String())
		}
		out = append(out, field{
			index:    i,
			key:      Prefix + "_" + name,
			def:      sf.Tag.Get("default"),
			desc:     sf.Tag.Get("desc"),
			typ:      sf.Type,
			required: sf.Tag.Get("required") == "true",
			secret:   sf.Type == secretType,
		})
	}
	return out
}

// typeName names a field's type in Usage's TYPE column, in the words of envconfig's own usage table.
func typeName(t reflect.Type) string {
	switch {
	case t == secretType:
		return "Secret"
	case t == durationType:
		return "Duration"
	case t == bytesType:
		return "Bytes"
	case t.Kind() == reflect.Bool:
		return "True or False"
	case t.Kind() == reflect.Int:
		return "Integer"
	default:
		return "String"
	}
}

// Default returns a Config holding every default value, the default tags decoded as FromEnv decodes a
// variable. The required fields are empty, so it does not pass Validate until they are filled in: a
// program that configures the bridge in Go (the demo, the benchmark, tests) starts from it, sets fields
// and calls Validate.
func Default() *Config {
	c := defaults
	return &c
}

// StreamURL is the URL of the event stream: UpstreamURL joined with StreamPath.
func (c *Config) StreamURL() string { return joinURL(c.UpstreamURL, c.StreamPath) }

// ReportURL is the URL reports are posted to: UpstreamURL joined with ReportPath.
func (c *Config) ReportURL() string { return joinURL(c.UpstreamURL, c.ReportPath) }

// joinURL appends path to base with exactly one slash between them.
func joinURL(base, path string) string {
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(path, "/")
}

// NATSServers returns the entries of NATSURL, trimmed of white space, empty ones left out.
func (c *Config) NATSServers() []string {
	var out []string
	for s := range strings.SplitSeq(c.NATSURL, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// APIEndpointList returns the endpoints BRIDGE_API_ENDPOINTS names, in the order of APIEndpointNames
// (every one for "all"), each once. Names are matched without regard to case; unknown ones, which
// Validate reports, are left out.
func (c *Config) APIEndpointList() []string {
	want := map[string]bool{}
	for _, e := range listEntries(c.APIEndpoints) {
		want[strings.ToLower(e)] = true
	}
	var out []string
	for _, name := range APIEndpointNames {
		if want[AllEndpoints] || want[name] {
			out = append(out, name)
		}
	}
	return out
}

// APIReplyPrefixList returns the entries of BRIDGE_API_REPLY_PREFIXES, trimmed of white space, empty ones
// left out, each ending in "." (a prefix is made of whole tokens: "_INBOX_alice" answers
// "_INBOX_alice.x", never "_INBOX_alicex.y").
func (c *Config) APIReplyPrefixList() []string {
	var out []string
	for _, p := range listEntries(c.APIReplyPrefixes) {
		if !strings.HasSuffix(p, ".") {
			p += "."
		}
		out = append(out, p)
	}
	return out
}

// listEntries returns the comma-separated entries of s, trimmed of white space, empty ones left out.
func listEntries(s string) []string {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// SlogLevel returns LogLevel as a slog.Level; a value Validate would reject gives slog.LevelInfo.
func (c *Config) SlogLevel() slog.Level {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// LogValue implements slog.LogValuer, for logging the effective configuration at start-up: a group with
// one attribute per variable, keyed by its name without the BRIDGE_ prefix in lower case (upstream_url,
// reconnect_min, ...). Durations read like "30s", sizes like "4GiB". A secret shows as "[redacted]" when
// set and "" when not, the user information of URLs (which may be a NATS token or password) as "xxxxx",
// and the values of their queries (which may be a client secret) as REDACTED.
func (c *Config) LogValue() slog.Value {
	v := reflect.ValueOf(c).Elem()
	attrs := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		key := strings.ToLower(strings.TrimPrefix(f.key, Prefix+"_"))
		fv := v.Field(f.index)
		var val slog.Value
		switch {
		case f.secret:
			if fv.String() == "" {
				val = slog.StringValue("")
			} else {
				val = slog.StringValue(redacted)
			}
		case fv.Type() == durationType:
			val = slog.StringValue(time.Duration(fv.Int()).String())
		case fv.Type() == bytesType:
			val = slog.StringValue(ByteSize(fv.Int()).String())
		case fv.Kind() == reflect.String:
			val = slog.StringValue(redactURLs(fv.String()))
		case fv.Kind() == reflect.Bool:
			val = slog.BoolValue(fv.Bool())
		default:
			val = slog.Int64Value(fv.Int())
		}
		attrs = append(attrs, slog.Attr{Key: key, Value: val})
	}
	return slog.GroupValue(attrs...)
}

// redactURLs redacts every comma-separated URL in s that has user information, a query or a fragment
// (logging.RedactURL); anything else is returned unchanged.
func redactURLs(s string) string {
	if !strings.ContainsAny(s, "@?#") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if r := logging.RedactURL(strings.TrimSpace(p)); r != strings.TrimSpace(p) {
			parts[i] = r
		}
	}
	return strings.Join(parts, ",")
}

// redactURL renders u with its user information (in a NATS URL the user part alone may be a token), its
// query values and its fragment redacted (logging.RedactedURL).
func redactURL(u *url.URL) string { return logging.RedactedURL(u) }

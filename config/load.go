package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// envSpec is what envconfig reads: every variable of Config, and the _FILE variable of each secret.
// envconfig.Process fills it and envconfig.CheckDisallowed knows the bridge's variables from it, so the
// two cannot disagree. init checks that its _FILE fields are exactly those of the secrets.
type envSpec struct {
	Config
	PasswordFile     string `envconfig:"PASSWORD_FILE"`
	NATSPasswordFile string `envconfig:"NATS_PASSWORD_FILE"`
	NATSTokenFile    string `envconfig:"NATS_TOKEN_FILE"`
}

// FromEnv reads the configuration from the process environment, as bridge run does, and validates it.
// The error, if any, joins every problem found, one per line, each naming its variable and none showing
// a secret's value.
//
// envconfig.Process fills the Config, with the defaults and decoders of its tags, and
// envconfig.CheckDisallowed finds BRIDGE_* variables the bridge does not know. Around them FromEnv keeps
// the rules Process does not have (see the package documentation): a variable set to "" counts as
// unset, a secret can come from its _FILE variable, integers are decimal, and a variable is never read
// under its name without the prefix (Process falls back to USERNAME when BRIDGE_USERNAME is unset). It
// reads the environment and never changes it.
//
// Process stops at the first value it cannot parse. FromEnv then decodes every variable itself, with the
// same decoders (decode), so that every value that does not parse is reported, not only the first.
func FromEnv() (*Config, error) {
	errs := unknownVariables(os.Environ())

	vars := readVars(os.LookupEnv)
	spec := envSpec{Config: defaults}
	perr := envconfig.Process(Prefix, &spec)
	if errors.Is(perr, envconfig.ErrInvalidSpecification) {
		panic("config: " + perr.Error())
	}
	// Process's other errors are a value it cannot parse (decoded again below, which finds it too) and a
	// required variable that is unset (Validate reports it, with every other problem).
	c := &spec.Config
	failed := make(map[string]error)
	v := reflect.ValueOf(c).Elem()
	for i, f := range fields {
		in, dst := vars[i], v.Field(f.index)
		switch {
		case in.problem != nil:
			failed[f.key] = in.problem
			dst.Set(defaultValue(f))
		case !in.set:
			// Whatever Process put there came from "" or from the name without the prefix.
			dst.Set(defaultValue(f))
		case perr != nil || in.fromFile || f.typ.Kind() == reflect.Int:
			if err := decode(f, in.raw, dst); err != nil {
				failed[f.key] = parseProblem(f, in.raw, err)
				dst.Set(defaultValue(f))
			}
		}
	}
	if pe, ok := errors.AsType[*envconfig.ParseError](perr); ok {
		// A value Process refused must have failed here too; if the decoders ever drift apart, Process's
		// own verdict is reported rather than lost.
		if i := slices.IndexFunc(fields, func(f field) bool { return f.key == pe.KeyName }); i >= 0 &&
			vars[i].set && !vars[i].fromFile && failed[pe.KeyName] == nil {
			failed[pe.KeyName] = parseProblem(fields[i], pe.Value, pe.Err)
		}
	}

	// The enumerations are matched without regard to case; hand them on in the documented spelling.
	c.LogFormat, c.LogLevel = strings.ToLower(c.LogFormat), strings.ToLower(c.LogLevel)

	for _, f := range fields { // in the order of the fields, as Usage lists them
		if err, ok := failed[f.key]; ok {
			errs = append(errs, err)
		}
	}
	concerned := make(map[string]bool, len(failed))
	for k := range failed {
		concerned[k] = true
	}
	// Validate's checks about a variable that failed to load are left out: they would judge its default,
	// which the operator did not choose, or repeat the problem.
	for _, err := range c.check() {
		if p, ok := err.(*problem); ok && p.concerns(concerned) {
			continue
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// input is what the environment holds for one field of Config.
type input struct {
	raw      string // the value, from the variable or from the _FILE variable's file
	set      bool   // raw is non-empty
	fromFile bool   // raw came from a _FILE variable's file
	problem  error  // both X and X_FILE set, or the file cannot be read
}

// readVars looks up every field's variable through lookup (os.LookupEnv), in the order of fields, and
// reads the _FILE secrets: a variable set to "" counts as unset, an empty file too; a secret X can come
// from the file named by X_FILE, but not from both.
func readVars(lookup func(string) (string, bool)) []input {
	get := func(key string) (string, bool) {
		v, ok := lookup(key)
		return v, ok && v != ""
	}
	out := make([]input, len(fields))
	for i, f := range fields {
		raw, ok := get(f.key)
		in := input{raw: raw, set: ok}
		if f.secret {
			path, fromFile := get(f.key + "_FILE")
			switch {
			case ok && fromFile:
				in = input{problem: problemf([]string{f.key, f.key + "_FILE"}, nil, "both are set; set only one")}
			case fromFile:
				s, err := readSecretFile(path)
				if err != nil {
					in = input{problem: problemf([]string{f.key + "_FILE"}, err, "cannot read %v", err)}
					break
				}
				// An empty file is like an unset variable: the default, or "required".
				in = input{raw: s, set: s != "", fromFile: true}
			}
		}
		out[i] = in
	}
	return out
}

// decode sets dst, the field f of a Config, from raw as envconfig.Process does: through the type's
// Decode method (Secret, ByteSize), time.ParseDuration, strconv.ParseBool, or as it is. Integers are the
// exception: they are decimal ("010" is ten), where Process reads "010" as octal and accepts 0x10 and
// 1_000.
func decode(f field, raw string, dst reflect.Value) error {
	if d, ok := dst.Addr().Interface().(envconfig.Decoder); ok {
		return d.Decode(raw)
	}
	switch {
	case f.typ == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		dst.SetInt(int64(d))
	case f.typ.Kind() == reflect.Int:
		n, err := strconv.ParseInt(raw, 10, 0)
		if err != nil {
			return err
		}
		dst.SetInt(n)
	case f.typ.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		dst.SetBool(b)
	default:
		dst.SetString(raw)
	}
	return nil
}

// defaults is the Config of the default tags, decoded as FromEnv decodes a variable; Default copies it.
var defaults = func() Config {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	for _, f := range fields {
		if f.def == "" {
			continue
		}
		if err := decode(f, f.def, v.Field(f.index)); err != nil {
			panic("config: the default of " + f.key + " does not load: " + err.Error())
		}
	}
	return c
}()

// defaultValue returns the default of the field f.
func defaultValue(f field) reflect.Value { return reflect.ValueOf(defaults).Field(f.index) }

// parseProblem is the problem of a value raw that does not parse as field f: `VAR: "x" is not <what>`.
// A decoder's own error (ByteSize's) says what; the others are named here.
func parseProblem(f field, raw string, err error) error {
	var what error = errNotA("a value of type " + f.typ.String())
	switch {
	case errors.As(err, new(errNotA)):
		what = err
	case f.typ == durationType:
		what = errNotA("a duration (use a unit, e.g. 500ms, 30s, 5m, 1h)")
	case f.typ.Kind() == reflect.Bool:
		what = errNotA("a boolean (use true or false)")
	case f.typ.Kind() == reflect.Int:
		what = errNotA("an integer")
	}
	if f.secret { // never echo a secret (Secret.Decode accepts every string, so this is a safeguard)
		return problemf([]string{f.key}, what, "is not %v", what)
	}
	return problemf([]string{f.key}, what, "%q is not %v", raw, what)
}

// errNotA describes what a value failed to parse as; the message reads `"x" is not <errNotA>`.
type errNotA string

func (e errNotA) Error() string { return string(e) }

// Variables returns the name of every variable the bridge reads, in the order Usage lists them: each
// field's, and a secret's _FILE variable right after it.
func Variables() []string {
	var out []string
	for _, f := range fields {
		out = append(out, f.key)
		if f.secret {
			out = append(out, f.key+"_FILE")
		}
	}
	return out
}

// known is the set of Variables.
var known = func() map[string]bool {
	m := make(map[string]bool)
	for _, k := range Variables() {
		m[k] = true
	}
	return m
}()

// unknownVariables returns a problem for every variable in environ (os.Environ's form) that starts with
// Prefix + "_" and is none of the bridge's: most likely a misspelt name, whose value would otherwise be
// silently ignored. envconfig.CheckDisallowed decides whether there is any; as it stops at the first,
// the names are then listed here. Kubernetes's service links are let through (serviceLink). No problem
// shows the variable's value, which may be a secret.
func unknownVariables(environ []string) []error {
	if envconfig.CheckDisallowed(Prefix, new(envSpec)) == nil {
		return nil
	}
	var errs []error
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, Prefix+"_") || known[name] || serviceLink(name, value) {
			continue
		}
		msg := "is not a variable of the bridge (bridge -h lists them); its value is ignored"
		if s := closest(name); s != "" {
			msg = "is not a variable of the bridge; did you mean " + s + "?"
		}
		errs = append(errs, problemf([]string{name}, nil, "%s", msg))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// serviceLinkName matches the names of the variables Kubernetes gives every container for each Service
// of its namespace (for a Service named bridge-foo: BRIDGE_FOO_SERVICE_HOST, BRIDGE_FOO_SERVICE_PORT,
// BRIDGE_FOO_SERVICE_PORT_<PORT NAME>, BRIDGE_FOO_PORT, BRIDGE_FOO_PORT_8080_TCP and its _PROTO, _PORT
// and _ADDR). No variable of the bridge has one of these forms. The second group is set for the two
// whose value is a URL, tcp://10.0.0.1:8080.
var serviceLinkName = regexp.MustCompile(`^[A-Z0-9_]+?_(SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT_[0-9]+_(?:TCP|UDP|SCTP)_(?:PROTO|PORT|ADDR)|(PORT(?:_[0-9]+_(?:TCP|UDP|SCTP))?))$`)

// serviceLink reports whether name=value is one of Kubernetes's service-link variables. A Service
// named bridge-<anything> in the bridge's namespace gives it BRIDGE_* names it cannot refuse; refusing
// them would stop the bridge for a Service it has nothing to do with. BRIDGE_X_PORT and
// BRIDGE_X_PORT_<N>_<PROTO> count only with a value of Kubernetes's form (tcp://10.0.0.1:8080), so that,
// say, BRIDGE_HTTP_PORT=9090 is still reported.
func serviceLink(name, value string) bool {
	m := serviceLinkName.FindStringSubmatch(name)
	switch {
	case m == nil:
		return false
	case m[2] == "":
		return true
	}
	scheme, _, ok := strings.Cut(value, "://")
	return ok && (scheme == "tcp" || scheme == "udp" || scheme == "sctp")
}

// closest returns the variable of the bridge nearest to name, if one is at most two edits away (a typo).
func closest(name string) string {
	best, bestD := "", 3
	for _, k := range Variables() {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// init checks that envSpec holds a _FILE field for every secret of Config and nothing more; a mismatch
// is a programming error, so it panics.
func init() {
	t := reflect.TypeFor[envSpec]()
	var got []string
	for i := 1; i < t.NumField(); i++ {
		got = append(got, Prefix+"_"+t.Field(i).Tag.Get("envconfig"))
	}
	var want []string
	for _, f := range fields {
		if f.secret {
			want = append(want, f.key+"_FILE")
		}
	}
	if !slices.Equal(got, want) {
		panic(fmt.Sprintf("config: envSpec's _FILE fields are %v, the secrets' %v", got, want))
	}
}

// readSecretFile returns the content of a _FILE secret without trailing CR and LF characters. Its errors
// name the path, never the content.
func readSecretFile(path string) (string, error) {
	b, err := readAtMost(path, maxSecretFileBytes)
	if err != nil {
		return "", pathError(path, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// readAtMost reads the file at path, failing when it holds more than limit bytes: a mistaken path (a log,
// a device such as /dev/zero) fails clearly instead of being read whole.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return b, err
}

// pathError renders err as "path: reason", without repeating the operation and path an *fs.PathError
// carries, and keeps it matchable with errors.Is (fs.ErrNotExist, fs.ErrPermission). The path is
// bounded, and left out when it is a file's contents pasted in its place.
func pathError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if strings.ContainsAny(path, "\r\n") || strings.Contains(path, "-----BEGIN") {
		// A certificate or a key pasted where its file's path goes: never repeat it.
		return fmt.Errorf("the value is a file's contents (PEM), not its path: %w", err)
	}
	return fmt.Errorf("%s: %w", logging.Value(path, 256), err)
}

// Environ returns c as the BRIDGE_* variables that give it to bridge run, in os.Environ's form
// ("BRIDGE_X=value"), in the order of Usage: one for each field that differs from its default, secrets
// in clear. It is for the environment of a child process (a test's, the benchmark's); never log it.
// FromEnv reads them back as c, but for two things no variable can say: a string set to "" where the
// default is not empty (an empty variable counts as unset), which is an error here, and the case of
// BRIDGE_LOG_FORMAT and BRIDGE_LOG_LEVEL, which FromEnv lower-cases.
func (c *Config) Environ() ([]string, error) {
	v := reflect.ValueOf(c).Elem()
	var out []string
	for _, f := range fields {
		fv := v.Field(f.index)
		if fv.Equal(defaultValue(f)) {
			continue
		}
		var s string
		switch {
		case f.typ == durationType:
			s = time.Duration(fv.Int()).String()
		case f.typ == bytesType:
			s = ByteSize(fv.Int()).String()
		case f.typ.Kind() == reflect.Int:
			s = strconv.FormatInt(fv.Int(), 10)
		case f.typ.Kind() == reflect.Bool:
			s = strconv.FormatBool(fv.Bool())
		default:
			s = fv.String()
			if s == "" {
				return nil, problemf([]string{f.key}, nil, "is empty, which no variable can say: an empty variable counts as unset, and the default is %q", f.def)
			}
		}
		out = append(out, f.key+"="+s)
	}
	return out, nil
}

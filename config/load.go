package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	_ "unsafe" // for go:linkname; see envconfigLookupEnv

	"github.com/kelseyhightower/envconfig"
)

// LoadFromEnv is Load reading the process environment.
func LoadFromEnv() (*Config, error) { return Load(os.LookupEnv) }

// Load reads the configuration through lookup, which has the signature of os.LookupEnv (nil means
// os.LookupEnv), reads the _FILE variants of secrets, applies the defaults (a variable set to "" counts as
// unset) and validates the result. The error, if any, joins every problem found (values that do not
// parse, unreadable secret files, and everything Validate reports), one per line, each naming its
// variable and none showing a secret's value.
//
// It works in three steps. A pre-pass reads every variable through lookup, in the order of Config's
// fields: it drops empty values, reads the _FILE secrets and checks integers (see readEnv). Then
// envconfig.Process fills a Config from what the pre-pass kept, with its own defaults and decoders (ByteSize
// and Secret implement envconfig.Decoder). Last, Validate's checks run on the result; those about a
// variable that already failed to load are left out, as they would only repeat it.
func Load(lookup func(string) (string, bool)) (*Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env, failed := readEnv(lookup)

	// envconfig.Process stops at the first value that does not parse. To report every one, Load runs it
	// again without each variable that failed (so that the field keeps its default, as it did before
	// envconfig) until it passes: n bad values cost n+1 passes over a few dozen fields, a few microseconds
	// each. Checking every value beforehand instead would mean a second copy of envconfig's decoding
	// (durations, booleans), which could drift from it.
	c := new(Config)
	for {
		err := process(env, c)
		if err == nil {
			break
		}
		pe, ok := errors.AsType[*envconfig.ParseError](err)
		if !ok {
			return nil, fmt.Errorf("config: %w", err) // process rules out every other error of Process
		}
		if _, fromEnv := env[pe.KeyName]; !fromEnv {
			panic("config: the default of " + pe.KeyName + " does not load: " + pe.Err.Error())
		}
		failed[pe.KeyName] = parseProblem(fieldOf(pe.KeyName), pe.Value, pe.Err)
		delete(env, pe.KeyName)
	}

	// The enumerations are matched without regard to case; hand them on in the documented spelling.
	c.LogFormat, c.LogLevel = strings.ToLower(c.LogFormat), strings.ToLower(c.LogLevel)

	var errs []error
	concerned := make(map[string]bool, len(failed))
	for _, f := range fields { // in the order of the fields, as Usage lists them
		if err, ok := failed[f.key]; ok {
			errs = append(errs, err)
			concerned[f.key] = true
		}
	}
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

// readEnv is Load's pre-pass: it looks up every variable of Config through lookup, in the order of the
// fields (a secret's X_FILE right after X), and returns the values for envconfig.Process, keyed by
// variable, with the problems found, keyed by the field's variable. It keeps three rules envconfig does
// not have:
//
//   - a variable set to "" counts as unset (Process would let it skip the default);
//   - a secret X can come from the file named by X_FILE, but not from both;
//   - an integer is written in decimal: "010" is ten (Process would read it as octal, and accept 0x10
//     and 1_000), so readEnv checks it and hands Process its canonical form.
func readEnv(lookup func(string) (string, bool)) (env map[string]string, failed map[string]error) {
	get := func(key string) (string, bool) {
		v, ok := lookup(key)
		return v, ok && v != ""
	}
	env, failed = make(map[string]string), make(map[string]error)
	for _, f := range fields {
		raw, ok := get(f.key)
		if f.secret {
			path, fromFile := get(f.key + "_FILE")
			switch {
			case ok && fromFile:
				failed[f.key] = problemf([]string{f.key, f.key + "_FILE"}, nil, "both are set; set only one")
				continue
			case fromFile:
				s, err := readSecretFile(path)
				if err != nil {
					failed[f.key] = problemf([]string{f.key + "_FILE"}, err, "cannot read %v", err)
					continue
				}
				// An empty file is like an unset variable: the default, or "required".
				raw, ok = s, s != ""
			}
		}
		if !ok {
			continue
		}
		if f.typ.Kind() == reflect.Int {
			n, err := strconv.ParseInt(raw, 10, 0)
			if err != nil {
				failed[f.key] = parseProblem(f, raw, err)
				continue
			}
			raw = strconv.FormatInt(n, 10)
		}
		env[f.key] = raw
	}
	return env, failed
}

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

// errNotA describes what a value failed to parse as; Load's message reads `"x" is not <errNotA>`.
type errNotA string

func (e errNotA) Error() string { return string(e) }

// fieldOf returns the field of the variable key.
func fieldOf(key string) field {
	for _, f := range fields {
		if f.key == key {
			return f
		}
	}
	panic("config: no variable " + key)
}

// envconfigLookupEnv is envconfig's package variable through which Process reads every variable (it is
// os.LookupEnv there). envconfig v1.4.0 offers no other way to hand Process an environment, and Load must
// read one from its lookup function without touching the process environment: tests run in parallel,
// the demo and the benchmark pass maps, and a child process would inherit what Load set. So process
// swaps it, under processMu. A future envconfig without this variable fails to link, loudly; the tests
// (TestLoadIgnoresProcessEnvironment) check that Process reads through it.
//
//go:linkname envconfigLookupEnv github.com/kelseyhightower/envconfig.lookupEnv
var envconfigLookupEnv func(string) (string, bool)

// processMu serialises process: envconfigLookupEnv is one variable for the whole program.
var processMu sync.Mutex

// requiredKeys are the variables of the required fields.
var requiredKeys = func() map[string]bool {
	m := make(map[string]bool)
	for _, f := range fields {
		if f.required {
			m[f.key] = true
		}
	}
	return m
}()

// process resets c and fills it with envconfig.Process from env alone (nil means empty): neither the
// process environment nor envconfig's fallback to the name without the prefix (USERNAME for
// BRIDGE_USERNAME) is read. A required variable missing from env is handed to Process as "", which
// satisfies its required tag: Validate reports it, together with every other problem, where Process would
// stop at it.
func process(env map[string]string, c *Config) error {
	processMu.Lock()
	defer processMu.Unlock()
	saved := envconfigLookupEnv
	defer func() { envconfigLookupEnv = saved }()
	envconfigLookupEnv = func(key string) (string, bool) {
		if v, ok := env[key]; ok {
			return v, true
		}
		return "", requiredKeys[key]
	}
	*c = Config{}
	return envconfig.Process(Prefix, c)
}

// readSecretFile returns the content of a _FILE secret without trailing CR and LF characters. Its errors
// name the path, never the content.
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", pathError(path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return "", pathError(path, err)
	}
	if len(b) > maxSecretFileBytes {
		return "", fmt.Errorf("%s: larger than %d bytes, not a secret file", path, maxSecretFileBytes)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// pathError renders err as "path: reason", without repeating the operation and path an *fs.PathError
// carries, and keeps it matchable with errors.Is (fs.ErrNotExist, fs.ErrPermission).
func pathError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %w", path, err)
}

package config

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

const usageHeader = `The bridge is configured through the environment. A variable set to the empty string counts as unset.
A secret can instead be read from the file named by its _FILE variable (trailing CR and LF removed);
setting both is an error. Durations are written with a unit: 500ms, 30s, 5m, 1h. Sizes of type Bytes
are a number of bytes, or a number with a binary unit: 512KiB, 256MiB, 4GiB.

`

// Usage writes the table of every variable (secrets' _FILE variants included) with its type, default
// and meaning, for bridge -h. It is built from the same struct tags envconfig.Process reads, so the two
// cannot disagree, and it prints no value from the environment. Write errors are ignored, as by
// flag.PrintDefaults.
//
// envconfig's own table (envconfig.Usagef) is not used: its default format has a REQUIRED column and no
// _FILE rows, and any format runs through text/template, whose reflection keeps every exported method
// of the program in the binary: megabytes more for the bridge.
func Usage(w io.Writer) {
	io.WriteString(w, usageHeader)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tDESCRIPTION")
	for _, f := range fields {
		def := f.def
		if f.required {
			def = "(required)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.key, typeName(f.typ), def, f.desc)
		if f.secret {
			fmt.Fprintf(tw, "%s_FILE\tPath\t\tfile holding the value of %s, instead of setting it\n", f.key, f.key)
		}
	}
	tw.Flush()
	io.WriteString(w, "\n"+tracingHeader+"\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tDESCRIPTION")
	for _, v := range tracingVars {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.key, v.typ, v.def, v.desc)
	}
	tw.Flush()
}

// tracingHeader introduces the OTEL_* variables in bridge -h and docs/configuration.md.
const tracingHeader = "Tracing follows OpenTelemetry's own variables (OTEL_*), read as the OpenTelemetry specification says;\n" +
	"it is off unless an OTLP endpoint is set. bridge check-config checks them with the BRIDGE_* variables."

// referenceHeader opens docs/configuration.md.
const referenceHeader = "# Configuration reference\n\n" +
	"<!-- Generated from the Config struct's tags in config/config.go by:\n" +
	"     go test ./config -run TestConfigurationReference -update\n" +
	"     Edit the tags, not this file. -->\n" + `
The bridge reads its configuration from ` + "`BRIDGE_*`" + ` environment variables, and from nothing else.
` + "`bridge -h`" + ` prints the same table. ` + "`bridge check-config`" + ` loads and validates a configuration
without contacting NATS or the upstream API: it exits 0 when the configuration is usable, and 2 with
every problem otherwise.

- A variable set to the empty string counts as unset: the default applies, and a required variable is
  reported as missing.
- Every variable of type Secret can instead be read from a file: set ` + "`X_FILE`" + ` to its path instead
  of setting ` + "`X`" + `. The file's content, less trailing CR and LF characters, is the value; a file
  larger than 64 KiB is refused. Setting both ` + "`X`" + ` and ` + "`X_FILE`" + ` is an error. No error
  message or log line shows a secret.
- Every variable is read under its ` + "`BRIDGE_`" + ` name only, never under the name without the prefix.
  A ` + "`BRIDGE_*`" + ` variable the bridge does not read is an error, so that a misspelt name
  (` + "`BRIDGE_NATS_UR`" + `) is not silently ignored; the error names the variable, the nearest real one
  when there is one, never its value. Left alone are the variables Kubernetes gives a pod for a Service
  named ` + "`bridge-…`" + ` in its namespace (` + "`BRIDGE_…_SERVICE_HOST`" + `, ` + "`BRIDGE_…_PORT=tcp://…`" + `, …).
- Every problem is reported at once, one per line, each naming its variable: the unknown variables,
  every value that does not parse and every ` + "`_FILE`" + ` that cannot be read, and every other problem
  found. Only the checks of a value that did not parse wait for it to parse: its range, and its relation
  to other variables (a minimum above a maximum).
- Durations take a unit: ` + "`500ms`, `30s`, `5m`, `1h`" + `. Integers are decimal. Sizes of type Bytes
  are a number of bytes, or a number with a binary unit: ` + "`512KiB`, `256MiB`, `4GiB`, `1TiB`" + `.
  Booleans are ` + "`true` or `false` (or `1` and `0`)" + `.
- In the meanings, P is ` + "`BRIDGE_SUBJECT_PREFIX`" + ` and PFX the streams' name prefix: P upper-cased,
  with every character other than A-Z and 0-9 written as ` + "`_`" + ` (` + "`tracking`" + ` gives
  ` + "`TRACKING_EVENTS`" + `).

| Variable | Type | Default | Meaning |
|---|---|---|---|
`

// writeReference writes docs/configuration.md, the configuration reference in Markdown: FromEnv's rules
// and Usage's table. TestConfigurationReference keeps the file up to date.
func writeReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString(referenceHeader)
	for _, f := range fields {
		def := ""
		switch {
		case f.required:
			def = "required"
		case f.def != "":
			def = "`" + f.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.key, typeName(f.typ), def, markdownText(f.desc))
		if f.secret {
			fmt.Fprintf(&b, "| `%s_FILE` | Path | | file holding the value of `%s`, instead of setting it |\n", f.key, f.key)
		}
	}
	b.WriteString("\n## Tracing\n\n" + tracingHeader + "\nWhat the spans hold: [operations.md](operations.md#tracing).\n\n" +
		"| Variable | Type | Default | Meaning |\n|---|---|---|---|\n")
	for _, v := range tracingVars {
		def := ""
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.key, v.typ, def, markdownText(v.desc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// markdownText escapes what Markdown would not show as written in a table cell: "|" (a cell's end), "<"
// (an HTML tag), "*" and a word's leading "_" (emphasis).
func markdownText(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '|' || r == '<' || r == '*':
			b.WriteByte('\\')
		case r == '_' && (i == 0 || strings.ContainsRune(" (", rune(s[i-1]))):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

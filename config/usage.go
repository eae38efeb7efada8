package config

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
)

const usageHeader = `The bridge is configured through the environment. A variable set to the empty string counts as unset.
A secret can instead be read from the file named by its _FILE variable (trailing CR and LF removed);
setting both is an error. Durations are written with a unit: 500ms, 30s, 5m, 1h.

`

// usageFormat is an envconfig.Usagef template: one row per variable, and for a secret a second row for
// its _FILE variant. Only names, types, defaults and descriptions are printed, never a value.
const usageFormat = `VARIABLE	TYPE	DEFAULT	DESCRIPTION
{{range .}}{{usage_key .}}	{{usage_type .}}	{{if eq (usage_required .) "true"}}(required){{else}}{{usage_default .}}{{end}}	{{usage_description .}}
{{if eq (usage_type .) "Secret"}}{{usage_key .}}_FILE	Path		file holding the value of {{usage_key .}}, instead of setting it
{{end}}{{end}}`

// Usage writes the table of every variable (secrets' _FILE variants included) with its type, default
// and meaning, for bridge -h. It prints no value from the environment. Write errors are ignored, as by
// flag.PrintDefaults.
func Usage(w io.Writer) {
	io.WriteString(w, usageHeader)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if err := envconfig.Usagef(Prefix, new(Config), tw, usageFormat); err != nil {
		fmt.Fprintf(tw, "config: usage: %v\n", err) // a broken template: caught by the tests
	}
	tw.Flush()
}

package config

import (
	"fmt"
	"io"
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
}

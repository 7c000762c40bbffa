package doctor

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/plural"
)

// ANSI colours of the verdicts on a terminal.
const (
	colourReset = "\x1b[0m"
	colourDim   = "\x1b[2m"
	colourBold  = "\x1b[1m"
)

var statusColour = map[Status]string{Info: "\x1b[36m", Pass: "\x1b[32m", Warn: "\x1b[33m", Fail: "\x1b[31m"}

// WriteText writes the report for people: checks grouped, each with its
// verdict, summary, evidence, fix and what it read; colour is ANSI escapes
// for a terminal. It returns the first write error.
func (r *Report) WriteText(w io.Writer, colour bool) error {
	bw := bufio.NewWriter(w)
	paint := func(code, s string) string {
		if !colour || code == "" {
			return s
		}
		return code + s + colourReset
	}
	fmt.Fprintf(bw, "%s\n", paint(colourBold, "floodgate doctor: "+r.Target))
	fmt.Fprintf(bw, "%s\n", paint(colourDim, fmt.Sprintf("started %s, took %v, %s in all (reads only, besides the client's connection setup)",
		r.Started.UTC().Format(time.RFC3339), r.Duration.Round(time.Millisecond), plural.Count(r.RedisCommands, "Redis command", "Redis commands"))))
	group := ""
	for _, c := range r.Checks {
		if c.Group != group {
			group = c.Group
			fmt.Fprintf(bw, "\n%s\n", paint(colourBold, group))
		}
		tag := fmt.Sprintf("[%s]", strings.ToUpper(c.Status.String()))
		fmt.Fprintf(bw, "  %s %s: %s\n", paint(statusColour[c.Status], tag), c.Name, indent(c.Summary))
		for _, e := range c.Evidence {
			fmt.Fprintf(bw, "         %s\n", indent(e))
		}
		if c.Fix != "" && c.Status >= Warn {
			fmt.Fprintf(bw, "         %s %s\n", paint(colourBold, "fix:"), indent(c.Fix))
		}
		read := "read: " + c.Read
		if c.RedisCommands > 0 {
			read += " (" + plural.Count(c.RedisCommands, "Redis command", "Redis commands") + ")"
		}
		fmt.Fprintf(bw, "         %s\n", paint(colourDim, read))
	}
	fmt.Fprintf(bw, "\n%s: %d fail, %d warn, %d pass, %d info\n", paint(statusColour[r.Worst()], strings.ToUpper(r.Worst().String())),
		r.Count(Fail), r.Count(Warn), r.Count(Pass), r.Count(Info))
	return bw.Flush()
}

// indent keeps a text that spans lines (an error from Redis) in the
// report's layout: its continuation lines are indented as evidence is.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n           ")
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Report
		Worst Status `json:"worst"`
	}{r, r.Worst()})
}

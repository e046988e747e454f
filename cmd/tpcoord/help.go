package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/internal/termlog"
)

// Help lists a command's flags in sections (a flag's section is its
// groupKey annotation; flags without one come first, under "Flags:"), and
// wraps every line at the terminal's width, between words.

// groupKey is the pflag annotation that puts a flag in a help section.
const groupKey = "tpcoord_help_group"

// Help sections, in the order help lists them after the command's own
// flags.
const (
	groupLaunch    = "launch"
	groupAPI       = "api"
	groupRanks     = "ranks"
	groupTelemetry = "telemetry"
)

// helpSections are the sections' keys and titles, in order.
var helpSections = []struct{ key, title string }{
	{"", "Flags"},
	{groupLaunch, "Launch flags"},
	{groupAPI, "OpenAI-compatible API flags"},
	{groupRanks, "Rank flags (every rank gets them)"},
	{groupTelemetry, "Telemetry and logging flags"},
}

// Help's widths: the width without a terminal or COLUMNS, the narrowest
// it formats for, and the widest a flag's name column gets.
const (
	helpDefaultWidth = 80
	helpMinWidth     = 30
	helpMaxNameCol   = 34
)

// setGroup puts the named flags of fs in help section group ("": the
// command's own flags).
func setGroup(fs *pflag.FlagSet, group string, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, groupKey, []string{group}); err != nil {
			panic(err) // a flag defined by the caller
		}
	}
}

func groupOf(f *pflag.Flag) string {
	if g := f.Annotations[groupKey]; len(g) > 0 {
		return g[0]
	}
	return ""
}

// installHelp makes root and its commands write help and usage with
// writeHelp and writeUsage.
func installHelp(root *cobra.Command) {
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		w := c.OutOrStdout()
		_, _ = io.WriteString(w, helpText(c, helpWidth(w, os.Getenv)))
	})
	root.SetUsageFunc(func(c *cobra.Command) error {
		w := c.OutOrStderr()
		_, err := io.WriteString(w, usageText(c, helpWidth(w, os.Getenv)))
		return err
	})
}

// helpWidth is the width help wraps at: $COLUMNS if it is a number, else
// the width of the terminal w is, else 80; at least helpMinWidth.
func helpWidth(w io.Writer, getenv func(string) string) int {
	n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS")))
	if err != nil || n <= 0 {
		n = termlog.Width(w)
	}
	if n <= 0 {
		n = helpDefaultWidth
	}
	return max(n, helpMinWidth)
}

// helpText is a command's help: its description, as written if it fits
// width and rewrapped if not, then its usage.
func helpText(c *cobra.Command, width int) string {
	var b strings.Builder
	desc := strings.TrimRight(c.Long, " \n")
	if desc == "" {
		desc = c.Short
	}
	if desc != "" {
		b.WriteString(reflow(desc, width))
		b.WriteString("\n\n")
	}
	if c.Runnable() || c.HasSubCommands() {
		b.WriteString(usageText(c, width))
	}
	return b.String()
}

// usageText is cobra's usage (the usage line, examples, commands, flags)
// with the flags in sections and every line wrapped at width.
func usageText(c *cobra.Command, width int) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	if c.Runnable() {
		b.WriteString(indentWrap(c.UseLine(), width, 2, 4))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "  %s [command]\n", c.CommandPath())
	}
	if c.HasExample() {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\nAvailable Commands:\n")
		b.WriteString(commandList(c, width))
	}
	if c.HasAvailableLocalFlags() {
		b.WriteString(flagSections(c.LocalFlags(), width))
	}
	if c.HasAvailableInheritedFlags() {
		b.WriteString("\nGlobal Flags:\n")
		rows := flagRows(visible(c.InheritedFlags()))
		b.WriteString(table(rows, width, nameCol(rows, width)))
	}
	if c.HasAvailableSubCommands() {
		b.WriteByte('\n')
		b.WriteString(indentWrap(fmt.Sprintf("Use \"%s [command] --help\" for more information about a command.", c.CommandPath()), width, 0, 0))
	}
	return b.String()
}

// commandList lists c's subcommands and what they do.
func commandList(c *cobra.Command, width int) string {
	var rows [][2]string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() || s.Name() == "help" {
			rows = append(rows, [2]string{"  " + s.Name(), s.Short})
		}
	}
	return table(rows, width, nameCol(rows, width))
}

// flagSections lists fs's visible flags under their sections' titles.
func flagSections(fs *pflag.FlagSet, width int) string {
	all := visible(fs)
	col := nameCol(flagRows(all), width) // one column for every section
	var b strings.Builder
	for _, s := range helpSections {
		var in []*pflag.Flag
		for _, f := range all {
			if groupOf(f) == s.key {
				in = append(in, f)
			}
		}
		if len(in) > 0 {
			fmt.Fprintf(&b, "\n%s:\n", s.title)
			rows := flagRows(in)
			b.WriteString(table(rows, width, col))
		}
	}
	return b.String()
}

// visible are fs's flags help lists, sorted by name.
func visible(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			out = append(out, f)
		}
	})
	return out
}

// flagRows are the rows of a table of flags as pflag writes them ("  -h,
// --help", the value's type, the usage and the default).
func flagRows(flags []*pflag.Flag) [][2]string {
	rows := make([][2]string, len(flags))
	for i, f := range flags {
		rows[i] = flagRow(f)
	}
	return rows
}

// flagRow is f's name column and its usage, as pflag formats them: a
// set of f alone rendered unwrapped is the name column, three spaces and
// the usage with its default.
func flagRow(f *pflag.Flag) [2]string {
	one := pflag.NewFlagSet(f.Name, pflag.ContinueOnError)
	g := *f
	g.Hidden = false
	one.AddFlag(&g)
	line := strings.TrimSuffix(one.FlagUsagesWrapped(0), "\n")
	lead := len(line) - len(strings.TrimLeft(line, " "))
	i := strings.Index(line[lead:], "   ")
	if i < 0 {
		return [2]string{line, ""}
	}
	name := line[:lead+i]
	usage := line[lead+i+3:]
	usage = strings.ReplaceAll(usage, "\n"+strings.Repeat(" ", len(name)+3), "\n")
	// "(default 2)" is not broken across lines.
	usage = strings.ReplaceAll(usage, " (default ", " (default"+nbsp)
	return [2]string{name, usage}
}

// nbsp joins words that wrapWords keeps on one line; it is written as a
// space.
const nbsp = "\u00a0"

// nameCol is where the texts of a table of rows start: after the widest
// name up to helpMaxNameCol; on a width too narrow for that, below the
// names.
func nameCol(rows [][2]string, width int) int {
	col := 0
	for _, r := range rows {
		if n := utf8.RuneCountInString(r[0]); n <= helpMaxNameCol {
			col = max(col, n)
		}
	}
	col += 3
	if width-col < 30 {
		col = min(8, width/4)
	}
	return col
}

// table writes rows of a name and a text: the texts from column col (a
// name wider than that puts its text on the next line), wrapped at width.
func table(rows [][2]string, width, col int) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r[0])
		n := utf8.RuneCountInString(r[0])
		if r[1] == "" {
			b.WriteByte('\n')
			continue
		}
		if n+1 > col {
			b.WriteByte('\n')
			n = 0
		}
		lines := wrapWords(r[1], width-col)
		for i, l := range lines {
			if i > 0 {
				n = 0
			}
			b.WriteString(strings.Repeat(" ", col-n))
			b.WriteString(strings.ReplaceAll(l, nbsp, " "))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// indentWrap wraps s at width, its first line indented by first and the
// others by rest.
func indentWrap(s string, width, first, rest int) string {
	var b strings.Builder
	for i, l := range wrapWords(s, width-rest) {
		n := rest
		if i == 0 {
			n = first
		}
		b.WriteString(strings.Repeat(" ", n))
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// wrapWords breaks s (its own line breaks kept) into lines of at most
// width characters, between words (split at spaces, not at nbsp); a
// word longer than width gets a line of its own, whole.
func wrapWords(s string, width int) []string {
	var out []string
	for _, para := range strings.Split(s, "\n") {
		line, n := "", 0
		for _, w := range strings.FieldsFunc(para, func(r rune) bool { return r == ' ' || r == '\t' }) {
			wn := utf8.RuneCountInString(w)
			switch {
			case n == 0:
				line, n = w, wn
			case n+1+wn <= width:
				line, n = line+" "+w, n+1+wn
			default:
				out = append(out, line)
				line, n = w, wn
			}
		}
		out = append(out, line)
	}
	return out
}

// reflow is text as written if every line fits width; else its
// paragraphs rewrapped at width. An indented line starts a block of its
// own: "  term  text" with the lines indented to text's column after it
// (a list of terms), or a line alone (a command line, say), whose
// continuation lines are indented two more.
func reflow(text string, width int) string {
	lines := strings.Split(text, "\n")
	fits := true
	for _, l := range lines {
		fits = fits && utf8.RuneCountInString(l) <= width
	}
	if fits {
		return text
	}
	var out, para []string
	flush := func() {
		if len(para) > 0 {
			out = append(out, wrapWords(strings.Join(para, " "), width)...)
			para = nil
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			flush()
			out = append(out, "")
		case strings.HasPrefix(l, " "):
			flush()
			head, hang := hanging(l)
			body := []string{l[len(head):]}
			for i+1 < len(lines) && indentOf(lines[i+1]) == hang && hang > indentOf(l) {
				i++
				body = append(body, strings.TrimSpace(lines[i]))
			}
			out = append(out, strings.TrimSuffix(head+indentWrap(strings.Join(body, " "), width, 0, hang), "\n"))
		default:
			para = append(para, l)
		}
	}
	flush()
	return strings.Join(out, "\n")
}

// hanging splits an indented line into its head (the indent, and a term
// followed by two spaces or more) and the column its continuation lines
// start at: the text's after a term, else two past the indent.
func hanging(l string) (head string, hang int) {
	lead := indentOf(l)
	if i := strings.Index(l[lead:], "  "); i > 0 {
		j := lead + i
		for j < len(l) && l[j] == ' ' {
			j++
		}
		return l[:j], utf8.RuneCountInString(l[:j])
	}
	return l[:lead], lead + 2
}

// indentOf is the number of spaces l starts with.
func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

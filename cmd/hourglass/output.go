package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/version"
)

// emit writes v as JSON with -o json, else calls table with a tab writer
// (flushed afterwards).
func (a *app) emit(v any, table func(w io.Writer)) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// emitPartial emits v unless err is a failure that left nothing to
// show; then, or after v, it returns err. A partial read
// (inspect.ErrPartial: some shards could not be read) thus prints the
// rest and ends with the warning and exit code 5.
func (a *app) emitPartial(v any, table func(w io.Writer), err error) error {
	if err != nil && !errors.Is(err, inspect.ErrPartial) {
		return err
	}
	if eerr := a.emit(v, table); eerr != nil {
		return eerr
	}
	return err
}

// row writes tab-separated cells and a newline, each cell through
// printable.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = printable(fmt.Sprint(c))
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// printable renders s for a terminal: s itself when every rune is
// printable (unicode.IsPrint: letters, marks, numbers, punctuation,
// symbols and the ASCII space) and s does not start with a double quote;
// otherwise s as a Go string literal (strconv.Quote), with control
// characters (\r, \n, \t, \x1b), other unprintable runes (\u202e) and
// bytes that are not UTF-8 (\xff) escaped. So data read from Redis (task
// ids, errors, reasons, queue names of corrupt data) cannot move the
// cursor, recolour or clear the terminal, forge a line or break a
// table's columns, and a quoted cell is never mistaken for a plain one.
// Every table cell (row) and every line of an error (errText) goes
// through it; -o json prints the data as it is, JSON-escaped.
func printable(s string) string {
	if strings.HasPrefix(s, `"`) || strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// errText renders an error's message for stderr, after the "hourglass: "
// the CLI prints: each of its lines (an errors.Join of config problems
// has several) through printable, without the "hourglass: " the public
// packages' errors start with.
func errText(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = printable(strings.TrimPrefix(l, "hourglass: "))
	}
	return strings.Join(lines, "\n")
}

// timeLayout is how tables show a time: local, 24-hour, to the
// millisecond, with the zone's offset, as the dashboard shows it.
const timeLayout = "2006-01-02 15:04:05.000 -07:00"

// when formats a time for tables ("-" for none).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(timeLayout)
}

// tablePayload bounds the payload bytes a table shows; -o json prints
// the whole payload.
const tablePayload = 4 << 10

// payloadText renders a payload for people: as text when it is valid
// UTF-8 without control characters other than newlines and tabs (row
// escapes those), its first tablePayload bytes of a longer one followed
// by its size; else as a size.
func payloadText(p []byte) string {
	shown, more := p, ""
	if len(p) > tablePayload {
		cut := tablePayload
		for k := 1; k < utf8.UTFMax && !utf8.RuneStart(p[cut]); k++ { // not in the middle of a character
			cut--
		}
		shown = p[:cut]
		more = fmt.Sprintf(" … (the first %d of %d bytes; -o json prints all)", len(shown), len(p))
	}
	if utf8.Valid(shown) && !strings.ContainsFunc(string(shown), func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
		return string(shown) + more
	}
	return fmt.Sprintf("(%d bytes of binary data; -o json shows it in base64)", len(p))
}

// showTask prints one task's details.
func showTask(w io.Writer, t inspect.Task) {
	row(w, "id", t.ID)
	row(w, "queue", t.Queue)
	row(w, "state", t.State)
	row(w, "shard", t.Shard)
	row(w, "attempts", fmt.Sprintf("%d (max retries %d)", t.Attempts, t.MaxRetries))
	if t.Priority != hourglass.PriorityNormal {
		row(w, "priority", t.Priority)
	}
	if t.TraceID != "" {
		row(w, "trace id", t.TraceID)
	}
	row(w, "timeout", t.Timeout)
	row(w, "due", when(t.Due))
	row(w, "enqueued", when(t.Enqueued))
	if !t.LeaseDeadline.IsZero() {
		row(w, "lease until", when(t.LeaseDeadline))
	}
	if t.LastError != "" {
		row(w, "last error", t.LastError)
	}
	if !t.Ended.IsZero() {
		row(w, "ended", when(t.Ended))
	}
	if t.State == inspect.StateSucceeded {
		row(w, "result", payloadText(t.Result))
	}
	if d := t.Dead; d != nil {
		row(w, "dead since", when(d.At))
		row(w, "reason", d.Reason)
		row(w, "error", d.Error)
	}
	if t.Problem != "" {
		row(w, "problem", t.Problem)
	}
	row(w, "payload", payloadText(t.Payload))
}

// confirm asks before a destructive bulk operation: --yes skips it; on a
// terminal the user answers y; otherwise it is refused.
func (a *app) confirm(what string) error {
	if a.yes {
		return nil
	}
	if f, ok := a.in.(*os.File); !ok || !isTerminal(f) {
		return refusedf("%s needs confirmation: pass --yes (stdin is not a terminal)", what)
	}
	fmt.Fprintf(a.errOut, "%s? [y/N] ", printable(what))
	line, _ := bufio.NewReader(a.in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
		return refusedf("%s not confirmed", what)
	}
	return nil
}

// isTerminal reports whether f is a terminal (not merely a character
// device such as /dev/null).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress returns a ProgressFunc that prints to stderr at most every
// 200 ms, and always the last report of each shard's end.
func (a *app) progress(verb string) inspect.ProgressFunc {
	var last time.Time
	return func(p inspect.Progress) {
		if time.Since(last) < 200*time.Millisecond && p.ShardsDone < p.Shards {
			return
		}
		last = time.Now()
		fmt.Fprintf(a.errOut, "%s %d of %d examined (shard %d/%d, %d calls)\n", verb, p.Done, p.Scanned, p.ShardsDone, p.Shards, p.Calls)
	}
}

func versionString() string { return version.String() }

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(a.out, version.String())
			return nil
		},
	}
}

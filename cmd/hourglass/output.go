package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

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

// row writes tab-separated cells and a newline.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// when formats a time for tables ("-" for none).
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// payloadText renders a payload for people: as text when it is valid
// UTF-8 without control characters, else as a size.
func payloadText(p []byte) string {
	if utf8.Valid(p) && !strings.ContainsFunc(string(p), func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' }) {
		return string(p)
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
	row(w, "timeout", t.Timeout)
	row(w, "due", when(t.Due))
	row(w, "enqueued", when(t.Enqueued))
	if !t.LeaseDeadline.IsZero() {
		row(w, "lease until", when(t.LeaseDeadline))
	}
	if t.LastError != "" {
		row(w, "last error", t.LastError)
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
		return fmt.Errorf("%w: %s needs confirmation: pass --yes (stdin is not a terminal)", errRefused, what)
	}
	fmt.Fprintf(a.errOut, "%s? [y/N] ", what)
	line, _ := bufio.NewReader(a.in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
		return fmt.Errorf("%w: %s not confirmed", errRefused, what)
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

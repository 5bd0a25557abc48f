package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// col is one column of a scenario's table.
type col struct {
	Key    string `json:"key"`
	Header string `json:"header"`
	Fmt    string `json:"fmt"` // printf verb for the value, e.g. "%.1f"
}

// row is one system's figures in a scenario.
type row struct {
	System string             `json:"system"`
	M      map[string]float64 `json:"metrics"`
	Notes  []string           `json:"notes,omitempty"`
}

// scenario is one scenario's results.
type scenario struct {
	Name  string   `json:"name"`
	Title string   `json:"title"`
	Cols  []col    `json:"columns"`
	Rows  []row    `json:"rows"`
	Notes []string `json:"notes,omitempty"`
}

func (s *scenario) row(system string) *row {
	for i := range s.Rows {
		if s.Rows[i].System == system {
			return &s.Rows[i]
		}
	}
	s.Rows = append(s.Rows, row{System: system, M: map[string]float64{}})
	return &s.Rows[len(s.Rows)-1]
}

func (s *scenario) get(system, key string) (float64, bool) {
	for _, r := range s.Rows {
		if r.System == system {
			v, ok := r.M[key]
			return v, ok
		}
	}
	return 0, false
}

// bar is one performance bar of the brief.
type bar struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	Value  string `json:"value"`
	Met    bool   `json:"met"`
	Known  bool   `json:"measured"`
	// Quick says, in a -quick run, how its sizes differ from the brief's:
	// the figure is not comparable with the bar.
	Quick string `json:"quick,omitempty"`
}

// status is MET, NOT MET, or NOT MEASURED when the scenario did not run.
func (b bar) status() string {
	st := "NOT MET"
	switch {
	case !b.Known:
		return "NOT MEASURED"
	case b.Met:
		st = "MET"
	}
	if b.Quick != "" {
		st += " (quick: not comparable)"
	}
	return st
}

// value is the measured figure, with what a quick run changed.
func (b bar) value() string {
	if b.Quick != "" {
		return b.Value + " [quick run: " + b.Quick + "]"
	}
	return b.Value
}

type meta struct {
	Date      string   `json:"date"`
	Commit    string   `json:"commit"`
	Go        string   `json:"go"`
	Redis     string   `json:"redis"`
	Etcd      string   `json:"etcd"`
	CPUs      int      `json:"cpus"`
	CPUModel  string   `json:"cpu_model"`
	Quick     bool     `json:"quick"`
	Scenarios []string `json:"scenarios"`
	Seconds   float64  `json:"duration_seconds"`
	Asynq     string   `json:"asynq"`
	BullMQ    string   `json:"bullmq,omitempty"`
	// Prefetch is the scheduler.prefetch of the tuned steady row
	// (flag -tuned-prefetch); every other row runs the default.
	Prefetch string `json:"tuned_prefetch"`
	// DefaultPrefetch is the default scheduler.prefetch the other rows
	// ran with (absent from runs before it became 50ms: 0).
	DefaultPrefetch string `json:"default_prefetch,omitempty"`
}

type report struct {
	Meta      meta        `json:"meta"`
	Scenarios []*scenario `json:"scenarios"`
	Bars      []bar       `json:"bars"`
}

func (r *report) find(name string) *scenario {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func fmtVal(c col, v float64, ok bool) string {
	if !ok || math.IsNaN(v) {
		return "–"
	}
	f := c.Fmt
	if f == "" {
		f = "%.1f"
	}
	return fmt.Sprintf(f, v)
}

// text prints the report as plain tables.
func (r *report) text(w io.Writer) {
	fmt.Fprintf(w, "\nHourglass benchmark — %s, commit %s, %s, Redis %s, %d CPUs%s\n", r.Meta.Date, r.Meta.Commit, r.Meta.Go, r.Meta.Redis, r.Meta.CPUs, map[bool]string{true: " (quick)"}[r.Meta.Quick])
	for _, s := range r.Scenarios {
		fmt.Fprintf(w, "\n== %s ==\n", s.Title)
		widths := make([]int, len(s.Cols)+1)
		widths[0] = len("system")
		cells := make([][]string, len(s.Rows))
		for i, rw := range s.Rows {
			widths[0] = max(widths[0], len(rw.System))
			cells[i] = make([]string, len(s.Cols))
			for j, c := range s.Cols {
				v, ok := rw.M[c.Key]
				cells[i][j] = fmtVal(c, v, ok)
				widths[j+1] = max(widths[j+1], len(cells[i][j]), len(c.Header))
			}
		}
		fmt.Fprintf(w, "%-*s", widths[0], "system")
		for j, c := range s.Cols {
			fmt.Fprintf(w, "  %*s", widths[j+1], c.Header)
		}
		fmt.Fprintln(w)
		for i, rw := range s.Rows {
			fmt.Fprintf(w, "%-*s", widths[0], rw.System)
			for j := range s.Cols {
				fmt.Fprintf(w, "  %*s", widths[j+1], cells[i][j])
			}
			fmt.Fprintln(w)
		}
		for _, rw := range s.Rows {
			for _, n := range rw.Notes {
				fmt.Fprintf(w, "  %s: %s\n", rw.System, n)
			}
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	fmt.Fprintf(w, "\n== Bars (BRIEF §5) ==\n")
	for _, b := range r.Bars {
		fmt.Fprintf(w, "%-12s %-44s target %-22s measured %s\n", b.status(), b.Name, b.Target, b.value())
	}
}

// markdown renders the report for results/latest.md.
func (r *report) markdown(w io.Writer) {
	m := r.Meta
	fmt.Fprintf(w, "# Hourglass benchmark results\n\n")
	fmt.Fprintf(w, "| | |\n|---|---|\n| date | %s |\n| commit | `%s` |\n| Go | %s |\n| Redis | %s |\n| etcd | %s |\n| asynq | %s |\n| BullMQ | %s |\n| CPUs | %d (%s) |\n| mode | %s |\n| Hourglass configuration | default (scheduler.prefetch %s); the tuned steady row: scheduler.prefetch %s |\n| run time | %.0f s |\n\n",
		m.Date, m.Commit, m.Go, m.Redis, m.Etcd, m.Asynq, or(m.BullMQ, "not run"), m.CPUs, m.CPUModel, map[bool]string{true: "quick (-quick): sizes differ from the brief's, bars not comparable", false: "full"}[m.Quick], or(m.DefaultPrefetch, "0s"), m.Prefetch, m.Seconds)
	fmt.Fprintf(w, "Generated by `make bench`; see bench/README.md for what each figure means.\n\n## Bars\n\n| bar | target | measured | |\n|---|---|---|---|\n")
	for _, b := range r.Bars {
		fmt.Fprintf(w, "| %s | %s | %s | **%s** |\n", b.Name, b.Target, b.value(), b.status())
	}
	r.sideBySide(w)
	for _, s := range r.Scenarios {
		fmt.Fprintf(w, "\n## %s\n\n| system |", s.Title)
		for _, c := range s.Cols {
			fmt.Fprintf(w, " %s |", c.Header)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(s.Cols)))
		for _, rw := range s.Rows {
			fmt.Fprintf(w, "| %s |", rw.System)
			for _, c := range s.Cols {
				v, ok := rw.M[c.Key]
				fmt.Fprintf(w, " %s |", fmtVal(c, v, ok))
			}
			fmt.Fprintln(w)
		}
		var notes []string
		for _, rw := range s.Rows {
			for _, n := range rw.Notes {
				notes = append(notes, fmt.Sprintf("%s: %s", rw.System, n))
			}
		}
		notes = append(notes, s.Notes...)
		if len(notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
	}
}

func (r *report) write(dir, base string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, base+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, base+".md"))
	if err != nil {
		return err
	}
	defer f.Close()
	r.markdown(f)
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// headline is one figure of the side-by-side table.
type headline struct {
	label, scen, key, fmt string
}

var headlines = []headline{
	{"burst drain, tasks/s", "burst", "drain", "%.0f"},
	{"burst lateness p99, ms", "burst", "p99", "%.0f"},
	{"steady 2,000/s lateness p50, ms", "steady", "p50", "%.1f"},
	{"steady 2,000/s lateness p99, ms", "steady", "p99", "%.1f"},
	{"steady 2,000/s tasks early", "steady", "early", "%.0f"},
	{"steady 2,000/s Redis CPU µs/task", "steady", "rcpu_per_1k", "%.1f"},
	{"steady 2,000/s Redis commands/task", "steady", "cmds", "%.1f"},
	{"steady capacity (p99 ≤ 10 ms), tasks/s", "capacity", "cap", "%.0f"},
	{"enqueue batched, 1 goroutine, tasks/s", "enqueue", "g1", "%.0f"},
	{"enqueue unbatched, 64 goroutines, tasks/s", "enqueue", "u64", "%.0f"},
	{"idle Redis commands/s", "idle", "cps", "%.2f"},
	{"memory, bytes/task beyond payload", "idle", "mem", "%.0f"},
}

// sideBySide renders the headline figures of the default deployment and
// the peers in one table, a column per system.
func (r *report) sideBySide(w io.Writer) {
	systems := []string{"hourglass", "asynq", "asynq-tuned", "bullmq"}
	var have []string
	for _, sys := range systems {
		for _, h := range headlines {
			if s := r.find(h.scen); s != nil {
				if _, ok := s.get(sys, h.key); ok {
					have = append(have, sys)
					break
				}
			}
		}
	}
	if len(have) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Side by side (default configurations; Hourglass: 16 shards)\n\n| figure |")
	for _, sys := range have {
		fmt.Fprintf(w, " %s |", sys)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(have)))
	for _, h := range headlines {
		s := r.find(h.scen)
		if s == nil {
			continue
		}
		fmt.Fprintf(w, "| %s |", h.label)
		for _, sys := range have {
			v, ok := s.get(sys, h.key)
			fmt.Fprintf(w, " %s |", fmtVal(col{Fmt: h.fmt}, v, ok))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nasynq-tuned is asynq with its poll intervals at 1 ms, not its default; the scenarios' tables below give every row (Hourglass on 2 shards and with prefetch among them).\n")
}

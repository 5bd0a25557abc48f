package logbridge_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/logbridge"
)

// capture returns a bridge onto a JSON handler at level (with sources)
// and a function returning the records written so far, each decoded.
func capture(t *testing.T, level slog.Leveler) (hclog.Logger, func() []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level, AddSource: true})
	return logbridge.New(slog.New(h)), func() []map[string]any {
		var out []map[string]any
		for line := range strings.Lines(buf.String()) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("record %q: %v", line, err)
			}
			delete(m, "time")
			out = append(out, m)
		}
		buf.Reset()
		return out
	}
}

// TestLevelsMapToSlogs: each hclog level logs at its slog level, and
// what the handler does not take is not logged and not reported enabled.
func TestLevelsMapToSlogs(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelInfo)
	l.Trace("t")
	l.Debug("d")
	l.Info("i")
	l.Warn("w")
	l.Error("e")
	l.Log(hclog.Error, "log e")
	l.Log(hclog.NoLevel, "log none")
	l.Log(hclog.Off, "log off")
	var got []string
	for _, r := range records() {
		got = append(got, r["level"].(string)+" "+r["msg"].(string))
	}
	want := []string{"INFO i", "WARN w", "ERROR e", "ERROR log e", "INFO log none"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
	if l.IsTrace() || l.IsDebug() || !l.IsInfo() || !l.IsWarn() || !l.IsError() {
		t.Errorf("Is*: trace %v debug %v info %v warn %v error %v, want only info and above",
			l.IsTrace(), l.IsDebug(), l.IsInfo(), l.IsWarn(), l.IsError())
	}
	if lv := l.GetLevel(); lv != hclog.Info {
		t.Errorf("GetLevel %s, want info", lv)
	}

	tl, trecords := capture(t, logbridge.LevelTrace)
	tl.Trace("t")
	if r := trecords(); len(r) != 1 || r[0]["level"] != "DEBUG-4" || !tl.IsTrace() || tl.GetLevel() != hclog.Trace {
		t.Errorf("trace on a handler at LevelTrace: %v, IsTrace %v, GetLevel %s", r, tl.IsTrace(), tl.GetLevel())
	}
}

// TestSetLevelIsSharedFloor: SetLevel raises a floor over the handler's
// level for the logger and every logger derived from it, as hclog's
// loggers share theirs; NoLevel gives the decision back to the handler.
func TestSetLevelIsSharedFloor(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelDebug)
	sub := l.Named("sub").With("k", "v")
	sub.SetLevel(hclog.Warn)
	l.Info("parent info")
	sub.Info("sub info")
	l.Warn("parent warn")
	if r := records(); len(r) != 1 || r[0]["msg"] != "parent warn" {
		t.Errorf("after SetLevel(Warn): %v, want only the warning", r)
	}
	if l.IsInfo() || l.GetLevel() != hclog.Warn {
		t.Errorf("after SetLevel(Warn): IsInfo %v, GetLevel %s", l.IsInfo(), l.GetLevel())
	}
	l.SetLevel(hclog.Off)
	l.Error("off")
	if r := records(); len(r) != 0 || l.GetLevel() != hclog.Off {
		t.Errorf("after SetLevel(Off): %v, GetLevel %s", r, l.GetLevel())
	}
	l.SetLevel(hclog.NoLevel)
	sub.Debug("debug")
	if r := records(); len(r) != 1 || l.GetLevel() != hclog.Debug {
		t.Errorf("after SetLevel(NoLevel): %v, GetLevel %s, want the handler's debug", r, l.GetLevel())
	}
}

// TestAttributes: arguments, With arguments (sorted, a repeated key
// replaced) and hclog's value types become attributes as hclog renders
// them; an odd argument is kept under hclog.MissingKey.
func TestAttributes(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelInfo)
	w := l.With("b", 1, "a", "x").With("b", 2)
	if got, want := w.ImpliedArgs(), []any{"a", "x", "b", 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("ImpliedArgs %v, want %v", got, want)
	}
	if len(l.ImpliedArgs()) != 0 {
		t.Errorf("With changed its parent: %v", l.ImpliedArgs())
	}
	w.Info("msg", "n", 7, "hex", hclog.Hex(255), "oct", hclog.Octal(8), "bin", hclog.Binary(5),
		"q", hclog.Quote(`a"b`), "f", hclog.Fmt("%d-%s", 3, "z"), "attr", slog.Int("inner", 4), "odd")
	r := records()
	if len(r) != 1 {
		t.Fatalf("records %v", r)
	}
	want := map[string]any{
		"a": "x", "b": 2.0, "n": 7.0, "hex": "0xff", "oct": "010", "bin": "0b101", "q": `"a\"b"`,
		"f": "3-z", "inner": 4.0, hclog.MissingKey: "odd",
	}
	for k, v := range want {
		if r[0][k] != v {
			t.Errorf("attribute %q = %#v, want %#v (record %v)", k, r[0][k], v, r[0])
		}
	}
	l.Error("with stack", hclog.Stacktrace())
	if r := records(); len(r) != 1 || !strings.Contains(r[0][logbridge.StacktraceKey].(string), "logbridge_test") {
		t.Errorf("a captured stack trace: %v", r)
	}
}

// TestNames: Named joins names with a dot, ResetNamed replaces the name,
// the name is the NameKey attribute and the message stays as given.
func TestNames(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelInfo)
	l.Info("unnamed")
	a := l.Named("worker")
	b := a.Named("fetch")
	c := b.ResetNamed("other")
	a.Info("a")
	b.Info("b")
	c.Info("c")
	got := records()
	if _, ok := got[0][logbridge.NameKey]; ok || l.Name() != "" {
		t.Errorf("an unnamed logger's record %v, Name %q", got[0], l.Name())
	}
	for i, want := range []string{"worker", "worker.fetch", "other"} {
		if got[i+1][logbridge.NameKey] != want || got[i+1]["msg"] != string(rune('a'+i)) {
			t.Errorf("record %v, want name %q", got[i+1], want)
		}
	}
	if a.Name() != "worker" || b.Name() != "worker.fetch" || c.Name() != "other" {
		t.Errorf("names %q %q %q", a.Name(), b.Name(), c.Name())
	}
}

// TestSourceIsTheCaller: a handler that adds sources names the line
// that called the bridge, through Info, Log and the standard logger.
func TestSourceIsTheCaller(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelInfo)
	l.Info("via Info")
	l.Log(hclog.Warn, "via Log")
	l.StandardLogger(nil).Print("via the standard logger")
	got := records()
	if len(got) != 3 {
		t.Fatalf("records %v, want 3", got)
	}
	for _, r := range got {
		src, _ := r["source"].(map[string]any)
		if file, _ := src["file"].(string); filepath.Base(file) != "logbridge_test.go" {
			t.Errorf("%q: source %v, want this file", r["msg"], src)
		}
	}
}

// TestStandardLogger: the standard logger and writer infer levels from
// "[LEVEL]" prefixes when asked, force one when given, and log at Info
// otherwise.
func TestStandardLogger(t *testing.T) {
	t.Parallel()
	l, records := capture(t, slog.LevelDebug)
	l.StandardLogger(nil).Print("[WARN] plain")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERR] inferred")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true}).
		Print("2024/01/02 03:04:05 [DEBUG] stamped")
	_, _ = l.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}).Write([]byte("[INFO] forced\n"))
	var got []string
	for _, r := range records() {
		got = append(got, r["level"].(string)+" "+r["msg"].(string))
	}
	want := []string{"INFO [WARN] plain", "ERROR inferred", "DEBUG stamped", "WARN forced"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
}

// Package logbridge turns a *slog.Logger into an hclog.Logger, so that
// a program logging with log/slog can hand its logger to the libraries
// (the worker's Config.Slog) while Hourglass's own code keeps one logger
// type: hclog, which the binaries log with.
//
// The mapping, one way:
//
//   - Levels: hclog's Trace is slog.LevelDebug-4 (LevelTrace), Debug,
//     Info, Warn and Error are slog's; NoLevel logs at Info and Off logs
//     nothing. The Is* guards and GetLevel ask the handler (Enabled).
//     SetLevel sets a floor, shared with every logger derived from this
//     one as hclog's loggers share theirs, below which nothing reaches
//     the handler; SetLevel(NoLevel) removes it.
//   - Names: a logger's name (Named joins names with ".", ResetNamed
//     replaces it) is the attribute NameKey of each record, not a
//     prefix of the message, so that messages stay constant.
//   - Arguments: hclog's alternating keys and values become attributes,
//     after the name and the With arguments; a non-string key is
//     formatted with %s, an odd last value gets the key
//     hclog.MissingKey, and hclog's Format, Hex, Octal, Binary and Quote
//     values are formatted as hclog formats them. A slog.Attr or
//     slog.Value passed as a value is kept as it is. A
//     hclog.CapturedStacktrace becomes the attribute StacktraceKey.
//   - Source: each record carries the program counter of the line that
//     called Info, Warn, ..., so that a handler with AddSource names it.
package logbridge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Attribute keys the bridge adds to records.
const (
	// NameKey holds the logger's name, when it has one.
	NameKey = "logger"
	// StacktraceKey holds an hclog.CapturedStacktrace argument.
	StacktraceKey = "stacktrace"
)

// LevelTrace is the slog level of hclog's Trace.
const LevelTrace = slog.LevelDebug - 4

// New returns an hclog.Logger that writes every record to l's handler.
// A nil l means slog.Default().
func New(l *slog.Logger) hclog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return &logger{h: l.Handler(), floor: new(atomic.Int32)}
}

// logger is the bridge. Loggers derived by With, Named and ResetNamed
// share h and floor and copy the rest.
type logger struct {
	h       slog.Handler
	name    string
	implied []any
	// floor is the level SetLevel set (hclog.NoLevel: none).
	floor *atomic.Int32
}

// slogLevel maps an hclog level that logs to slog's.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo // hclog.Info and NoLevel, as hclog's default level
}

// enabled reports whether a record at level reaches the handler.
func (l *logger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if f := hclog.Level(l.floor.Load()); f != hclog.NoLevel && level < f {
		return false
	}
	return l.h.Enabled(context.Background(), slogLevel(level))
}

// Log emits msg at level; the other methods that log call it or log
// the same way, at the same depth of calls (see emit).
func (l *logger) Log(level hclog.Level, msg string, args ...any) { l.emit(level, msg, args) }

// Trace emits msg at LevelTrace.
func (l *logger) Trace(msg string, args ...any) { l.emit(hclog.Trace, msg, args) }

// Debug emits msg at slog.LevelDebug.
func (l *logger) Debug(msg string, args ...any) { l.emit(hclog.Debug, msg, args) }

// Info emits msg at slog.LevelInfo.
func (l *logger) Info(msg string, args ...any) { l.emit(hclog.Info, msg, args) }

// Warn emits msg at slog.LevelWarn.
func (l *logger) Warn(msg string, args ...any) { l.emit(hclog.Warn, msg, args) }

// Error emits msg at slog.LevelError.
func (l *logger) Error(msg string, args ...any) { l.emit(hclog.Error, msg, args) }

// emit sends one record to the handler. It must be called directly by
// the method the caller called: the record's source is two frames up.
func (l *logger) emit(level hclog.Level, msg string, args []any) {
	l.emitDepth(level, msg, args, 0)
}

// emitDepth is emit for a caller depth more frames above emit's caller.
func (l *logger) emitDepth(level hclog.Level, msg string, args []any, depth int) {
	if !l.enabled(level) {
		return
	}
	var pcs [1]uintptr
	// Skip runtime.Callers, emitDepth, emit (or its stand-in), the
	// method called and depth more.
	runtime.Callers(4+depth, pcs[:])
	r := slog.NewRecord(time.Now(), slogLevel(level), msg, pcs[0])
	if l.name != "" {
		r.AddAttrs(slog.String(NameKey, l.name))
	}
	r.AddAttrs(attrs(l.implied)...)
	r.AddAttrs(attrs(args)...)
	_ = l.h.Handle(context.Background(), r) // hclog has no error to return
}

// attrs converts hclog's alternating keys and values to attributes.
func attrs(args []any) []slog.Attr {
	if len(args) == 0 {
		return nil
	}
	out := make([]slog.Attr, 0, len(args)/2+1)
	for i := 0; i+1 < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprintf("%s", args[i])
		}
		out = append(out, attr(key, args[i+1]))
	}
	if len(args)%2 != 0 {
		last := args[len(args)-1]
		if cs, ok := last.(hclog.CapturedStacktrace); ok {
			out = append(out, slog.String(StacktraceKey, string(cs)))
		} else {
			out = append(out, slog.Any(hclog.MissingKey, last))
		}
	}
	return out
}

// attr converts one argument, formatting hclog's own value types as
// hclog does.
func attr(key string, v any) slog.Attr {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) > 0 {
			if f, ok := v[0].(string); ok {
				return slog.String(key, fmt.Sprintf(f, v[1:]...))
			}
		}
		return slog.String(key, fmt.Sprint(v...))
	case hclog.Hex:
		return slog.String(key, "0x"+strconv.FormatUint(uint64(v), 16))
	case hclog.Octal:
		return slog.String(key, "0"+strconv.FormatUint(uint64(v), 8))
	case hclog.Binary:
		return slog.String(key, "0b"+strconv.FormatUint(uint64(v), 2))
	case hclog.Quote:
		return slog.String(key, strconv.Quote(string(v)))
	case hclog.CapturedStacktrace:
		return slog.String(key, string(v))
	case slog.Attr:
		return v // a value that is an Attr already keeps its own key
	case slog.Value:
		return slog.Attr{Key: key, Value: v}
	}
	return slog.Any(key, v)
}

// IsTrace reports whether Trace logs reach the handler.
func (l *logger) IsTrace() bool { return l.enabled(hclog.Trace) }

// IsDebug reports whether Debug logs reach the handler.
func (l *logger) IsDebug() bool { return l.enabled(hclog.Debug) }

// IsInfo reports whether Info logs reach the handler.
func (l *logger) IsInfo() bool { return l.enabled(hclog.Info) }

// IsWarn reports whether Warn logs reach the handler.
func (l *logger) IsWarn() bool { return l.enabled(hclog.Warn) }

// IsError reports whether Error logs reach the handler.
func (l *logger) IsError() bool { return l.enabled(hclog.Error) }

// ImpliedArgs returns the With arguments, in hclog's order (sorted by
// key).
func (l *logger) ImpliedArgs() []any { return slices.Clone(l.implied) }

// With returns a logger that adds args to each record. As hclog's With,
// a key given again replaces its value, and the implied arguments are
// kept sorted by key.
func (l *logger) With(args ...any) hclog.Logger {
	var extra any
	odd := len(args)%2 != 0
	if odd {
		extra, args = args[len(args)-1], args[:len(args)-1]
	}
	vals := make(map[string]any, (len(l.implied)+len(args))/2)
	var keys []string
	add := func(k, v any) {
		key, ok := k.(string)
		if !ok {
			key = fmt.Sprintf("%s", k)
		}
		if _, seen := vals[key]; !seen {
			keys = append(keys, key)
		}
		vals[key] = v
	}
	for i := 0; i+1 < len(l.implied); i += 2 {
		if l.implied[i] == hclog.MissingKey {
			continue // appended last again below
		}
		add(l.implied[i], l.implied[i+1])
	}
	for i := 0; i < len(args); i += 2 {
		add(args[i], args[i+1])
	}
	slices.Sort(keys)
	sl := *l
	sl.implied = make([]any, 0, 2*len(keys)+2)
	for _, k := range keys {
		sl.implied = append(sl.implied, k, vals[k])
	}
	if odd {
		sl.implied = append(sl.implied, hclog.MissingKey, extra)
	}
	return &sl
}

// Name returns the logger's name ("" if unnamed).
func (l *logger) Name() string { return l.name }

// Named returns a logger whose name is this one's, a dot and name.
func (l *logger) Named(name string) hclog.Logger {
	sl := *l
	if sl.name != "" {
		sl.name += "." + name
	} else {
		sl.name = name
	}
	return &sl
}

// ResetNamed returns a logger named name.
func (l *logger) ResetNamed(name string) hclog.Logger {
	sl := *l
	sl.name = name
	return &sl
}

// SetLevel sets the floor below which nothing is logged, for this
// logger and every one derived from the same New; hclog.NoLevel removes
// it, leaving the handler to decide.
func (l *logger) SetLevel(level hclog.Level) { l.floor.Store(int32(level)) }

// GetLevel returns the floor SetLevel set if it lets less through than
// the handler, else the lowest level the handler takes; hclog.Off when
// it takes none.
func (l *logger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

// StandardLogger returns a *log.Logger writing to StandardWriter(opts).
func (l *logger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer that logs each write as one record,
// with hclog's conventions: the level is opts.ForceLevel if set, else,
// with opts.InferLevels, read from a leading "[ERROR]", "[ERR]",
// "[WARN]", "[INFO]", "[DEBUG]" or "[TRACE]" (after a leading timestamp
// with InferLevelsWithTimestamp), else Info.
func (l *logger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &stdWriter{l: l, opts: *opts}
}

// stdWriter is StandardWriter's writer.
type stdWriter struct {
	l    *logger
	opts hclog.StandardLoggerOptions
}

// leadingTimestamp matches what a timestamp at the start of a line can
// be made of, as hclog's own writer trims it.
var leadingTimestamp = regexp.MustCompile(`^[\d\s:/.+\-TZ]*`)

// Write logs p (one line or more, trailing blanks removed) as one
// record.
func (w *stdWriter) Write(p []byte) (int, error) {
	s := string(bytes.TrimRight(p, " \t\n"))
	level := hclog.Info
	switch {
	case w.opts.ForceLevel != hclog.NoLevel:
		_, s = levelPrefix(s)
		level = w.opts.ForceLevel
	case w.opts.InferLevels:
		if w.opts.InferLevelsWithTimestamp {
			s = s[len(leadingTimestamp.FindString(s)):]
		}
		level, s = levelPrefix(s)
	}
	// The caller of log.Logger's Print, Printf or Println is one frame
	// further than a method's: Print calls output, which calls Write.
	w.l.emitDepth(level, s, nil, 1)
	return len(p), nil
}

// levelPrefix returns the level a line's "[LEVEL]" prefix names (Info if
// none) and the line without it.
func levelPrefix(s string) (hclog.Level, string) {
	for _, p := range []struct {
		tag   string
		level hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
	} {
		if rest, ok := strings.CutPrefix(s, p.tag); ok {
			return p.level, strings.TrimSpace(rest)
		}
	}
	return hclog.Info, s
}

package config

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/recovery"
	"github.com/hourglass-sched/hourglass/internal/reshard"
	"github.com/hourglass-sched/hourglass/internal/scan"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/worker"
)

// The settings table (settings.go) against everything that states a
// setting: the Config struct, the validator, the libraries' defaults,
// the example configurations and docs/operations.md. Each test fails
// when one of them disagrees with the table: a key missing in one, a
// different default, a different range.

var update = flag.Bool("update", false, "rewrite the settings tables of docs/operations.md from Settings")

const (
	schedulerExample = "../../configs/scheduler.example.yaml"
	workerExample    = "../../configs/worker.example.yaml"
	operationsDoc    = "../../docs/operations.md"
)

// TestSettingsCoverEveryKey: every key of Config (by its koanf tags) has
// exactly one row, and every row names a key of Config.
func TestSettingsCoverEveryKey(t *testing.T) {
	t.Parallel()
	var keys []string
	walkKeys(reflect.TypeFor[Config](), "", func(key string, _ reflect.Type) { keys = append(keys, key) })
	var rows []string
	for _, s := range Settings() {
		if slices.Contains(rows, s.Key) {
			t.Errorf("%s has two rows", s.Key)
		}
		rows = append(rows, s.Key)
	}
	for _, k := range keys {
		if !slices.Contains(rows, k) {
			t.Errorf("key %s has no row in Settings", k)
		}
	}
	for _, r := range rows {
		if !slices.Contains(keys, r) {
			t.Errorf("row %s names no key of Config", r)
		}
	}
	for _, s := range Settings() {
		if s.Doc == "" {
			t.Errorf("%s: no doc", s.Key)
		}
		for _, l := range s.Lib {
			if _, ok := libKeys[l]; !ok || strings.Count(l, ".") < 1 {
				t.Errorf("%s: Lib %q is not a library field", s.Key, l)
			}
		}
	}
}

// walkKeys calls fn with every leaf key of t, by koanf tags: a map of
// structs is walked under "<q>" (queues) or "<name>" (periodic).
func walkKeys(t reflect.Type, prefix string, fn func(string, reflect.Type)) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		if tag == "" {
			continue
		}
		key := prefix + tag
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != durationType:
			walkKeys(f.Type, key+".", fn)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			name := "<name>"
			if tag == "queues" {
				name = "<q>"
			}
			walkKeys(f.Type.Elem(), key+"."+name+".", fn)
		default:
			fn(key, f.Type)
		}
	}
}

// probe is a Config with one key set, for the validator: the default
// configuration with a queue "default" and a periodic schedule "p".
type probe struct {
	t   *testing.T
	c   Config
	key string // the concrete key: queues.default.x, periodic.p.x
}

func newProbe(t *testing.T, s Setting) *probe {
	c := Default()
	c.Periodic = map[string]PeriodicConfig{"p": {Queue: "default", Interval: time.Hour}}
	key := strings.NewReplacer("<q>", "default", "<name>", "p").Replace(s.Key)
	if s.Key == "queues.<q>.key_concurrency" || strings.HasPrefix(s.Key, "queues.<q>.key_rate_limit.") {
		// A cap per key is a fair queue's (the validator refuses it
		// otherwise, TestValidateNewKeys).
		c.Queues = maps.Clone(c.Queues)
		q := c.Queues["default"]
		q.Fair = true
		c.Queues["default"] = q
	}
	return &probe{t: t, c: c, key: key}
}

// set returns the error Validate reports for key set to x (converted to
// the field's type), and whether the configuration is valid.
func (p *probe) set(x any) (valid bool, atKey error) {
	c := p.c
	c.Queues = maps.Clone(c.Queues)
	c.Periodic = maps.Clone(c.Periodic)
	setKey(&c, p.key, x)
	err := c.Validate()
	var got error
	confcheck.Each(err, func(e error) {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Key == p.key {
			got = e
		} else {
			p.t.Errorf("%s = %v: a problem at another key: %v", p.key, x, e)
		}
	})
	if rule := shardRules[p.key]; rule != nil {
		// internal/shard checks these too, with errors that name no
		// field (so the rows state the range): it must agree.
		if serr := rule(&c); (serr == nil) != (got == nil) {
			p.t.Errorf("%s = %v: the validator says %v, internal/shard says %v", p.key, x, got, serr)
		}
	}
	return err == nil, got
}

// shardRules are internal/shard's own checks of the keys whose ranges
// the rows state.
var shardRules = func() map[string]func(*Config) error {
	policy := func(c *Config) error { return c.QueuePolicies()["default"].Validate() }
	far := func(c *Config) error { return c.FarTier().Validate() }
	return map[string]func(*Config) error{
		"max_payload": policy, "queues.default.max_retries": policy, "queues.default.timeout": policy,
		"queues.default.backoff.base": policy, "queues.default.backoff.cap": policy, "queues.default.backoff.factor": policy,
		"scheduler.far_bucket": far, "scheduler.far_lead": far,
	}
}()

// setKey sets the field at a concrete key (a queue's or a schedule's
// entry is copied, set and stored back).
func setKey(c *Config, key string, x any) {
	f, store := fieldFor(c, key)
	if f.Kind() == reflect.Pointer {
		n := reflect.New(f.Type().Elem())
		n.Elem().Set(reflect.ValueOf(x).Convert(f.Type().Elem()))
		f.Set(n)
	} else {
		f.Set(reflect.ValueOf(x).Convert(f.Type()))
	}
	store()
}

// getKey returns the value at a concrete key.
func getKey(c *Config, key string) reflect.Value {
	f, _ := fieldFor(c, key)
	return f
}

func fieldFor(c *Config, key string) (reflect.Value, func()) {
	for _, m := range []string{"queues.", "periodic."} {
		rest, ok := strings.CutPrefix(key, m)
		if !ok {
			continue
		}
		name, path, _ := strings.Cut(rest, ".")
		mv := reflect.ValueOf(c).Elem().FieldByName(map[string]string{"queues.": "Queues", "periodic.": "Periodic"}[m])
		e := reflect.New(mv.Type().Elem()).Elem()
		if v := mv.MapIndex(reflect.ValueOf(name)); v.IsValid() {
			e.Set(v)
		}
		return fieldAt(e, path), func() { mv.SetMapIndex(reflect.ValueOf(name), e) }
	}
	return fieldAt(reflect.ValueOf(c).Elem(), key), func() {}
}

// TestSettingsAgreeWithValidator: for every row, the validator accepts
// the bounds and rejects what lies just beyond them, a fraction of the
// unit and a value outside Allowed, each under the row's key; a zero is
// accepted exactly when the row says what it means. It is the same
// whether the rule is the library's (Lib) or the row's own.
func TestSettingsAgreeWithValidator(t *testing.T) {
	t.Parallel()
	if def := Default(); def.Validate() != nil {
		err := def.Validate()
		t.Fatalf("the defaults are invalid: %v", err)
	}
	for _, s := range Settings() {
		t.Run(s.Key, func(t *testing.T) {
			p := newProbe(t, s)
			typ := getKey(&p.c, p.key).Type()
			if typ.Kind() == reflect.Pointer {
				typ = typ.Elem()
			}
			accept := func(x any, why string) {
				if ok, err := p.set(x); !ok {
					t.Errorf("%s = %v (%s) refused: %v", p.key, x, why, err)
				}
			}
			refuse := func(x any, why string) {
				if _, err := p.set(x); err == nil {
					t.Errorf("%s = %v (%s) accepted, or refused under another key", p.key, x, why)
				}
			}
			if s.Allowed != nil {
				def := getKey(&p.c, p.key).String()
				if !slices.Contains(s.Allowed, def) && (def != "" || s.Zero == "") {
					t.Errorf("default %q not among %v", def, s.Allowed)
				}
				refuse("not-"+strings.Join(s.Allowed, "-"), "not allowed")
				return
			}
			if !isNumber(typ) {
				return
			}
			if s.Min != nil {
				accept(s.Min, "Min")
				below := add(s.Min, -1)
				if isZero(below) && s.Zero != "" {
					accept(below, "zero: "+s.Zero)
				} else {
					refuse(below, "below Min")
				}
				if greater(s.Min, zeroOf(typ)) {
					refuse(add(zeroOf(typ), -1), "negative")
				}
			}
			if s.Max != nil {
				accept(s.Max, "Max")
				refuse(add(s.Max, 1), "above Max")
			}
			if s.Unit != 0 {
				lo := s.Min
				if lo == nil {
					lo = time.Duration(0)
				}
				refuse(lo.(time.Duration)+s.Unit/2, "a fraction of the unit")
			}
			switch z := zeroOf(typ); {
			case s.Zero != "":
				if needs := zeroNeeds[s.Key]; needs != nil {
					needs(&p.c)
				}
				accept(z, "zero: "+s.Zero)
			case s.Min != nil && greater(s.Min, z):
				refuse(z, "zero without a meaning")
			}
		})
	}
}

// zeroNeeds sets, for a key whose zero means "use another key instead",
// that other key.
var zeroNeeds = map[string]func(*Config){
	"periodic.<name>.interval": func(c *Config) { c.Periodic["p"] = PeriodicConfig{Queue: "default", Cron: "@hourly"} },
}

func isNumber(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Float64:
		return true
	}
	return false
}

func zeroOf(t reflect.Type) any {
	switch {
	case t == durationType:
		return time.Duration(0)
	case t.Kind() == reflect.Float64:
		return 0.0
	}
	return 0
}

// add returns x plus k of the least step of its type: 1ns, 1e-9 or 1.
func add(x any, k int) any {
	switch x := x.(type) {
	case time.Duration:
		return x + time.Duration(k)
	case float64:
		return x + float64(k)*1e-9
	}
	return reflect.ValueOf(x).Int() + int64(k)
}

func isZero(x any) bool { return reflect.ValueOf(x).IsZero() }

func greater(a, b any) bool {
	switch a := a.(type) {
	case time.Duration:
		return a > b.(time.Duration)
	case float64:
		return a > b.(float64)
	}
	return reflect.ValueOf(a).Int() > reflect.ValueOf(b).Int()
}

// TestDefaultsAreTheLibraries: the binary's defaults are the libraries':
// what each For* method hands a library from Default() is that library's
// DefaultConfig, and the periodic rows' stated defaults are what the
// periodic package applies.
func TestDefaultsAreTheLibraries(t *testing.T) {
	t.Parallel()
	c := Default()
	q := c.Queues["default"]
	qo := q.ForWorker()
	qo.Backoff = worker.Backoff{} // the queue's policy; DefaultQueueOptions has none
	for _, ch := range []struct {
		what      string
		got, want any
	}{
		{"scan", c.ForMover(), scan.DefaultConfig()},
		{"recovery", c.ForRecovery(), recovery.DefaultConfig()},
		{"reshard", c.ForReshard(), reshard.DefaultConfig()},
		{"worker", c.ForWorker(), worker.DefaultConfig()},
		{"worker queue", qo, worker.DefaultQueueOptions()},
		{"election TTL", c.ForElection("r").TTL, election.DefaultTTL},
		{"queue policy", c.QueuePolicies()["default"], shard.QueuePolicy{
			MaxRetries: shard.DefaultMaxRetries, Timeout: shard.DefaultTimeout, MaxPayload: shard.DefaultMaxPayload, Backoff: shard.DefaultBackoff,
			Retention: shard.Retention{Count: shard.DefaultRetentionCount}}},
		{"far tier", c.FarTier(), shard.FarTier{Bucket: shard.DefaultFarBucket, Lead: shard.DefaultFarLead}},
		{"layout", [2]any{c.Namespace, c.Shards}, [2]any{shard.DefaultNamespace, shard.DefaultShards}},
	} {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s: the binary's default %+v, the library's %+v", ch.what, ch.got, ch.want)
		}
	}
	compiled, err := PeriodicConfig{Queue: "q", Interval: time.Hour}.Schedule("p").Compile()
	if err != nil {
		t.Fatal(err)
	}
	for key, applied := range map[string]string{
		"periodic.<name>.catch_up":        string(compiled.CatchUp),
		"periodic.<name>.overlap":         string(compiled.Overlap),
		"periodic.<name>.catch_up_window": formatDuration(compiled.CatchUpWindow),
	} {
		if got := setting(t, key).Default; got != applied {
			t.Errorf("%s: the row says the default is %q, the periodic package applies %q", key, got, applied)
		}
	}
}

func setting(t *testing.T, key string) Setting {
	for _, s := range Settings() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no row %s", key)
	return Setting{}
}

// TestZeroMeansTheDefault: Load gives a key set to 0 where that means
// its default the default's value, so a binary runs with what it logs.
func TestZeroMeansTheDefault(t *testing.T) {
	t.Parallel()
	c, err := Load([]string{"-set", "shards=0", "-set", "namespace=", "-set", "scheduler.scan_limit=0",
		"-set", "worker.fetch_timeout=0s", "-set", "worker.registration_wait=0s", "-set", "queues.q.concurrency=0", "-set", "queues.q.rate_limit.period=0s",
		"-set", "dlq.max_size=0", "-set", "queues.q.lease_after=0s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, q := Default(), c.Queues["q"]
	if c.Shards != d.Shards || c.Namespace != d.Namespace || c.Scheduler.ScanLimit != d.Scheduler.ScanLimit ||
		c.Worker.FetchTimeout != d.Worker.FetchTimeout || c.Worker.RegistrationWait != d.Worker.RegistrationWait || q.Concurrency != DefaultQueue().Concurrency ||
		q.RateLimit.Period != DefaultQueue().RateLimit.Period {
		t.Errorf("a zero that means the default was kept: %+v", c)
	}
	// A zero that means none stays none.
	if c.DLQ.MaxSize != 0 || q.LeaseAfter != 0 {
		t.Errorf("a zero that means none was changed: dlq.max_size %d, lease_after %s", c.DLQ.MaxSize, q.LeaseAfter)
	}
}

// exampleLine is one key of an example file: its value as written and
// the comment after it on the same line.
type exampleLine struct {
	line           int
	value, comment string
}

var keyLine = regexp.MustCompile(`^( *)([A-Za-z0-9_.:-]+):(.*)$`)

// readExample returns the keys an example file sets, by dotted path.
func readExample(t *testing.T, path string) (map[string]exampleLine, string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]exampleLine{}
	type level struct {
		indent int
		key    string
	}
	var stack []level
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for n := 1; sc.Scan(); n++ {
		m := keyLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a comment, a list item, a blank line
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, m[2]})
		var path []string
		for _, l := range stack {
			path = append(path, l.key)
		}
		value, comment := splitComment(m[3])
		out[strings.Join(path, ".")] = exampleLine{line: n, value: value, comment: comment}
	}
	return out, string(raw)
}

// splitComment splits a YAML value from a comment after it, outside
// quotes.
func splitComment(s string) (value, comment string) {
	var quote rune
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote && (i == 0 || s[i-1] != '\\') {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#' && (i == 0 || s[i-1] == ' '):
			return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
		}
	}
	return strings.TrimSpace(s), ""
}

// commentedInExample are the keys the scheduler example shows commented
// out with an example value (no default to show).
func commentedInExample(key string) bool {
	return strings.HasPrefix(key, "periodic.") || key == "queues.<q>.http.headers" || key == "queues.<q>.command"
}

// TestSchedulerExample: configs/scheduler.example.yaml sets every key
// to its default, with the key's range and zero meaning (brief) in the
// comment on its line; the keys with no default to show are there
// commented out.
func TestSchedulerExample(t *testing.T) {
	t.Parallel()
	lines, raw := readExample(t, schedulerExample)
	loaded, err := Load([]string{"-config", schedulerExample}, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	for _, s := range Settings() {
		if commentedInExample(s.Key) {
			leaf := s.Key[strings.LastIndexByte(s.Key, '.')+1:]
			if !regexp.MustCompile(`#\s*` + leaf + `:`).MatchString(raw) {
				t.Errorf("%s: not shown, commented out, in %s", s.Key, schedulerExample)
			}
			continue
		}
		key := strings.Replace(s.Key, "<q>", "default", 1)
		l, ok := lines[key]
		if !ok {
			t.Errorf("%s: missing from %s", key, schedulerExample)
			continue
		}
		if got, want := getKey(loaded, key).Interface(), getKey(&def, key).Interface(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:%d: %s is %v, the default %v", schedulerExample, l.line, key, got, want)
		}
		if b := brief(s); !strings.Contains(l.comment, b) {
			t.Errorf("%s:%d: %s's comment %q does not say %q", schedulerExample, l.line, key, l.comment, b)
		}
	}
}

// TestWorkerExample: configs/worker.example.yaml sets every worker key,
// and every key it sets outside its queues to the worker binary's
// default; a comment on the line, if any, says the key's brief.
func TestWorkerExample(t *testing.T) {
	t.Parallel()
	lines, _ := readExample(t, workerExample)
	loaded, err := Load([]string{"-config", workerExample}, nil, WithDefaults(WorkerDefaults))
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	WorkerDefaults(&def)
	for _, s := range Settings() {
		if strings.HasPrefix(s.Key, "queues.") || strings.HasPrefix(s.Key, "periodic.") {
			continue
		}
		l, ok := lines[s.Key]
		switch {
		case !ok && strings.HasPrefix(s.Key, "worker."):
			t.Errorf("%s: missing from %s", s.Key, workerExample)
		case !ok:
		case !reflect.DeepEqual(getKey(loaded, s.Key).Interface(), getKey(&def, s.Key).Interface()):
			t.Errorf("%s:%d: %s is %v, the worker's default %v", workerExample, l.line, s.Key, getKey(loaded, s.Key), getKey(&def, s.Key))
		case l.comment != "" && !strings.Contains(l.comment, brief(s)):
			t.Errorf("%s:%d: %s's comment %q does not say %q", workerExample, l.line, s.Key, l.comment, brief(s))
		}
	}
}

// Markers of the generated settings tables in docs/operations.md.
const (
	docsBegin = "<!-- settings:begin (generated from internal/config/settings.go: go test ./internal/config -run TestSettingsDocs -update) -->"
	docsEnd   = "<!-- settings:end -->"
)

// TestSettingsDocs: the settings tables of docs/operations.md are those
// Settings renders (with -update, it writes them).
func TestSettingsDocs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, docsBegin), strings.Index(doc, docsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", operationsDoc, docsBegin, docsEnd)
	}
	want := docsBegin + "\n" + settingsTables() + docsEnd
	if got := doc[i : j+len(docsEnd)]; got != want {
		if *update {
			if err := os.WriteFile(operationsDoc, []byte(doc[:i]+want+doc[j+len(docsEnd):]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the settings tables of %s differ from Settings; run go test ./internal/config -run TestSettingsDocs -update\n%s",
			operationsDoc, firstDiff(got, want))
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  doc:      %s\n  settings: %s", i+1, a, b)
		}
	}
	return ""
}

// settingsTables renders one markdown table per section of Settings.
func settingsTables() string {
	def := Default()
	dq := DefaultQueue()
	var b strings.Builder
	section := "\x00"
	for _, s := range Settings() {
		sec, _, ok := strings.Cut(s.Key, ".")
		if !ok {
			sec = ""
		}
		if sec != section {
			if section != "\x00" {
				b.WriteString("\n")
			}
			section = sec
			title := "Top-level keys"
			if sec != "" {
				title = "`" + sec + "`"
			}
			fmt.Fprintf(&b, "**%s**\n\n| key | default | values | 0 or empty means | what it does |\n|---|---|---|---|---|\n", title)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", s.Key, defaultText(s, &def, &dq), cell(valuesText(s)), cell(s.Zero), cell(s.Doc))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// defaultText renders a key's default for the docs.
func defaultText(s Setting, def *Config, dq *QueueConfig) string {
	if s.Default != "" {
		return s.Default
	}
	var v reflect.Value
	switch {
	case strings.HasPrefix(s.Key, "queues.<q>."):
		v = fieldAt(reflect.ValueOf(dq).Elem(), strings.TrimPrefix(s.Key, "queues.<q>."))
	case strings.HasPrefix(s.Key, "periodic."):
		return "—"
	default:
		v = getKey(def, s.Key)
	}
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "empty"
		}
	}
	return "`" + formatValue(v) + "`"
}

func formatValue(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return formatDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, formatValue(v.Index(i)))
		}
		return strings.Join(parts, ", ")
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// formatDuration writes d in its largest whole unit, as the examples do:
// 1m, 168h, 250ms.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "µs"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// valuesText renders what a key accepts: its range and unit, or its
// allowed values, and its other rule.
func valuesText(s Setting) string {
	var parts []string
	if r := rangeText(s); r != "" {
		parts = append(parts, r)
	}
	if s.Rule != "" {
		parts = append(parts, s.Rule)
	}
	return strings.Join(parts, "; ")
}

func rangeText(s Setting) string {
	if len(s.Allowed) > 0 {
		a := s.Allowed
		if len(a) == 1 {
			return a[0]
		}
		return strings.Join(a[:len(a)-1], ", ") + " or " + a[len(a)-1]
	}
	var r string
	switch {
	case s.Min != nil && s.Max != nil:
		r = formatAny(s.Min) + ".." + formatAny(s.Max)
	case s.Min != nil && s.Min == any(time.Duration(1)):
		r = "positive"
	case s.Min != nil && isZero(s.Min):
		r = "0 or more"
	case s.Min != nil:
		r = "at least " + formatAny(s.Min)
	case s.Max != nil:
		r = "at most " + formatAny(s.Max)
	}
	if s.Unit != 0 {
		r += ", whole " + map[time.Duration]string{time.Second: "seconds", time.Millisecond: "ms"}[s.Unit]
	}
	return r
}

func formatAny(x any) string {
	if isZero(x) {
		return "0"
	}
	if f, ok := x.(float64); ok && f == math.Trunc(f) {
		return strconv.FormatInt(int64(f), 10)
	}
	return formatValue(reflect.ValueOf(x))
}

// brief is what an example configuration says of a key on its line: its
// values and what its zero means, as the docs' table does.
func brief(s Setting) string {
	var parts []string
	if v := valuesText(s); v != "" {
		parts = append(parts, strings.ReplaceAll(v, "`", ""))
	}
	if s.Zero != "" {
		z := "0"
		if s.Min == nil && s.Max == nil {
			z = "empty"
		}
		parts = append(parts, z+": "+s.Zero)
	}
	return strings.Join(parts, "; ")
}

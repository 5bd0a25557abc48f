package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/textproto"
	"reflect"
	"slices"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment variable that Load reads.
const EnvPrefix = "HOURGLASS_"

// Load builds the configuration from the built-in defaults, the YAML file
// named by -config, the HOURGLASS_ variables in env and the -set flags in
// args, in that order of precedence, and validates the result.
//
// args are the command-line arguments without the program name
// (os.Args[1:]); env is a list of KEY=VALUE strings (os.Environ()). Load
// reads no other environment. With -h or -help it returns an error
// matching flag.ErrHelp, with -version [ErrVersion]; [Usage] describes
// the flags.
//
// Errors about keys and values wrap [ErrInvalid] and name the full dotted
// key; several are joined with errors.Join. A key set to 0 (or "") where
// that means its default (see [Settings]) holds the default in the
// returned Config.
//
// Options change the built-in defaults of one binary, for example
// Load(args, env, WithDefaults(WorkerDefaults)).
func Load(args []string, env []string, opts ...Option) (*Config, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	fs := flag.NewFlagSet("hourglass", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "YAML configuration file")
	showVersion := fs.Bool("version", false, "print the version and exit")
	var sets setFlag
	fs.Var(&sets, "set", "set one key, as key=value; repeatable")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		return nil, ErrVersion
	}

	var layers []*layer
	if *path != "" {
		l, err := fileLayer(*path)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	l, err := envLayer(env)
	if err != nil {
		return nil, err
	}
	layers = append(layers, l)
	if l, err = setLayer(sets); err != nil {
		return nil, err
	}
	layers = append(layers, l)

	cfg := defaultsWithoutQueues()
	for _, fn := range o.defaults {
		fn(&cfg)
	}
	def := cfg // the defaults of this binary, for fillDefaults
	var errs []error
	for _, l := range layers {
		errs = append(errs, l.apply(&cfg)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]QueueConfig{"default": DefaultQueue()}
	}
	if err := cfg.Validate(); err != nil {
		return nil, withSources(err, layers)
	}
	cfg.fillDefaults(&def)
	return &cfg, nil
}

// withSources appends to each FieldError of err the source that set its
// key last (the file, the environment variable, -set, or "default"), as
// unknown keys name theirs.
func withSources(err error, layers []*layer) error {
	errs := []error{err}
	if _, one := err.(*FieldError); !one { // a FieldError unwraps to its causes
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		var fe *FieldError
		if errors.As(e, &fe) {
			src := "default"
			for j := len(layers) - 1; j >= 0; j-- {
				if layers[j].has(fe.Key) {
					src = layers[j].where(fe.Key)
					break
				}
			}
			out[i] = &FieldError{Key: fe.Key, Msg: fe.Msg + " (" + src + ")", Err: fe.Err}
		}
	}
	return errors.Join(out...)
}

// has reports whether the layer sets key (a dotted key, perhaps with an
// index: "etcd.endpoints[1]"). Queue names may hold dots, so each level
// tries the longest name first.
func (l *layer) has(key string) bool {
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	return hasPath(l.data, strings.Split(key, "."))
}

func hasPath(m map[string]any, parts []string) bool {
	for n := len(parts); n >= 1; n-- {
		v, ok := m[strings.Join(parts[:n], ".")]
		if !ok {
			continue
		}
		if n == len(parts) {
			return true
		}
		if sub, ok := v.(map[string]any); ok && hasPath(sub, parts[n:]) {
			return true
		}
	}
	return false
}

// Option changes how [Load] builds the configuration.
type Option func(*options)

type options struct {
	defaults []func(*Config)
}

// WithDefaults applies fn to the built-in defaults before any source is
// read, so that a binary can have defaults of its own (see
// [WorkerDefaults]). Its changes are the lowest layer: the file, the
// environment and -set still override them. The Config that fn sees has
// a nil Queues map; if fn sets queues, they replace the implicit
// "default" queue and the sources add to them.
func WithDefaults(fn func(*Config)) Option {
	return func(o *options) { o.defaults = append(o.defaults, fn) }
}

// Usage returns the help text for the flags and environment that Load
// reads, for a binary to print when Load returns flag.ErrHelp.
func Usage() string {
	return `Flags:
  -config path     YAML configuration file (see configs/scheduler.example.yaml
                   and configs/worker.example.yaml)
  -set key=value   set one configuration key, e.g. -set scheduler.scan_limit=1000;
                   repeatable, later flags win
  -version         print the version and exit
  -h               show this help

Environment:
  HOURGLASS_<KEY>  sets <key>: "__" separates levels and the name is lower-cased,
                   e.g. HOURGLASS_REDIS__ADDR=10.0.0.5:6379 sets redis.addr

Precedence, lowest first: built-in defaults, -config file, environment, -set.
`
}

// setFlag collects repeated -set key=value flags.
type setFlag []string

func (s *setFlag) String() string { return strings.Join(*s, " ") }

func (s *setFlag) Set(v string) error {
	key, _, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(key) == "" {
		return errors.New("want key=value")
	}
	if _, err := splitKey(strings.TrimSpace(key)); err != nil {
		return err
	}
	*s = append(*s, v)
	return nil
}

// splitKey splits a dotted key into its path. In queues.<name>.<field>
// the name may itself contain dots, and so may <field> (backoff.base,
// http.url, http.headers.<header>): the name is the shortest run of
// segments after "queues" that leaves a known queue field, so
// queues.mail.high.timeout names queue "mail.high" and
// queues.hooks.http.headers.X-Key names queue "hooks". Everything after
// http.headers is one header name. Without any known field, the last
// segment is taken as the field (and reported as unknown).
func splitKey(key string) ([]string, error) {
	parts := strings.Split(key, ".")
	if slices.Contains(parts, "") {
		return nil, fmt.Errorf("key %q has an empty segment", key)
	}
	if parts[0] != "queues" || len(parts) <= 3 {
		return parts, nil
	}
	for i := 2; i < len(parts); i++ {
		if field, ok := queueField(parts[i:]); ok {
			return append([]string{"queues", strings.Join(parts[1:i], ".")}, field...), nil
		}
	}
	return []string{parts[0], strings.Join(parts[1:len(parts)-1], "."), parts[len(parts)-1]}, nil
}

// queueField reports whether path names a field of QueueConfig and
// returns it with a header name joined into one segment.
func queueField(path []string) ([]string, bool) {
	t := reflect.TypeFor[QueueConfig]()
	for i, p := range path {
		f, ok := fieldByTag(t, p)
		if !ok {
			return nil, false
		}
		switch f.Type.Kind() {
		case reflect.Struct:
			t = f.Type
			continue
		case reflect.Map:
			if i == len(path)-1 {
				return path, true
			}
			return append(slices.Clone(path[:i+1]), strings.Join(path[i+1:], ".")), true
		}
		return path, i == len(path)-1
	}
	return nil, false // a struct, not a value
}

// layer is one source of configuration: a nested map of raw values and
// the names that errors use to point back at the source.
type layer struct {
	data   map[string]any
	source string            // e.g. "file x.yaml"
	origin map[string]string // dotted key -> more precise source
}

func (l *layer) where(key string) string {
	if o, ok := l.origin[key]; ok {
		return o
	}
	if i := strings.IndexByte(key, '['); i >= 0 {
		if o, ok := l.origin[key[:i]]; ok {
			return o
		}
	}
	return l.source
}

func (l *layer) fieldError(key, msg string) error {
	return &FieldError{Key: key, Msg: msg + " (" + l.where(key) + ")"}
}

func fileLayer(path string) (*layer, error) {
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("config: file %s: %w", path, err)
	}
	return &layer{data: k.Raw(), source: "file " + path}, nil
}

func envLayer(environ []string) (*layer, error) {
	l := &layer{source: "environment", origin: map[string]string{}}
	k := koanf.New(".")
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "__", ".")
			if key == "" {
				return "", nil
			}
			l.origin[key] = "environment variable " + name
			return key, value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}
	l.data = k.Raw()
	return l, nil
}

func setLayer(sets []string) (*layer, error) {
	l := &layer{source: "-set", origin: map[string]string{}}
	data := map[string]any{}
	for _, s := range sets {
		key, value, _ := strings.Cut(s, "=")
		key = strings.TrimSpace(key)
		path, err := splitKey(key) // checked by setFlag.Set already
		if err != nil {
			return nil, fmt.Errorf("config: -set %q: %w", s, err)
		}
		m := data
		for _, p := range path[:len(path)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[path[len(path)-1]] = value
		l.origin[strings.Join(path, ".")] = "-set " + key
	}
	// confmap with no delimiter keeps queue names with dots intact.
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(data, ""), nil); err != nil {
		return nil, fmt.Errorf("config: -set: %w", err)
	}
	l.data = k.Raw()
	return l, nil
}

// apply checks the layer's keys and decodes its values onto cfg. Queues
// named for the first time start from DefaultQueue.
func (l *layer) apply(cfg *Config) []error {
	var unknown []string
	unknownKeys(l.data, reflect.TypeFor[Config](), "", &unknown)
	slices.Sort(unknown)
	var errs []error
	for _, k := range unknown {
		errs = append(errs, l.fieldError(k, "unknown key"))
	}
	// With unknown keys reported above, mapstructure's own check would
	// only repeat them without their full names.
	strict := len(unknown) == 0

	rest := maps.Clone(l.data)
	delete(rest, "queues")
	errs = append(errs, l.decode("", rest, cfg, strict)...)

	raw, ok := l.data["queues"]
	if !ok {
		return errs
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]QueueConfig{}
	}
	if raw == nil {
		return errs
	}
	queues, ok := raw.(map[string]any)
	if !ok {
		return append(errs, l.fieldError("queues", "expected a mapping of queue names to settings, got "+describe(raw)))
	}
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		q, ok := cfg.Queues[name]
		if !ok {
			q = DefaultQueue()
		}
		qerrs := l.decode("queues."+name, canonicalHeaders(queues[name]), &q, strict)
		errs = append(errs, qerrs...)
		if len(qerrs) == 0 {
			cfg.Queues[name] = q
		}
	}
	return errs
}

// canonicalHeaders returns a queue's raw settings with the names in
// http.headers in canonical form (authorization -> Authorization), so
// that a header set in one layer is overridden, not duplicated, by the
// same header spelled differently in a later one (the environment
// lower-cases every name).
func canonicalHeaders(raw any) any {
	q, ok := raw.(map[string]any)
	if !ok {
		return raw
	}
	h, ok := q["http"].(map[string]any)
	if !ok {
		return raw
	}
	headers, ok := h["headers"].(map[string]any)
	if !ok {
		return raw
	}
	canon := make(map[string]any, len(headers))
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		canon[textproto.CanonicalMIMEHeaderKey(k)] = headers[k]
	}
	h, q = maps.Clone(h), maps.Clone(q)
	h["headers"] = canon
	q["http"] = h
	return q
}

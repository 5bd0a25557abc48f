package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// Decoding a layer's raw values onto the Config: strict type conversion
// (decodeHook), unknown keys, and mapstructure's errors turned into
// FieldErrors that name the key and its source.

// decode decodes data onto out, leaving fields that data does not
// mention as they are, and turns mapstructure's errors into FieldErrors.
func (l *layer) decode(root string, data any, out any, errorUnused bool) []error {
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:  decodeHook,
		ErrorUnused: errorUnused,
		TagName:     "koanf",
		RootName:    root,
		Result:      out,
	})
	if err != nil {
		return []error{fmt.Errorf("config: %w", err)}
	}
	var errs []error
	l.collect(d.Decode(data), &errs)
	// mapstructure walks maps in random order; report in key order.
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

func (l *layer) collect(err error, out *[]error) {
	if err == nil {
		return
	}
	if de, ok := err.(*mapstructure.DecodeError); ok {
		*out = append(*out, l.fieldError(de.Name(), de.Unwrap().Error()))
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l.collect(e, out)
		}
		return
	}
	if u := errors.Unwrap(err); u != nil {
		l.collect(u, out)
		return
	}
	*out = append(*out, fmt.Errorf("config: %s: %w", l.source, err))
}

// unknownKeys appends to out the dotted names of the keys in data that
// have no field in the struct type t.
func unknownKeys(data map[string]any, t reflect.Type, prefix string, out *[]string) {
	for k, v := range data {
		key := prefix + k
		f, ok := fieldByTag(t, k)
		if !ok {
			*out = append(*out, key)
			continue
		}
		sub, ok := v.(map[string]any)
		if !ok {
			continue // a wrong type is reported by decode
		}
		switch ft := f.Type; {
		case ft.Kind() == reflect.Struct:
			unknownKeys(sub, ft, key+".", out)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			for name, ev := range sub {
				if em, ok := ev.(map[string]any); ok {
					unknownKeys(em, ft.Elem(), key+"."+name+".", out)
				}
			}
		}
	}
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("koanf") == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeHook converts the raw values of YAML, environment and flags to
// the field types strictly: strings are parsed, but a bool never becomes
// a number, a number never becomes a string or a duration, and so on.
func decodeHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if data == nil {
		return nil, nil
	}
	switch {
	case to == durationType:
		switch v := data.(type) {
		case time.Duration:
			return v, nil
		case string:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf(`invalid duration %q: want a number with a unit, such as "5s" or "250ms"`, v)
			}
			return d, nil
		}
		return nil, fmt.Errorf(`expected a duration with a unit, such as "5s" or "250ms", got %s`, describe(data))
	case to.Kind() == reflect.Int || to.Kind() == reflect.Int64:
		switch v := data.(type) {
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			return v, nil
		case float64:
			if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
				return int64(v), nil
			}
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n, nil
			}
		}
		return nil, fmt.Errorf("expected an integer, got %s", describe(data))
	case to.Kind() == reflect.Float64:
		switch v := data.(type) {
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
			return v, nil
		case string:
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f, nil
			}
		}
		return nil, fmt.Errorf("expected a number, got %s", describe(data))
	case to.Kind() == reflect.Bool:
		switch v := data.(type) {
		case bool:
			return v, nil
		case string:
			if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("expected true or false, got %s", describe(data))
	case to.Kind() == reflect.String:
		if s, ok := data.(string); ok {
			return s, nil
		}
		return nil, fmt.Errorf("expected a string, got %s; quote it in YAML", describe(data))
	case to.Kind() == reflect.Slice:
		switch v := data.(type) {
		case []any:
			return v, nil
		case string:
			return splitList(v), nil
		}
		return nil, fmt.Errorf("expected a list or a comma-separated string, got %s", describe(data))
	case to.Kind() == reflect.Struct || to.Kind() == reflect.Map:
		if _, ok := data.(map[string]any); ok {
			return data, nil
		}
		return nil, fmt.Errorf("expected a mapping of keys to values, got %s", describe(data))
	}
	return data, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []any {
	out := []any{}
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

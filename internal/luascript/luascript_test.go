package luascript

import (
	"strings"
	"testing"
)

const testLib = `-- lib: header, dropped.

-- a doubles.
local function a(x)
  return 2 * x
end

-- b calls a.
local function b(x)
  return a(x) + 1
end

-- c is named only in comments and strings.format calls.
local function c()
  return string.c
end

-- d is four.
local function d()
  return 4
end`

func TestPrune(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string // helpers kept, in lib order
	}{
		{"none", "return 1", nil},
		{"direct", "return a(1)", []string{"a"}},
		{"through another helper", "return b(1)", []string{"a", "b"}},
		{"comment and field do not count", "-- uses c()\nreturn string.c(d())", []string{"d"}},
		{"all", "return a(1) + b(2) + c() + d()", []string{"a", "b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prune(testLib, tc.script)
			var names []string
			for _, line := range strings.Split(got, "\n") {
				if n, ok := strings.CutPrefix(line, "local function "); ok {
					names = append(names, n[:strings.Index(n, "(")])
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("kept %v, want %v:\n%s", names, tc.want, got)
			}
			if strings.Contains(got, "header") {
				t.Fatalf("kept text outside helpers:\n%s", got)
			}
			if len(tc.want) > 0 && !strings.Contains(got, "-- "+tc.want[0]+" ") {
				t.Fatalf("dropped the comment of %s:\n%s", tc.want[0], got)
			}
		})
	}
}

// Package version names the build a binary runs, for its -version flag:
// the module version (or the one set at link time), the VCS revision and
// whether the tree was modified, and the Go version.
package version

import (
	"fmt"
	"runtime/debug"
)

// version may be set at link time:
// go build -ldflags "-X github.com/hourglass-sched/hourglass/internal/version.version=v1.2.3".
var version string

// build reads what the binary knows of its build: the module version
// (or the one set at link time, "" if none), the VCS revision, whether
// the tree was modified, and the Go version.
func build() (v, rev string, modified bool, goVersion string) {
	v = version
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	return v, rev, modified, goVersion
}

// Short names the build in a word: the module version, or for a build
// of a checkout "devel-" and the first 12 digits of its revision
// ("+dirty" when modified).
func Short() string {
	v, rev, modified, _ := build()
	if v != "" && v != "(devel)" {
		return v
	}
	v = "devel"
	if rev != "" {
		v += fmt.Sprintf("-%.12s", rev)
	}
	if modified {
		v += "+dirty"
	}
	return v
}

// String describes the build, for example
// "hourglass v1.2.3 (rev 1a2b3c4d5e6f, modified) go1.26.8".
func String() string {
	v, rev, modified, goVersion := build()
	if v == "" {
		v = "(devel)"
	}
	out := "hourglass " + v
	if rev != "" {
		out += fmt.Sprintf(" (rev %.12s", rev)
		if modified {
			out += ", modified"
		}
		out += ")"
	}
	if goVersion != "" {
		out += " " + goVersion
	}
	return out
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEmptyNamespaceSaysSo (issue 24, item 12): with a namespace that
// holds nothing (a typo, or the config of another deployment), queue ls,
// stats, task ls and dlq ls printed an empty table and exited 0 with no
// hint. They still print it and exit 0 (an empty namespace may be a new
// deployment), stdout unchanged and machine-readable, but warn on stderr
// naming the namespace, the config key and the namespaces in use on this
// Redis. A namespace that holds queues gets no warning for an empty
// listing.
func TestEmptyNamespaceSaysSo(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "real")
	const warning = `hourglass: warning: namespace "nosuch" has no queue registered and no task stored; namespaces with queues on this Redis: real (the config key namespace: --set namespace=NAME, HOURGLASS_NAMESPACE, or namespace: in the file of -c)` + "\n"
	for _, args := range [][]string{
		{"queue", "ls"},
		{"stats"},
		{"task", "ls", "--state", "scheduled"},
		{"dlq", "ls"},
		{"-o", "json", "queue", "ls"},
		{"-o", "json", "dlq", "ls", "--all"},
	} {
		out, errOut, code := e.cli(append([]string{"--set", "namespace=nosuch"}, args...)...)
		if code != exitOK || errOut != warning {
			t.Errorf("%v in an empty namespace: exit %d, stderr\n %q\nwant exit 0, stderr\n %q", args, code, errOut, warning)
		}
		if args[0] == "-o" && !json.Valid([]byte(out)) {
			t.Errorf("%v: stdout is not JSON: %q", args, out)
		}
		if args[0] != "-o" && strings.Contains(out, "warning") {
			t.Errorf("%v: the warning reached stdout: %q", args, out)
		}
		out, errOut, code = e.cli(args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%v in a namespace with queues: exit %d, stderr %q\n%s", args, code, errOut, out)
		}
	}
}

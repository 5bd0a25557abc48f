package hourglass_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibrariesLinkNoEtcd: the public packages a program embeds to
// produce, consume and administer tasks on Redis link neither etcd's
// client nor gRPC (go list -deps); only inspect/etcdowners, which reads
// shard owners from etcd, does.
func TestLibrariesLinkNoEtcd(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	const mod = "github.com/hourglass-sched/hourglass/"
	heavy := []string{"go.etcd.io/", "google.golang.org/grpc"}
	for _, c := range []struct {
		pkg       string
		wantHeavy bool
		maxNonStd int // a bound, so that weight creeping back in is seen
	}{
		{pkg: "inspect", maxNonStd: 60},
		{pkg: "client", maxNonStd: 60},
		{pkg: "worker", maxNonStd: 120},
		{pkg: "periodic", maxNonStd: 10},
		{pkg: "inspect/etcdowners", wantHeavy: true, maxNonStd: 400},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+c.pkg).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("go list: %v\n%s", err, ee.Stderr)
				}
				t.Fatalf("go list: %v", err)
			}
			var nonStd, found []string
			for _, p := range strings.Fields(string(out)) {
				nonStd = append(nonStd, p)
				for _, h := range heavy {
					if strings.Contains(p, h) {
						found = append(found, p)
					}
				}
			}
			t.Logf("%s: %d non-standard packages, %d of etcd or gRPC", c.pkg, len(nonStd), len(found))
			switch {
			case c.wantHeavy && len(found) == 0:
				t.Errorf("%s links no etcd package: is the check still looking at the right thing?", c.pkg)
			case !c.wantHeavy && len(found) > 0:
				t.Errorf("%s links %d etcd or gRPC packages, for example %s", c.pkg, len(found), found[0])
			}
			if len(nonStd) > c.maxNonStd {
				t.Errorf("%s links %d non-standard packages, more than %d", c.pkg, len(nonStd), c.maxNonStd)
			}
		})
	}
}

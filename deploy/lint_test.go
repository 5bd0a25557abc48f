package deploy_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zegl/kube-score/config"
	ks "github.com/zegl/kube-score/domain"
	"github.com/zegl/kube-score/parser"
	"github.com/zegl/kube-score/score"
	"github.com/zegl/kube-score/score/checks"
	"github.com/zegl/kube-score/scorecard"
)

// kubeScoreIgnored are the kube-score checks the manifests do not pass on
// purpose, each with the reason.
var kubeScoreIgnored = map[string]string{
	// kube-score wants Always so that imagePullSecrets are re-checked on
	// every start in a shared cluster. The manifests run a locally built
	// image (kind load, minikube image load) under a fixed tag, which
	// Always would try to pull from Docker Hub and fail on; with a
	// registry, a versioned tag and IfNotPresent pull each version once.
	"container-image-pull-policy": "IfNotPresent on purpose: a locally loaded image, or a registry's immutable version tag",
	// The root file system is read-only and no volume is writable: the
	// containers write only their logs, which the kubelet rotates.
	"container-ephemeral-storage-request-and-limit": "nothing but logs is written",
}

// TestKubernetesManifestsKubeScore runs kube-score (the library behind
// its CLI, offline) over deploy/kubernetes with every default check and
// the optional seccomp one: a pod security context with a numeric user
// and group above 10000, probes, disruption budgets, host anti-affinity
// for Deployments of two replicas or more, read-only root file systems,
// stable API versions, selectors that match. A check the manifests skip
// on purpose is in kubeScoreIgnored with its reason; a CPU limit is not
// required (it throttles the mover, whose lateness is measured in
// milliseconds). kube-score cannot see the image's user: the kubelet's
// runAsNonRoot rule is TestPodsRunAsNonRootUnderTheImageUser's.
func TestKubernetesManifestsKubeScore(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	for _, line := range kubeScore(t, files) {
		t.Error(line)
	}
}

// kubeScore scores files and returns one line per check graded warning
// or worse.
func kubeScore(t *testing.T, files []string) []string {
	t.Helper()
	var readers []ks.NamedReader
	policies := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		policies = policies || bytes.Contains(b, []byte("\nkind: NetworkPolicy"))
		readers = append(readers, namedReader{Reader: bytes.NewReader(b), name: f})
	}
	ignored := map[string]struct{}{}
	for id := range kubeScoreIgnored {
		ignored[id] = struct{}{}
	}
	if !policies {
		// Until a NetworkPolicy ships beside the Deployments, every pod
		// would fail this check; once one does, the check holds it to
		// selecting every pod.
		ignored["pod-networkpolicy"] = struct{}{}
	}
	p, err := parser.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := p.ParseFiles(readers)
	if err != nil {
		t.Fatalf("kube-score cannot parse the manifests: %v", err)
	}
	run := &config.RunConfiguration{
		IgnoreContainerCpuLimitRequirement: true,
		EnabledOptionalTests:               map[string]struct{}{"container-seccomp-profile": {}},
		KubernetesVersion:                  config.Semver{Major: 1, Minor: 30},
		MinReplicasDeployment:              2,
	}
	card, err := score.Score(objs, score.RegisterAllChecks(objs, &checks.Config{IgnoredTests: ignored}, run), run)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, o := range *card {
		for _, c := range o.Checks {
			if c.Skipped || c.Grade > scorecard.GradeWarning {
				continue
			}
			var why []string
			for _, cm := range c.Comments {
				why = append(why, strings.TrimSpace(cm.Path+" "+cm.Summary))
			}
			bad = append(bad, o.HumanFriendlyRef()+": "+c.Check.ID+" "+c.Grade.String()+": "+strings.Join(why, "; "))
		}
	}
	slices.Sort(bad)
	return bad
}

// namedReader is a manifest for kube-score's parser, named for its
// reports.
type namedReader struct {
	io.Reader
	name string
}

func (r namedReader) Name() string { return r.name }

package deploy_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests decodes every document of deploy/kubernetes
// strictly (unknown or misspelt fields fail) into the Kubernetes API type
// its kind names, then checks what Hourglass needs: probes on /healthz
// and /readyz, a non-root hardened container that the kubelet starts
// under the Dockerfile's user (runAsNonRootUnder), disruption budgets
// that select the Deployments' pods, a NetworkPolicy that admits only
// named peers to their port, and a ConfigMap with a config.yaml (which
// the main module's internal/config loads, TestConfigMapLoads, checking
// that its dashboard cannot be changed by whoever reaches the pod: this
// module links none of Hourglass's packages, see doc.go).
// (TestKubernetesManifestsKubeScore lints them besides.)
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	deployments := map[string]*appsv1.Deployment{}
	var pdbs []*policyv1.PodDisruptionBudget
	var cm *corev1.ConfigMap
	var np *networkingv1.NetworkPolicy
	kinds := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				deployments[f] = d
				obj = d
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				pdbs = append(pdbs, p)
				obj = p
			case "v1 ConfigMap":
				cm = &corev1.ConfigMap{}
				obj = cm
			case "v1 Service":
				obj = &corev1.Service{}
			case "networking.k8s.io/v1 NetworkPolicy":
				np = &networkingv1.NetworkPolicy{}
				obj = np
			default:
				t.Fatalf("%s #%d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			strict(t, f, doc, obj)
			kinds[meta.Kind]++
		}
	}
	if kinds["Deployment"] != 2 || kinds["PodDisruptionBudget"] != 2 || kinds["ConfigMap"] != 1 || kinds["Service"] != 1 || kinds["NetworkPolicy"] != 1 {
		t.Errorf("kinds: %v", kinds)
	}
	user := imageUser(t)
	if d := deployments["kubernetes/scheduler.yaml"]; d != nil {
		checkOnePerNode(t, d)
	}
	for f, d := range deployments {
		checkDeployment(t, f, d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if err := runAsNonRootUnder(&d.Spec.Template.Spec, &c, user); err != nil {
				t.Errorf("%s: the kubelet would refuse to start it: %v", f, err)
			}
		}
		if !slicesAnySelects(pdbs, d.Spec.Template.Labels) {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", f)
		}
	}
	if np != nil {
		checkNetworkPolicy(t, np, deployments)
	}
	if cm == nil {
		t.Fatal("no ConfigMap")
	}
	if cm.Data["config.yaml"] == "" {
		t.Errorf("ConfigMap %s has no config.yaml", cm.Name)
	}
}

// checkNetworkPolicy checks that np covers the pods of every Deployment,
// restricts their ingress, and admits each rule's peers by label (never
// everyone: an empty peer, an empty selector or an IP block would) to
// the port named http only.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, deployments map[string]*appsv1.Deployment) {
	t.Helper()
	for f, d := range deployments {
		for k, v := range np.Spec.PodSelector.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("NetworkPolicy %s does not select the pods of %s (%s=%s)", np.Name, f, k, v)
			}
		}
	}
	if len(np.Spec.PodSelector.MatchLabels) == 0 || len(np.Spec.PodSelector.MatchExpressions) > 0 {
		t.Errorf("NetworkPolicy %s: podSelector %+v, want labels only", np.Name, np.Spec.PodSelector)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s: policyTypes %v restrict no ingress", np.Name, np.Spec.PolicyTypes)
	}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("NetworkPolicy %s: ingress rule %d admits every peer", np.Name, i)
		}
		for _, p := range rule.From {
			named := func(s *metav1.LabelSelector) bool { return s != nil && len(s.MatchLabels)+len(s.MatchExpressions) > 0 }
			if p.IPBlock != nil || !named(p.PodSelector) || !named(p.NamespaceSelector) {
				t.Errorf("NetworkPolicy %s: ingress rule %d admits %+v: name the peer's pods and namespace by label", np.Name, i, p)
			}
		}
		if len(rule.Ports) == 0 {
			t.Errorf("NetworkPolicy %s: ingress rule %d admits every port", np.Name, i)
		}
		for _, port := range rule.Ports {
			if port.Port == nil || port.Port.String() != "http" {
				t.Errorf("NetworkPolicy %s: ingress rule %d admits port %v, want http", np.Name, i, port.Port)
			}
		}
	}
}

// strict decodes a YAML document into obj as the API server does in its
// strict mode: unknown fields, duplicate fields and fields spelt with
// another case (encoding/json would accept those) fail.
func strict(t *testing.T, f, doc string, obj any) {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	strictErrs, err := kjson.UnmarshalStrict(j, obj)
	if err != nil || len(strictErrs) > 0 {
		t.Errorf("%s: not a valid %T: %v %v", f, obj, err, strictErrs)
	}
}

func checkDeployment(t *testing.T, f string, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", f, len(spec.Containers))
	}
	c := spec.Containers[0]
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: want an HTTP probe on %s of port http, got %+v", f, path, probe)
		}
	}
	if c.ImagePullPolicy == "" {
		t.Errorf("%s: no imagePullPolicy: the default for a :latest or untagged image is Always, which cannot start a locally loaded one", f)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("%s: ports %+v", f, c.Ports)
	}
	sc := c.SecurityContext
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("%s: container not hardened: pod %+v container %+v", f, spec.SecurityContext, sc)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("%s: selector %s=%s does not match the pod labels", f, k, v)
		}
	}
}

// checkOnePerNode fails unless d's pods are kept on different nodes
// (required anti-affinity on the host name, selecting its own pods), so
// that a node loss leaves one, and a rolling update adds no pod beyond
// its replicas (maxSurge 0), which no node could take.
func checkOnePerNode(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spread := false
	if a := d.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			spread = spread || (err == nil && term.TopologyKey == "kubernetes.io/hostname" && sel.Matches(labels.Set(d.Spec.Template.Labels)))
		}
	}
	if !spread {
		t.Errorf("%s: its pods may share a node: want a required pod anti-affinity on kubernetes.io/hostname", d.Name)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("%s: a rolling update would add a pod that no node can take: want maxSurge 0", d.Name)
	}
}

func slicesAnySelects(pdbs []*policyv1.PodDisruptionBudget, labels map[string]string) bool {
	for _, p := range pdbs {
		all := p.Spec.Selector != nil && len(p.Spec.Selector.MatchLabels) > 0
		for k, v := range p.Spec.Selector.MatchLabels {
			all = all && labels[k] == v
		}
		if all {
			return true
		}
	}
	return false
}

// runAsNonRootUnder is the kubelet's check of runAsNonRoot before it
// creates container c of pod spec (verifyRunAsNonRoot in
// k8s.io/kubernetes/pkg/kubelet/kuberuntime, which no linter or schema
// encodes: it needs the image's user too). imageUser is the image's USER
// ("" for none: root). A non-nil error is what the kubelet reports as
// CreateContainerConfigError.
func runAsNonRootUnder(spec *corev1.PodSpec, c *corev1.Container, imageUser string) error {
	// The container's settings win over the pod's
	// (securitycontext.DetermineEffectiveSecurityContext).
	var nonRoot *bool
	var uid *int64
	if p := spec.SecurityContext; p != nil {
		nonRoot, uid = p.RunAsNonRoot, p.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
	}
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	if uid != nil {
		if *uid == 0 {
			return errors.New("container's runAsUser breaks non-root policy")
		}
		return nil
	}
	// The runtime reports the image's user as a uid when its part before
	// ':' is a number, else as a name; none is root.
	name, _, _ := strings.Cut(imageUser, ":")
	n, err := strconv.ParseInt(name, 10, 64)
	switch {
	case name == "" || (err == nil && n == 0):
		return errors.New("container has runAsNonRoot and image will run as root")
	case err != nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", name)
	case n < 0 || n > math.MaxInt32:
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d)", n)
	}
	return nil
}

// TestRunAsNonRootRule: runAsNonRootUnder refuses what the kubelet
// refuses, among them the manifests and image of issue 24 (a pod with
// runAsNonRoot, no runAsUser, and USER nonroot:nonroot), and accepts
// the fixed ones.
func TestRunAsNonRootRule(t *testing.T) {
	yes, no := true, false
	uid := func(n int64) *int64 { return &n }
	pod := func(nonRoot *bool, user *int64) *corev1.PodSpec {
		return &corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: nonRoot, RunAsUser: user}}
	}
	for _, tc := range []struct {
		name      string
		spec      *corev1.PodSpec
		container corev1.SecurityContext
		image     string
		refused   bool
	}{
		{"issue 24: a named image user, no runAsUser", pod(&yes, nil), corev1.SecurityContext{}, "nonroot:nonroot", true},
		{"a numeric image user", pod(&yes, nil), corev1.SecurityContext{}, "65532:65532", false},
		{"runAsUser overrides a named image user", pod(&yes, uid(65532)), corev1.SecurityContext{}, "nonroot:nonroot", false},
		{"the container's runAsUser wins", pod(&yes, uid(0)), corev1.SecurityContext{RunAsUser: uid(10001)}, "", false},
		{"runAsUser 0", pod(&yes, uid(0)), corev1.SecurityContext{}, "65532", true},
		{"an image without USER runs as root", pod(&yes, nil), corev1.SecurityContext{}, "", true},
		{"an image user 0", pod(&yes, nil), corev1.SecurityContext{}, "0:0", true},
		{"runAsNonRoot off in the container", pod(&yes, nil), corev1.SecurityContext{RunAsNonRoot: &no}, "nonroot", false},
		{"runAsNonRoot unset", &corev1.PodSpec{}, corev1.SecurityContext{}, "nonroot", false},
	} {
		c := corev1.Container{Name: "c", SecurityContext: &tc.container}
		if err := runAsNonRootUnder(tc.spec, &c, tc.image); (err != nil) != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

// Package deploy holds the checks of Hourglass's deployment files: the
// systemd units, the Kubernetes manifests, the Dockerfile and the compose
// file, each read by the real tool or the real API types that consume
// it; the manifests are also linted by kube-score and held to the
// kubelet's runAsNonRoot check against the Dockerfile's user. It is a
// module of its own so that the main module does not depend on the
// Kubernetes API types. It links none of Hourglass's packages: their
// compile for this module alone, without -race, cost make test more CPU
// than all these checks, so what needs them is checked in the main
// module, reading these files: the settings that the compose file and
// the ConfigMap give the binaries load (internal/config's deploy_test.go),
// and the Grafana dashboard's metric names are those of the running
// binaries (e2e).
package deploy

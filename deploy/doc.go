// Package deploy holds the checks of Hourglass's deployment files: the
// systemd units, the Kubernetes manifests, the Dockerfile and the compose
// file, each read by the real tool or the real API types that consume
// it; the manifests are also linted by kube-score and held to the
// kubelet's runAsNonRoot check against the Dockerfile's user. It is a
// module of its own so that the main module does not depend on the
// Kubernetes API types. (The Grafana dashboard's metric names are
// checked against the running binaries in e2e.)
package deploy

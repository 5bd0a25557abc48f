// Package deploy holds the checks of Hourglass's deployment files: the
// systemd units, the Kubernetes manifests, the Dockerfile and the compose
// file, each read by the real tool or the real API types that consume
// it. It is a module of its own so that the main module does not depend
// on the Kubernetes API types. (The Grafana dashboard's metric names are
// checked against the running binaries in e2e.)
package deploy

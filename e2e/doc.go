// Package e2e holds Hourglass's end-to-end tests: they build the real
// scheduler and worker binaries, start them as processes against real
// redis-server and etcd processes, and kill, pause and restart any of
// them. It has no code of its own.
package e2e

package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// Redis is a redis-server started for one test.
type Redis struct {
	*Process
	// Addr is host:port of the server.
	Addr string
	// Dir is the server's data directory.
	Dir string
	srv *localrun.Redis
}

// RedisOption adjusts the server's configuration.
type RedisOption func(*[]string)

// WithRedisArgs appends raw redis-server arguments, for example
// WithRedisArgs("--appendonly", "yes").
func WithRedisArgs(args ...string) RedisOption {
	return func(a *[]string) { *a = append(*a, args...) }
}

// StartRedis starts a redis-server on a free loopback port with its data
// in a temporary directory, waits until it answers PING and stops it when
// the test ends.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	LookBinary(t, "redis-server")
	var extra []string
	for _, o := range opts {
		o(&extra)
	}
	srv, err := localrun.StartRedis(t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return &Redis{Process: watch(t, srv.Proc), Addr: srv.Addr, Dir: srv.Dir, srv: srv}
}

// Client returns a go-redis client for the server, closed at cleanup.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// Restart restarts a stopped server with the same port and data directory
// and waits until it answers.
func (r *Redis) Restart() { r.RestartWith() }

// RestartWith is Restart with extra redis-server arguments for this
// incarnation only, for example "--replicaof", host, port.
func (r *Redis) RestartWith(args ...string) {
	r.t.Helper()
	if err := r.srv.RestartWith(args...); err != nil {
		r.t.Fatal(err)
	}
}

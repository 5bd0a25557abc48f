package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server started for one test.
type Redis struct {
	*Process
	// Addr is host:port of the server.
	Addr string
	// Dir is the server's data directory.
	Dir string
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
	bin := LookBinary(t, "redis-server")
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t)
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--protected-mode", "yes",
			"--logfile", "",
			"--dbfilename", "dump.rdb",
		}
		for _, o := range opts {
			o(&args)
		}
		p := StartProcess(t, fmt.Sprintf("redis-%d", port), bin, args, nil)
		r := &Redis{Process: p, Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir}
		if lastErr = waitReady(p, r.ping); lastErr == nil {
			return r
		}
		p.stop()
	}
	t.Fatalf("testenv: redis-server did not start: %v", lastErr)
	return nil
}

func (r *Redis) ping() error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := c.Ping(ctx).Err()
	if err != nil && err.Error() == "NOAUTH Authentication required." {
		return nil // up, but needs credentials
	}
	return err
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
func (r *Redis) Restart() {
	r.t.Helper()
	r.Process.Restart()
	if err := waitReady(r.Process, r.ping); err != nil {
		r.t.Fatalf("testenv: redis restart: %v", err)
	}
}

// DataDir returns the directory holding RDB/AOF files.
func (r *Redis) DataDir() string { return filepath.Clean(r.Dir) }

package testenv

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// AfterCommand is a go-redis hook that calls Fn once, right after the
// first command that Match accepts has been answered, before the caller
// sees the reply: tests use it to make something happen between two
// commands of the operation under test (another process's step, a crash).
//
// A command counts as answered when the server ran it: a reply, or a nil
// reply (redis.Nil). A command that failed does not count: above all an
// EVALSHA refused with NOSCRIPT, which changed nothing and which go-redis
// sends again as EVAL. The hook looks at the error the command returned,
// not at cmd.Err(): inside a hook go-redis has not set it yet.
//
// The commands a new connection sends by itself (HELLO, CLIENT SETINFO
// and the like, AUTH, SELECT) never match: a hook waiting for an
// operation's first command would otherwise fire on the handshake.
type AfterCommand struct {
	// Match reports whether a command, given by its arguments (the name
	// first, in lower case), is the one to follow.
	Match func(args []any) bool
	// Fn runs once, on the goroutine that sent the command.
	Fn func()

	once sync.Once
}

// CommandOn returns a Match for the command name (lower case) whose first
// argument is key: CommandOn("hgetall", l.Outbox(0)).
func CommandOn(name, key string) func(args []any) bool {
	return func(a []any) bool {
		if len(a) < 2 {
			return false
		}
		n, _ := a[0].(string)
		k, _ := a[1].(string)
		return n == name && k == key
	}
}

// HookedClient returns a new client of rdb's server with h added, closed
// at cleanup. Its connections are its own, so h sees only the commands
// sent through it.
func HookedClient(t testing.TB, rdb *redis.Client, h redis.Hook) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { c.Close() })
	c.AddHook(h)
	return c
}

// handshake lists the commands a new connection sends by itself.
var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (h *AfterCommand) after(cmd redis.Cmder, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	a := cmd.Args()
	if name, _ := a[0].(string); handshake[name] || !h.Match(a) {
		return
	}
	h.once.Do(h.Fn)
}

// DialHook is redis.Hook's: it adds nothing.
func (h *AfterCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's: it follows each command.
func (h *AfterCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(cmd, err)
		return err
	}
}

// ProcessPipelineHook is redis.Hook's: it follows each command of a
// pipeline, once the pipeline has been answered.
func (h *AfterCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.after(c, c.Err())
		}
		return err
	}
}

// CommandCalls returns the calls Redis counted for each command (INFO
// commandstats, lower case: "evalsha", "config|get"); commands run by
// scripts are counted too.
func CommandCalls(t testing.TB, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, st := range CommandStats(t, rdb) {
		out[name] = st.Calls
	}
	return out
}

// CommandStat is one command's counters in INFO commandstats.
type CommandStat struct {
	Calls int64 // calls since the last CONFIG RESETSTAT
	Usec  int64 // Redis's time in the command, µs
}

// CommandStats reads INFO commandstats once: each command's calls and
// time, by the name Redis gives it ("evalsha", "client|setname").
func CommandStats(t testing.TB, rdb redis.UniversalClient) map[string]CommandStat {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("testenv: INFO commandstats: %v", err)
	}
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(strings.TrimSpace(line), "cmdstat_") {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out[name] = st
	}
	return out
}

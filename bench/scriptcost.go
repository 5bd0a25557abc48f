package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ---- The cost of each script, one task per call ----

// scriptCosts runs each hot-path script with one task per call, n calls
// in a row, in a namespace of its own on the Hourglass Redis (its
// schedulers never touch it), and reports Redis time per call from
// commandstats: the script's whole run and the part outside the commands
// it ran (Lua code, argument and reply conversion). This is what a task
// costs where nothing batches, as at a steady low rate, minus the round
// trips.
func scriptCosts(ctx context.Context, hg *hgSystem, n int) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: hg.e.hgRed.Addr})
	defer rdb.Close()
	l, err := shard.NewLayout("hgscripts", 1)
	if err != nil {
		return "", err
	}
	s := shard.NewStore(rdb, l)
	// "k" keeps the records of its ended tasks (#27's results).
	if err := s.RegisterQueues(ctx, map[string]shard.QueuePolicy{"q": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024},
		"k": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 1024, Retention: shard.Retention{Age: time.Hour, Count: 2 * n}}}); err != nil {
		return "", err
	}
	defer func() {
		if keys, err := rdb.Keys(ctx, "{hgscripts:*").Result(); err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()
	var parts []string
	inScript := scriptCommands(hg.e.root)
	phase := func(name string, f func(i int) error) error {
		a, err := snapshot(ctx, rdb, newCmdCounter(), nil, nil)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := f(i); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		b, err := snapshot(ctx, rdb, newCmdCounter(), nil, nil)
		if err != nil {
			return err
		}
		w := diff(a, b)
		var inner int64
		for k, v := range w.usec {
			if inScript[k] {
				inner += v
			}
		}
		ev := float64(w.usec["evalsha"]) / float64(n)
		parts = append(parts, fmt.Sprintf("%s %.1f µs (Lua and conversions %.1f)", name, ev, ev-float64(inner)/float64(n)))
		return nil
	}
	due := time.Now()
	id := func(i int) string { return "s" + strconv.Itoa(i) }
	if err := phase("enqueue.lua", func(i int) error {
		return s.Enqueue(ctx, shard.EnqueueArgs{ID: id(i), Queue: "q", Payload: []byte("0123456789abcdef"), Due: due, MaxRetries: -1}).Err
	}); err != nil {
		return "", err
	}
	// #27's change of a pending task, on the tasks just stored (in the
	// delayed set, due now): a reschedule 1 ms later, then a replace.
	if err := phase("change.lua (reschedule)", func(i int) error {
		_, err := s.Change(ctx, id(i), shard.Change{SetDue: true, Due: due.Add(time.Millisecond)})
		return err
	}); err != nil {
		return "", err
	}
	if err := phase("change.lua (replace)", func(i int) error {
		_, err := s.Change(ctx, id(i), shard.Change{Payload: []byte("fedcba9876543210")})
		return err
	}); err != nil {
		return "", err
	}
	// #27's debounce (trailing: the first call of a key opens its window
	// with a task, the second changes that task) and unique ids.
	if err := phase("debounce.lua (a key's first and second call, each)", func(i int) error {
		_, err := s.Debounce(ctx, shard.DebounceArgs{Key: "key" + strconv.Itoa(i/2), Mode: shard.DebounceTrailing, Delay: time.Hour,
			Queue: "q", Payload: []byte("0123456789abcdef"), MaxRetries: -1})
		return err
	}); err != nil {
		return "", err
	}
	if err := phase("unique.lua", func(i int) error {
		return s.Enqueue(ctx, shard.EnqueueArgs{ID: "u" + strconv.Itoa(i), Queue: "q", Payload: []byte("0123456789abcdef"), Due: due.Add(time.Hour),
			MaxRetries: -1, UniqueFor: time.Hour}).Err
	}); err != nil {
		return "", err
	}
	if err := phase("move.lua", func(int) error {
		_, err := s.Move(ctx, 0, 1, 1)
		return err
	}); err != nil {
		return "", err
	}
	pops, err := popAll(ctx, s, l, "q", n)
	if err != nil {
		return "", err
	}
	if err := phase("ack.lua", func(i int) error {
		d, ok := s.Popped(0, pops[i], time.Now(), 0)
		if !ok {
			return fmt.Errorf("entry %q", pops[i])
		}
		return s.AckBatch(ctx, []shard.AckArgs{{Shard: 0, ID: d.Task.ID, Token: d.Token, Queue: "q"}})[0]
	}); err != nil {
		return "", err
	}
	// The same in a queue that keeps records: each success recorded with
	// a 100-byte result, then read back as client.Result reads it.
	result := []byte(strings.Repeat("r", 100))
	kid := func(i int) string { return "k" + strconv.Itoa(i) }
	for i := range n {
		if err := s.Enqueue(ctx, shard.EnqueueArgs{ID: kid(i), Queue: "k", Payload: []byte("0123456789abcdef"), Due: due, MaxRetries: -1}).Err; err != nil {
			return "", err
		}
	}
	if _, err := s.Move(ctx, 0, 1, n); err != nil {
		return "", err
	}
	if pops, err = popAll(ctx, s, l, "k", n); err != nil {
		return "", err
	}
	if err := phase("succeed.lua (ack with its result kept)", func(i int) error {
		d, ok := s.Popped(0, pops[i], time.Now(), 0)
		if !ok {
			return fmt.Errorf("entry %q", pops[i])
		}
		return s.Succeed(ctx, d.AckArgs(true), result)
	}); err != nil {
		return "", err
	}
	if err := phase("lookup.lua (a result)", func(i int) error {
		_, err := s.Lookup(ctx, kid(i))
		return err
	}); err != nil {
		return "", err
	}
	return fmt.Sprintf("one task per script call, %d calls in a row, Redis time per call (commandstats): %s", n, strings.Join(parts, "; ")), nil
}

// popAll pops n entries of queue's ready lists.
func popAll(ctx context.Context, s *shard.Store, l shard.Layout, queue string, n int) ([]string, error) {
	keys := l.ReadyKeys([]string{queue})
	var pops []string
	for len(pops) < n {
		_, es, err := s.Pop(ctx, keys, 500, time.Second)
		if err != nil || len(es) == 0 {
			return nil, fmt.Errorf("pop: %v", err)
		}
		pops = append(pops, es...)
	}
	return pops, nil
}

var callRE = regexp.MustCompile(`redis\.call\("([A-Za-z]+)"`)

// scriptCommands lists the Redis commands Hourglass's Lua scripts call.
func scriptCommands(root string) map[string]bool {
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(root, "internal", "shard", "lua", "*.lua"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range callRE.FindAllStringSubmatch(string(b), -1) {
			out[strings.ToLower(m[1])] = true
		}
	}
	return out
}

package main

// asynq, the first peer: its client and server on a Redis of their own.

import (
	"context"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

type aqSystem struct {
	e      *env
	label  string
	cfg    asynq.Config
	prefix string
	cliRdb *redis.Client
	cliN   *cmdCounter
	srvN   *cmdCounter
	cli    *asynq.Client
}

// asynqConfigs returns asynq's default configuration and the "tuned" one:
// every poll interval its Config has turned down. Config accepts any
// positive duration; 1 ms is the floor we use, below which the pollers
// only burn CPU (its scheduled scores are whole seconds anyway).
func asynqConfigs() (def, tuned asynq.Config) {
	base := asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{"default": 1},
		LogLevel:    asynq.ErrorLevel,
		Logger:      quietLogger{},
	}
	tuned = base
	tuned.DelayedTaskCheckInterval = time.Millisecond // default 5 s
	tuned.TaskCheckInterval = time.Millisecond        // default 1 s: sleep when the queues are empty
	return base, tuned
}

func newAQ(e *env, label string, cfg asynq.Config) *aqSystem {
	a := &aqSystem{e: e, label: label, cfg: cfg, cliN: newCmdCounter(), srvN: newCmdCounter()}
	a.cliRdb = redis.NewClient(&redis.Options{Addr: e.aqRed.Addr})
	a.cliRdb.AddHook(a.cliN)
	a.cli = asynq.NewClientFromRedisClient(a.cliRdb)
	return a
}

func (a *aqSystem) name() string       { return a.label }
func (a *aqSystem) setPrefix(p string) { a.prefix = p }

func (a *aqSystem) enqueue(ctx context.Context, ts []btask) (int, error) {
	for i, t := range ts {
		head := strconv.Itoa(t.idx) + ":" + strconv.FormatInt(t.due.UnixNano(), 10) + ":"
		task := asynq.NewTask("bench", payloadOf(t.payload, head))
		if _, err := a.cli.EnqueueContext(ctx, task, asynq.ProcessAt(t.due)); err != nil {
			return i, err
		}
	}
	return len(ts), nil
}

// enqueueEach is enqueue: asynq's client has only the single-task call.
func (a *aqSystem) enqueueEach(ctx context.Context, ts []btask) (int, error) {
	return a.enqueue(ctx, ts)
}

func (a *aqSystem) startConsumer(_ context.Context, rec *recorder) (func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: a.e.aqRed.Addr})
	rdb.AddHook(a.srvN)
	srv := asynq.NewServerFromRedisClient(rdb, a.cfg)
	err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		p := t.Payload()
		i1 := strings.IndexByte(string(p), ':')
		if i1 < 0 {
			return nil
		}
		i2 := strings.IndexByte(string(p[i1+1:]), ':')
		idx, _ := strconv.Atoi(string(p[:i1]))
		due, _ := strconv.ParseInt(string(p[i1+1:i1+1+i2]), 10, 64)
		rec.record(idx, due)
		return nil
	}))
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return func() {
		srv.Shutdown()
		rdb.Close()
	}, nil
}

func (a *aqSystem) consumerLateness() (float64, float64, bool) { return 0, 0, false }

func (a *aqSystem) snap(ctx context.Context) (rstats, error) {
	return snapshot(ctx, a.e.aqAdmin, a.e.aqAdminN, counters{a.cliN, a.srvN}, nil)
}

func (a *aqSystem) clear(ctx context.Context) error { return a.e.aqAdmin.FlushAll(ctx).Err() }

func (a *aqSystem) close() { a.cli.Close() }

// quietLogger drops asynq's logs below error.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(args ...any) {
	log.Println(append([]any{"asynq:"}, args...)...)
}
func (quietLogger) Fatal(args ...any) { log.Fatal(append([]any{"asynq:"}, args...)...) }

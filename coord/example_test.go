package coord_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/coord"
)

// These examples need a Redis server on 127.0.0.1:6379; they are
// compiled by go test but not run (no Output comment).

// Run a nightly report on one process of the fleet at a time. The
// watchdog keeps the lease while the report runs; Lost tells the report
// to stop if the lease is lost anyway (a long pause, Redis unreachable).
func ExampleLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	lock, err := coord.NewLock(rdb, "nightly-report", 30*time.Second, coord.WithWatchdog(), coord.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	lease, err := lock.TryAcquire(ctx)
	if errors.Is(err, coord.ErrNotAcquired) {
		fmt.Println("another process runs the report")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	work, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-lease.Lost():
			stop() // another process may hold the lock now
		case <-work.Done():
		}
	}()
	// Write with the fencing token; the store refuses tokens older than
	// the newest it has seen.
	fmt.Println("running the report with fencing token", lease.Fence())
}

// Cap the queries that every worker process sends to a database at 10 at
// once. A worker that crashes holding a permit gives it back when its
// lease ends; a live one refreshes the lease while it works.
func ExampleSemaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	sem, err := coord.NewSemaphore(rdb, "reports-db", 10, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	permit, err := sem.Acquire(ctx) // blocks without polling until a permit is free
	if err != nil {
		log.Fatal(err)
	}
	defer sem.Release(ctx, permit)

	// ... a long query; refresh before the lease ends:
	if err := sem.Refresh(ctx, permit, 30*time.Second); errors.Is(err, coord.ErrNotHeld) {
		log.Print("permit lost: stop the query")
	}
	n, _ := sem.InUse(ctx)
	fmt.Println("permits in use:", n)
}

// Many readers of a routing table, and a writer that replaces it; a
// waiting writer keeps new readers out so that it is not starved.
func ExampleRWLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	rw, err := coord.NewRWLock(rdb, "routing-table", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	r, err := rw.AcquireRead(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reading the table")
	_ = r.Release(ctx)

	w, err := rw.AcquireWrite(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replacing the table")
	_ = w.Release(ctx)
}

// A partner API accepts 200 calls per second with bursts of 20, across
// every process that calls it.
func ExampleTokenBucket() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	tb, err := coord.NewTokenBucket(rdb, "partner-api", 200, time.Second, 20)
	if err != nil {
		log.Fatal(err)
	}
	res, err := tb.Allow(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if !res.Allowed {
		fmt.Println("throttled; retry in", res.RetryAfter)
		return
	}
	fmt.Println("call the partner;", res.Remaining, "more allowed right now")
}

// At most 5 password attempts per user in any 15 minutes, with no burst
// at window boundaries.
func ExampleSlidingWindow() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	sw, err := coord.NewSlidingWindow(rdb, "login:alice", 5, 15*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	res, err := sw.Allow(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if !res.Allowed {
		fmt.Println("too many attempts; try again in", res.RetryAfter.Round(time.Second))
	}
}

// A daily quota of 10,000 exports per tenant, reset at midnight UTC (the
// windows are aligned on the Redis server clock).
func ExampleFixedWindow() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	fw, err := coord.NewFixedWindow(rdb, "exports:tenant-42", 10000, 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	res, err := fw.Allow(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", res.Allowed, "left today:", res.Remaining, "resets in:", res.ResetAfter.Round(time.Minute))
}

// Send SMS through a gateway at an even 10 per second, queueing up to 50
// instead of rejecting bursts.
func ExampleLeakyBucket() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	lb, err := coord.NewLeakyBucket(rdb, "sms-gateway", 100*time.Millisecond, 50)
	if err != nil {
		log.Fatal(err)
	}
	res, err := lb.Allow(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if !res.Allowed {
		fmt.Println("queue full; retry in", res.RetryAfter)
		return
	}
	time.Sleep(res.Delay) // this request's slot
	fmt.Println("send the SMS")
}

// Wait blocks until any limiter admits a request: it sleeps RetryAfter
// after a denial, and a leaky bucket's Delay after an admission.
func ExampleWait() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	tb, err := coord.NewTokenBucket(rdb, "partner-api", 200, time.Second, 20)
	if err != nil {
		log.Fatal(err)
	}
	if err := coord.Wait(ctx, tb); err != nil {
		log.Fatal(err)
	}
	fmt.Println("call the partner")
}

// A bounded job buffer shared by processes: consumers wait on "ready"
// while the buffer is empty, releasing the lock as they wait; a producer
// appends under the lock and signals one consumer. A consumer that dies
// while waiting passes the Signal on after the liveness period.
func ExampleCond() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	ctx := context.Background()

	lock, err := coord.NewLock(rdb, "jobs", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	ready, err := coord.NewCond(lock, "ready", 0) // 0: coord.DefaultLiveness
	if err != nil {
		log.Fatal(err)
	}

	// Consumer.
	lease, err := lock.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for {
		job, err := rdb.LPop(ctx, "jobs:buffer").Result()
		if err == nil {
			fmt.Println("got", job)
			break
		}
		if err != redis.Nil {
			log.Fatal(err)
		}
		// Releases the lock while it waits, holds it again on return.
		if lease, _, err = ready.Wait(ctx, lease, time.Minute); err != nil {
			log.Fatal(err)
		}
	}
	_ = lease.Release(ctx)

	// Producer (another process).
	p, err := lock.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	rdb.RPush(ctx, "jobs:buffer", "job-1")
	if _, err := ready.Signal(ctx); err != nil {
		log.Fatal(err)
	}
	_ = p.Release(ctx)
}

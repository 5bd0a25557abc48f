package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// ---- 7. Durability mode ----

// runDurable measures what the client's durability mode costs: the same
// enqueues with and without WAIT for one replica (a second redis-server
// replicating the benchmark's Redis on loopback). Figures: single-task
// enqueue latency and batched throughput.
func runDurable(ctx context.Context, o sizes, e *env, logf func(string, ...any)) *scenario {
	sc := &scenario{Name: "durable", Title: "Durability mode: enqueue with WAIT for 1 replica (client.Config.WaitReplicas) against none, one replica on loopback",
		Cols: []col{{"p50", "1 task p50 ms", "%.3f"}, {"p99", "1 task p99 ms", "%.3f"}, {"batch", "batches of 1000 /s (tasks)", "%.0f"}}}
	sc.Notes = append(sc.Notes, "one goroutine; single-task latency over 2000 Enqueue calls; throughput of EnqueueBatch with 1000 tasks per call for the run's enqueue bound; WAIT runs on the connection that carried the enqueue, in the same pipeline")
	host, port, _ := strings.Cut(e.hgRed.Addr, ":")
	rep, err := localrun.StartRedis(e.dir, "--replicaof", host, port)
	if err != nil {
		sc.Notes = append(sc.Notes, "replica: "+err.Error())
		return sc
	}
	defer rep.Stop(5 * time.Second)
	rrdb := redis.NewClient(&redis.Options{Addr: rep.Addr})
	defer rrdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(rrdb.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) || ctx.Err() != nil {
			sc.Notes = append(sc.Notes, "replica not in sync after 20 s")
			return sc
		}
		time.Sleep(50 * time.Millisecond) // polling a server's state with a deadline
	}
	prdb := redis.NewClient(&redis.Options{Addr: e.hgRed.Addr})
	defer prdb.Close()
	for _, replicas := range []int{0, 1} {
		name := "no wait"
		if replicas > 0 {
			name = fmt.Sprintf("WAIT %d replica", replicas)
		}
		r := sc.row(name)
		cli, err := client.New(prdb, client.Config{Namespace: namespace, Shards: e.shards, WaitReplicas: replicas, WaitTimeout: time.Second})
		if err != nil {
			r.note("%v", err)
			continue
		}
		prefix := uniq("dur")
		far := time.Now().Add(time.Hour)
		lat := make([]float64, 0, 2000)
		for i := range 2000 {
			t0 := time.Now()
			if _, err := cli.Enqueue(ctx, client.Task{ID: fmt.Sprintf("%s-1-%d", prefix, i), Queue: hgQueue, Payload: payloadOf(100, ""), At: far}); err != nil {
				r.note("enqueue: %v", err)
				break
			}
			lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		}
		sort.Float64s(lat)
		if len(lat) > 0 {
			r.set("p50", lat[len(lat)/2])
			r.set("p99", lat[len(lat)*99/100])
		}
		sent, t0 := 0, time.Now()
		for b := 0; time.Since(t0) < o.enqBound && sent < o.enqMax; b++ {
			batch := make([]client.Task, 1000)
			for i := range batch {
				batch[i] = client.Task{ID: fmt.Sprintf("%s-b-%d-%d", prefix, b, i), Queue: hgQueue, Payload: payloadOf(100, ""), At: far}
			}
			if _, err := cli.EnqueueBatch(ctx, batch); err != nil {
				r.note("batch: %v", err)
				break
			}
			sent += len(batch)
		}
		r.set("batch", float64(sent)/time.Since(t0).Seconds())
		logf("durable %s: 1 task p50 %.3f ms p99 %.3f ms; batches %.0f tasks/s", name, r.M["p50"], r.M["p99"], r.M["batch"])
		_ = e.clearHG(ctx)
	}
	return sc
}

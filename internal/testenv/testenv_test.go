package testenv

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestRedisControls(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	c := r.Client(t)
	ctx := Ctx(t, 30*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	r.Kill()
	if r.Running() {
		t.Fatal("redis still running after Kill")
	}
	r.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}

func TestEtcdControls(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	c := e.Client(t)
	ctx := Ctx(t, 30*time.Second)
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	lease, err := c.Grant(ctx, 5)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := c.Put(ctx, "/l", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put with lease: %v", err)
	}
	e.Kill()
	e.Restart()
	resp, err := c.Get(ctx, "/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after restart: %v %v", resp, err)
	}
}

package testenv

import (
	"fmt"
	"testing"
	"time"
)

func TestSentinelFailoverAfterPrimaryKill(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("primary, replica and %d sentinels up in %s", len(s.Sentinels), time.Since(start).Round(time.Millisecond))
	fc := s.FailoverClient(t)
	ctx := Ctx(t, 30*time.Second)

	if err := fc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	// Only a write the replica has acknowledged survives the failover.
	if n, err := fc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica's acknowledgement", n, err)
	}

	old := s.Primary.Addr
	s.Primary.Kill()
	killed := time.Now()
	addr, err := s.WaitForNewPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinels promoted %s %s after the kill", addr, time.Since(killed).Round(time.Millisecond))
	if addr != s.Replica.Addr {
		t.Fatalf("new primary %s, want the replica %s", addr, s.Replica.Addr)
	}

	// The same client finds the new primary (it may take a moment to
	// notice), then keeps working.
	WaitFor(t, 15*time.Second, "a write through the failover client", func() (bool, string) {
		if err := fc.Set(ctx, "after", "1", 0).Err(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	t.Logf("failover client writing again %s after the kill", time.Since(killed).Round(time.Millisecond))
	for i := range 20 {
		key := fmt.Sprintf("after:%d", i)
		if err := fc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := fc.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v", key, got, err)
		}
	}
	if got, err := fc.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET of the write before the failover = %q, %v", got, err)
	}
	if got, err := s.Replica.Client(t).Get(ctx, "after:19").Result(); err != nil || got != "19" {
		t.Fatalf("GET directly on the new primary = %q, %v", got, err)
	}
}

package coord

import (
	"fmt"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass"
)

// Key layout. Every key and wake channel of one primitive is built here
// from the caller's name as "{name}:suffix", so all keys of a primitive
// share the hash tag {name} and sit in one Redis Cluster slot, which its
// Lua scripts require. The token bucket's key is "rate:{name}:tb" (the
// redis_rate library adds the "rate:" prefix); its hash tag is the same.
//
//	Lock       {name}:lock            STRING owner token, PX = lease
//	           {name}:lock:fence      STRING fencing counter (WithFencing)
//	           {name}:lock:wake       pub/sub channel
//	Semaphore  {name}:sem             ZSET permit id -> expiry ms
//	           {name}:sem:wake        pub/sub channel
//	RWLock     {name}:rw:writer       STRING writer token, PX = lease
//	           {name}:rw:readers      ZSET reader id -> expiry ms
//	           {name}:rw:waiting      ZSET waiting writer -> marker expiry ms
//	           {name}:rw:fence        STRING fencing counter (WithFencing)
//	           {name}:rw:wake         pub/sub channel
//	Cond       {lock}:cond:<c>:q      ZSET waiter -> arrival number
//	           {lock}:cond:<c>:alive  ZSET waiter -> liveness deadline ms
//	           {lock}:cond:<c>:sig    HASH waiter -> wake-up not yet taken
//	           {lock}:cond:<c>:seq    STRING arrival counter
//	           {lock}:cond:<c>:wake   pub/sub channel (payload: a waiter)
//	limiters   {name}:fw, {name}:sw, {name}:lb, rate:{name}:tb
func key(name, suffix string) string { return "{" + name + "}:" + suffix }

// checkName rejects names that would break the shared hash tag.
func checkName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s: empty name", hourglass.ErrInvalidArgument, kind)
	}
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: %s %q: name must not contain { or }", hourglass.ErrInvalidArgument, kind, name)
	}
	return nil
}

// checkDuration rejects durations that Redis cannot express in ms.
func checkDuration(kind, name, what string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%w: %s %q: %s %s is below 1ms", hourglass.ErrInvalidArgument, kind, name, what, d)
	}
	return nil
}

// ms converts d to whole milliseconds, rounding up, at least 1.
func ms(d time.Duration) int64 {
	m := int64((d + time.Millisecond - 1) / time.Millisecond)
	if m < 1 {
		m = 1
	}
	return m
}

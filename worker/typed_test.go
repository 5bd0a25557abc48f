package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/codec"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// order is a typed payload.
type order struct {
	ID    int
	Items []string
	Due   time.Time
}

// prefixed is a Codec other than JSON: JSON behind a version prefix, so
// that a payload only it encoded fails to decode with plain JSON.
type prefixed struct{}

func (prefixed) Marshal(v any) ([]byte, error) {
	b, err := codec.JSON{}.Marshal(v)
	return append([]byte("v1:"), b...), err
}

func (prefixed) Unmarshal(data []byte, v any) error {
	rest, ok := bytes.CutPrefix(data, []byte("v1:"))
	if !ok {
		return errors.New("no v1: prefix")
	}
	return codec.JSON{}.Unmarshal(rest, v)
}

// A value enqueued with client.EnqueueOf reaches a Typed handler equal
// to what was sent, with JSON by default and with a codec set on both
// sides; Task.Payload keeps the encoded bytes.
func TestTypedRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		codec   codec.Codec // nil: the defaults (client.Config's, worker.Typed)
		payload string      // Task.Payload's prefix
	}{
		{"json", nil, `{"ID":7,`},
		{"pluggable codec", prefixed{}, `v1:{"ID":7,`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, shard.QueuePolicy{MaxRetries: 3, Timeout: 30 * time.Second})
			cl, err := client.New(e.RDB, client.Config{Namespace: ns, Shards: shards, Codec: c.codec})
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				o   order
				raw string
			}
			seen := make(chan got, 1)
			h := func(_ context.Context, task *Task, o order) error {
				seen <- got{o, string(task.Payload)}
				return nil
			}
			handler := Typed(h)
			if c.codec != nil {
				handler = TypedWith(c.codec, h)
			}
			e.start(e.RDB, QueueOptions{}, handler)
			sent := order{ID: 7, Items: []string{"tea", "cake"}, Due: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
			ctx := testenv.Ctx(t, 30*time.Second)
			if _, err := client.EnqueueOf(ctx, cl, client.Task{ID: "typed-1", Queue: "q"}, sent); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-seen:
				if !reflect.DeepEqual(g.o, sent) || !strings.HasPrefix(g.raw, c.payload) {
					t.Fatalf("handler got %+v from payload %s, want %+v from %s...", g.o, g.raw, sent, c.payload)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the typed handler never ran")
			}
			testenv.WaitFor(t, 10*time.Second, "the task acked", func() (bool, string) {
				_, err := e.Lookup("typed-1")
				return errors.Is(err, shard.ErrNotFound), fmt.Sprint(err)
			})
		})
	}
}

// A payload that does not decode into the handler's type is dead-lettered
// after one attempt, without calling the handler, though the queue allows
// retries: the reason names the type and the decode error.
func TestTypedDecodeFailureDeadLetters(t *testing.T) {
	t.Parallel()
	e, cl := newClientEnv(t, shard.QueuePolicy{MaxRetries: 5, Timeout: 30 * time.Second,
		Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond, Factor: 1}})
	var mu sync.Mutex
	calls := 0
	e.start(e.RDB, QueueOptions{}, Typed(func(context.Context, *Task, order) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return nil
	}))
	ctx := testenv.Ctx(t, 30*time.Second)
	cases := []struct{ id, payload, reason string }{
		{"not-json", `close order 7`, "invalid character"},
		{"wrong-type", `{"ID":"seven"}`, "cannot unmarshal string"},
		{"empty", ``, "unexpected end of JSON input"},
	}
	for _, c := range cases {
		if _, err := cl.Enqueue(ctx, client.Task{ID: c.id, Queue: "q", Payload: []byte(c.payload)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		testenv.WaitFor(t, 20*time.Second, c.id+" dead-lettered", func() (bool, string) {
			info, err := e.Lookup(c.id)
			return err == nil && info.State == "dead", fmt.Sprintf("%s, attempts %d, %v", info.State, info.Task.Attempts, err)
		})
		info, _ := e.Lookup(c.id)
		want := `"error":"hourglass: payload does not decode as worker.order: `
		if info.Task.Attempts != 1 || !strings.Contains(info.DeadInfo, `"reason":"not retryable"`) ||
			!strings.Contains(info.DeadInfo, want) || !strings.Contains(info.DeadInfo, c.reason) {
			t.Errorf("%s: attempts %d, dead info %s; want 1 attempt and a reason with %q and %q", c.id, info.Task.Attempts, info.DeadInfo, want, c.reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("the handler ran %d times on payloads that do not decode", calls)
	}
}

// The decode error wraps ErrPayloadDecode and asks for no retry, and a
// nil codec or handler is the nil Handler that Handle refuses.
func TestTypedHandlerError(t *testing.T) {
	t.Parallel()
	h := Typed(func(context.Context, *Task, order) error { return nil })
	err := h(context.Background(), &Task{ID: "x", Payload: []byte("{")})
	var nr noRetryError
	if !errors.Is(err, ErrPayloadDecode) || !errors.As(err, &nr) {
		t.Fatalf("decode error %v: want ErrPayloadDecode under NoRetry", err)
	}
	if TypedWith[order](nil, func(context.Context, *Task, order) error { return nil }) != nil || Typed[order](nil) != nil {
		t.Fatal("a nil codec or handler gave a non-nil Handler")
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	w, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("q", Typed[order](nil), QueueOptions{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Handle of a nil typed handler: %v", err)
	}
}

package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// EnqueueOf stores the payload JSON-encoded by default, and sends nothing
// when the task already has a Payload or the value does not encode:
// both are ErrInvalidArgument.
func TestEnqueueOf(t *testing.T) {
	t.Parallel()
	c := newClient(t, 0)
	ctx := testenv.Ctx(t, 30*time.Second)
	type email struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	res, err := client.EnqueueOf(ctx, c, client.Task{ID: "welcome-1", Queue: "emails", Delay: time.Hour}, email{"a@example.com", "hi"})
	if err != nil || res.ID != "welcome-1" {
		t.Fatalf("EnqueueOf: %+v %v", res, err)
	}
	info, err := c.Lookup(ctx, "welcome-1")
	if err != nil || string(info.Payload) != `{"to":"a@example.com","subject":"hi"}` {
		t.Fatalf("stored payload %s (%v)", info.Payload, err)
	}
	if p, err := c.Encode(email{To: "b"}); err != nil || string(p) != `{"to":"b","subject":""}` {
		t.Fatalf("Encode: %s %v", p, err)
	}
	for name, enqueue := range map[string]func() (client.Result, error){
		"payload set too": func() (client.Result, error) {
			return client.EnqueueOf(ctx, c, client.Task{ID: "both", Queue: "emails", Payload: []byte("{}")}, email{})
		},
		"does not encode": func() (client.Result, error) {
			return client.EnqueueOf(ctx, c, client.Task{ID: "chan", Queue: "emails"}, make(chan int))
		},
	} {
		res, err := enqueue()
		if !errors.Is(err, client.ErrInvalidArgument) || !errors.Is(res.Err, client.ErrInvalidArgument) {
			t.Errorf("%s: %+v %v, want ErrInvalidArgument", name, res, err)
		}
		if ok, err := c.Exists(ctx, res.ID); ok || err != nil {
			t.Errorf("%s: task %q stored (%v)", name, res.ID, err)
		}
	}
}

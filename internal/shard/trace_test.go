package shard

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestTraceContextTravels: a task enqueued with a traceparent keeps it,
// apart from its payload, in both encodings, through a change of its
// payload, a move, a pop, a claim and a failed attempt (which leaves its
// span id for the next attempt's link), and in listings; the
// traceparent is not counted against the queue's max_payload, and a
// malformed one is refused.
func TestTraceContextTravels(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	ctx := testenv.Ctx(t, 30*time.Second)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, enc := range []TaskEncoding{EncodingText, EncodingCompact} {
		l, err := NewLayout("hgtrace"+map[TaskEncoding]string{EncodingText: "1", EncodingCompact: "2"}[enc], 1)
		if err != nil {
			t.Fatal(err)
		}
		s := NewStore(rdb, l)
		s.SetTaskEncoding(enc)
		if err := s.RegisterQueues(ctx, map[string]QueuePolicy{"q": {MaxRetries: 3, Timeout: 30 * time.Second, MaxPayload: 64}}); err != nil {
			t.Fatal(err)
		}
		full := bytes.Repeat([]byte("p"), 64)
		if r := s.Enqueue(ctx, EnqueueArgs{ID: "tr", Queue: "q", Payload: full, Delay: time.Hour, MaxRetries: -1, Priority: PriorityHigh, TraceParent: tp}); r.Err != nil {
			t.Fatalf("encoding %v: a payload of max_payload with a traceparent: %v", enc, r.Err)
		}
		if r := s.Enqueue(ctx, EnqueueArgs{ID: "big", Queue: "q", Payload: append(full, 'x'), MaxRetries: -1, TraceParent: tp}); !errors.Is(r.Err, ErrPayloadTooLarge) {
			t.Fatalf("encoding %v: payload over max_payload: %v", enc, r.Err)
		}
		if r := s.Enqueue(ctx, EnqueueArgs{ID: "bad", Queue: "q", MaxRetries: -1, TraceParent: tp[:54] + "x"}); !errors.Is(r.Err, ErrInvalidArgument) {
			t.Fatalf("encoding %v: malformed traceparent: %v", enc, r.Err)
		}
		if r := s.Enqueue(ctx, EnqueueArgs{ID: "plain", Queue: "q", Payload: []byte("x"), Delay: time.Hour, MaxRetries: -1}); r.Err != nil {
			t.Fatal(r.Err)
		}
		check := func(stage, link string, payload []byte) {
			t.Helper()
			info, err := s.Lookup(ctx, "tr")
			if err != nil || info.Task.TraceParent != tp || info.Task.TraceLink != link || !bytes.Equal(info.Task.Payload, payload) ||
				info.Task.Priority != PriorityHigh || info.Task.MaxRetries != 3 || info.View().TraceID != tp[3:35] {
				t.Fatalf("encoding %v, %s: %+v, %v", enc, stage, info.Task, err)
			}
		}
		check("enqueued", "", full)
		es, _, _, err := s.PageSet(ctx, 0, SetDelayed, Cursor{}, 10, Filter{})
		if err != nil || len(es) != 2 {
			t.Fatalf("page: %v %v", es, err)
		}
		for _, e := range es {
			v := e.View("scheduled", 0)
			if e.ID == "tr" && (v.TraceID != tp[3:35] || v.PayloadSize != 64 || !bytes.Equal(v.Payload, full)) ||
				e.ID == "plain" && (v.TraceID != "" || string(v.Payload) != "x") {
				t.Fatalf("encoding %v: listed %s as %+v", enc, e.ID, v)
			}
		}
		if _, err := s.Change(ctx, "tr", Change{Payload: []byte("new"), SetDue: true}); err != nil {
			t.Fatal(err)
		}
		check("payload changed, due now", "", []byte("new"))
		deliver := func(link string) Delivery {
			t.Helper()
			if r, err := s.Move(ctx, 0, 1, 10); err != nil || r.Moved != 1 {
				t.Fatalf("move: %+v %v", r, err)
			}
			_, entries, err := s.Pop(ctx, l.ReadyKeys([]string{"q"}), 10, time.Second)
			if err != nil || len(entries) != 1 {
				t.Fatalf("pop: %v %v", entries, err)
			}
			if d, ok := s.Popped(0, entries[0], time.Now(), 0); !ok || d.Task.TraceParent != tp || d.Task.TraceLink != link || string(d.Task.Payload) != "new" {
				t.Fatalf("popped %+v", d.Task)
			}
			ds, err := s.Claim(ctx, 0, "q", []string{EntryRef(entries[0])}, time.Minute)
			if err != nil || len(ds) != 1 || ds[0].Task.TraceParent != tp || ds[0].Task.TraceLink != link {
				t.Fatalf("claim: %+v %v", ds, err)
			}
			return ds[0]
		}
		fail := func(d Delivery, span string) {
			t.Helper()
			a := d.NackArgs(false, "boom")
			a.TraceLink = span
			if r, err := s.Nack(ctx, a); err != nil || r.Dead {
				t.Fatalf("nack: %+v %v", r, err)
			}
			if _, err := s.Change(ctx, "tr", Change{SetDue: true}); err != nil {
				t.Fatal(err)
			}
		}
		fail(deliver(""), "A1B2c3d4e5f60718") // not W3C's form: ignored
		check("failed with a malformed span id", "", []byte("new"))
		fail(deliver(""), "a1b2c3d4e5f60718")
		deliver("a1b2c3d4e5f60718")
		check("failed again", "a1b2c3d4e5f60718", []byte("new"))
	}
}

// TestTraceInTaskData: Go writes and reads the trace context as the
// scripts do; malformed contexts leave the payload whole.
func TestTraceInTaskData(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := Task{ID: "x", Queue: "q", MaxRetries: 1000, Priority: PriorityLow, Timeout: time.Second,
		Due: time.UnixMilli(1700000000000), Enqueued: time.UnixMilli(1700000000001), Payload: []byte("p"), TraceParent: tp, TraceLink: "0102030405060708"}
	for name, blob := range map[string][]byte{"v1": Encode(in), "v2": EncodeV2(in, 7)} {
		out, err := DecodeWith("x", blob, func(uint16) (string, error) { return "q", nil })
		if err != nil || out.MaxRetries != 1000 || out.Priority != PriorityLow || out.TraceParent != tp || out.TraceLink != in.TraceLink || string(out.Payload) != "p" {
			t.Fatalf("%s: %+v %v", name, out, err)
		}
	}
	for _, p := range []string{"", "short", tp + "+0102030405060708", tp[:54] + "g-0102030405060708"} {
		if gotTP, _, payload := splitTrace([]byte(p)); gotTP != "" || string(payload) != p {
			t.Fatalf("splitTrace(%q) = %q, %q", p, gotTP, payload)
		}
	}
	if !ValidTraceParent(tp) || ValidTraceParent(tp[:54]) || ValidTraceParent("00_"+tp[3:]) {
		t.Fatal("ValidTraceParent")
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// events records, in order, the pages fetched and what reached stdout.
type events struct {
	log []string
	out bytes.Buffer
}

func (e *events) Write(p []byte) (int, error) {
	e.log = append(e.log, "write "+string(p))
	return e.out.Write(p)
}

// fetchPages returns a page function over pages of the given ids, each
// page's cursor naming the next ("" after the last); fail, when >= 0,
// makes the fetch of that page fail.
func (e *events) fetchPages(pages [][]string, fail int) func(context.Context, string) (inspect.Page, error) {
	return func(_ context.Context, cur string) (inspect.Page, error) {
		e.log = append(e.log, "fetch "+cur)
		k := 0
		if cur != "" {
			fmt.Sscanf(cur, "c%d", &k)
		}
		if k == fail {
			return inspect.Page{}, errors.New("redis went away")
		}
		p := inspect.Page{Tasks: []inspect.Task{}}
		for _, id := range pages[k] {
			p.Tasks = append(p.Tasks, inspect.Task{ID: id, Queue: "q", State: inspect.StateDead, PayloadSize: 1})
		}
		if k+1 < len(pages) {
			p.Cursor = fmt.Sprintf("c%d", k+1)
		}
		return p, nil
	}
}

// TestEmptyPagesKeepTheJSONValid: a listing whose first page is empty (an
// empty dead-letter queue, or a filter that matches nothing in the first
// shards) wrote the JSON object's opening twice, so `dlq ls -o json` of
// an empty queue was not JSON. Empty pages, first or not, now write
// nothing.
func TestEmptyPagesKeepTheJSONValid(t *testing.T) {
	t.Parallel()
	for _, pages := range [][][]string{{{}}, {{}, {}}, {{}, {"b1"}, {}}, {{"a1"}, {}}} {
		e := &events{}
		a := &app{out: e, output: "json", timeout: time.Second}
		if err := a.stream(context.Background(), pageFlags{all: true}, e.fetchPages(pages, -1), nil, nil); err != nil {
			t.Fatal(err)
		}
		var got inspect.Page
		if err := json.Unmarshal(e.out.Bytes(), &got); err != nil || len(got.Tasks) != len(slices.Concat(pages...)) || got.Cursor != "" {
			t.Errorf("pages %q: %v, output\n%s", pages, err, e.out.String())
		}
	}
}

// TestListingStreamsPages: with --all, each page reaches stdout before
// the next is fetched (so memory holds one page, not the listing), in
// the table and in JSON; the JSON is the one inspect.Page object -o json
// always printed; a failure after the first page closes the JSON with
// the cursor to go on from.
func TestListingStreamsPages(t *testing.T) {
	t.Parallel()
	pages := [][]string{{"a1", "a2"}, {"b1", "b2"}, {}, {"d1"}}
	cells := func(t inspect.Task) []any { return []any{t.ID, t.Queue} }
	for _, output := range []string{"table", "json"} {
		e := &events{}
		a := &app{out: e, output: output, timeout: time.Second}
		if err := a.stream(context.Background(), pageFlags{all: true}, e.fetchPages(pages, -1), []any{"ID", "QUEUE"}, cells); err != nil {
			t.Fatal(err)
		}
		// Every fetch after the first comes after the previous page's
		// tasks were written.
		for i, ev := range e.log {
			if !strings.HasPrefix(ev, "fetch c") {
				continue
			}
			var k int
			fmt.Sscanf(ev, "fetch c%d", &k)
			for _, id := range pages[k-1] {
				if !strings.Contains(strings.Join(e.log[:i], "\n"), id) {
					t.Errorf("%s: %s fetched before %s of the page before was written: %q", output, ev, id, e.log)
				}
			}
		}
		if output == "json" {
			var all inspect.Page
			for k, ids := range pages {
				p, _ := e.fetchPages(pages, -1)(context.Background(), map[bool]string{true: "", false: fmt.Sprintf("c%d", k)}[k == 0])
				all.Tasks = append(all.Tasks, p.Tasks...)
				_ = ids
			}
			want, _ := json.MarshalIndent(all, "", "  ")
			if got := e.out.String(); got != string(want)+"\n" {
				t.Errorf("json:\n%s\nwant\n%s", got, want)
			}
		} else if got := e.out.String(); strings.Count(got, "\n") != 6 || !strings.HasPrefix(got, "ID  ") || strings.Contains(got, "more:") {
			t.Errorf("table:\n%s", got)
		}
	}

	e := &events{}
	a := &app{out: e, output: "json", timeout: time.Second}
	err := a.stream(context.Background(), pageFlags{all: true}, e.fetchPages(pages, 1), nil, cells)
	var got inspect.Page
	if jerr := json.Unmarshal(e.out.Bytes(), &got); err == nil || jerr != nil || got.Cursor != "c1" || len(got.Tasks) != 2 {
		t.Errorf("failed on the second page: %v; output %+v (%v)", err, got, jerr)
	}
	e = &events{}
	a = &app{out: e, output: "json", timeout: time.Second}
	if err := a.stream(context.Background(), pageFlags{all: true}, e.fetchPages(pages, 0), nil, cells); err == nil || e.out.Len() != 0 {
		t.Errorf("failed on the first page: %v; output %q", err, e.out.String())
	}
}

// TestDlqLsAllListsEveryPage: dlq ls --all pages through a real Redis a
// few dead letters at a time and prints each once, as one JSON object or
// as one table.
func TestDlqLsAllListsEveryPage(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	cfg := writeConfig(t, fmt.Sprintf("redis:\n  addr: %s\nnamespace: pages\nshards: 4\n", r.Addr))
	ctx := testenv.Ctx(t, time.Minute)
	l, err := shard.NewLayout("pages", 4)
	if err != nil {
		t.Fatal(err)
	}
	rdb := r.Client(t)
	const n = 23
	now := time.Now()
	for k := range n {
		id := fmt.Sprintf("d%02d", k)
		sh := l.ShardOf(id)
		blob := shard.Encode(shard.Task{Queue: "default", Attempts: 1, Timeout: time.Second, Due: now, Enqueued: now, Payload: []byte("p")})
		pipe := rdb.Pipeline()
		pipe.HSet(ctx, l.Tasks(sh), id, blob)
		pipe.ZAdd(ctx, l.Dead(sh), redis.Z{Score: float64(now.UnixMilli()), Member: id})
		pipe.HSet(ctx, l.DeadInfo(sh), id, `{"reason":"not retryable","error":"boom"}`)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"--config", cfg, "-o", "json", "dlq", "ls", "--all", "--limit", "4"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var page inspect.Page
	if err := json.Unmarshal(out.Bytes(), &page); err != nil || page.Cursor != "" {
		t.Fatalf("%v %q: %s", err, page.Cursor, out.String())
	}
	seen := map[string]bool{}
	for _, tk := range page.Tasks {
		seen[tk.ID] = true
	}
	if len(page.Tasks) != n || len(seen) != n {
		t.Fatalf("%d tasks listed, %d distinct, want %d", len(page.Tasks), len(seen), n)
	}
	out.Reset()
	if code := run([]string{"--config", cfg, "dlq", "ls", "--all", "--limit", "4"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if rows := strings.Count(out.String(), "\nd"); rows != n || !strings.HasPrefix(out.String(), "ID ") {
		t.Fatalf("table of %d rows:\n%s", rows, out.String())
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hourglass-sched/hourglass/inspect"
)

// TestJSONPagesIsOneObject: -o json of a streamed listing is one JSON
// object of inspect.Page's shape whatever the pages were: none, empty
// ones (a filter that matches nothing on some shards), full ones, and a
// listing cut short with a cursor to go on from.
func TestJSONPagesIsOneObject(t *testing.T) {
	t.Parallel()
	task := func(id string) inspect.Task { return inspect.Task{ID: id, State: inspect.StateDead} }
	for _, tc := range []struct {
		name   string
		pages  [][]inspect.Task
		cursor string
		want   int
	}{
		{"no page", nil, "", 0},
		{"one empty page", [][]inspect.Task{{}}, "", 0},
		{"empty pages", [][]inspect.Task{{}, {}, {}}, "", 0},
		{"empty then full", [][]inspect.Task{{}, {task("a"), task("b")}}, "", 2},
		{"full then empty", [][]inspect.Task{{task("a")}, {}}, "", 1},
		{"cut short", [][]inspect.Task{{task("a")}, {task("b")}}, "c1", 2},
	} {
		var buf bytes.Buffer
		j := &jsonPages{w: bufio.NewWriter(&buf)}
		for _, p := range tc.pages {
			if err := j.page(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.end(tc.cursor); err != nil {
			t.Fatal(err)
		}
		var got inspect.Page
		dec := json.NewDecoder(&buf)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Errorf("%s: %v in %q", tc.name, err, buf.String())
			continue
		}
		if dec.More() {
			t.Errorf("%s: more than one JSON value: %q", tc.name, buf.String())
		}
		if len(got.Tasks) != tc.want || got.Cursor != tc.cursor || got.Tasks == nil {
			t.Errorf("%s: %s", tc.name, fmt.Sprint(got))
		}
	}
}

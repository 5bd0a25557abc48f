package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// rawControl reports the first byte of s that a terminal would act on:
// a C0 control other than the newline, DEL, or the start of a C1 control
// (U+0080..U+009F). -1 if none.
func rawControl(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n') || c == 0x7f || (c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f) {
			return i
		}
	}
	return -1
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order-42":         "order-42",
		"größe ✓":          "größe ✓",
		"":                 "",
		"a\x1b[2Jb":        `"a\x1b[2Jb"`,
		"cr\r\nlf":         `"cr\r\nlf"`,
		"tab\tcell":        `"tab\tcell"`,
		"nul\x00":          `"nul\x00"`,
		"bad\xff":          `"bad\xff"`,
		"csi\u009b31m":     `"csi\u009b31m"`,
		"rtl\u202eexe.txt": `"rtl\u202eexe.txt"`,
		`"quoted"`:         `"\"quoted\""`,
		`back\slash`:       `back\slash`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
	if got, want := errText(errors.New("config: a: bad\nconfig: b: \x1b]0;pwned\x07")), "config: a: bad\n"+`"config: b: \x1b]0;pwned\a"`; got != want {
		t.Errorf("errText = %q, want %q", got, want)
	}
}

// TestTablesEscapeControlCharacters: dead letters stored under ids with
// control characters (stored before enqueue refused them) and with
// control characters in their reasons and errors reach the terminal
// escaped from dlq ls, task ls, task show and an error naming them;
// -o json keeps the data as it is.
func TestTablesEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	cfg := writeConfig(t, fmt.Sprintf("redis:\n  addr: %s\nnamespace: esc\nshards: 2\n", r.Addr))
	ctx := testenv.Ctx(t, time.Minute)
	l, err := shard.NewLayout("esc", 2)
	if err != nil {
		t.Fatal(err)
	}
	const id, reason, lastErr = "evil\x1b[2J\r\nid", "max retries\x1b[31m", "HTTP 502\r\nfake: line\x1b]0;title\x07"
	sh := l.ShardOf(id)
	now := time.Now()
	blob := shard.Encode(shard.Task{ID: id, Queue: "default", MaxRetries: 3, Timeout: time.Second, Due: now, Enqueued: now, Payload: []byte("pay\x1bload")})
	rec, _ := json.Marshal(map[string]any{"reason": reason, "error": lastErr, "at": now.UnixMilli()})
	if err := rdb.HSet(ctx, l.Tasks(sh), id, blob).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, l.DeadInfo(sh), id, rec).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, l.Errors(sh), id, lastErr).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, l.Dead(sh), redis.Z{Score: float64(now.UnixMilli()), Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		run(append([]string{"--config", cfg}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String()
	}
	for _, args := range [][]string{{"dlq", "ls"}, {"task", "ls", "--state", "dead"}, {"task", "show", id}, {"dlq", "show", id}} {
		out, errOut := cli(args...)
		if i := rawControl(out + errOut); i >= 0 {
			t.Errorf("%q prints a raw control character at %d: %q %q", args, i, out, errOut)
		}
		if !strings.Contains(out, `"evil\x1b[2J\r\nid"`) {
			t.Errorf("%q does not show the id escaped: %q %q", args, out, errOut)
		}
	}
	out, _ := cli("dlq", "show", id)
	for _, want := range []string{`"max retries\x1b[31m"`, `"HTTP 502\r\nfake: line\x1b]0;title\a"`} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show does not show %s: %q", want, out)
		}
	}
	_, errOut := cli("queue", "pause", "no\x1b[2Jsuch")
	if i := rawControl(errOut); i >= 0 || !strings.HasPrefix(errOut, "hourglass: ") {
		t.Errorf("an error prints a raw control character at %d: %q", i, errOut)
	}
	out, _ = cli("-o", "json", "dlq", "show", id)
	var got struct {
		ID   string `json:"id"`
		Dead struct{ Reason, Error string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.ID != id || got.Dead.Reason != reason || got.Dead.Error != lastErr {
		t.Errorf("-o json: %+v %v (%q)", got, err, out)
	}
}

// TestPayloadText: a table shows a text payload, the first tablePayload
// bytes of a longer one (never half a character) with its size, and the
// size of a binary one.
func TestPayloadText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", tablePayload) // 2 bytes each
	for _, c := range []struct {
		in   string
		want string
	}{
		{"hello\nworld", "hello\nworld"},
		{"\x00\x01", "(2 bytes of binary data; -o json shows it in base64)"},
		{strings.Repeat("a", tablePayload+1), strings.Repeat("a", tablePayload) + fmt.Sprintf(" … (the first %d of %d bytes; -o json prints all)", tablePayload, tablePayload+1)},
		{"x" + long, "x" + long[:tablePayload-2] + fmt.Sprintf(" … (the first %d of %d bytes; -o json prints all)", tablePayload-1, 1+len(long))},
	} {
		if got := payloadText([]byte(c.in)); got != c.want {
			t.Errorf("payloadText(%.20q…) = %.60q…, want %.60q…", c.in, got, c.want)
		}
	}
}

// TestWhenShowsTheZone: table times are local, 24-hour, to the
// millisecond, with the zone's offset, as the dashboard shows them.
func TestWhenShowsTheZone(t *testing.T) {
	at := time.Date(2026, 11, 28, 17, 49, 12, 3_000_000, time.FixedZone("X", 5*3600+30*60))
	got := when(at)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d$`).MatchString(got) {
		t.Fatalf("when = %q", got)
	}
	back, err := time.Parse(timeLayout, got)
	if err != nil || !back.Equal(at) {
		t.Fatalf("when = %q reads back as %v (%v), want %v", got, back, err, at)
	}
	if when(time.Time{}) != "-" {
		t.Fatalf("the zero time: %q", when(time.Time{}))
	}
}

package periodic

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass"
)

func mustCompile(t *testing.T, s Schedule) *Compiled {
	t.Helper()
	c, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func at(t *testing.T, loc *time.Location, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDaylightSavingTime: a 02:30 schedule does not occur on a
// spring-forward day (02:30 does not exist in Europe/Paris on 2026-03-29)
// and occurs at 02:30 again the next day; an hourly schedule across the
// fall-back (2026-10-25, 03:00 CEST becomes 02:00 CET) occurs at every
// real hour, so 02:00 local occurs twice, an hour apart.
func TestDaylightSavingTime(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	daily := mustCompile(t, Schedule{Name: "d", Queue: "q", Cron: "30 2 * * *", TimeZone: "Europe/Paris"})
	got := daily.Next(at(t, paris, "2026-03-28 12:00:00"))
	if want := at(t, paris, "2026-03-30 02:30:00"); !got.Equal(want) {
		t.Fatalf("02:30 after the spring-forward eve: %v, want %v (the day without 02:30 skipped)", got.In(paris), want)
	}
	if got := daily.Next(at(t, paris, "2026-03-27 12:00:00")); !got.Equal(at(t, paris, "2026-03-28 02:30:00")) {
		t.Fatalf("an ordinary day: %v", got.In(paris))
	}

	hourly := mustCompile(t, Schedule{Name: "h", Queue: "q", Cron: "0 * * * *", TimeZone: "Europe/Paris"})
	start := at(t, paris, "2026-10-25 00:30:00")
	var occ []time.Time
	for o := hourly.Next(start); len(occ) < 4; o = hourly.Next(o) {
		occ = append(occ, o)
	}
	for i := 1; i < len(occ); i++ {
		if d := occ[i].Sub(occ[i-1]); d != time.Hour {
			t.Fatalf("hourly across the fall-back: %v then %v, %v apart", occ[i-1].In(paris), occ[i].In(paris), d)
		}
	}
	twice := 0
	for _, o := range occ {
		if o.In(paris).Hour() == 2 {
			twice++
		}
	}
	if twice != 2 {
		t.Fatalf("02:00 local occurred %d times across the fall-back, want 2: %v", twice, occ)
	}
}

func TestIntervalCountsFromTheEpoch(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, Schedule{Name: "i", Queue: "q", Interval: 10 * time.Second})
	got := c.Next(time.UnixMilli(1_000_005_000))
	if want := time.UnixMilli(1_000_010_000); !got.Equal(want) {
		t.Fatalf("next after a time: %v, want %v", got, want)
	}
	if got := c.Next(time.UnixMilli(1_000_010_000)); !got.Equal(time.UnixMilli(1_000_020_000)) {
		t.Fatalf("next after an occurrence is the one after it: %v", got)
	}
}

func TestCronWithSeconds(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, Schedule{Name: "s", Queue: "q", Cron: "*/15 * * * * *"})
	got := c.Next(time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC))
	if want := time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("six fields: %v, want %v", got, want)
	}
}

func TestMissed(t *testing.T) {
	t.Parallel()
	c := func(p CatchUp) *Compiled {
		return mustCompile(t, Schedule{Name: "m", Queue: "q", Interval: time.Second, CatchUp: p, CatchUpWindow: 5 * time.Second})
	}
	last := time.UnixMilli(1_000_000_000)
	now := last.Add(10*time.Second + 500*time.Millisecond)
	if got := c(CatchUpSkip).Missed(last, now); len(got) != 0 {
		t.Fatalf("skip: %v", got)
	}
	if got := c(CatchUpLatest).Missed(last, now); len(got) != 1 || !got[0].Equal(last.Add(10*time.Second)) {
		t.Fatalf("latest: %v", got)
	}
	got := c(CatchUpAll).Missed(last, now)
	if len(got) != 5 || !got[0].Equal(last.Add(6*time.Second)) || !got[4].Equal(last.Add(10*time.Second)) {
		t.Fatalf("all within 5 s: %v", got)
	}
	if got := c(CatchUpAll).Missed(time.Time{}, now); got != nil {
		t.Fatalf("never fired: %v", got)
	}
	// The latest of a frequent schedule whose last firing is a year ago
	// is found without walking the year.
	old := now.Add(-365 * 24 * time.Hour)
	if got := c(CatchUpLatest).Missed(old, now); len(got) != 1 || !got[0].Equal(last.Add(10*time.Second)) {
		t.Fatalf("latest after a year: %v", got)
	}
	all := mustCompile(t, Schedule{Name: "m", Queue: "q", Interval: time.Second, CatchUp: CatchUpAll, CatchUpWindow: 2 * time.Hour})
	if got := all.Missed(old, now); len(got) != MaxCatchUp || !got[len(got)-1].Equal(last.Add(10*time.Second)) {
		t.Fatalf("all is bounded by MaxCatchUp, the latest kept: %d, last %v", len(got), got[len(got)-1])
	}
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, Schedule{Name: "j", Queue: "q", Interval: 10 * time.Second, Jitter: 3 * time.Second})
	seen := map[time.Duration]bool{}
	for i := range 50 {
		occ := time.UnixMilli(int64(i) * 10_000)
		d := c.Due(occ).Sub(occ)
		if d < 0 || d >= 3*time.Second || c.Due(occ) != c.Due(occ) {
			t.Fatalf("occurrence %v: jitter %v", occ, d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter hardly varies: %d distinct values over 50 occurrences", len(seen))
	}
}

func TestInvalidSchedulesNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    Schedule
		want string
	}{
		{Schedule{Name: "bad name", Queue: "q", Interval: time.Second}, "name"},
		{Schedule{Name: "a", Interval: time.Second}, "queue"},
		{Schedule{Name: "a", Queue: "q"}, "cron"},
		{Schedule{Name: "a", Queue: "q", Cron: "* * * * *", Interval: time.Second}, "cron"},
		{Schedule{Name: "a", Queue: "q", Cron: "61 * * * *"}, "cron"},
		{Schedule{Name: "a", Queue: "q", Cron: "@every 1m"}, "cron"},
		{Schedule{Name: "a", Queue: "q", Cron: "0 0 30 2 *"}, "never occurs"},
		{Schedule{Name: "a", Queue: "q", Cron: "* * * * *", TimeZone: "Mars/Olympus"}, "time_zone"},
		{Schedule{Name: "a", Queue: "q", Interval: 500 * time.Millisecond}, "interval"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, TimeZone: "UTC"}, "time_zone"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, Jitter: time.Second}, "jitter"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, CatchUp: "some"}, "catch_up"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, Overlap: "never"}, "overlap"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, MaxRetries: hourglass.Retries(-1)}, "max_retries"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, MaxRetries: hourglass.Retries(1001)}, "max_retries"},
		{Schedule{Name: "a", Queue: "q", Interval: time.Second, CatchUpWindow: 8 * 24 * time.Hour}, "catch_up_window"},
	} {
		_, err := tc.s.Compile()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.s, err, tc.want)
		}
	}
	c := mustCompile(t, Schedule{Name: "ok", Queue: "q", Cron: "@hourly", TimeZone: "America/New_York"})
	if c.CatchUp != CatchUpSkip || c.Overlap != OverlapAllow || c.CatchUpWindow != DefaultCatchUpWindow {
		t.Fatalf("defaults: %+v", c.Schedule)
	}
}

func TestEncodeDecode(t *testing.T) {
	t.Parallel()
	s := Schedule{Name: "x", Queue: "q", Payload: []byte("p"), Cron: "*/5 * * * *", TimeZone: "Asia/Tokyo", Jitter: time.Second,
		MaxRetries: hourglass.Retries(2), Timeout: time.Minute, CatchUp: CatchUpAll, CatchUpWindow: 2 * time.Hour, Overlap: OverlapSkip}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode("x", b)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Payload) != "p" || c.Cron != s.Cron || c.TimeZone != s.TimeZone || c.Jitter != s.Jitter || c.MaxRetries == nil || *c.MaxRetries != 2 ||
		c.Timeout != time.Minute || c.CatchUp != CatchUpAll || c.CatchUpWindow != 2*time.Hour || c.Overlap != OverlapSkip {
		t.Fatalf("round trip: %+v", c.Schedule)
	}
	if _, err := Decode("y", []byte("{")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad JSON: %v", err)
	}
}

// TestMaxRetriesNilIsTheDefault: a nil MaxRetries is the queue's default
// and is stored as -1, which schedulers of the versions before it was a
// pointer also read as the default (a rolling upgrade runs both); 0 is
// stored and means no retry; -1, null or no key reads as nil.
func TestMaxRetriesNilIsTheDefault(t *testing.T) {
	t.Parallel()
	def := Schedule{Name: "d", Queue: "q", Interval: time.Second}
	b, err := def.Encode()
	if err != nil || !strings.Contains(string(b), `"max_retries":-1`) {
		t.Fatalf("a default retry limit is stored as %s (%v), want max_retries -1", b, err)
	}
	if def.MaxRetries != nil {
		t.Fatal("Encode changed the schedule it encoded")
	}
	if c, err := Decode("d", b); err != nil || c.MaxRetries != nil {
		t.Fatalf("decoded %+v, %v; want MaxRetries nil", c, err)
	}
	never := def
	never.MaxRetries = hourglass.Retries(0)
	if b, _ = never.Encode(); !strings.Contains(string(b), `"max_retries":0`) {
		t.Fatalf("no retry is stored as %s", b)
	}
	if c, err := Decode("d", b); err != nil || c.MaxRetries == nil || *c.MaxRetries != 0 {
		t.Fatalf("decoded %+v, %v; want MaxRetries 0", c, err)
	}
	for _, old := range []string{
		`{"name":"d","queue":"q","interval":1000000000,"max_retries":-1}`, // the default, as written before
		`{"name":"d","queue":"q","interval":1000000000,"max_retries":null}`,
		`{"name":"d","queue":"q","interval":1000000000}`,
	} {
		if c, err := Decode("d", []byte(old)); err != nil || c.MaxRetries != nil {
			t.Errorf("%s decoded %+v, %v; want MaxRetries nil", old, c, err)
		}
	}
	if _, err := Decode("d", []byte(`{"queue":"q","interval":1000000000,"max_retries":-2}`)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("max_retries -2 decoded: %v", err)
	}
}

func TestUnshadowed(t *testing.T) {
	t.Parallel()
	a := mustCompile(t, Schedule{Name: "a", Queue: "q", Interval: time.Second})
	b := mustCompile(t, Schedule{Name: "b", Queue: "q", Interval: time.Second})
	a2 := mustCompile(t, Schedule{Name: "a", Queue: "other", Interval: time.Minute})
	got := Unshadowed([]*Compiled{a}, []*Compiled{a2, b})
	if len(got) != 1 || got[0] != b {
		t.Fatalf("the configured a must shadow the registered one: %v", got)
	}
}

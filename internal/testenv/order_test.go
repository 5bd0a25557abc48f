package testenv

import "testing"

// TestOrderAdmitsInOrder: requests are admitted in the order they asked,
// at most limit at a time, the next one as soon as one ends.
func TestOrderAdmitsInOrder(t *testing.T) {
	t.Parallel()
	if (&order{}).ask() != nil {
		t.Fatal("an order not in use admits through t.Parallel alone")
	}
	o := &order{limit: 2}
	var turns []<-chan struct{}
	for range 5 {
		turns = append(turns, o.ask())
	}
	admitted := func() (n []int) {
		for i, c := range turns {
			select {
			case <-c:
				n = append(n, i)
			default:
			}
		}
		return n
	}
	check := func(want ...int) {
		t.Helper()
		got := admitted()
		if len(got) != len(want) {
			t.Fatalf("admitted %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("admitted %v, want %v", got, want)
			}
		}
	}
	check(0, 1)
	o.done()
	check(0, 1, 2)
	o.done()
	o.done()
	check(0, 1, 2, 3, 4)
	if o.running != 2 || len(o.waiting) != 0 {
		t.Fatalf("running %d, waiting %d; want 2 and 0", o.running, len(o.waiting))
	}
}

package reshard_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/reshard"
)

// TestConfigValidate: the zero Config and DefaultConfig are valid; each
// field out of its range is refused by New, naming the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []reshard.Config{{}, reshard.DefaultConfig(), {Batch: reshard.MaxBatch, Rate: reshard.MaxRate}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for field, c := range map[string]reshard.Config{
		"Batch":  {Batch: reshard.MaxBatch + 1},
		"Margin": {Margin: -time.Second},
		"Retry":  {Retry: -time.Second},
		"Rate":   {Rate: -1},
	} {
		_, err := reshard.New(nil, c)
		if !errors.Is(err, reshard.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", field, err)
		} else if want := "reshard: invalid config: " + field + " must be"; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %q does not name the field", field, err)
		}
	}
	if got := reshard.DefaultConfig().Rate; got != reshard.DefaultRate || got == 0 {
		t.Errorf("DefaultConfig().Rate = %d, want DefaultRate (bounded)", got)
	}
}

package testenv

import (
	"os"
	"testing"
)

// SoakEnv is the environment variable that runs the long forms of the
// soak tests (make soak sets it; CI runs them in a step of their own).
const SoakEnv = "HGTEST_SOAK"

// SkipUnlessSoak skips a soak test unless SoakEnv is set. A soak test,
// named TestSoak…, is the long form of a test that make test runs in a
// form sized to what its assertions need (a few faults, a few thousand
// tasks): it repeats the same checks for minutes or at a larger volume,
// to catch what only shows up rarely.
func SkipUnlessSoak(t testing.TB) {
	t.Helper()
	if os.Getenv(SoakEnv) == "" {
		t.Skipf("the long form; make soak runs it (%s=1)", SoakEnv)
	}
}

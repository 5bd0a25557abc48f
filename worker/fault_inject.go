//go:build faultinject

package worker

import (
	"os"
	"sync"
	"syscall"
)

// HG_FAULT=stop-after-pop makes the process stop itself (SIGSTOP)
// right after its first pop that returned tasks, as a process paused
// between Redis's reply and its handling would be. The end-to-end tests
// build the binaries with -tags faultinject and resume the process with
// SIGCONT.
func init() {
	if os.Getenv("HG_FAULT") != "stop-after-pop" {
		return
	}
	var once sync.Once
	faultAfterPop = func() {
		once.Do(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) })
	}
}
